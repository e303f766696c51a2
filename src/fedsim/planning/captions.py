"""The report's words about the run that was made (`snakemake --report`): the pieces the captions
(workflow/report/*.rst) and the front page fill in, from the config's experiments, their methods, the
settings tuned and their grids, the datasets and the folder of the tables. The templates hold the
prose that is true of every run; what depends on the run is built here, so that a custom experiment's
report speaks of its own methods and files, and the paper's findings stand only beside the paper's
own experiments.

The rules pass a caption as a param (workflow/rules/figures.smk, summary.smk): a Caption, not a str,
because Snakemake records the params of built-in types and reruns a job whose recorded params changed,
and a caption's wording reruns nothing. The front page, which Snakemake renders with the config alone,
reads front_page()'s pieces from the config (workflow/rules/common.smk puts them there).
"""

from __future__ import annotations

from types import SimpleNamespace

from ..methods import ENTRIES, resolve
from ..outputs.styles import in_legend_order
from . import experiments as ex
from .jobs import method_options
from ..kinds import KINDS
from .kinds import trains_linear_softmax

# What makes an experiment the paper's: one of its figures drawn, of (at least) the methods the paper
# compares, on the paper's kinds of data. Its finding then stands beside the figure, as the paper's.
PAPER_FINDINGS = {
    "figure1": "Paper's finding (Figure 1): FedDANE is only competitive on Synthetic IID; on the "
               "heterogeneous sets it converges more slowly or diverges.",
    "figure2": "Paper's finding (Figure 2): low participation hurts FedDANE under heterogeneity; on "
               "Synthetic (0.5,0.5) even K = 30 does not save it.",
    "figure3": "Paper's finding (Figure 3): even with E = 1 and (nearly) all devices per round, the setting "
               "that favours it, FedDANE is worse than FedAvg and FedProx, most on the heterogeneous sets.",
}
PAPER_METHODS = ("fedavg", "fedprox", "feddane")

# The datasets' kinds in words (a plugin's kind: "built by the plugin kind <name>").
# What a method is, where its label does not say it: the paper's FedDANE and the authors' term, the
# variants the paper suggests, SCAFFOLD. A caption holds the notes of the methods its experiment ran.
NOTES = {
    "feddane": "FedDANE is the paper's Algorithm 2 (local correction g_t - grad F_k(w^{t-1}))",
    "feddane_authors": "\"FedDANE, authors' correction\" is the correction term the authors' code computed instead (g_t "
                       "minus two entries of the device's bias gradient, one for every kernel entry, one for every "
                       "bias entry), the term every FedDANE curve of the paper on synthetic data and FEMNIST was "
                       "produced with; the rest of its run is as the paper's FedDANE (config/authors.yaml replays "
                       "their code whole)",
    "scaffold": "SCAFFOLD (Karimireddy et al., 2020) corrects client drift with control variates at one exchange "
                "per round",
    "feddane_decayed": "decayed FedDANE scales its correction by 1/(1 + t/tau), tau = {tau} rounds",
    "feddane_pipelined": "pipelined FedDANE uses the previous round's aggregate gradient in one exchange",
    "feddane_exact_gradient": "exact-gradient FedDANE (a diagnostic, not federated) takes g_t from every device, so "
                              "what remains of its gap comes from heterogeneity rather than from the sampled "
                              "gradient estimate",
}

# The figure commands whose layout the caption explains.
LAYOUTS = {
    "beyond": "Not in the paper: the top row is against rounds, the bottom row against communication rounds.",
}


class Caption(SimpleNamespace):
    """One caption's pieces, read by its template as attributes. Not a str or dict: Snakemake records a
    job's params of built-in types only, so that a caption reruns no job (module docstring)."""

    def __repr__(self):  # the report lists a job's params
        return "(the caption's words)"


def _values(values) -> str:
    return "[" + ", ".join(ex.fmt(v) for v in values) + "]"


