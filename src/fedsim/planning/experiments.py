"""A workflow config's experiments expanded into training runs: the runs table.

Pure functions of the config (a dict as the schema leaves it, defaults filled in): no torch, no
Snakemake. The workflow (workflow/rules/common.smk) binds them to its config; tests call them
directly. An experiment runs datasets x methods x K x E x seeds, each method at its mu values:
none (0), fixed (the dataset's fedprox_mu), tuned (every mu of the grid where the experiment tunes
it, else the mu tuned in its `mu_from` experiment), or the experiment's own `mu` list.
"""

from __future__ import annotations

import re
from collections import namedtuple
from decimal import Decimal

import pandas as pd

from ..methods import ENTRIES
from ..settings import clients_per_round_problem
from .kinds import model_tag, sources, trains_linear_softmax
from ..synthetic import DEFAULTS as SYNTHETIC_DEFAULTS


SYNTHETIC_KEYS = tuple(SYNTHETIC_DEFAULTS)  # the generator's settings a synthetic dataset's entry may override
# What names a run (its folder); T is the rounds tag, theory the theory tag (run_stem)
# mu: the value of the method's setting (setting_name: its mu, or the option it is tuned over)
RUN_FIELDS = ("dataset", "method", "mu", "K", "E", "T", "theory", "seed")
PLAN_COLUMNS = ["experiment", *RUN_FIELDS, "rounds"]
Run = namedtuple("Run", RUN_FIELDS)
Setting = namedtuple("Setting", ("dataset", "K", "E", "T"))  # a run without method, mu, theory, seed


class ConfigError(ValueError):
    """A config mistake: the key path (a list of keys and indices, or text) and the problem."""

    def __init__(self, path, problem: str):
        self.path = path if isinstance(path, str) else key_path(path)
        self.problem = problem
        super().__init__(f"Config error at {self.path}: {problem}")


def key_path(parts) -> str:
    """['a', 'b', 0, 'c'] -> 'a.b[0].c'."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def fmt(x) -> str:
    """Canonical text of a number for paths: 0 -> '0', 1.0 -> '1', 1e-3 -> '0.001'. Strings
    (wildcard patterns such as '{mu}', or already formatted values) pass through."""
    if isinstance(x, str):
        return x
    text = format(Decimal(repr(float(x))), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


# ---------------------------------------------------------------------------------------
# Datasets
# ---------------------------------------------------------------------------------------

def synthetic_settings(cfg, dataset) -> dict:
    """Generator settings of a synthetic dataset: shared `synthetic` + its overrides."""
    entry = cfg["datasets"][dataset]
    return {**cfg["synthetic"], **{k: entry[k] for k in SYNTHETIC_KEYS if k in entry}}


def n_devices(cfg, dataset):
    """Number of devices of a dataset, where the config determines it (else None): the LEAF and
    JSON kinds' count is the one the config declares (checked when the file is built); a Dirichlet
    partition's is the count it deals to."""
    if cfg["datasets"][dataset]["kind"] == "synthetic":
        return synthetic_settings(cfg, dataset)["devices"]
    return cfg["datasets"][dataset].get("devices")


def used_datasets(cfg) -> list[str]:
    """The datasets some experiment runs (others may be defined but are never built)."""
    return sorted({d for exp in cfg["experiments"].values() for d in exp["datasets"]})


def dataset_sources(cfg, dataset) -> list[str]:
    """The raw sources (keys of `sources`) a dataset is built from (a Dirichlet partition: its pool's)."""
    entry = cfg["datasets"][dataset]
    if entry["kind"] == "dirichlet":  # the config check has refused a pool that is itself a partition
        pool = entry.get("pool")
        return dataset_sources(cfg, pool) if pool in cfg["datasets"] and pool != dataset else []
    return sources(cfg, dataset)


def run_tag(cfg, dataset, rounds=None) -> str:
    """What a run's folder adds to its dataset's name, method and settings: '_T<rounds>' where it runs
    another number of rounds than the dataset's own (the paper's; also rounds=None), and '_<model>'
    where its dataset entry names another model than its kind's default (fedsim.planning.kinds.model_tag). The
    paper's runs keep short paths; an experiment's `rounds` and a dataset's `model` get their own."""
    rounds_part = "" if rounds in (None, cfg["datasets"][dataset]["rounds"]) else f"_T{rounds}"
    return rounds_part + model_tag(cfg, dataset)


