# Helpers only (no rules): config validation, the ONE place that builds every path,
# the expansion of experiments into training runs, and wildcard constraints.

import copy
import os
import re
import sys
from collections import namedtuple
from decimal import Decimal
from pathlib import Path

import jsonschema
import yaml


# ---------------------------------------------------------------------------------------
# Config validation
# ---------------------------------------------------------------------------------------

SCHEMA_FILE = Path(workflow.basedir, "workflow", "schemas", "config.schema.yaml")


def _with_defaults(validator_class):
    """A validator class that also fills in the schema's `default` values."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def properties(validator, props, instance, schema):
        if validator.is_type(instance, "object"):
            for key, subschema in props.items():
                if "default" in subschema and key not in instance:
                    instance[key] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, props, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": properties})


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


with open(SCHEMA_FILE) as _handle:
    SCHEMA = yaml.safe_load(_handle)
METHODS = SCHEMA["definitions"]["method"]["enum"]


def validate_config(cfg):
    """Fill defaults, check `cfg` against the schema, then check cross-references."""
    validator = _with_defaults(jsonschema.Draft7Validator)(SCHEMA)
    error = jsonschema.exceptions.best_match(validator.iter_errors(cfg))
    if error is not None:
        config_error(*_explain(error))

    for name, entry in cfg["datasets"].items():
        if entry["kind"] == "synthetic" and entry["iid"]:
            for key in ("alpha", "beta"):
                if entry[key] != 0:
                    config_error(["datasets", name, key], "must be 0 when iid is true")

    uniform = cfg["simulator"]["selection"] == "uniform"  # without replacement: K <= devices
    for name, exp in cfg["experiments"].items():
        tuned = cfg["tuning"]["method"]
        if "figure" in exp and tuned not in exp["methods"]:
            config_error(
                ["experiments", name, "methods"],
                f"an experiment with a figure must run {tuned!r} (the figure shows it at its "
                "tuned mu)",
            )
        for i, dataset in enumerate(exp["datasets"]):
            if dataset not in cfg["datasets"]:
                config_error(
                    ["experiments", name, "datasets", i],
                    f"unknown dataset {dataset!r} (defined under datasets: "
                    f"{', '.join(cfg['datasets'])})",
                )
            devices = n_devices(dataset, cfg)
            for k in as_list(exp["clients_per_round"]):
                if uniform and devices is not None and k > devices:
                    config_error(
                        ["experiments", name, "clients_per_round"],
                        f"{k} is more than the {devices} devices of dataset {dataset}",
                    )


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
    return None


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

RUN_FIELDS = ("dataset", "method", "mu", "K", "E", "seed")


def results(*parts):
    return str(Path(config["results_dir"], *parts))


def dataset_path(name="{dataset}"):
    return results("datasets", f"{name}.h5")


def run_stem(dataset="{dataset}", method="{method}", mu="{mu}", K="{K}", E="{E}", seed="{seed}"):
    """Relative location of one training run: {dataset}/{method}/mu{mu}_K{K}_E{E}_seed{seed}."""
    return f"{dataset}/{method}/mu{fmt(mu)}_K{fmt(K)}_E{fmt(E)}_seed{fmt(seed)}"


def run_dir(*args, **kwargs):
    return results("runs", run_stem(*args, **kwargs))


def metrics_path(*args, **kwargs):
    return f"{run_dir(*args, **kwargs)}/metrics.csv"


def info_path(*args, **kwargs):
    return f"{run_dir(*args, **kwargs)}/run.json"


def summary_path(name):
    """results/summary/<name> (runs.csv, tuned_mu.csv)."""
    return results("summary", name)


def figure_path(experiment="{experiment}", ext="pdf"):
    return results("figures", f"{experiment}.{ext}")


def benchmark_path(rule, stem):
    return results("benchmarks", rule, f"{stem}.tsv")


def log_path(rule, stem):
    return f"logs/{rule}/{stem}.log"


# ---------------------------------------------------------------------------------------
# Package code the jobs depend on. Snakemake compares the checksums of small inputs, so
# an edit reruns the jobs whose code changed and a mere mtime change (checkout) does not.
# ---------------------------------------------------------------------------------------

PACKAGE_DIR = Path(workflow.basedir, "src", "fedsim")
# What each step's results depend on, as paths relative to src/fedsim (files or folders).
# Training depends on every module except those listed in NOT_TRAIN_CODE, so a new module
# reruns training until it is listed here (the safe side).
DATA_CODE = ("synthetic.py", "data.py")
NOT_TRAIN_CODE = (
    "__init__.py",
    "__main__.py",
    "cli.py",
    "atomic.py",
    "synthetic.py",
    "summary.py",
    "figures.py",
)
SUMMARY_CODE = ("summary.py",)
FIGURE_CODE = ("figures.py",)


def package_code(include=None, exclude=()):
    """Package source files under `include` (default: all), minus those under `exclude`;
    empty where the workflow's checkout has no src/ (package installed elsewhere)."""
    if not PACKAGE_DIR.is_dir():
        return []

    def under(rel, names):
        return any(part.as_posix() in names for part in (rel, *rel.parents))

    files = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR)
        if (include is None or under(rel, include)) and not under(rel, exclude):
            files.append(os.path.relpath(path))  # relative to the working directory
    return files


