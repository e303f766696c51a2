# Helpers (no rules): the config checked, the runs table bound to it (fedsim.planning.experiments), the ONE
# place that builds every path, the code each job depends on, and per-rule arguments. Parsing
# writes one thing: the code fingerprints (results/code/, see below), compared by content each time.

import csv
import hashlib
import os
import re
import shlex
import sys

import yaml

import snakemake.common.configfile
import snakemake.utils
from functools import cache, partial
from pathlib import Path

# fedsim's registry, its runs table and config checks import no torch: cheap enough for every
# snakemake call (this checkout's src/ where there is one: the Snakefile puts it first).
from fedsim.specs import PluginError  # noqa: E402

try:  # the registries of kinds, methods and models, a plugin's files among them: its mistake in one line
    from fedsim import kinds as _kinds  # noqa: E402
    from fedsim.data import atomic  # noqa: E402
    from fedsim.planning import captions, cost, experiments, jobs, kinds  # noqa: E402
    from fedsim.planning.configcheck import (check_config, check_partition_pools, command_line_types,  # noqa: E402
                                   load_schema, pool_samples, target_read_as_config)
    from fedsim.planning.experiments import ConfigError  # noqa: E402
    from fedsim.kinds import BUILT_KINDS, KINDS  # noqa: E402
    from fedsim.planning.progress import PROGRESS_ENV  # noqa: E402
    from fedsim.methods import ENTRIES  # noqa: E402
    from fedsim.outputs.styles import METRICS  # noqa: E402
except PluginError as err:
    sys.exit(f"{'Kind' if type(err).__name__ == 'KindFileError' else 'Plugin'} error: {err}")

try:
    SCHEMA = load_schema(Path(workflow.basedir, "workflow", "schemas", "config.schema.yaml"))
except ValueError as err:  # two kinds' keys that clash, a kind's key every entry has
    sys.exit(f"Kind error: {err}")
METHODS = list(ENTRIES)  # methods and their variants (feddane_authors), by name
# --config's nested values arrive as text ('20'): typed as a config file would type them. Only
# those: config_settings.config holds what --config gave (overwrite_config mixes in the --configfile
# files, where a quoted '10' is the user's text and the check refuses it).
snakemake.utils.update_config(config, command_line_types(dict(workflow.config_settings.config)))
# A target written after --configfile's file (`--configfile my.yaml results/x/run.json`) is read as a
# second config file: one line where it is a file Snakemake could read (others stop Snakemake earlier).
_misread = target_read_as_config(sys.argv, SCHEMA, snakemake.common.configfile.load_configfile)
if _misread:
    sys.exit(_misread)
try:
    check_config(config, SCHEMA, workflow.basedir, workflow.configfiles)
    config["experiments"] = experiments.selected_experiments(config)  # only_experiments, only_datasets
except ConfigError as err:
    sys.exit(str(err))  # one line naming the key, before any job
for line in experiments.left_out(config):
    print(line, file=sys.stderr)
try:  # the folder the parse itself writes in (the code fingerprints): one line, not a traceback
    Path(config["results_dir"], "code").mkdir(parents=True, exist_ok=True)  # code_dir(), defined below
except OSError as err:
    sys.exit(f"Config error at results_dir: cannot write below {config['results_dir']!r} ({err.strerror})")

# The runs table and its helpers, bound to this config (fedsim.planning.experiments says what each does).
used_datasets, dataset_sources, tuned_methods, after_tuning = (
    partial(getattr(experiments, name), config)
    for name in ("used_datasets", "dataset_sources", "tuned_methods", "after_tuning"))
experiment_runs = partial(experiments.experiment_runs, config)
PLAN = experiments.plan(config)  # the runs known before tuning; those after it join once chosen_settings.csv exists
RUNS = experiments.runs_by_path(config, PLAN)  # the train rule's runs by their folder


def all_runs(tuned=None):
    """Every training run of every experiment; runs shared by experiments appear once."""
    return experiments.runs_of(config, PLAN if tuned is None else experiments.plan(config, tuned))


def run_record(path):
    """The run whose folder below results/runs/ is `path` (the train rule's one wildcard): from the runs
    table, or one known only after tuning from the table planned with the chosen settings, which the `tune`
    checkpoint has written by the time the DAG asks for such a run (not checkpoints.tune.get(): every
    train job would wait on the tuning)."""
    run = RUNS.get(path) or runs_after_tuning().get(path)
    if run is None:
        raise ValueError(f"{run_dir(path=path)} is no run of this config (nor one known after its tuning)")
    return run


def runs_after_tuning():
    """The runs by folder once the tuning has chosen (chosen_settings.csv read once per version), else {}."""
    chosen = Path(summary_path(CHOSEN_SETTINGS))
    if not after_tuning() or not chosen.is_file():
        return {}
    stat = chosen.stat()
    return _runs_after_tuning(str(chosen), stat.st_mtime_ns, stat.st_size)