def tag_rounds(cfg, dataset, tag) -> int:
    """The number of rounds a run tag stands for."""
    found = re.match(r"_T([0-9]+)", tag)
    return int(found[1]) if found else cfg["datasets"][dataset]["rounds"]


def tag_model(tag) -> str | None:
    """The model a run tag names; None: its dataset kind's default."""
    found = re.fullmatch(r"(?:_T[0-9]+)?(?:_(\w+))?", tag)
    return found[1] if found else None


# ---------------------------------------------------------------------------------------
# Experiments
# ---------------------------------------------------------------------------------------

def experiment_ks(cfg, name, dataset) -> list:
    """The K values (devices per round) an experiment runs on a dataset: `clients_per_round`, or
    `clients_fraction` of the dataset's devices (rounded, at least 1). Raises ConfigError naming
    the key where K is undefined or, drawing without replacement, larger than the devices."""
    exp, devices = cfg["experiments"][name], n_devices(cfg, dataset)
    if "clients_per_round" in exp:
        key, ks = "clients_per_round", as_list(exp["clients_per_round"])
    else:
        key, fraction = "clients_fraction", exp["clients_fraction"]
        if isinstance(fraction, dict):
            fraction = fraction.get(dataset, fraction.get("default"))
        if fraction is None:
            raise ConfigError(["experiments", name, key], f"no fraction for {dataset} (nor a default)")
        if devices is None:
            raise ConfigError(["datasets", dataset, "devices"], f"needed for {key} of experiment {name}")
        ks = [max(1, round(fraction * devices))]
    for k in ks if devices is not None else ():
        problem = clients_per_round_problem(k, devices, cfg["simulator"]["selection"])
        if problem:
            raise ConfigError(["experiments", name, key], f"{problem}; dataset {dataset}")
    return ks


def method_kind(method) -> str:
    """How a method's (or variant's) setting is chosen: none (mu 0), fixed (fedprox_mu), tuned (its mu,
    or the option it is tuned over, fedsim.methods.Method.tuned)."""
    entry = ENTRIES[method]
    return "tuned" if entry.method.tuned else entry.method.mu


def setting_name(method) -> str:
    """The setting a method's runs differ in, as paths, logs and legends name it: mu, or its tuned option."""
    return ENTRIES[method].method.setting_name


def setting_grid(cfg, method, experiment) -> list:
    """The values a tuned method is tuned over: its option's grid (or the experiment's `grids` entry
    for it), or the (experiment's) mu grid."""
    exp, tuned = cfg["experiments"][experiment], ENTRIES[method].method.tuned
    if tuned:
        return list(exp.get("grids", {}).get(method, ENTRIES[method].method.options[tuned].grid))
    return exp.get("mu_grid", cfg["tuning"]["mu_grid"])


def tuned_methods(cfg) -> list[str]:
    """The methods that are tuned (the registry says which), among those the experiments run."""
    used = {m for exp in cfg["experiments"].values() for m in exp["methods"]}
    return [m for m in ENTRIES if method_kind(m) == "tuned" and m in used]


def mu_source(cfg, experiment) -> str:
    """Where an experiment's tuned methods get their mu: `fixed` (its own list `mu`, every method
    with a proximal term runs each), `from` (the mu tuned in its `mu_from` experiment, on the
    same dataset) or `grid` (it runs the grid and tunes itself)."""
    exp = cfg["experiments"][experiment]
    if "mu" in exp:
        return "fixed"
    return "from" if "mu_from" in exp and not cfg["tuning"]["per_setting"] else "grid"


def tunes_mu(cfg, experiment) -> bool:
    return mu_source(cfg, experiment) == "grid"


def theory_tag(cfg, experiment) -> str:
    """'_theory' in the paths of an experiment whose runs log the theorems' constants: they cost
    more than the same runs without, which other experiments share."""
    return "_theory" if cfg["experiments"][experiment].get("theory") else ""


def settings(cfg, experiment) -> list[Setting]:
    """Every (dataset, K, E, run tag) of an experiment."""
    exp = cfg["experiments"][experiment]
    return [Setting(dataset, fmt(K), fmt(E), run_tag(cfg, dataset, exp.get("rounds")))
            for dataset in exp["datasets"] for K in experiment_ks(cfg, experiment, dataset)
            for E in as_list(exp["epochs"])]