def train_code(method):
    """Code of one method's training runs: an edit of another method's file (methods/<name>.py)
    does not rerun them."""
    others = tuple(f"methods/{m}.py" for m in METHODS if m != method)
    return package_code(exclude=NOT_TRAIN_CODE + others)


# ---------------------------------------------------------------------------------------
# Experiments -> training runs
# ---------------------------------------------------------------------------------------

Run = namedtuple("Run", RUN_FIELDS)


def method_mus(method, dataset):
    """The mu values a method is run with on a dataset."""
    if method == config["tuning"]["method"]:
        return config["tuning"]["mu_grid"]
    if method == "fedavg":
        return [0]
    if method == "fedprox":
        return [dataset_cfg(dataset)["fedprox_mu"]]
    raise ValueError(f"no mu values known for method {method}")


def experiment_runs(experiment):
    """Every training run of one experiment (sorted, no duplicates)."""
    exp = config["experiments"][experiment]
    runs = {
        Run(dataset, method, fmt(mu), fmt(K), fmt(E), fmt(seed))
        for dataset in exp["datasets"]
        for method in exp["methods"]
        for mu in method_mus(method, dataset)
        for K in as_list(exp["clients_per_round"])
        for E in as_list(exp["epochs"])
        for seed in exp["seeds"]
    }
    return sorted(runs)


def all_runs():
    """Every training run of every experiment; runs shared by experiments appear once."""
    return sorted({run for name in config["experiments"] for run in experiment_runs(name)})


def tuning_runs(runs=None):
    """The runs among `runs` (default: all) that take part in tuning mu."""
    grid = {fmt(mu) for mu in config["tuning"]["mu_grid"]}
    return [
        r
        for r in (all_runs() if runs is None else runs)
        if r.method == config["tuning"]["method"] and r.mu in grid
    ]


def info_paths(runs):
    return [info_path(*run) for run in runs]


def metrics_paths(runs):
    return [metrics_path(*run) for run in runs]


def figure_experiments():
    return [name for name, exp in config["experiments"].items() if "figure" in exp]


def final_targets():
    targets = [summary_path("runs.csv")]
    if tuning_runs():
        targets.append(summary_path("tuned_mu.csv"))
    for name in figure_experiments():
        targets += [figure_path(name, "pdf"), figure_path(name, "png")]
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


def train_mem_mb(dataset):
    return 2048


def train_runtime(dataset, epochs):
    """Minutes a run may take; generous: a 200-round, E = 20 synthetic run takes about
    15 s on one CPU core."""
    return 5 + dataset_cfg(dataset)["rounds"] * int(epochs) // 400


def figure_inputs(wildcards):
    """Inputs of one figure: its runs and the tuned mu table."""
    runs = experiment_runs(wildcards.experiment)
    return {
        "tuned": summary_path("tuned_mu.csv"),
        "runs": info_paths(runs),
        "metrics": metrics_paths(runs),
        "code": package_code(FIGURE_CODE),
    }


# ---------------------------------------------------------------------------------------
# Validate now (before any rule is defined) and constrain the wildcards.
# ---------------------------------------------------------------------------------------

validate_config(config)


wildcard_constraints:
    dataset=alternatives(config["datasets"]),
    method=alternatives(METHODS),
    mu=r"[0-9]+(\.[0-9]+)?",
    K=r"[0-9]+",
    E=r"[0-9]+",
    seed=r"[0-9]+",
    experiment=alternatives(config["experiments"]),