def _join(items) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = list(items)
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def label(method) -> str:
    """A method's or variant's name in the figures, quoted where it holds a comma (FedDANE, authors' correction)."""
    text = ENTRIES[method].label
    return f'"{text}"' if "," in text else text


def labels(methods) -> str:
    return _join(label(m) for m in _in_order(methods))


def _in_order(methods) -> list[str]:
    """Methods (and variants) in legend order, once each."""
    return in_legend_order(methods)


def is_papers(cfg, experiment) -> bool:
    """Whether an experiment is one of the paper's: a figure of the paper (PAPER_FINDINGS), drawn of the
    methods the paper compares (PAPER_METHODS) on the paper's kinds of data (Kind.paper)."""
    exp = cfg["experiments"][experiment]
    return (exp.get("figure") in PAPER_FINDINGS and set(PAPER_METHODS) <= set(exp["methods"])
            and all(KINDS[cfg["datasets"][d]["kind"]].paper for d in exp["datasets"]))


# ---- What each method ran at

def _lr_text(lrs) -> str:
    return f"client lr over {_values(lrs)}"


def method_values_text(cfg, experiment, method) -> str:
    """How an experiment runs a method's setting: 'mu = 0', 'the dataset's fedprox_mu (1)', 'alpha tuned
    over [0.01] in each setting', 'the mu tuned in figure1 on the same dataset', 'mu = 1, 10 (fixed)'."""
    exp, entry = cfg["experiments"][experiment], ENTRIES[method]
    source, setting = ex.mu_source(cfg, experiment), entry.method.setting_name
    if entry.method.mu != "none" and source == "fixed":
        return f"mu = {', '.join(ex.fmt(mu) for mu in exp['mu'])} (fixed)"
    if source == "from" and ex.tunes(cfg, method, experiment):
        reference = exp["mu_from"]
        chosen = [setting] if ex.method_kind(method) == "tuned" else []
        chosen += ["client lr"] if ex.lr_grid(cfg, method, reference) else []
        return f"the {' and '.join(chosen)} tuned in {reference} on the same dataset"
    lrs = ex.lr_grid(cfg, method, experiment) if source == "grid" else None
    if ex.method_kind(method) == "tuned" and source == "grid":
        text = f"{setting} tuned over {_values(ex.setting_grid(cfg, method, experiment))}"
        return text + (f" and its {_lr_text(lrs)}" if lrs else "") + " in each setting"
    if ex.method_kind(method) == "fixed":
        mus = sorted({cfg["datasets"][d]["fedprox_mu"] for d in exp["datasets"]})
        text = f"mu = the dataset's fedprox_mu ({', '.join(ex.fmt(mu) for mu in mus)})"
    else:
        text = f"{setting} = 0"
    return text + (f", its {_lr_text(lrs)} tuned in each setting" if lrs else "")


def settings_text(cfg, experiment, tuned_path) -> str:
    """Every method of an experiment with the values it ran at, methods alike grouped: 'FedAvg: mu = 0;
    FedDyn: alpha tuned over [0.01] in each setting (results/summary/chosen_settings.csv)'."""
    groups: dict[str, list[str]] = {}
    for method in _in_order(cfg["experiments"][experiment]["methods"]):
        groups.setdefault(method_values_text(cfg, experiment, method), []).append(method)
    text = "; ".join(f"{labels(methods)}: {values}" for values, methods in groups.items())
    tuned = any(ex.tunes(cfg, m, experiment) for m in cfg["experiments"][experiment]["methods"])
    return text + (f" (the tuned values: {tuned_path})" if tuned else "") + "."


# Methods whose `weighting: paper` (their papers' plain mean over devices) minimises another objective
# than the n_k-weighted f every metric measures
PLAIN_MEAN_NOTE = ("{label} runs its paper's plain mean over devices (weighting: paper): it minimises the "
                   "unweighted mean of the device losses, not the sample-weighted loss the curves measure "
                   "(weighting: samples in method_options aligns it)")