def method_setting(cfg, method, setting) -> Setting:
    """The setting a method runs in where its experiment has `setting`: the same, except that a method
    needing every device each round runs at K = the dataset's devices, whatever the experiment's K."""
    if not ENTRIES[method].method.full_participation:
        return setting
    devices = n_devices(cfg, setting.dataset)
    if devices is None:
        raise ConfigError(["datasets", setting.dataset, "devices"], f"needed for {method}, which runs every device "
                                                                    "each round")
    return setting._replace(K=fmt(devices))


def reference_setting(cfg, experiment, setting) -> Setting:
    """The setting whose tuning gives the tuned method's mu in `setting`: itself, or the same
    dataset's (only) setting in the `mu_from` experiment."""
    if tunes_mu(cfg, experiment):
        return setting
    source = cfg["experiments"][experiment]["mu_from"]
    return next(s for s in settings(cfg, source) if s.dataset == setting.dataset)


def chosen_mu(cfg, tuned, method, setting) -> str:
    """The value (of its mu or tuned option) chosen for `method` in `setting` in `tuned` (rows of tuned_mu.csv)."""
    key = (method, setting.dataset, setting.K, setting.E, tag_rounds(cfg, setting.dataset, setting.T))
    for row in tuned:
        numbers = (fmt(float(row[c])) for c in ("clients_per_round", "epochs"))
        if (row["method"], row["dataset"], *numbers, int(row["rounds"])) == key:
            return fmt(float(row["chosen"]))
    raise ValueError(f"tuned_mu.csv has no row for {method} in {setting}")


def method_mus(cfg, method, setting, experiment, tuned=None) -> list:
    """The mu values a method runs with in one setting of an experiment. A tuned method: every mu
    of the grid where the experiment tunes it, else the mu chosen in `tuned`, or "tuned" while
    `tuned` is not known. None at all where the method does not apply (the authors' FedDANE on
    an LSTM or a CNN dataset)."""
    exp, kind = cfg["experiments"][experiment], method_kind(method)
    if ENTRIES[method].mclr_only and not trains_linear_softmax(cfg, setting.dataset):
        return []
    if ENTRIES[method].method.mu != "none" and mu_source(cfg, experiment) == "fixed":
        return exp["mu"]
    if kind == "tuned":
        if tunes_mu(cfg, experiment):
            return setting_grid(cfg, method, experiment)
        source = method_setting(cfg, method, reference_setting(cfg, experiment, setting))
        return ["tuned"] if tuned is None else [chosen_mu(cfg, tuned, method, source)]
    return [cfg["datasets"][setting.dataset]["fedprox_mu"]] if kind == "fixed" else [0]


def left_out(cfg) -> list[str]:
    """One line per experiment and MCLR-only method it lists that some of its datasets cannot run (their
    kind's model is not MCLR-like, as Sent140's LSTM): method_mus leaves those runs out, and the
    workflow says so rather than drop them unseen. (A dataset entry naming such a model is refused by
    the config check instead.)"""
    lines = []
    for name, exp in cfg["experiments"].items():
        for method in (m for m in exp["methods"] if ENTRIES[m].mclr_only):
            skipped = [d for d in exp["datasets"] if not trains_linear_softmax(cfg, d)]
            if skipped:
                lines.append(f"experiment {name}: {method} is defined for MCLR models only, so it is left out on "
                             f"{', '.join(skipped)}")
    return lines


def selection_folder(cfg) -> str:
    """The folder, below results_dir, of a selection's tables and figures: '' for the whole config;
    `only-<experiments>`, `only-<experiments>-in-<datasets>` or `only-in-<datasets>` under
    `only_experiments` / `only_datasets`. A subset then never overwrites the whole run's tables and
    figures, nor another subset's, and a report made with a selection holds that selection's tables
    beside its figures. The runs themselves are shared: a run is the same in every selection."""
    only_experiments, only_datasets = cfg.get("only_experiments"), cfg.get("only_datasets")
    name = "only"
    if only_experiments is not None:
        name += "-" + "+".join(sorted(set(only_experiments)))
    if only_datasets is not None:
        name += "-in-" + "+".join(sorted(set(only_datasets)))
    return "" if name == "only" else name


