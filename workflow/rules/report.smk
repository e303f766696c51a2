# `snakemake --report`: refused in one line where the report would not show this config's runs
# (included after common.smk, whose paths and runs table it reads).

import contextlib
import csv
import json
import shlex
import sys
from pathlib import Path


def report_call(argv):
    """This call's options where it builds a report of the default target (`--report [FILE]` or
    `--reporter`, not `--report-after-run`, which reports after its own run), else None. Read with
    Snakemake's own parser, only where argv names --report (the jobs' and the API's never do)."""
    if not any(a == "--report" or a.startswith(("--report=", "--reporter")) for a in argv[1:]):
        return None
    from snakemake.cli import get_argument_parser

    try:
        args, _ = get_argument_parser().parse_known_args(argv[1:])
    except SystemExit:  # argv is not a snakemake command line after all
        return None
    wanted = (args.report or args.reporter) and not args.report_after_run
    return args if wanted and not args.targets else None  # named targets: Snakemake's to judge


def selection_runs():
    """Every run this selection reports, as far as it is known now (chosen_settings.csv's choices where the
    tuning has run)."""
    tuned, tuned_file = None, Path(summary_path(CHOSEN_SETTINGS))
    if tuning_runs() and tuned_file.exists():
        with open(tuned_file, newline="") as handle:
            tuned = list(csv.DictReader(handle))
    return all_runs(tuned)


def trained_rounds(record_path):
    with open(record_path) as handle:
        return json.load(handle)["config"]["rounds"]


def report_problem():
    """Why this config has nothing to report yet, or None: an output of its run missing, a run of it
    not trained, or tables made from other runs (a selection's folder is shared by configs that differ
    in rounds or seeds)."""
    missing = [path for path in final_targets() if not Path(path).exists()]
    if missing:
        return f"{missing[0]} and {len(missing) - 1} more of the run's outputs do not exist" if len(missing) > 1 \
            else f"{missing[0]}, an output of the run, does not exist"
    runs = selection_runs()
    untrained = [info_path(run) for run in runs if not Path(info_path(run)).exists()]
    if untrained:
        return f"{untrained[0]} and {len(untrained) - 1} more of its {len(runs)} runs are not trained"
    for run in runs:  # a dataset's rounds changed: same folders, other runs
        if trained_rounds(info_path(run)) != run.rounds:
            return f"{info_path(run)} was trained for {trained_rounds(info_path(run))} rounds, not this config's " \
                   f"{run.rounds}"
    runs = [info_path(run) for run in runs]
    with open(summary_path("runs.csv"), newline="") as handle:
        listed = {row["run"] for row in csv.DictReader(handle)}
    other = [path for path in runs if path not in listed]
    if other:
        return f"{summary_path('runs.csv')} and the figures beside it are of other runs (not {other[0]})"
    return None


def check_report_has_a_run():
    """`snakemake --report` where the report would not show this config's runs stops with one line
    naming the command to run first (Snakemake's own message, "File ... marked for report but does
    not exist", says neither, and a report of another run's figures would say nothing). What the
    parse itself made for the report (an empty results/code/) goes with it."""
    args = report_call(sys.argv)
    problem = report_problem() if args else None
    if problem:
        command = ["snakemake", *(["--snakefile", args.snakefile] if args.snakefile else []),
                   *(["--directory", args.directory] if args.directory else []),
                   *(["--configfile", *map(str, args.configfile)] if args.configfile else []),
                   *(["--config", *args.config] if args.config else [])]
        for folder in (code_dir(), results()):
            with contextlib.suppress(OSError):  # not empty: something computed, kept
                Path(folder).rmdir()
        sys.exit(f"Nothing to report yet: {problem}; run `{shlex.join(map(str, command))}` first, then the report")


check_report_has_a_run()