def method_note(cfg, method) -> str | None:
    """What a method is, where its label does not say it (NOTES; decayed FedDANE's with its tau; a
    method minimising another objective than the curves measure)."""
    if method == "feddane_decayed":
        return NOTES[method].format(tau=ex.fmt(method_options_resolved(cfg, method)["tau"]))
    if method_options_resolved(cfg, method).get("weighting") == "paper":
        return PLAIN_MEAN_NOTE.format(label=label(method))
    return NOTES.get(method)


def method_options_resolved(cfg, method) -> dict:
    """Every option of a method or variant as the config runs it."""
    return resolve(method, method_options(cfg, method))[1]


def _sentences(parts) -> str:
    return " ".join(p[0].upper() + p[1:] + ("" if p.endswith(".") else ".") for p in parts if p)


def notes_text(cfg, experiment) -> str:
    """The notes on an experiment's methods, and the panels an MCLR-only method is absent from."""
    exp = cfg["experiments"][experiment]
    notes = [method_note(cfg, m) for m in _in_order(exp["methods"])]
    for method in (m for m in _in_order(exp["methods"]) if ENTRIES[m].mclr_only):
        skipped = [d for d in exp["datasets"] if not trains_linear_softmax(cfg, d)]
        if skipped:
            notes.append(f"{label(method)} is absent from the {_join(skipped)} panels: it is defined for MCLR "
                         "models only")
    return _sentences(notes)


def draws_text(cfg, methods) -> str:
    """The random draws, and the second subset where a method that runs sampled the gradients first draws one."""
    text = f"Random draws: ``{cfg['simulator']['rng']}``"
    second = [m for m in _in_order(methods) if ENTRIES[m].method.gradients == "sampled"]
    if second:
        text += f"; second subset of {labels(second)}: ``{cfg['simulator']['second_subset']}``"
    return text + "."


def exchanges_text(cfg, experiment) -> str:
    """Which methods spend more than one communication round per round, and how the x-axis counts them."""
    exp = cfg["experiments"][experiment]
    by_count: dict[int, list[str]] = {}
    for method in _in_order(exp["methods"]):
        if ENTRIES[method].method.exchanges > 1:
            by_count.setdefault(ENTRIES[method].method.exchanges, []).append(method)
    if not by_count:
        return ""
    words = {2: "two", 3: "three"}
    text = "One round of " + "; of ".join(f"{labels(ms)} costs {words.get(n, n)} communication rounds"
                                           for n, ms in by_count.items())
    if exp.get("figure") in LAYOUTS:
        return text + " (the rest one)."
    if cfg["figures"]["x_axis"] == "rounds":
        return text + ("; as in the paper, it is plotted as one." if is_papers(cfg, experiment)
                       else "; it is plotted as one.")
    return text + "; here it is plotted as that many."


# ---- The captions

def figure(cfg, experiment, findings_path, tuned_path) -> Caption:
    """The pieces of an experiment's figure caption (workflow/report/figure.rst) and of its test-accuracy
    companion's (figure_test_acc.rst)."""
    exp, papers = cfg["experiments"][experiment], is_papers(cfg, experiment)
    return Caption(
        methods=labels(exp["methods"]),
        datasets=_join(exp["datasets"]),
        findings=findings_path,
        settings=settings_text(cfg, experiment, tuned_path),
        notes=notes_text(cfg, experiment),
        draws=draws_text(cfg, exp["methods"]),
        exchanges=exchanges_text(cfg, experiment),
        layout=LAYOUTS.get(exp.get("figure"), ""),
        finding=PAPER_FINDINGS[exp["figure"]] if papers else "",
        accuracy=("The paper shows training loss only; FedDANE's test accuracy can stay near FedAvg's while its "
                  "training loss blows up." if papers else ""),
    )


