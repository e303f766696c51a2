# Helpers only (no rules): config validation, the ONE place that builds every path,
# the expansion of experiments into training runs, and wildcard constraints.

import ast
import copy
import csv
import json
import math
import os
import re
import shlex
import sys
from collections import namedtuple
from decimal import Decimal
from pathlib import Path

import jsonschema
import pandas as pd
import yaml


# ---------------------------------------------------------------------------------------
# Config validation
# ---------------------------------------------------------------------------------------

SCHEMA_FILE = Path(workflow.basedir, "workflow", "schemas", "config.schema.yaml")


def _with_defaults(validator_class):
    """A validator class that also fills in the schema's `default` values, and whose integers
    are ints only: 2.0 where an integer is meant is refused, so that 2.0 and 2 can never name
    two runs (JSON Schema itself counts 2.0 as an integer)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def properties(validator, props, instance, schema):
        if validator.is_type(instance, "object"):
            for key, subschema in props.items():
                if "default" in subschema and key not in instance:
                    instance[key] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, props, instance, schema)

    types = validator_class.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    )
    return jsonschema.validators.extend(validator_class, {"properties": properties}, type_checker=types)


def _key_path(parts):
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def _explain(error):
    """(key path, one-line problem) for a jsonschema error."""
    path = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = set(error.schema.get("properties", {}))
        unknown = sorted(str(k) for k in error.instance if k not in known)
        allowed = ", ".join(sorted(known)) or "none"
        return path + unknown[:1], f"unknown key (allowed here: {allowed})"
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [k for k in error.validator_value if k not in error.instance]
        return path + missing[:1], "required key is missing"
    if "propertyNames" in error.schema_path:
        return path + [str(error.instance)], (
            "invalid name (use letters, digits, '_', '.', '-'; start with a letter or digit)"
        )
    if error.validator in ("oneOf", "anyOf") and "description" in error.schema:
        return path, f"{error.instance!r} is not {error.schema['description']}"
    problem = " ".join(error.message.split())
    if error.validator == "type" and _is_number_text(error.instance):
        problem += " (YAML reads 1e-3 as text: write 0.001 or 1.0e-3)"
    return path, problem


def _is_number_text(value):
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return isinstance(value, str)


def config_error(path, problem):
    """Stop Snakemake with ONE line naming the key path and the problem."""
    if not isinstance(path, str):
        path = _key_path(path)
    sys.exit(f"Config error at {path}: {problem}")


# The methods come from fedsim's registry (fedsim.methods: one file per method, each declaring its
# label, how its mu is chosen, its options and variants), read from this checkout's src/ where
# there is one. It imports no torch: cheap enough for every snakemake call.
if Path(workflow.basedir, "src", "fedsim").is_dir():
    sys.path.insert(0, str(Path(workflow.basedir, "src")))
from fedsim.methods import ENTRIES, REGISTRY, USES, resolve  # noqa: E402

with open(SCHEMA_FILE) as _handle:
    SCHEMA = yaml.safe_load(_handle)
METHODS = list(ENTRIES)  # methods and their variants (feddane_authors), in legend order
SCHEMA["definitions"]["method"]["enum"] = METHODS


def method_kind(method):
    """How a workflow method's mu is chosen: none (0), fixed (the dataset's fedprox_mu), tuned."""
    return ENTRIES[method].method.mu


def _duplicate_keys(node, path=()):
    """(key path, line) of every key repeated in one YAML mapping under `node`."""
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for key, value in node.value:
            if key.value in seen:
                yield [*path, key.value], key.start_mark.line + 1
            seen.add(key.value)
            yield from _duplicate_keys(value, (*path, key.value))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            yield from _duplicate_keys(item, (*path, i))


def check_duplicate_keys(files):
    """YAML keeps the last of two equal keys in a mapping, silently: refuse them instead."""
    for name in files:
        with open(name) as handle:
            node = yaml.compose(handle, Loader=yaml.SafeLoader)
        for path, line in _duplicate_keys(node):
            config_error(path, f"duplicate key in {name}, line {line} (YAML would keep only the last)")


def _non_finite(value, path=()):
    """The key path of the first NaN or infinite number in `value`, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return list(path)
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        found = _non_finite(child, (*path, key))
        if found is not None:
            return found
    return None


