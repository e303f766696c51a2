"""The workflow's jobs as fedsim commands: their arguments and resources, from the config, and
the package code each one runs with its fingerprint (so that an edit reruns exactly the jobs whose
code changed).

Pure functions of the config (as fedsim.planning.configcheck leaves it) and of a job's wildcards (a training
job's: its run record, experiments.RunSpec); no torch, no Snakemake. workflow/rules/common.smk binds them to
its config; a rule's params are these strings, so changing a setting reruns exactly the jobs whose command it
changes.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

from ..data import atomic
from ..specs import FILE_KINDS, model_file
from ..kinds import BUILT_KINDS, KINDS, PLUGIN_KIND_FILES
from .experiments import RunSpec, specs_of
from ..core.sources import method_entries, model_entries, package_code
from .kinds import entry_dissimilarity, resolved_entry, trains_linear_softmax
from ..methods import ENTRIES, resolve

# A dataset entry's keys that say how its runs train, not what the dataset holds
TRAINING_KEYS = ("lr", "batch_size", "rounds", "fedprox_mu", "eval_devices", "eval_every", "dissimilarity", "load",
                 "model")


def build_entry(cfg, dataset) -> str:
    """`fedsim build-dataset`'s --entry: the entry with its kind's shared settings, but its TRAINING_KEYS
    and the keys its kind's build does not read (Kind.reads), as JSON: its lr, say, changes no dataset
    (no rebuild)."""
    entry = resolved_entry(cfg, dataset)
    reads = KINDS[entry["kind"]].reads
    keys = set(reads(entry) if reads else entry) - set(TRAINING_KEYS)
    return json.dumps({k: v for k, v in entry.items() if k in keys}, sort_keys=True)


def build_files(named) -> str:
    """`fedsim build-dataset`'s inputs from its build's named inputs (fedsim.planning.kinds.inputs as
    paths): --files the raw ones, --input NAME=PATH each other's (a JSON import's train and test, a
    partition's pool, Sent140's GloVe)."""
    args = ["--files", *named.get("raw", [])] if named.get("raw") else []
    args += [f"--input={name}={path}" for name, paths in named.items() if name != "raw" for path in paths]
    return shlex.join(args)


def raw_file(cfg, source) -> str:
    """The name a source's file gets under raw_dir: the local copy's own name where `path` is
    given (a .txt.gz copy stays one), else the source's file name."""
    entry = cfg["sources"][source]
    return Path(entry["path"]).name if "path" in entry else entry["file"]


def fetch_inputs(cfg, source) -> list[str]:
    """A local copy or mirror file is an input of the download (Snakemake names it when missing)."""
    entry = cfg["sources"][source]
    if "path" in entry:
        return [entry["path"]]
    return [str(Path(entry["mirror"], entry["file"]))] if "mirror" in entry else []


def fetch_args(cfg, source, file) -> str:
    """Arguments of `fedsim fetch` for one source: the origin used (only that one, so editing an
    unused base_url reruns nothing) and the checksums to check."""
    entry = cfg["sources"][source]
    if file != raw_file(cfg, source):
        raise ValueError(f"{source}: expected file {raw_file(cfg, source)}, not {file}")
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


def init_files(cfg, seed) -> list[str]:
    """The run's initial model file, where `simulator.init` names one ({seed}: the run's seed)."""
    init = cfg["simulator"]["init"]
    return [] if init is None else [init.replace("{seed}", str(seed))]


def method_options(cfg, method) -> dict:
    """The options the config sets for a method or variant (method_options); those a variant fixes
    stay as the variant has them, and the one a method is tuned over is each run's own."""
    entry = ENTRIES[method]
    options = cfg["method_options"].get(entry.method.name, {})
    return {k: v for k, v in sorted(options.items()) if k not in entry.options and k != entry.method.tuned}


def method_options_text(cfg, method) -> str:
    """All of a method's options, canonical JSON (the summary's `options` column)."""
    return json.dumps(resolve(method, method_options(cfg, method))[1], sort_keys=True)