def tuning_items(cfg) -> list[str]:
    """Each grid tuned over, with the methods tuned over it and the experiments that tune them: "alpha over
    [0.01]: FedDyn (mine)", "mu over [0, 1]: FedDANE (figure1 and beyond), "FedDANE, authors' correction" (figure1)"."""
    grids: dict[str, dict[str, list[str]]] = {}  # grid text -> method -> experiments
    for name, exp in cfg["experiments"].items():
        if ex.mu_source(cfg, name) != "grid":
            continue
        for method in _in_order(exp["methods"]):
            if not ex.tunes(cfg, method, name):
                continue
            lrs = ex.lr_grid(cfg, method, name)
            parts = [f"{ENTRIES[method].method.setting_name} over {_values(ex.setting_grid(cfg, method, name))}"
                     ] if ex.method_kind(method) == "tuned" else []
            grid = " and ".join(parts + ([_lr_text(lrs)] if lrs else []))
            grids.setdefault(grid, {}).setdefault(method, []).append(name)
    items = []
    for grid, methods in grids.items():
        alike: dict[tuple, list[str]] = {}  # the methods tuned over the grid in the same experiments
        for method, names in methods.items():
            alike.setdefault(tuple(names), []).append(method)
        items.append(f"{grid}: " + ", ".join(f"{labels(ms)} ({_join(names)})" for names, ms in alike.items()))
    return items


def reuse_text(cfg) -> str:
    """The experiments that take their tuned values from another's (`mu_from`)."""
    sources: dict[str, list[str]] = {}
    for name, exp in cfg["experiments"].items():
        if ex.mu_source(cfg, name) == "from" and any(ex.tunes(cfg, m, name) for m in exp["methods"]):
            sources.setdefault(exp["mu_from"], []).append(name)
    return " ".join(f"{'Experiments' if len(names) > 1 else 'Experiment'} {_join(names)} "
                    f"{'reuse' if len(names) > 1 else 'reuses'} the values chosen in {source} for their dataset."
                    for source, names in sources.items())


def tuning(cfg) -> Caption:
    """The pieces of the chosen_settings.csv and tuning figure captions (chosen_settings.rst, tuning.rst)."""
    tuned = ex.tuned_methods(cfg)
    return Caption(
        methods=labels(tuned),
        grids="; ".join(tuning_items(cfg)),
        reuse=reuse_text(cfg),
        notes=_sentences(method_note(cfg, m) for m in tuned if m in ("feddane", "feddane_authors")),
    )


def datasets_text(cfg) -> str:
    """The datasets the experiments run, by kind: "generated as in the FedProx paper: synthetic_iid (IID),
    synthetic_1_1 (alpha = 1, beta = 1)"."""
    by_kind: dict[str, list[str]] = {}
    for name in ex.used_datasets(cfg):
        entry = cfg["datasets"][name]
        kind, devices = KINDS[entry["kind"]], ex.n_devices(cfg, name)
        detail = ", ".join(([kind.detail(entry)] if kind.detail else []) + ([f"{devices} devices"] if devices else []))
        by_kind.setdefault(entry["kind"], []).append(f"``{name}``" + (f" ({detail})" if detail else ""))
    return "; ".join(f"{KINDS[kind].words or f'built by the plugin kind ``{kind}``'}: {', '.join(names)}"
                     for kind, names in sorted(by_kind.items(), key=lambda item: list(KINDS).index(item[0])))


def front_page(cfg, folder) -> dict:
    """The front page's pieces (workflow/report/workflow.rst), as plain text: the config holds them."""
    names = list(cfg["experiments"])
    shown = [f"{name} (the paper's {cfg['experiments'][name]['figure'].replace('figure', 'Figure ')})"
             if is_papers(cfg, name) else name for name in names if "figure" in cfg["experiments"][name]]
    used = {m for exp in cfg["experiments"].values() for m in exp["methods"]}
    return {
        "experiments": _join(shown) or _join(names),
        "folder": folder,
        "datasets": datasets_text(cfg),
        "methods": labels(used),
        "tuning": "; ".join(tuning_items(cfg)),
        "reuse": reuse_text(cfg),
        "draws": draws_text(cfg, used),
    }