def validate_config(cfg):
    """Fill defaults, check `cfg` against the schema, then check cross-references and sizes."""
    bad = _non_finite(cfg)
    if bad is not None:
        config_error(bad, f"{_value_at(cfg, bad)} is not a finite number")
    validator = _with_defaults(jsonschema.Draft7Validator)(SCHEMA)
    error = jsonschema.exceptions.best_match(validator.iter_errors(cfg))
    if error is not None:
        config_error(*_explain(error))
    _validate_results_dir(cfg)

    for name, entry in cfg["datasets"].items():
        if entry["kind"] == "synthetic" and entry["iid"]:
            for key in ("alpha", "beta"):
                if entry[key] != 0:
                    config_error(["datasets", name, key], "must be 0 when iid is true")

    for name, exp in cfg["experiments"].items():
        _validate_experiment(name, exp, cfg)
    _validate_rng(cfg)
    _validate_method_options(cfg)

    for name in used_datasets(cfg):
        for source in dataset_sources(name, cfg):
            if source not in cfg["sources"]:
                config_error(["sources", source], f"required by dataset {name} (kind {cfg['datasets'][name]['kind']})")
        devices, sample = n_devices(name, cfg), cfg["datasets"][name].get("eval_devices")
        if devices is not None and sample is not None and sample > devices:
            config_error(["datasets", name, "eval_devices"], f"{sample} is more than the dataset's {devices} devices")
    if not cfg["allow_large"]:
        _validate_sizes(cfg)


def _value_at(cfg, path):
    for key in path:
        cfg = cfg[key]
    return cfg


def _validate_results_dir(cfg):
    """A results folder that is a filesystem root or the project itself would mix or bury it."""
    folder = Path(cfg["results_dir"]).resolve()
    for forbidden, what in ((Path(folder.anchor), "a filesystem root"), (Path(workflow.basedir).resolve(),
                            "the project folder"), (Path.cwd().resolve(), "the working directory")):
        if folder == forbidden:
            config_error(["results_dir"], f"{cfg['results_dir']!r} is {what}; name a folder below it")


# Ceilings on what one config may ask for, unless `allow_large: true` (config/README.md).
MAX_ROUNDS = 100_000
MAX_RUNS = 10_000
MAX_DATASET_GB = 8.0
SYNTHETIC_MEAN_SAMPLES = 453  # E[int(lognormal(4, 2))] + 50 = e^6 + 50: FedProx's device sizes


def _validate_sizes(cfg):
    """Refuse plans that would run for days or fill the disk, saying how big they are."""
    hint = "set allow_large: true to run it anyway"
    for name in used_datasets(cfg):
        entry = cfg["datasets"][name]
        if entry["rounds"] > MAX_ROUNDS:
            config_error(["datasets", name, "rounds"], f"{entry['rounds']} is above the ceiling of {MAX_ROUNDS} ({hint})")
        if entry["kind"] == "synthetic":
            settings = synthetic_settings(name, cfg)
            gigabytes = settings["devices"] * SYNTHETIC_MEAN_SAMPLES * (settings["features"] + 1) * 4 / 1e9
            if gigabytes > MAX_DATASET_GB:
                key = ["datasets", name, "devices"] if "devices" in entry else ["synthetic", "devices"]
                config_error(key, f"{settings['devices']} devices would make a dataset of about "
                             f"{gigabytes:,.0f} GB (above the ceiling of {MAX_DATASET_GB:g} GB; {hint})")
    runs = 0
    for name, exp in cfg["experiments"].items():
        if exp.get("rounds", 0) > MAX_ROUNDS:
            config_error(["experiments", name, "rounds"], f"{exp['rounds']} is above the ceiling of {MAX_ROUNDS} ({hint})")
        grid = len(exp.get("mu", exp.get("mu_grid", cfg["tuning"]["mu_grid"])))
        per_setting = len(exp["methods"]) * grid * len(exp.get("seeds", cfg["seeds"]))
        runs += per_setting * len(exp["datasets"]) * len(as_list(exp.get("clients_per_round", 1))) \
            * len(as_list(exp["epochs"]))
    if runs > MAX_RUNS:
        config_error(["experiments"], f"up to {runs:,} training runs are above the ceiling of {MAX_RUNS:,} ({hint})")


def _validate_rng(cfg):
    """The authors' draws select uniformly, and FedDANE's two subsets alike (fedsim.authors)."""
    sim = cfg["simulator"]
    if sim["rng"] != "authors":
        return
    if sim["selection"] != "uniform":
        config_error(["simulator", "selection"], "must be uniform with rng: authors (their code's)")
    two_subsets = [m for e in cfg["experiments"].values() for m in e["methods"] if ENTRIES[m].method.gradients == "sampled"]
    if two_subsets and sim["second_subset"] != "same":
        config_error(["simulator", "second_subset"], "must be same with rng: authors (their FedDANE draws "
                     "its second subset with the first one's seed)")


def _validate_method_options(cfg):
    """Each method's settings, checked by the method itself (fedsim.methods: its `options`)."""
    for name, options in cfg["method_options"].items():
        if name not in REGISTRY:
            config_error(["method_options", name], f"unknown method (one of {', '.join(REGISTRY)})")
        for key, value in options.items():
            try:
                REGISTRY[name].resolve({key: value})
            except ValueError as err:
                config_error(["method_options", name, key], str(err))


