"""A workflow config's experiments expanded into training runs: the runs table.

Pure functions of the config (a dict as the schema leaves it, defaults filled in): no torch, no
Snakemake. The workflow (workflow/rules/common.smk) binds them to its config; tests call them
directly. An experiment runs datasets x methods x K x E x seeds, each method at its mu values:
none (0), fixed (the dataset's fedprox_mu), tuned (every mu of the grid where the experiment tunes
it, else the mu tuned in its `mu_from` experiment), or the experiment's own `mu` list.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import astuple, dataclass, fields
from decimal import Decimal

import pandas as pd

from ..methods import ENTRIES
from ..core.settings import clients_per_round_problem
from ..outputs.styles import in_legend_order
from ..kinds import KINDS
from .kinds import n_devices, own_model, sources, trains_linear_softmax



@dataclass(frozen=True)
class RunSpec:
    """One training run: every field it depends on beyond its dataset entry's and the simulator's shared settings
    (jobs.train_args adds those). Made once, at planning (plan); its folder is written by run_path alone and
    read by no one: the train rule looks the record up by that folder and hands it whole to `fedsim train`.
    The text fields are canonical (fmt), as the folder spells them."""

    dataset: str
    method: str
    setting: str  # the name of the method's setting: mu, or the option it is tuned over (FedDyn's alpha)
    value: str  # its value; "tuned" where another experiment's tuning chooses it and has not yet
    lr: str  # the client learning rate
    K: str
    E: str
    rounds: int
    model: str | None  # None: its dataset entry's default (the folder names any other)
    theory: bool  # whether it logs Theorem 1's constants (a theory experiment's runs)
    seed: str


RUN_FIELDS = tuple(field.name for field in fields(RunSpec))
PLAN_COLUMNS = ["experiment", *RUN_FIELDS]
Setting = namedtuple("Setting", ("dataset", "K", "E", "rounds"))  # what a tuning groups runs by


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
    (already formatted values, "tuned") pass through."""
    if isinstance(x, str):
        return x
    text = format(Decimal(repr(float(x))), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


# ---------------------------------------------------------------------------------------
# Datasets
# ---------------------------------------------------------------------------------------

def used_datasets(cfg) -> list[str]:
    """The datasets some experiment runs (others may be defined but are never built)."""
    return sorted({d for exp in cfg["experiments"].values() for d in exp["datasets"]})


def dataset_sources(cfg, dataset) -> list[str]:
    """The raw sources (keys of `sources`) a dataset is built from (a partition: its pool's)."""
    entry = cfg["datasets"][dataset]
    if KINDS[entry["kind"]].pools:  # the config check has refused a pool that is itself a partition
        pool = entry.get("pool")
        return dataset_sources(cfg, pool) if pool in cfg["datasets"] and pool != dataset else []
    return sources(cfg, dataset)


def run_path(cfg, run: RunSpec) -> str:
    """The run's folder below results/runs/, written here and nowhere else:
    {dataset}/{method}/{setting}{value}_K{K}_E{E}{variant}{theory}_seed{seed} (run_parts)."""
    dataset, method, setting, value, K, E, variant, theory, seed = run_parts(cfg, run)
    return f"{dataset}/{method}/{setting}{value}_K{K}_E{E}{variant}{theory}_seed{seed}"


def run_parts(cfg, run: RunSpec) -> tuple[str, ...]:
    """The pieces of a run's folder: its fields, variant '_T<rounds>' where it runs another number of rounds
    than its dataset's own, then '_<model>' where it trains another model than its dataset kind's default,
    then '_lr<lr>' where another client lr than its dataset's (an experiment's lr grid), and '_theory' where
    it logs the theorems' constants (they cost more than the same run without, which other experiments
    share). The paper's runs keep short folders; two runs that differ never share one."""
    entry = cfg["datasets"][run.dataset]
    variant = ("" if run.rounds == entry["rounds"] else f"_T{run.rounds}") + (f"_{run.model}" if run.model else "")
    variant += "" if run.lr == fmt(entry["lr"]) else f"_lr{run.lr}"
    return (run.dataset, run.method, run.setting, run.value, run.K, run.E, variant, "_theory" if run.theory else "",
            run.seed)


def run_order(cfg):
    """The key runs are listed in (the tables' inputs): by dataset, method, value, K, E, variant, theory, seed."""
    return lambda run: tuple(part for i, part in enumerate(run_parts(cfg, run)) if i != 2)


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


def lr_grid(cfg, method, experiment) -> list | None:
    """The client learning rates an experiment tunes a method's runs over, jointly with its own setting
    (its `lr_grids` entry for the method, else its `lr_grid`), or None: it runs at its dataset's lr."""
    exp = cfg["experiments"][experiment]
    return exp.get("lr_grids", {}).get(method, exp.get("lr_grid"))


def tunes(cfg, method, experiment) -> bool:
    """Whether an experiment (or the one it takes its values from, `mu_from`) chooses something for the
    method: the value of its setting (a tuned method) or its client lr (an lr grid over its runs)."""
    source = mu_source(cfg, experiment)
    if source == "fixed":
        return False
    if method_kind(method) == "tuned":
        return True
    reference = cfg["experiments"][experiment]["mu_from"] if source == "from" else experiment
    return method in cfg["experiments"][reference]["methods"] and lr_grid(cfg, method, reference) is not None


def tuned_methods(cfg) -> list[str]:
    """The methods that are tuned (their setting, the registry says which, or their lr, an experiment's lr
    grid), among those the experiments run."""
    used = {m for name, exp in cfg["experiments"].items() for m in exp["methods"] if tunes(cfg, m, name)}
    return in_legend_order(used)


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


def settings(cfg, experiment) -> list[Setting]:
    """Every (dataset, K, E, rounds) of an experiment (its `rounds`, else each dataset's own)."""
    exp = cfg["experiments"][experiment]
    return [Setting(dataset, fmt(K), fmt(E), exp.get("rounds") or cfg["datasets"][dataset]["rounds"])
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


def chosen(cfg, tuned, method, setting) -> tuple[str, str]:
    """The value (of its mu or tuned option) and client lr chosen for `method` in `setting` in `tuned` (rows
    of chosen_settings.csv)."""
    key = (method, setting.dataset, setting.K, setting.E, setting.rounds)
    for row in tuned:
        numbers = (fmt(float(row[c])) for c in ("clients_per_round", "epochs"))
        if (row["method"], row["dataset"], *numbers, int(row["rounds"])) == key:
            return fmt(float(row["chosen"])), fmt(float(row["lr"]))
    raise ValueError(f"chosen_settings.csv has no row for {method} in {setting}")


def method_values(cfg, method, setting, experiment, tuned=None) -> list[tuple]:
    """The (mu, client lr) pairs a method runs with in one setting of an experiment (lr None: the dataset's).
    A method the experiment tunes: every mu of its grid (or its fixed mu) at every lr of its lr grid, where
    the experiment tunes it; else the pair chosen in `tuned`, or ("tuned", None) while `tuned` is not
    known. None at all where the method does not apply (the authors' FedDANE on an LSTM or a CNN dataset)."""
    exp = cfg["experiments"][experiment]
    if ENTRIES[method].mclr_only and not trains_linear_softmax(cfg, setting.dataset):
        return []
    source = mu_source(cfg, experiment)
    if ENTRIES[method].method.mu != "none" and source == "fixed":
        return [(mu, None) for mu in exp["mu"]]
    if source == "from" and tunes(cfg, method, experiment):
        reference = method_setting(cfg, method, reference_setting(cfg, experiment, setting))
        return [("tuned", None)] if tuned is None else [chosen(cfg, tuned, method, reference)]
    if method_kind(method) == "tuned" and source == "grid":
        mus = setting_grid(cfg, method, experiment)
    else:
        mus = [cfg["datasets"][setting.dataset]["fedprox_mu"]] if method_kind(method) == "fixed" else [0]
    lrs = (lr_grid(cfg, method, experiment) if source == "grid" else None) or [None]
    return [(mu, lr) for mu in mus for lr in lrs]


def left_out(cfg) -> list[str]:
    """One line per experiment and MCLR-only method it lists that some of its datasets cannot run (their
    kind's model is not MCLR-like, as Sent140's LSTM): method_values leaves those runs out, and the
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
    one takes its values from (`mu_from`) stays, on those datasets and without its figure, for the
    tuning runs that choose them (its methods whose mu, option or lr it tunes)."""
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
            methods.update(m for m in exp["methods"] if tunes(cfg, m, name))
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
    """The experiments expanded into their training runs: one row per experiment and run (a run two
    experiments share has a row in each, one folder), its columns the experiment and the run's record
    (RunSpec). The value is "tuned" where another experiment's tuning chooses it and `tuned` (rows of
    chosen_settings.csv) is not known yet."""
    rows = [
        (name, *astuple(RunSpec(s.dataset, method, setting_name(method), fmt(mu),
                                fmt(cfg["datasets"][s.dataset]["lr"] if lr is None else lr), s.K, s.E, s.rounds,
                                own_model(cfg, s.dataset), bool(exp.get("theory")), fmt(seed))))
        for name, exp in cfg["experiments"].items()
        for setting in settings(cfg, name)
        for method in exp["methods"]
        for s in [method_setting(cfg, method, setting)]
        for mu, lr in method_values(cfg, method, s, name, tuned)
        for seed in exp.get("seeds", cfg["seeds"])
    ]
    # a full-participation method runs once per experiment K list: one row each
    return pd.DataFrame(rows, columns=PLAN_COLUMNS).drop_duplicates(ignore_index=True)


def specs_of(table: pd.DataFrame) -> list[RunSpec]:
    """The run records of rows of a plan. A run of its dataset's default model has model None: pandas holds
    a column of names and Nones as strings with NaN, which is no model's name."""
    return [RunSpec(**{**row, "model": row["model"] if isinstance(row["model"], str) and row["model"] else None})
            for row in table[list(RUN_FIELDS)].to_dict("records")]


def runs_of(cfg, table: pd.DataFrame) -> list[RunSpec]:
    """The distinct runs of rows of a plan whose value is known, in run_order."""
    return sorted(set(specs_of(table[table["value"] != "tuned"])), key=run_order(cfg))


def runs_by_path(cfg, table: pd.DataFrame) -> dict[str, RunSpec]:
    """The known runs of a plan by their folder (run_path): how the train rule finds its run."""
    return {run_path(cfg, run): run for run in runs_of(cfg, table)}


def run_setting(run) -> Setting:
    """The setting a run belongs to: its dataset, K, E and rounds (what its tuning groups by)."""
    return Setting(run.dataset, run.K, run.E, run.rounds)


def experiment_runs(cfg, experiment, tuned=None, chosen_only=False) -> list[RunSpec]:
    """Training runs of one experiment; `chosen_only`: a method it tunes at its chosen values only."""
    table = plan(cfg, tuned)
    table = table[table["experiment"] == experiment]
    if chosen_only and tunes_mu(cfg, experiment):
        keep = [not tunes(cfg, r.method, experiment)
                or (r.value, r.lr) == chosen(cfg, tuned, r.method, run_setting(r))
                for r in table.itertuples()]
        table = table[keep]
    return runs_of(cfg, table)


def tuning_runs(cfg, table: pd.DataFrame) -> list[RunSpec]:
    """The runs of a plan the tuned methods' values are chosen from: their grid runs where they are tuned."""
    tuning = [tunes_mu(cfg, name) and tunes(cfg, method, name) for name, method in zip(table["experiment"],
                                                                                         table["method"])]
    return runs_of(cfg, table[tuning])


def after_tuning(cfg) -> bool:
    """Whether some runs are known only after tuning (a tuned method of an experiment with `mu_from`)."""
    return any(mu_source(cfg, name) == "from" and any(tunes(cfg, m, name) for m in exp["methods"])
               for name, exp in cfg["experiments"].items())
