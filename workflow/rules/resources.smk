# What each training job asks the scheduler for, from the cost estimate (fedsim.planning.cost), and the
# estimate printed at start (included after common.smk, before train.smk, which reads these).

import contextlib
import os
import sys
from functools import cache
from pathlib import Path

# ---- The cost estimate (fedsim.planning.cost): printed at start, and what each training job asks for

COST_CONSTANTS, COST_SOURCE = cost.load_constants(calibration_path())
MAX_RUNTIME = config["simulator"]["max_runtime"]  # minutes, the site's; None: no cap


@cache
def dataset_sizes(dataset):
    """An LSTM dataset's device sizes: its built file's, else the paper's Table 1 (fedsim.planning.cost)."""
    return cost.dataset_sizes(config, dataset, dataset_path(dataset))


def print_cost_estimate():
    """The LSTM datasets' estimated cost (fedsim.planning.cost), on stderr before any job (`snakemake -n`
    too): one line per dataset, a WARNING where a run would take days on a CPU. Nothing without
    LSTM datasets; nothing in the jobs' own processes (cluster jobs re-read the Snakefile)."""
    if not workflow.is_main_process:
        return
    costs = cost.plan_costs(config, PLAN, dataset_path, COST_CONSTANTS)
    reference = cost.plan_costs(config, PLAN, dataset_path, cost.GPU_REFERENCE)
    for line in cost.report_lines(costs, COST_SOURCE, reference=reference):
        print(line, file=sys.stderr)


def train_runtime(run):
    """A training job's minutes: its run's estimate with a margin, or max_runtime where lower."""
    seconds = cost.train_seconds(config, run.dataset, method=run.method, k=int(run.K), epochs=int(run.E),
                                 rounds=run.rounds, theory=run.theory, sizes_of=dataset_sizes, constants=COST_CONSTANTS)
    return cost.job_minutes(seconds, MAX_RUNTIME)


try:  # a CPU round longer than a capped job: one line, before any job
    cost.check_max_runtime(config, PLAN, dataset_sizes, COST_CONSTANTS)
except ConfigError as err:
    sys.exit(str(err))
print_cost_estimate()
# Under max_runtime, the train rule's retries: those that take the longest run through its jobs, and
# spares; without a cap (None), the profile's `retries` (the rule's own count replaces it).
TRAIN_RETRIES = cost.train_retries(config, PLAN, dataset_sizes, COST_CONSTANTS)
# A capped job checkpoints often enough to save before its cut; execution only (no bit changes),
# so resources, not params: changing them reruns nothing.
TRAIN_CHECKPOINT_EVERY, TRAIN_CHECKPOINT_SECONDS = cost.job_checkpoints(MAX_RUNTIME)
# Jobs call fedsim through its warm launcher (fedsim.warm: one process imports torch once and
# forks a child per job); FEDSIM_WARM=0, inherited by the jobs, makes every job a fresh process.
# Not a param: it changes no result, so switching it reruns nothing.
_warm_start = config["simulator"]["warm_start"] and os.environ.get("FEDSIM_WARM") != "0"  # either may say no
os.environ.update(FEDSIM_WARM="1" if _warm_start else "0")
# The jobs' progress lines and the cost estimate they compare their pace with (fedsim.planning.progress):
# output only, so environment, not params (changing them reruns nothing).
os.environ.update({PROGRESS_ENV: str(config["simulator"]["progress_seconds"]),
                   cost.CALIBRATION_ENV: calibration_path()})


def remove_empty_checkpoint_folders():
    """The folders a resumed run's checkpoint left under results/checkpoints/ once it removed the file
    (the run's outputs complete), deepest first; a folder still holding a checkpoint stays."""
    root = Path(checkpoints_dir())
    for folder in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()
    with contextlib.suppress(OSError):
        root.rmdir()


onsuccess:
    remove_empty_checkpoint_folders()