def planned_runs_csv(cfg, plan, run_dir) -> str:
    """The runs table before tuning (experiments.plan: each row's experiment and run record) as
    planned_runs.csv: with every other setting that shapes a run's result, and the run's folder
    (`run_dir(run)`; empty while its value is `tuned`). The value is `mu`, as runs.csv names it, `setting`
    saying whose value it is."""
    datasets = [cfg["datasets"][name] for name in plan["dataset"]]
    runs = specs_of(plan)
    table = plan.assign(
        model=[run.model or "" for run in runs],
        batch_size=[entry["batch_size"] for entry in datasets],
        options=[method_options_text(cfg, m) for m in plan["method"]],
        eval_devices=[entry.get("eval_devices", "") for entry in datasets],
        eval_every=[entry.get("eval_every", 1) for entry in datasets],
        dissimilarity=[entry_dissimilarity(cfg, name) for name in plan["dataset"]],
        **{key: cfg["simulator"][key] for key in ("selection", "second_subset", "rng", "init")},
        run=[run_dir(run) if run.value != "tuned" else "" for run in runs],
    )
    # runs.csv's names: the run setting's value is `mu`, K and E are clients_per_round and epochs
    return table.rename(columns={"value": "mu", "K": "clients_per_round", "E": "epochs"}).to_csv(index=False)


def train_args(cfg, run: RunSpec) -> str:
    """`fedsim train`'s options for one run but its files and threads, made here alone: the run's record
    (experiments.RunSpec), and what its dataset entry and the simulator section say of how it trains."""
    sim = cfg["simulator"]
    args = [run_args(cfg, run.method, run.seed), setting_args(run),
            f"--clients-per-round {run.K} --epochs {run.E}",
            f"--batch-size {cfg['datasets'][run.dataset]['batch_size']} --lr {run.lr} --rounds {run.rounds}",
            f"--seed {run.seed} --selection {sim['selection']} --second-subset {sim['second_subset']}",
            f"--device {train_device(cfg, run.dataset)}", eval_args(cfg, run.dataset),
            f"--model {run.model}" if run.model else "",  # None: its dataset file's default
            "--theory" if run.theory else ""]
    return " ".join(arg for arg in args if arg)


def run_args(cfg, method, seed) -> str:
    """How a run is computed beyond its record's other fields: the method as fedsim knows it, whose random
    draws, the initial model, IEEE subnormals where kept."""
    args = [f"--method {method} --rng {cfg['simulator']['rng']}"]
    args += ["--keep-subnormals"] if cfg["simulator"].get("keep_subnormals") else []
    args += [f"--option {shlex.quote(f'{k}={v}')}" for k, v in method_options(cfg, method).items()]
    args += [f"--init {shlex.quote(path)}" for path in init_files(cfg, seed)]
    return " ".join(args)


def setting_args(run: RunSpec) -> str:
    """The argument giving a run its value of the method's setting: --mu, or the tuned option."""
    name, value = run.setting, run.value
    return f"--mu {value}" if name == "mu" else f"--option {shlex.quote(f'{name}={value}')}"


def eval_args(cfg, dataset) -> str:
    """How a run reads its dataset, on how many devices and how often it computes the metrics, and
    whether with the dissimilarities."""
    entry = cfg["datasets"][dataset]
    args = [f"--load {entry['load']}"]
    args += [f"--eval-devices {entry['eval_devices']}"] if "eval_devices" in entry else []
    args += [f"--eval-every {entry['eval_every']}"] if "eval_every" in entry else []
    if entry.get("dissimilarity") is not None:  # else the model's default (fedsim.specs.ModelSpec)
        args += ["--dissimilarity" if entry["dissimilarity"] else "--no-dissimilarity"]
    return " ".join(args)


def train_device(cfg, dataset) -> str:
    """Where a dataset's runs compute: `simulator.device`, where `auto` means the CPU for the MCLR
    datasets (small matmuls, faster on a core and its compiled kernel) and the GPU (if there is
    one) for the others (the LSTMs, a CNN)."""
    device = cfg["simulator"]["device"]
    return "cpu" if device == "auto" and trains_linear_softmax(cfg, dataset) else device