def selected_experiments(cfg) -> dict:
    """The experiments `only_experiments` and `only_datasets` select (null: all). A selected
    experiment keeps the selected datasets and is left out without any; an experiment a selected
    one takes its mu from (`mu_from`) stays, on those datasets and without its figure, for the
    tuning runs that choose that mu."""
    only_experiments, only_datasets = cfg.get("only_experiments"), cfg.get("only_datasets")
    for key, names, known in (("only_experiments", only_experiments, cfg["experiments"]),
                              ("only_datasets", only_datasets, cfg["datasets"])):
        for i, name in enumerate(names or ()):
            if name not in known:
                raise ConfigError([key, i], f"unknown name {name!r} (one of {', '.join(known)})")
    chosen = {}
    for name, exp in cfg["experiments"].items():
        datasets = [d for d in exp["datasets"] if only_datasets is None or d in only_datasets]
        if (only_experiments is None or name in only_experiments) and datasets:
            chosen[name] = {**exp, "datasets": datasets}
    if not chosen:
        raise ConfigError(["only_experiments" if only_experiments is not None else "only_datasets"],
                          "selects no experiment with a dataset")
    needed = {}  # unselected mu_from sources -> the datasets and tuned methods taken from them
    for name, exp in chosen.items():
        if mu_source(cfg, name) == "from" and exp["mu_from"] not in chosen:
            datasets, methods = needed.setdefault(exp["mu_from"], (set(), set()))
            datasets.update(exp["datasets"])
            methods.update(m for m in exp["methods"] if method_kind(m) == "tuned")
    for source, (datasets, methods) in needed.items():
        exp = cfg["experiments"][source]
        chosen[source] = {**{k: v for k, v in exp.items() if k != "figure"},
                          "datasets": [d for d in exp["datasets"] if d in datasets],
                          "methods": [m for m in exp["methods"] if m in methods]}
    return chosen


# ---------------------------------------------------------------------------------------
# The runs table
# ---------------------------------------------------------------------------------------

def plan(cfg, tuned=None) -> pd.DataFrame:
    """The experiments expanded into their training runs: one row per experiment and run (a run
    two experiments share has a row in each, one path). mu is canonical text, or "tuned" where
    another experiment's tuning chooses it and `tuned` (rows of tuned_mu.csv) is not known yet."""
    rows = [
        (name, s.dataset, method, fmt(mu), s.K, s.E, s.T, theory_tag(cfg, name), fmt(seed),
         tag_rounds(cfg, s.dataset, s.T))
        for name, exp in cfg["experiments"].items()
        for setting in settings(cfg, name)
        for method in exp["methods"]
        for s in [method_setting(cfg, method, setting)]
        for mu in method_mus(cfg, method, s, name, tuned)
        for seed in exp.get("seeds", cfg["seeds"])
    ]
    # a full-participation method runs once per experiment K list: one row each
    return pd.DataFrame(rows, columns=PLAN_COLUMNS).drop_duplicates(ignore_index=True)


def runs_of(table: pd.DataFrame) -> list[Run]:
    """The distinct runs (sorted) of rows of a plan whose mu is known."""
    known = table[table["mu"] != "tuned"]
    return sorted({Run(*row) for row in known[list(RUN_FIELDS)].itertuples(index=False)})


def experiment_runs(cfg, experiment, tuned=None, chosen_only=False) -> list[Run]:
    """Training runs of one experiment; `chosen_only`: a method it tunes at its chosen mu only."""
    table = plan(cfg, tuned)
    table = table[table["experiment"] == experiment]
    if chosen_only and tunes_mu(cfg, experiment):
        keep = [method_kind(r.method) != "tuned"
                or r.mu == chosen_mu(cfg, tuned, r.method, Setting(r.dataset, r.K, r.E, r.T))
                for r in table.itertuples()]
        table = table[keep]
    return runs_of(table)


def tuning_runs(cfg, table: pd.DataFrame) -> list[Run]:
    """The runs of a plan the tuned methods' mu is chosen from: their grid runs where they are tuned."""
    tuning = table["experiment"].map(lambda name: tunes_mu(cfg, name))
    return runs_of(table[tuning & table["method"].map(lambda m: method_kind(m) == "tuned")])


def after_tuning(cfg) -> bool:
    """Whether some runs are known only after tuning (a tuned method of an experiment with `mu_from`)."""
    return any(mu_source(cfg, name) == "from" and any(method_kind(m) == "tuned" for m in exp["methods"])
               for name, exp in cfg["experiments"].items())