def _validate_experiment(name, exp, cfg):
    where = ["experiments", name]
    if name == "tuning" or name.endswith("_test_acc"):
        config_error(where, "reserved name (tuning and *_test_acc are figure file names)")
    given = [key for key in ("clients_per_round", "clients_fraction") if key in exp]
    if len(given) != 1:
        problem = "give one of clients_per_round, clients_fraction"
        config_error(where + (given[1:] or ["clients_per_round"]), problem)
    for i, dataset in enumerate(exp["datasets"]):
        if dataset not in cfg["datasets"]:
            config_error(
                where + ["datasets", i],
                f"unknown dataset {dataset!r} (defined under datasets: "
                f"{', '.join(cfg['datasets'])})",
            )
        experiment_ks(name, dataset, cfg)  # stops with a config error where K is undefined
        if exp.get("theory") and cfg["datasets"][dataset]["kind"] in LSTM_KINDS:
            config_error(where + ["theory"], f"the theorems' constants are measured for MCLR models only, not {dataset}")
    if exp.get("figure") == "theory" and not exp.get("theory"):
        config_error(where + ["theory"], "must be true for figure: theory (its runs log the constants it draws)")
    if "mu" in exp:
        for key in ("mu_from", "mu_grid"):
            if key in exp:
                config_error(where + [key], "not with `mu` (the experiment's mu values are fixed)")
    if "mu_from" in exp:
        _validate_mu_from(name, exp, cfg)


def _validate_mu_from(name, exp, cfg):
    """The experiment named by mu_from must tune mu in ONE setting per dataset of ours."""
    where, source = ["experiments", name, "mu_from"], exp["mu_from"]
    ref = cfg["experiments"].get(source)
    if ref is None or source == name or "mu_from" in ref or "mu" in ref:
        config_error(where, f"{source!r} is not another experiment that tunes mu itself")
    for method in (m for m in exp["methods"] if method_kind(m) == "tuned"):
        if method not in ref["methods"]:
            config_error(where, f"experiment {source} does not run {method}")
    for dataset in exp["datasets"]:
        if dataset not in ref["datasets"]:
            config_error(where, f"experiment {source} does not run dataset {dataset}")
        if len(experiment_ks(source, dataset, cfg)) > 1 or len(as_list(ref["epochs"])) > 1:
            config_error(where, f"experiment {source} tunes several K or E on {dataset}")


# ---------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------

SYNTHETIC_KEYS = ("devices", "features", "classes", "train_fraction", "seed")