@cache
def _runs_after_tuning(chosen, mtime_ns, size):
    with open(chosen, newline="") as handle:
        return experiments.runs_by_path(config, experiments.plan(config, list(csv.DictReader(handle))))


def tuning_runs():
    return experiments.tuning_runs(config, PLAN)


def dataset_cfg(dataset):
    return config["datasets"][dataset]


def dataset_kind(dataset):
    """A dataset entry's kind (fedsim.kinds): its build's declaration."""
    return KINDS[config["datasets"][dataset]["kind"]]


def alternatives(names):
    """A regex matching exactly these names (or nothing when the list is empty)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


# ---- Paths: every file name of the workflow is built here and nowhere else.
#      Called without arguments, the run helpers return wildcard patterns for rule outputs.

def results(*parts):
    return str(Path(config["results_dir"], *parts))


SELECTION = experiments.selection_folder(config)  # '' unless only_experiments / only_datasets
SELECTION_RULES = ("plan", "tune", "summarise", "findings", "tables", "figure", "tuning_figure", "theory_figure",
                   "datasets_table")  # whose outputs depend on the selection: in its own folder


def selection_results(*parts):
    """<results_dir>/<selection folder>/...: the tables and figures of this selection (fedsim.planning.experiments.
    selection_folder); results_dir itself for the whole config."""
    return results(SELECTION, *parts)


def raw_path(source="{source}", file="{file}"):
    """A raw source file as fetched: <raw_dir>/<source>/<file> (file: the source's, see raw_file)."""
    if source != "{source}" and file == "{file}":
        file = raw_file(source)
    return str(Path(config["raw_dir"], source, file))


def dataset_path(name="{dataset}"):
    return results("datasets", f"{name}.h5")


def run_dir(run=None, path="{run}"):
    """A training run's folder: results/runs/<its path> (fedsim.planning.experiments.run_path, which alone
    writes it); without a run, the pattern of the train rule's one wildcard."""
    return results("runs", path if run is None else experiments.run_path(config, run))


def metrics_path(run=None):
    return f"{run_dir(run)}/metrics.csv"


def info_path(run=None):
    return f"{run_dir(run)}/run.json"


CHOSEN_SETTINGS = "chosen_settings.csv"  # the tuning's choices (rule tune), read by the runs and figures after it


def summary_path(name):
    """summary/<name> (planned_runs.csv, runs.csv, chosen_settings.csv) of this selection."""
    return selection_results("summary", name)


def figure_path(name="{experiment}", ext="pdf", metric="train_loss"):
    """figures/<name>.<ext> of this selection; a figure of another metric than the paper's training
    loss is its companion <name>_<metric>.<ext>."""
    stem = name if metric == "train_loss" else f"{name}_{metric}"
    return selection_results("figures", f"{stem}.{ext}")


def checkpoints_dir():
    """<results_dir>/checkpoints/: the runs' resume states, outside their outputs, so Snakemake's cleanup of
    a failed job's outputs keeps them; a run deletes its own once its outputs are complete."""
    return results("checkpoints")


def checkpoint_path(path="{run}"):
    """A run's resume state (`path`: its folder below results/runs/)."""
    return str(Path(checkpoints_dir(), f"{path}.pt"))


def calibration_path():
    """<results_dir>/benchmarks/cost_calibration.json: this machine's cost constants, where measured."""
    return results("benchmarks", cost.CALIBRATION_FILE)


def benchmark_path(rule, stem):
    return (selection_results if rule in SELECTION_RULES else results)("benchmarks", rule, f"{stem}.tsv")


def code_dir():
    """<results_dir>/code/: the fingerprints of the code the jobs run (see code_fingerprint)."""
    return results("code")


SHARED_LOG_RULES = ("download",)  # their files (raw_dir) serve every results_dir


def log_path(rule_name, stem):
    """<results_dir>/logs/<rule_name>/<stem>.log, beside the outputs it explains, so two configs
    with their own results_dir never overwrite each other's logs; downloads log under logs/."""
    if rule_name in SHARED_LOG_RULES:
        return f"logs/{rule_name}/{stem}.log"
    return (selection_results if rule_name in SELECTION_RULES else results)("logs", rule_name, f"{stem}.log")


# ---- The runs table's outputs

def planned_runs_csv():
    return jobs.planned_runs_csv(config, PLAN, run_dir)


def write_plan(path, log):
    atomic.write_text(path, planned_runs_csv())
    Path(log).write_text(f"{len(PLAN)} runs planned before tuning\n")


def tuned_table():
    """Rows of chosen_settings.csv, once the `tune` checkpoint has written it (Snakemake then
    re-evaluates the jobs that asked)."""
    with open(checkpoints.tune.get().output[0], newline="") as handle:
        return list(csv.DictReader(handle))


def info_paths(runs):
    return [info_path(run) for run in runs]


def metrics_paths(runs):
    return [metrics_path(run) for run in runs]


def figure_experiments(theory=False):
    """The experiments drawn by the curves' figure (or, theory=True, by the theory figure)."""
    return [name for name, exp in config["experiments"].items()
            if "figure" in exp and (exp["figure"] == "theory") == theory]


FIGURE_METRICS = tuple(METRICS)  # the paper's figure (training loss) and its companions; rule figure draws each


def final_targets():
    targets = [summary_path("planned_runs.csv"), summary_path("runs.csv")]
    if tuning_runs():
        targets.append(summary_path(CHOSEN_SETTINGS))
        targets += [figure_path("tuning", ext) for ext in ("pdf", "png")]
    for name in figure_experiments():
        for metric in FIGURE_METRICS:
            targets += [figure_path(name, ext, metric) for ext in ("pdf", "png")]
        targets += [summary_path(f"findings_{name}.csv"), summary_path(f"tables_{name}.md")]
    for name in figure_experiments(theory=True):
        targets += [figure_path(name, ext) for ext in ("pdf", "png")]
    if any(dataset_cfg(name)["kind"] in BUILT_KINDS for name in used_datasets()):
        targets.append(summary_path("datasets.csv"))  # only then: the default DAG stays as it was
    return targets


def config_text():
    """This run's config as the tables name it: its files (from the workflow's folder) and its --config values."""
    files = " + ".join(os.path.relpath(path, workflow.basedir) for path in workflow.configfiles)
    given = command_line_types(dict(workflow.config_settings.config))
    text = yaml.safe_dump(given, default_flow_style=True, width=float("inf")).strip()
    return files + (f" with --config {text}" if given else "")


# ---- The report's words about this run (fedsim.planning.captions): its methods, tuned settings, grids, datasets
#      and files. The rules' captions are params; the front page, which Snakemake renders with the config
#      alone, reads its pieces from the config.

def figure_caption(wildcards):
    return captions.figure(config, wildcards.experiment, summary_path(f"findings_{wildcards.experiment}.csv"),
                           summary_path(CHOSEN_SETTINGS))


def tuning_caption(wildcards):
    return captions.tuning(config)


config["_report"] = captions.front_page(config, selection_results())

# ---- Per-rule arguments and resources (fedsim.planning.jobs), bound to this config

(build_entry, raw_file, fetch_inputs, fetch_args, init_files, train_args, train_gpus, train_mem_mb,
 method_options_text) = (
    partial(getattr(jobs, name), config) for name in (
        "build_entry", "raw_file", "fetch_inputs", "fetch_args", "init_files", "train_args", "train_gpus",
        "train_mem_mb", "method_options_text"))
build_files = jobs.build_files


def dataset_inputs(dataset):
    """The named inputs of a dataset's build, as its kind declares them (fedsim.planning.kinds.inputs):
    raw sources under raw_dir, files its entry names, another dataset's file."""
    path_of = {"source": raw_path, "file": str, "dataset": dataset_path}
    return {name: [path_of[what](value) for what, value in items]
            for name, items in kinds.inputs(config, dataset).items()}


# A partition its pool cannot hold (the pool built, or an .npz whose header tells its rows): one line
# now, not a failed job later. In the main process only: a job's own process (a `run:` rule's, a
# cluster job's) reads this file again, maybe after this call built the pool, and stopping there
# fails that job without its log; the partition's own job refuses the pool in its log.
if workflow.is_main_process:
    try:
        check_partition_pools(config, lambda name: pool_samples(config, name, dataset_path(name)))
    except ConfigError as err:
        sys.exit(str(err))


def known_tuning():
    """chosen_settings.csv's rows where some method is tuned (once `tune` has run), else None: an experiment
    of untuned methods (fedavg, scaffold) has no tuning to wait for."""
    return tuned_table() if tuning_runs() else None


def tuned_inputs(wildcards=None):
    """chosen_settings.csv, an input of the rules that read it, where some method is tuned."""
    return [summary_path(CHOSEN_SETTINGS)] if tuning_runs() else []


def summary_runs(wildcards):
    """Every run, including those known only after tuning."""
    return all_runs(known_tuning() if after_tuning() else None)


def figure_runs(wildcards):
    """The runs one figure shows: each tuned method at its chosen value only."""
    return experiment_runs(wildcards.experiment, known_tuning(), chosen_only=True)


def theory_runs(wildcards):
    """The runs of a theory figure: every one of its experiment (its mu values are fixed)."""
    return experiment_runs(wildcards.experiment)


# Input functions giving the run records / metrics files of such a list of runs: named
# inputs, not unpack(), so that `{input.runs}` stays defined while a checkpoint is pending.
def infos_of(runs):
    return lambda wildcards: info_paths(runs(wildcards))


def metrics_of(runs):
    return lambda wildcards: metrics_paths(runs(wildcards))


wildcard_constraints:
    dataset=alternatives(config["datasets"]),
    # a run's folder (fedsim.planning.experiments.run_path): its dataset, method and one name; the runs table
    # says what it holds (run_record)
    run=rf"({alternatives(config['datasets'])})/({alternatives(METHODS)})/[A-Za-z0-9_.-]+",
    experiment=alternatives(config["experiments"]),