def train_gpus(cfg, dataset) -> int:
    """GPUs a training job asks the scheduler for: one wherever it may compute on a GPU."""
    return int(train_device(cfg, dataset) != "cpu")


def train_mem_mb(cfg, dataset) -> int:
    return 8192 if cfg["datasets"][dataset]["kind"] in BUILT_KINDS else 2048


# ---------------------------------------------------------------------------------------
# The code a job runs, from its modules' imports
# ---------------------------------------------------------------------------------------

def fingerprint_name(*entries) -> str:
    """The name of the fingerprint of the code that runs the modules `entries`: the entries
    joined by '+', e.g. train+methods.feddane."""
    return "+".join(entries)


def fingerprint_text(files) -> str:
    """One line per source file, `<sha256 of its content>  <path>` (sha256sum's format, so
    `sha256sum -c` checks it), in the order given."""
    return "".join(f"{hashlib.sha256(Path(path).read_bytes()).hexdigest()}  {path}\n" for path in files)


def code_fingerprint(package_dir, out_dir, *entries) -> list[str]:
    """The code a job running `entries` executes (package_code), as ONE input file:
    <out_dir>/<fingerprint_name>.txt listing each of those source files with the sha256 of its
    content. Rewritten (atomically) only when that text changes, so its modification time moves
    exactly when the content of some of that code does: a checkout that only touches files
    reruns nothing, and Snakemake stats one file per job instead of every source file.
    [] where package_dir does not exist (the package installed elsewhere), like package_code."""
    files = package_code(package_dir, *entries)
    return file_fingerprint(out_dir, fingerprint_name(*entries), files) if files else []


def file_fingerprint(out_dir, name, files) -> list[str]:
    """`files` listed with their sha256 in <out_dir>/<name>.txt, rewritten only when that text changes."""
    path = Path(out_dir, f"{name}.txt")
    text = fingerprint_text(files)
    if not path.is_file() or path.read_text() != text:
        atomic.write_text(path, text)  # a temporary file of its own: several processes may parse at once
    return [str(path)]


def model_fingerprint(package_dir, out_dir, model: str | None) -> list[str]:
    """The code of a run's model, as one input file like code_fingerprint's. The registry finds the
    model modules at run time, so no import of train's names one: a run depends on its model here. A
    model of fedsim.models: its module and what it imports ([] where package_dir does not exist); a
    user's own (FEDSIM_PLUGINS): its file, wherever it is; None (a JSON import's, which its built file
    decides): each model a file kind defaults to."""
    names = sorted({default for _, default in FILE_KINDS.values()}) if model is None else [model]
    ours, plugins = model_entries([model_file(name) for name in names])
    files = sorted({*package_code(package_dir, *ours), *map(str, plugins)})
    return file_fingerprint(out_dir, fingerprint_name(*(f"models.{n}" for n in names)), files) if files else []


def method_fingerprint(package_dir, out_dir, method: str) -> list[str]:
    """The code of one method's training runs, as input files like code_fingerprint's: train.py's
    imports with fedsim's method modules the method's code is in (fedsim.methods.USES: its own, those
    it builds on, no other method's) and, for a user's own method (FEDSIM_PLUGINS), its file, wherever
    it is (<out_dir>/methods.<name>.txt): an edit of either reruns that method's runs and no other."""
    entries, plugins = method_entries(method)
    own = code_fingerprint(package_dir, out_dir, "core.train", *entries)
    return own + [path for name, file in plugins.items()
                  for path in file_fingerprint(out_dir, f"methods.{name}", [str(file)])]


def kind_fingerprint(package_dir, out_dir, kind: str) -> list[str]:
    """The code a dataset's build runs, as one input file like code_fingerprint's: fedsim's own kind's
    module and what it imports; a user's own (FEDSIM_PLUGINS): the kinds' registry and its file."""
    path = PLUGIN_KIND_FILES.get(kind)
    if path is None:
        return code_fingerprint(package_dir, out_dir, f"kinds.{kind}")
    return code_fingerprint(package_dir, out_dir, "kinds") + file_fingerprint(out_dir, f"kinds.{kind}", [str(path)])