def as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def fmt(x):
    """Canonical text of a number for paths: 0 -> '0', 1.0 -> '1', 1e-3 -> '0.001'.

    Strings (wildcard patterns such as '{mu}', or already formatted values) pass through.
    """
    if isinstance(x, str):
        return x
    text = format(Decimal(repr(float(x))), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def synthetic_settings(dataset, cfg=None):
    """Generator settings of a synthetic dataset: shared `synthetic` + its overrides."""
    cfg = cfg or config
    entry = cfg["datasets"][dataset]
    settings = dict(cfg["synthetic"])
    settings.update({k: entry[k] for k in SYNTHETIC_KEYS if k in entry})
    return settings


def n_devices(dataset, cfg=None):
    """Number of devices of a dataset, where the config determines it (else None)."""
    cfg = cfg or config
    if cfg["datasets"][dataset]["kind"] == "synthetic":
        return synthetic_settings(dataset, cfg)["devices"]
    # LEAF and JSON datasets: the count the config declares (checked when the file is built)
    return cfg["datasets"][dataset].get("devices")


def experiment_ks(name, dataset, cfg=None):
    """The K values (devices per round) an experiment runs on a dataset: `clients_per_round`,
    or `clients_fraction` of the dataset's devices (rounded, at least 1). Stops with a
    config error naming the key where K is undefined or too large."""
    cfg = cfg or config
    exp, devices = cfg["experiments"][name], n_devices(dataset, cfg)
    if "clients_per_round" in exp:
        key, ks = "clients_per_round", as_list(exp["clients_per_round"])
    else:
        key, fraction = "clients_fraction", exp["clients_fraction"]
        if isinstance(fraction, dict):
            fraction = fraction.get(dataset, fraction.get("default"))
        if fraction is None:
            config_error(["experiments", name, key], f"no fraction for {dataset} (nor a default)")
        if devices is None:
            config_error(["datasets", dataset, "devices"], f"needed for {key} of experiment {name}")
        ks = [max(1, round(fraction * devices))]
    # uniform selection draws without replacement: K <= devices
    uniform = cfg["simulator"]["selection"] == "uniform"
    for k in ks:
        if uniform and devices is not None and k > devices:
            problem = f"{k} is more than the {devices} devices of dataset {dataset}"
            config_error(["experiments", name, key], problem)
    return ks


def dataset_cfg(dataset):
    return config["datasets"][dataset]


def datasets_of_kind(kind):
    return [name for name, entry in config["datasets"].items() if entry["kind"] == kind]


def alternatives(names):
    """A regex matching exactly these names (or nothing when the list is empty)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


# ---------------------------------------------------------------------------------------
# Paths: every file name of the workflow is built here and nowhere else.
# Called without arguments, the run helpers return wildcard patterns for rule outputs.
# ---------------------------------------------------------------------------------------

RUN_FIELDS = ("dataset", "method", "mu", "K", "E", "T", "theory", "seed")


def results(*parts):
    return str(Path(config["results_dir"], *parts))


def raw_path(source="{source}", file="{file}"):
    """A raw source file as fetched: <raw_dir>/<source>/<file> (file: the source's, see raw_file)."""
    if source != "{source}" and file == "{file}":
        file = raw_file(source)
    return str(Path(config["raw_dir"], source, file))


def dataset_path(name="{dataset}"):
    return results("datasets", f"{name}.h5")


def run_stem(
    dataset="{dataset}", method="{method}", mu="{mu}", K="{K}", E="{E}", T="{T}", theory="{theory}", seed="{seed}"
):
    """Relative location of one training run: {dataset}/{method}/mu{mu}_K{K}_E{E}{T}{theory}_seed{seed},
    T being the rounds tag (see rounds_tag), theory '_theory' where the run logs the theorems'
    constants (an experiment's `theory: true`), else ''."""
    return f"{dataset}/{method}/mu{fmt(mu)}_K{fmt(K)}_E{fmt(E)}{T}{theory}_seed{fmt(seed)}"


def rounds_tag(dataset, rounds=None):
    """'' for the dataset's own number of rounds (the paper's; also rounds=None), else
    '_T<rounds>': the paper's runs keep short paths, an experiment's `rounds` gets its own."""
    return "" if rounds in (None, dataset_cfg(dataset)["rounds"]) else f"_T{rounds}"


def tag_rounds(dataset, tag):
    """The number of rounds a rounds tag stands for."""
    return int(tag[2:]) if tag else dataset_cfg(dataset)["rounds"]


def run_dir(*args, **kwargs):
    return results("runs", run_stem(*args, **kwargs))


def metrics_path(*args, **kwargs):
    return f"{run_dir(*args, **kwargs)}/metrics.csv"


def info_path(*args, **kwargs):
    return f"{run_dir(*args, **kwargs)}/run.json"


def summary_path(name):
    """results/summary/<name> (planned_runs.csv, runs.csv, tuned_mu.csv)."""
    return results("summary", name)


def figure_path(name="{experiment}", ext="pdf", metric="train_loss"):
    """figures/<name>.<ext>; a figure of another metric than the paper's training loss is
    its companion <name>_<metric>.<ext>."""
    stem = name if metric == "train_loss" else f"{name}_{metric}"
    return results("figures", f"{stem}.{ext}")


def checkpoint_path(*args, **kwargs):
    """A run's resume state: outside its outputs, so Snakemake's cleanup of a failed job's
    outputs keeps it; the run deletes it once its outputs are complete."""
    return results("checkpoints", f"{run_stem(*args, **kwargs)}.pt")


def benchmark_path(rule, stem):
    return results("benchmarks", rule, f"{stem}.tsv")


SHARED_LOG_RULES = ("download",)  # their files (raw_dir) serve every results_dir


def log_path(rule_name, stem):
    """<results_dir>/logs/<rule_name>/<stem>.log, beside the outputs it explains, so two configs
    with their own results_dir never overwrite each other's logs; downloads log under logs/."""
    if rule_name in SHARED_LOG_RULES:
        return f"logs/{rule_name}/{stem}.log"
    return results("logs", rule_name, f"{stem}.log")


# ---------------------------------------------------------------------------------------
# Package code the jobs depend on. Snakemake compares the checksums of small inputs, so
# an edit reruns the jobs whose code changed and a mere mtime change (checkout) does not.
# ---------------------------------------------------------------------------------------

PACKAGE_DIR = Path(workflow.basedir, "src", "fedsim")


def _module_file(dotted):
    """src/fedsim/<dotted name as a path>.py or that package's __init__.py; None if neither exists."""
    base = PACKAGE_DIR.joinpath(*dotted.split(".")) if dotted else PACKAGE_DIR
    candidates = [base.with_suffix(".py"), base / "__init__.py"] if dotted else [base / "__init__.py"]
    return next((path for path in candidates if path.is_file()), None)


def _imported(dotted):
    """The fedsim modules (dotted names) one module imports, at any depth of its code (a lazy import inside a
    function is code the job runs too)."""
    path = _module_file(dotted)
    parts = dotted.split(".") if dotted else []
    package = parts if path.name == "__init__.py" else parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "fedsim":
            base = node.module.split(".")[1:]
        elif isinstance(node, ast.Import):
            found |= {".".join(a.name.split(".")[1:]) for a in node.names if a.name.split(".")[0] == "fedsim"}
            continue
        else:
            continue
        found.add(".".join(base))
        found |= {".".join([*base, a.name]) for a in node.names if _module_file(".".join([*base, a.name]))}
    return {m for m in found if _module_file(m)}


def package_code(*entries):
    """The package's source files a job running the modules `entries` executes: each one, what it
    imports, transitively, and the packages' __init__.py on the way. Derived from the imports, so a
    refactor cannot silently stop (or start) reruns. Empty where the workflow's checkout has no
    src/ (the package installed elsewhere). The methods' registry finds the method modules at run
    time, so no import names them: train_code adds the run's own."""
    if not PACKAGE_DIR.is_dir():
        return []
    seen, todo = set(), list(entries)
    while todo:
        dotted = todo.pop()
        if dotted in seen:
            continue
        seen.add(dotted)
        parts = dotted.split(".")
        todo += [".".join(parts[:i]) for i in range(len(parts))]  # its packages' __init__ run first
        todo += sorted(_imported(dotted))
    return sorted(os.path.relpath(_module_file(m)) for m in seen)  # relative to the working directory


def train_code(method):
    """Code of one method's training runs: train.py's imports and the method's own module with
    those it builds on (fedsim.methods.USES); another method's file is not among them."""
    return package_code("train", *(f"methods.{m}" for m in USES[ENTRIES[method].method.name]))


# ---------------------------------------------------------------------------------------
# Experiments -> training runs
# ---------------------------------------------------------------------------------------

Run = namedtuple("Run", RUN_FIELDS)
Setting = namedtuple("Setting", ("dataset", "K", "E", "T"))  # a run without method, mu, theory, seed


def tuned_methods():
    """The methods whose mu is tuned (the registry says which), among those the experiments run."""
    used = {m for exp in config["experiments"].values() for m in exp["methods"]}
    return [m for m in METHODS if method_kind(m) == "tuned" and m in used]


def mu_source(experiment):
    """Where an experiment's tuned methods get their mu: `fixed` (its own list `mu`, every method
    with a proximal term runs each), `from` (the mu tuned in its `mu_from` experiment, on the
    same dataset) or `grid` (it runs the grid and tunes itself)."""
    exp = config["experiments"][experiment]
    if "mu" in exp:
        return "fixed"
    return "from" if "mu_from" in exp and not config["tuning"]["per_setting"] else "grid"


def tunes_mu(experiment):
    return mu_source(experiment) == "grid"


def settings(experiment):
    """Every (dataset, K, E, rounds tag) of an experiment."""
    exp = config["experiments"][experiment]
    return [
        Setting(dataset, fmt(K), fmt(E), rounds_tag(dataset, exp.get("rounds")))
        for dataset in exp["datasets"]
        for K in experiment_ks(experiment, dataset)
        for E in as_list(exp["epochs"])
    ]


def reference_setting(experiment, setting):
    """The setting whose tuning gives the tuned method's mu in `setting`: itself, or the
    same dataset's (only) setting in the `mu_from` experiment."""
    if tunes_mu(experiment):
        return setting
    source = config["experiments"][experiment]["mu_from"]
    return next(s for s in settings(source) if s.dataset == setting.dataset)


def chosen_mu(tuned, method, setting):
    """The mu chosen for `method` in `setting` in `tuned` (rows of tuned_mu.csv)."""
    key = (method, setting.dataset, setting.K, setting.E, tag_rounds(setting.dataset, setting.T))
    for row in tuned:
        numbers = (fmt(float(row[c])) for c in ("clients_per_round", "epochs"))
        if (row["method"], row["dataset"], *numbers, int(row["rounds"])) == key:
            return fmt(float(row["chosen_mu"]))
    raise ValueError(f"{summary_path('tuned_mu.csv')} has no row for {method} in {setting}")


def method_mus(method, setting, experiment, tuned=None):
    """The mu values a method runs with in one setting of an experiment. A tuned method:
    every mu of the grid where the experiment tunes it, else the mu chosen in `tuned`, or
    "tuned" while `tuned` is not known. None at all where the method does not apply (the
    authors' FedDANE on an LSTM dataset)."""
    exp = config["experiments"][experiment]
    if ENTRIES[method].mclr_only and dataset_cfg(setting.dataset)["kind"] in LSTM_KINDS:
        return []
    kind = method_kind(method)
    if kind != "none" and mu_source(experiment) == "fixed":
        return exp["mu"]
    if kind == "tuned":
        if tunes_mu(experiment):
            return exp.get("mu_grid", config["tuning"]["mu_grid"])
        return ["tuned"] if tuned is None else [chosen_mu(tuned, method, reference_setting(experiment, setting))]
    return [dataset_cfg(setting.dataset)["fedprox_mu"]] if kind == "fixed" else [0]


PLAN_COLUMNS = ["experiment", *RUN_FIELDS, "rounds"]


def plan(tuned=None):
    """The experiments expanded into their training runs: one row per experiment and run (a run
    two experiments share has a row in each, one path). mu is canonical text, or "tuned" where
    another experiment's tuning chooses it and `tuned` (rows of tuned_mu.csv) is not known yet."""
    rows = [
        (name, s.dataset, method, fmt(mu), s.K, s.E, s.T, theory_tag(name), fmt(seed), tag_rounds(s.dataset, s.T))
        for name, exp in config["experiments"].items()
        for s in settings(name)
        for method in exp["methods"]
        for mu in method_mus(method, s, name, tuned)
        for seed in exp.get("seeds", config["seeds"])
    ]
    return pd.DataFrame(rows, columns=PLAN_COLUMNS)


def runs_of(table):
    """The distinct runs (sorted) of rows of a plan whose mu is known."""
    known = table[table["mu"] != "tuned"]
    return sorted({Run(*row) for row in known[list(RUN_FIELDS)].itertuples(index=False)})


def experiment_runs(experiment, tuned=None, chosen_only=False):
    """Training runs of one experiment; `chosen_only`: a method it tunes at its chosen mu only."""
    table = plan(tuned)
    table = table[table["experiment"] == experiment]
    if chosen_only and tunes_mu(experiment):
        chosen = [method_kind(r.method) != "tuned" or r.mu == chosen_mu(tuned, r.method, Setting(r.dataset, r.K, r.E, r.T))
                  for r in table.itertuples()]
        table = table[chosen]
    return runs_of(table)


def all_runs(tuned=None):
    """Every training run of every experiment; runs shared by experiments appear once."""
    return runs_of(PLAN if tuned is None else plan(tuned))


def tuning_runs():
    """The runs the tuned methods' mu is chosen from: their grid runs where they are tuned."""
    table = PLAN[PLAN["experiment"].map(tunes_mu) & PLAN["method"].map(lambda m: method_kind(m) == "tuned")]
    return runs_of(table)


def write_plan(path):
    """The plan before tuning, with every setting that shapes a run's result and the run's folder, as
    CSV (rewritten only when it changes): what the DAG will train, readable before it does."""
    table = PLAN.assign(
        lr=[dataset_cfg(d)["lr"] for d in PLAN["dataset"]],
        batch_size=[dataset_cfg(d)["batch_size"] for d in PLAN["dataset"]],
        options=[method_options_text(m) for m in PLAN["method"]],
        **{key: config["simulator"][key] for key in ("selection", "second_subset", "rng", "init")},
        run=[run_dir(*run) if run.mu != "tuned" else "" for run in PLAN[list(RUN_FIELDS)].itertuples(index=False)],
    )
    text = table.to_csv(index=False)
    if not Path(path).is_file() or Path(path).read_text() != text:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(f"{path}.tmp").write_text(text)
        os.replace(f"{path}.tmp", path)


def after_tuning():
    """Whether some runs are known only after tuning (an experiment with `mu_from`)."""
    return any(mu_source(name) == "from" for name in config["experiments"])


def theory_tag(experiment):
    """'_theory' in the paths of an experiment whose runs log the theorems' constants: they cost
    more than the same runs without, which other experiments share."""
    return "_theory" if config["experiments"][experiment].get("theory") else ""


def tuned_table():
    """Rows of tuned_mu.csv, once the `tune` checkpoint has written it (Snakemake then
    re-evaluates the jobs that asked)."""
    with open(checkpoints.tune.get().output[0], newline="") as handle:
        return list(csv.DictReader(handle))


def info_paths(runs):
    return [info_path(*run) for run in runs]


def metrics_paths(runs):
    return [metrics_path(*run) for run in runs]


def figure_experiments(theory=False):
    """The experiments drawn by the curves' figure (or, theory=True, by the theory figure)."""
    return [name for name, exp in config["experiments"].items()
            if "figure" in exp and (exp["figure"] == "theory") == theory]


FIGURE_METRICS = ("train_loss", "test_acc")  # the paper's figure and its companion


def final_targets():
    targets = [summary_path("runs.csv")]
    if tuning_runs():
        targets.append(summary_path("tuned_mu.csv"))
        targets += [figure_path("tuning", ext) for ext in ("pdf", "png")]
    for name in figure_experiments():
        for metric in FIGURE_METRICS:
            targets += [figure_path(name, ext, metric) for ext in ("pdf", "png")]
    for name in figure_experiments(theory=True):
        targets += [figure_path(name, ext) for ext in ("pdf", "png")]
    if any(dataset_cfg(name)["kind"] in LEAF_KINDS for name in used_datasets()):
        targets.append(summary_path("datasets.csv"))  # only then: the default DAG stays as it was
    return targets


# ---------------------------------------------------------------------------------------
# Per-rule arguments and resources
# ---------------------------------------------------------------------------------------


def synthetic_args(dataset):
    """CLI arguments of `fedsim generate-synthetic` for one dataset (also its params)."""
    entry, settings = dataset_cfg(dataset), synthetic_settings(dataset)
    args = [f"--alpha {fmt(entry['alpha'])}", f"--beta {fmt(entry['beta'])}"]
    if entry["iid"]:
        args.append("--iid")
    args += [
        f"--devices {settings['devices']}",
        f"--features {settings['features']}",
        f"--classes {settings['classes']}",
        f"--train-fraction {fmt(settings['train_fraction'])}",
        f"--seed {settings['seed']}",
    ]
    return " ".join(args)


LEAF_KINDS = ("femnist", "shakespeare", "sent140")


def used_datasets(cfg=None):
    """The datasets some experiment runs (others may be defined but are never built)."""
    cfg = cfg or config
    return sorted({d for exp in cfg["experiments"].values() for d in exp["datasets"]})


def dataset_sources(dataset, cfg=None):
    """The raw sources (keys of `sources`) a dataset is built from."""
    cfg = cfg or config
    entry = cfg["datasets"][dataset]
    if entry["kind"] == "femnist":
        return [] if "json" in entry else ["nist_by_class"]
    return {"synthetic": [], "json": [], "shakespeare": ["shakespeare"], "sent140": ["sent140", "glove"]}[entry["kind"]]


def raw_file(source):
    """The name a source's file gets under raw_dir: the local copy's own name where `path` is
    given (a .txt.gz copy stays one), else the source's file name."""
    entry = config["sources"][source]
    return Path(entry["path"]).name if "path" in entry else entry["file"]


def fetch_inputs(wildcards):
    """A local copy or mirror file is an input of the download (Snakemake names it when missing)."""
    entry = config["sources"][wildcards.source]
    if "path" in entry:
        return [entry["path"]]
    return [str(Path(entry["mirror"], entry["file"]))] if "mirror" in entry else []


def fetch_args(wildcards):
    """Arguments of `fedsim fetch` for one source: the origin used (only that one, so editing an
    unused base_url reruns nothing) and the checksums to check."""
    entry = config["sources"][wildcards.source]
    if wildcards.file != raw_file(wildcards.source):
        raise ValueError(f"{wildcards.source}: expected file {raw_file(wildcards.source)}, not {wildcards.file}")
    if "path" in entry:
        origin = f"--path {shlex.quote(entry['path'])}"
    elif "mirror" in entry:
        origin = f"--mirror {shlex.quote(entry['mirror'])}"
    else:
        origin = f"--base-url {shlex.quote(entry['base_url'])}"
    checks = [f"--{algo} {entry[algo]}" for algo in ("sha256", "md5") if entry.get(algo)]
    if "path" in entry and Path(entry["path"]).name != entry["file"]:
        checks = []  # another file than the published archive: its digests are logged, not checked
    return " ".join([origin, *(checks or ["--no-verify"])])


def leaf_raw_inputs(dataset):
    """The raw files a LEAF dataset is built from: its sources under raw_dir, or FEMNIST's
    LEAF JSON files or folders (`json`)."""
    entry = dataset_cfg(dataset)
    if entry["kind"] == "femnist" and "json" in entry:
        return as_list(entry["json"])
    return [raw_path(source) for source in dataset_sources(dataset)]


def leaf_args(dataset):
    """CLI arguments of `fedsim prepare-<kind>` besides its raw inputs: LEAF's sampling, the
    construction's settings and the device count the config declares."""
    entry = dataset_cfg(dataset)
    keys = {"shakespeare": ("fraction", "min_samples", "min_samples_rule", "train_fraction", "seed"),
            "sent140": ("fraction", "min_samples", "min_samples_rule", "train_fraction", "seed", "glove_dim"),
            "femnist": ("variant", "seed")}[entry["kind"]]
    flags = {"glove_dim": "dim"}
    args = [f"--{flags.get(k, k).replace('_', '-')} {fmt(entry[k])}" for k in keys]
    if entry.get("allow_reuse"):
        args.append("--allow-reuse")
    if "devices" in entry:
        args.append(f"--expect-devices {entry['devices']}")
    return " ".join(args)


def json_inputs(dataset):
    """The train and test JSON files or folders of a dataset of kind json."""
    entry = dataset_cfg(dataset)
    return {"train": as_list(entry["train"]), "test": as_list(entry["test"])}


def json_args(dataset):
    """CLI arguments of `fedsim import-json` besides its inputs."""
    entry = dataset_cfg(dataset)
    args = [f"--order {entry['order']} --test-only {entry['test_only']}"]
    if "classes" in entry:
        args.append(f"--classes {entry['classes']}")
    if "devices" in entry:
        args.append(f"--expect-devices {entry['devices']}")
    return " ".join(args)


def init_files(wildcards):
    """The run's initial model file, where `simulator.init` names one ({seed}: the run's seed)."""
    init = config["simulator"]["init"]
    return [] if init is None else [init.replace("{seed}", wildcards.seed)]


def method_options(method):
    """The options the config sets for a method or variant (method_options); those a variant fixes
    stay as the variant has them."""
    entry = ENTRIES[method]
    options = config["method_options"].get(entry.method.name, {})
    return {k: v for k, v in sorted(options.items()) if k not in entry.options}


def method_options_text(method):
    """All of a method's options, canonical JSON (the summary's `options` column)."""
    return json.dumps(resolve(method, method_options(method))[1], sort_keys=True)


def run_args(wildcards):
    """How a run is computed beyond its wildcards: the method as fedsim knows it, whose random
    draws, the initial model."""
    args = [f"--method {wildcards.method} --rng {config['simulator']['rng']}"]
    args += [f"--option {shlex.quote(f'{k}={v}')}" for k, v in method_options(wildcards.method).items()]
    args += [f"--init {shlex.quote(path)}" for path in init_files(wildcards)]
    return " ".join(args)


def eval_args(dataset):
    """How a run reads its dataset and on how many devices it computes the metrics."""
    entry = dataset_cfg(dataset)
    args = f"--load {entry['load']}"
    return args + (f" --eval-devices {entry['eval_devices']}" if "eval_devices" in entry else "")


LSTM_KINDS = ("shakespeare", "sent140")


def train_mem_mb(dataset):
    return 8192 if dataset_cfg(dataset)["kind"] in LEAF_KINDS else 2048


def train_device(dataset):
    """Where a dataset's runs compute: `simulator.device`, where `auto` means the GPU (if there is
    one) for the LSTM datasets and the CPU for the MCLR ones (small matmuls, faster on a core)."""
    device = config["simulator"]["device"]
    if device == "auto" and dataset_cfg(dataset)["kind"] not in LSTM_KINDS:
        return "cpu"
    return device


def train_gpus(dataset):
    """GPUs a training job asks the scheduler for: one wherever it may compute on a GPU."""
    return int(train_device(dataset) != "cpu")


def train_runtime(wildcards):
    """Minutes a run may take; generous: a 200-round, E = 20, K = 10 synthetic run takes
    about 15 s on one CPU core, and the time grows with rounds x E x K (x 3 logging the theory)."""
    rounds = tag_rounds(wildcards.dataset, wildcards.T)
    return 5 + rounds * int(wildcards.E) * int(wildcards.K) * (3 if wildcards.theory else 1) // 4000


def summary_runs(wildcards):
    """Every run, including those known only after tuning."""
    return all_runs(tuned_table() if after_tuning() else None)


def figure_runs(wildcards):
    """The runs one figure shows: FedDANE at its chosen mu only."""
    return experiment_runs(wildcards.experiment, tuned_table(), chosen_only=True)


def theory_runs(wildcards):
    """The runs of a theory figure: every one of its experiment (its mu values are fixed)."""
    return experiment_runs(wildcards.experiment)


# Input functions giving the run records / metrics files of such a list of runs: named
# inputs, not unpack(), so that `{input.runs}` stays defined while a checkpoint is pending.
def infos_of(runs):
    return lambda wildcards: info_paths(runs(wildcards))


def metrics_of(runs):
    return lambda wildcards: metrics_paths(runs(wildcards))


# ---------------------------------------------------------------------------------------
# Validate now (before any rule is defined) and constrain the wildcards.
# ---------------------------------------------------------------------------------------

check_duplicate_keys(workflow.configfiles)
validate_config(config)
# Jobs call fedsim through its warm launcher (fedsim.warm: one process imports torch once and
# forks a child per job); FEDSIM_WARM=0, inherited by the jobs, makes every job a fresh process.
# Not a param: it changes no result, so switching it reruns nothing.
_warm_start = config["simulator"]["warm_start"] and os.environ.get("FEDSIM_WARM") != "0"  # either may say no
os.environ.update(FEDSIM_WARM="1" if _warm_start else "0")
PLAN = plan()  # the runs known before tuning; those after it join once tuned_mu.csv exists
write_plan(summary_path("planned_runs.csv"))


wildcard_constraints:
    dataset=alternatives(config["datasets"]),
    method=alternatives(METHODS),
    mu=r"[0-9]+(\.[0-9]+)?",
    K=r"[0-9]+",
    E=r"[0-9]+",
    T=r"(_T[0-9]+)?",
    theory=r"(_theory)?",
    seed=r"[0-9]+",
    experiment=alternatives(config["experiments"]),
