"""Command line: the steps the Snakemake rules call, usable on their own.

    python -m fedsim generate-synthetic --name synthetic_1_1 --alpha 1 --beta 1 --out d.h5
    python -m fedsim fetch shakespeare --out resources/raw/shakespeare/ [--mirror DIR | --path FILE]
    python -m fedsim prepare-shakespeare --raw gutenberg-100-1994.txt.gz --out shakespeare.h5
    python -m fedsim prepare-femnist --json leaf/femnist/train leaf/femnist/test --out femnist.h5
    python -m fedsim prepare-femnist62 --json leaf-sample-1/ leaf-sample-2/ --out femnist62.h5
    python -m fedsim prepare-femnist62 --nist by_class.zip by_write.zip --fraction 0.05 --out femnist62.h5
    python -m fedsim partition-dirichlet --pool femnist62.h5 --devices 100 --alpha 0.3 --out dirichlet.h5
    python -m fedsim prepare-sent140 --raw trainingandtestdata.zip --glove glove.6B.zip --out sent140.h5
    python -m fedsim import-json --train data/train --test data/test --name synthetic_iid --out d.h5
    python -m fedsim datasets-table --out datasets.csv DATASET_H5...
    python -m fedsim train --data d.h5 --method feddane --mu 0.01 --metrics m.csv --info run.json
    python -m fedsim train --data d.h5 --method feddane_authors --rng authors \
        --second-subset same --init init-seed{seed}.npz ...     # the authors' code, replayed
    python -m fedsim train --data d.h5 --method feddane_decayed --option tau=50 ...  # a method's setting
    python -m fedsim summarise --out runs.csv RUN_JSON...
    python -m fedsim findings --out findings_figure1.csv RUN_JSON...
    python -m fedsim tables --findings findings_figure1.csv --config config/config.yaml --out tables_figure1.md
    python -m fedsim tables --findings findings_figure1.csv      # on the screen (or --out -)
    python -m fedsim tune --methods feddane feddane_authors --out chosen_settings.csv RUN_JSON...
    python -m fedsim figure1 --tuned chosen_settings.csv --out figure1.pdf RUN_JSON...
    python -m fedsim figure2 --metric test_acc --x-axis communication_rounds --out f.pdf RUN_JSON...
    python -m fedsim tuning-figure --tuned chosen_settings.csv --out tuning.pdf RUN_JSON...

Errors in the input end the command with one line naming the bad value (exit code 2). SIGTERM,
SIGINT (Ctrl-C) and SIGUSR1 end it with one line and exit code 128 + the signal's number; `train`
first finishes the round in progress and saves its checkpoint there (fedsim.core.stopping).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import sys
from collections.abc import Callable

from . import __version__
from .core import settings
from .data.atomic import write_csv, write_text
from .data.download import SOURCES
from .kinds import KINDS
from .methods import ENTRIES
from .planning.progress import PROGRESS_ENV, PROGRESS_SECONDS, progress_seconds
from .core.settings import NEEDS_MU, TAIL_FRACTION, Check, RunConfig, given_config
from .core.stopping import StopSignals, Stopped, exit_status
from .outputs.styles import LEGEND, METRICS


def _number(check: Check):
    """An argparse type: cast the text, refuse (one line, exit 2) what `check` rejects."""
    def parse(text):
        try:
            value = check.cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {check.what}") from None
        if not check.ok(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {check.what}")
        return value
    parse.__name__ = check.what  # argparse names the type in some messages
    return parse


COUNT, INDEX = _number(settings.COUNT), _number(settings.INDEX)
NON_NEGATIVE = _number(settings.NON_NEGATIVE)
SHARE = _number(Check(float, lambda v: math.isfinite(v) and 0 < v <= 1, "a fraction in (0, 1]"))


def _method_option(text: str) -> tuple[str, str]:
    """NAME=VALUE of --option; the method checks the name and value (RunConfig)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


# How the fields that are not one plain value each are spelled on the command line: a method's
# options come one NAME=VALUE at a time; --mu has no default of its own (run_config gives it).
SPELLED = {"options": {"flag": "--option", "type": _method_option, "action": "append", "default": [],
                       "metavar": "NAME=VALUE"},
           "dissimilarity": {"action": argparse.BooleanOptionalAction, "default": None},
           "mu": {"default": None, "more_help": f" (required for {', '.join(NEEDS_MU)}, whose mu is the dataset's; "
                                                "default 0 for the others)"}}


def _named_input(text: str) -> tuple[str, str]:
    """NAME=PATH of build-dataset's --input."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=PATH")
    return name, path


def _run_setting_argument(f: dataclasses.Field) -> tuple[tuple[str], dict]:
    """The `train` option of one RunConfig field: its flag and add_argument's keywords (as _arg's)."""
    meta, spelled = f.metadata, dict(SPELLED.get(f.name, {}))
    flag = spelled.pop("flag", "--" + f.name.replace("_", "-"))
    kwargs = {"dest": f.name, "help": meta["help"] + spelled.pop("more_help", ""), **spelled}
    if meta["choices"]:
        kwargs["choices"] = list(meta["choices"])
    if meta["check"] is not None:
        kwargs["type"] = _number(meta["check"])
    if f.default is False:
        kwargs["action"] = "store_true"
    elif f.default is True:
        kwargs.update(action=argparse.BooleanOptionalAction, default=True)
    elif "default" not in kwargs:
        if f.default is dataclasses.MISSING:
            kwargs["required"] = True
        else:
            kwargs["default"] = f.default
            if f.default is not None:
                kwargs["help"] += f" (default: {f.default})"
    return (flag,), kwargs


def run_config(args) -> RunConfig:
    """The RunConfig of parsed `train` arguments; without --mu, FedProx (NEEDS_MU) is refused in one
    line (settings.given_config: the rule fedsim.run follows too)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)}
    values["options"] = dict(values["options"])  # --option's NAME=VALUE pairs
    return given_config(values, flag=lambda name: "--" + name.replace("_", "-"))


def _fetch(args) -> None:
    import logging

    from .data.download import fetch

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    got = fetch(args.source, args.out, sha256=args.sha256, md5=args.md5, verify=not args.no_verify,
                mirror=args.mirror, local_path=args.path, base_url=args.base_url, retries=args.retries)
    checked = "verified" if got.verified else "NOT verified (no checksum given)"
    print(f"{args.source}: {got.path} from {got.origin}, sha256 {got.sha256}, md5 {got.md5}, {checked}")


def _build_dataset(args) -> None:
    import json

    named = {"raw": args.files} if args.files else {}
    for name, path in args.input:
        named.setdefault(name, []).append(path)
    _build(json.loads(args.entry), named, args.out, args.name)


def _build(entry, named, out, name) -> None:
    from .kinds import build, complete

    print(f"{name}: {build(complete(entry), named, out, name)}")


def _kind_handler(kind) -> Callable[[argparse.Namespace], None]:
    """Its own command's handler: the options that are the kind's keys as its entry, those holding files as
    its build's inputs (two options filling one input: one of them given)."""
    def handler(args) -> None:
        given = {key: value for key, value in vars(args).items() if value is not None}
        named, by = {}, {}
        for option, (name, _) in kind.command.files.items():
            if option in given:
                if name in named:
                    raise ValueError(f"give one of --{by[name]} and --{option}")
                named[name], by[name] = _as_list(given[option]), option
        missing = {name for name, _ in kind.command.files.values()} - set(named)
        if missing:
            options = [f"--{o}" for o, (name, _) in kind.command.files.items() if name in missing]
            raise ValueError(f"give one of {' and '.join(options)}")
        keys = {**kind.shared_keys, **kind.keys}
        _build({"kind": kind.name, **{key: value for key, value in given.items() if key in keys}}, named, args.out,
               args.name)
    return handler


def _as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _datasets_table(args) -> None:
    from .data.leaf.stats import write_datasets_csv

    print(write_datasets_csv(args.datasets, args.out).to_string(index=False))


def _check_dataset_file(path) -> None:
    """A file `train` cannot read that a kind's command turns into a dataset file: the line names the command."""
    import h5py
    from pathlib import Path

    makers = {f".{kind.own_files}": kind.command.name for kind in KINDS.values()
              if kind.command and kind.own_files and not kind.sources}
    suffix = Path(path).suffix
    if suffix in makers and Path(path).is_file() and not h5py.is_hdf5(path):
        raise ValueError(f"{path}: not a dataset file; `fedsim {makers[suffix]}` makes one of it")


def _train(args) -> None:
    from pathlib import Path

    from .methods import describe_setting, variant_of
    from .core.checkpoint import Checkpoint
    from .core.train import run, write_run

    _check_dataset_file(args.data)
    config = run_config(args)
    checkpoint = (Checkpoint(Path(args.checkpoint), args.checkpoint_every, args.checkpoint_seconds)
                  if args.checkpoint else None)
    progress = _progress(config, args.progress_seconds)
    try:
        with StopSignals(graceful=True) as stop:
            metrics, record = run(config, on_round=progress, checkpoint=checkpoint, stop=stop,
                                     on_resume=progress.resume)
    except Stopped as stopped:
        stopped.kept = _kept(checkpoint, stopped)
        raise
    finally:
        progress.close()
    write_run(metrics, record, args.metrics, args.info)
    if checkpoint is not None:
        checkpoint.remove()  # only now: the outputs it stood in for are complete
    result = record["result"]
    status = run_status(result, record["config"]["lr"], record["config"]["method"])
    print(f"{variant_of(record['config'])} {describe_setting(record['config'])} on {record['dataset']['name']}: {status}, "
          f"final train loss {result['final_train_loss']:.4f}, {result['wall_seconds']:.1f} s")


def run_status(result: dict, lr: float, method: str = "") -> str:
    """How a run ended, for the CLI's last line: a non-finite loss at round 0 (before any training) is the
    data's or the initial model's, not the method's (fedsim.core.train.DIVERGED_REASONS); a later one may
    be the lr's, or a user's own method's code (its server step, say)."""
    from .methods import PLUGIN_METHOD_FILES

    reason = result.get("diverged_reason")
    if result["diverged_round"] is None:
        return "done"
    if reason == "data":
        return (f"not trained: the initial model's train loss is {result['final_train_loss']}: the data (or the "
                "initial model) hold a non-finite value, not the method")
    if reason == "initial_model":
        return "not trained: the initial model's weights are not finite (its init file), not the method"
    own = f", or {PLUGIN_METHOD_FILES[method]} may compute a non-finite value" if method in PLUGIN_METHOD_FILES else ""
    return f"diverged at round {result['diverged_round']} (the lr, {lr:g}, may be too large{own})"


def _kept(checkpoint, stopped) -> str:
    """What a stopped run leaves for its rerun, for the CLI's last line."""
    if checkpoint is None:
        return "nothing was kept (no --checkpoint file): a rerun starts over"
    if checkpoint.saved_round is None:
        return f"nothing was kept (no round to save in {checkpoint.path} yet): a rerun starts over"
    if checkpoint.saved_round == stopped.round:
        return f"checkpoint written to {checkpoint.path}; rerun the same command to resume"
    return (f"the checkpoint of round {checkpoint.saved_round} in {checkpoint.path} is kept; rerun the same "
            "command to resume from it")


def _progress(config, every: float):
    """The run's progress lines (fedsim.planning.progress), with the cost model's estimate where it has one."""
    from .api import run_progress

    return run_progress(config, every)


def _summarise(args) -> None:
    from .outputs.summary import summarise

    write_csv(args.out, summarise(args.runs, args.fraction))


def _findings(args) -> None:
    import pandas as pd

    from .outputs.summary import findings

    tuned = pd.read_csv(args.tuned) if args.tuned else None
    write_csv(args.out, findings(args.runs, args.fraction, args.across_k, tuned))


def _tables(args) -> None:
    from .data import atomic
    from .outputs.tables import checkout_commit, read_findings, render

    commit = args.commit or checkout_commit(args.checkout)
    text = render(read_findings(args.findings), args.source or args.findings, commit, args.config) + "\n"
    if args.out in (None, "-"):
        sys.stdout.write(text)
    else:
        atomic.write_text(args.out, text)


def _tune(args) -> None:
    from .outputs.summary import tune

    write_csv(args.out, tune(args.runs, args.methods, args.fraction))


def _figure(args) -> None:
    import pandas as pd

    from .outputs import figures

    tuned = pd.read_csv(args.tuned) if args.tuned else None
    figures.CURVE_FIGURES[args.command](args.runs, tuned, args.out, metric=args.metric, x_axis=args.x_axis)


def _theory_figure(args) -> None:
    from .outputs.figures import theory_figure

    theory_figure(args.runs, args.out)


def _tuning_figure(args) -> None:
    import pandas as pd

    from .outputs.figures import tuning_figure

    tuning_figure(args.runs, pd.read_csv(args.tuned), args.out, args.fraction, args.methods)


def _cost(args) -> None:
    import json

    from .planning.calibration import calibrate

    constants = calibrate(steps=args.steps, device=args.device)
    if args.out:
        write_text(args.out, json.dumps(constants, indent=1) + "\n")  # whole or not at all, as every output
        print(f"wrote {args.out}: the workflow's cost estimate reads it from <results_dir>/benchmarks/")


# The curves' figures' commands, one per fedsim.outputs.figures.CURVE_FIGURES name (their functions are
# there; this module names them without importing matplotlib: tests/test_one_fact.py ties the two).
# Each draws whatever runs it is given (an experiment's `figure:` names one for its own runs); figure1-3 are one
# plot, named for the paper's figures: a panel per dataset, a row per dataset and a column per (K, E) where some
# dataset has several
_PANELS = "the runs' curves: a panel per dataset, or a row per dataset and a column per (K, E) where it has several"
FIGURE_HELP = {"figure1": f"{_PANELS} (the paper's Figure 1 is its runs)",
               "figure2": f"{_PANELS} (the paper's Figure 2 is its runs)",
               "figure3": f"{_PANELS} (the paper's Figure 3 is its runs)",
               "beyond": "beyond the paper: every method, against rounds and communication rounds",
               "successors": "FedDANE among its successors: every method against rounds, vectors sent and "
                             "gradients computed"}


def _arg(*flags: str, **kwargs) -> tuple[tuple[str, ...], dict]:
    """One argument of a command: add_argument's flags (or positional name) and keywords."""
    return flags, kwargs


@dataclasses.dataclass(frozen=True)
class Command:
    """One `fedsim` command: its name, help line, the function it runs and its arguments in help
    order. An argument is _arg's (flags, keywords), or a function called when the parser is built
    that returns a tuple of them (for defaults read then: the environment, the methods)."""
    name: str
    help: str
    func: Callable[[argparse.Namespace], None]
    arguments: tuple = ()


# Options several commands share.
NAME_HELP = "the dataset's name, recorded in its file (the workflow gives its entry's)"
OUT = _arg("--out", required=True, help="the file to write (atomically; its folder is made)")
FIGURE_OUT = _arg("--out", required=True, help="figure .pdf (a .png is written beside it)")
RUNS = _arg("runs", nargs="+", help="run.json files (each beside its metrics.csv)")


def _tail(**kwargs) -> tuple:
    """--fraction of the commands that average the tail of each run."""
    kwargs.setdefault("help", f"the last share of each run's rounds averaged (default: {TAIL_FRACTION:g})")
    return _arg("--fraction", type=SHARE, default=TAIL_FRACTION, **kwargs)


def _run_settings() -> tuple:
    """One `train` option per RunConfig field (fedsim.core.settings), in its order: the settings that
    shape the result first."""
    return tuple(map(_run_setting_argument, dataclasses.fields(RunConfig)))


def _progress_option() -> tuple:
    """--progress-seconds, whose default is the environment's when the parser is built."""
    return (_arg("--progress-seconds", type=NON_NEGATIVE, default=progress_seconds(),
                 help="seconds between two progress lines of a running run, at most one a round (default: "
                      f"${PROGRESS_ENV} or {PROGRESS_SECONDS:g}; the workflow's simulator.progress_seconds)"),)


def _tuned_methods_option() -> tuple:
    """tune's --methods: by default every method with a tuned setting, in legend order."""
    tuned = [name for name in LEGEND if ENTRIES[name].method.tuned_setting]
    return (_arg("--methods", nargs="+", default=tuned, help="the methods to tune (those with runs)"),)


FIGURE_ARGUMENTS = (
    _arg("--tuned", help="chosen_settings.csv: shows FedDANE at the chosen mu where the runs hold several"),
    _arg("--metric", choices=list(METRICS), default="train_loss", help="the metric drawn (default: train_loss)"),
    _arg("--x-axis", choices=["rounds", "communication_rounds"], default="rounds",
         help="communication_rounds counts FedDANE's two per round"),
    FIGURE_OUT, RUNS)


def _rule_type(rule: dict):
    """An argparse type for a kind key's numeric rule (settings.key_check: its cast and bounds, a value
    outside them refused in one line); None for another rule."""
    check = settings.key_check(rule)
    return _number(check) if check else None


def _key_option(kind, key: str, rule: dict) -> tuple:
    """A kind key's option of the kind's own command: its flag, type, choices and default from its rule."""
    command = kind.command
    default = command.defaults.get(key, rule.get("default"))
    keywords = {"dest": key, "help": rule.get("description", "")}
    if rule.get("type") == "boolean":  # off by default: a switch; on: --key / --no-key
        if default:
            keywords.update(action=argparse.BooleanOptionalAction, default=True)
        else:
            keywords.update(action="store_true")
        return _arg(command.flags.get(key, "--" + key.replace("_", "-")), **keywords)
    keywords |= {"choices": rule["enum"]} if "enum" in rule else {}
    keywords |= {"nargs": "+"} if "oneOf" in rule else {}
    keywords |= {"type": _rule_type(rule)} if _rule_type(rule) else {}
    if default is not None:
        keywords.update(default=default, help=f"{keywords['help']} (default: {default})")
    elif key in kind.required:
        keywords["required"] = True
    return _arg(command.flags.get(key, "--" + key.replace("_", "-")), **keywords)


def _kind_command(kind) -> Command:
    """A kind's own command (fedsim.specs.KindCommand), an alias of build-dataset: its file options, then an
    option a key (the kind's keys in their order), --name and --out."""
    command = kind.command
    files = tuple(_arg(f"--{option}", **keywords) for option, (_, keywords) in command.files.items())
    keys = {**kind.shared_keys, **kind.keys}
    options = tuple(_key_option(kind, key, rule) for key, rule in keys.items() if key not in command.files)
    name = (_arg("--name", default=command.dataset_name, help=f"{NAME_HELP} (default: {command.dataset_name})")
            if command.dataset_name else _arg("--name", required=True, help=NAME_HELP))
    return Command(command.name, f"{command.help} (build-dataset's build of this kind, its keys as options)", _kind_handler(kind),
                   (*files, *options, name, OUT))


COMMANDS = (
    *(_kind_command(kind) for kind in KINDS.values() if kind.command),
    Command("fetch", "download (or copy) a raw source, checksum-verified", _fetch, (
        _arg("source", help=f"a source name ({', '.join(SOURCES)}) or a URL"),
        _arg("--out", required=True, help="destination file (or folder ending with /)"),
        _arg("--base-url", help="replaces the source's default base URL"),
        _arg("--sha256", help="expected sha256 (default: the source's recorded checksums)"),
        _arg("--md5", help="expected md5 (default: the source's recorded checksums)"),
        _arg("--no-verify", action="store_true", help="check no checksum (the digests are printed)"),
        _arg("--mirror", help="folder holding the file under its source name (no network)"),
        _arg("--path", help="a local copy of the file (no network)"),
        _arg("--retries", type=INDEX, default=4, help="tries after a failed download, waiting longer each time "
                                                      "(default: 4)"))),
    Command("build-dataset", "a dataset entry of any kind (fedsim.kinds, a plugin's among them), by its "
                             "kind's build", _build_dataset, (
        _arg("--entry", required=True, help="the dataset's config entry as JSON: its kind and the kind's keys "
                                            "(their defaults fill the rest)"),
        _arg("--files", nargs="*", default=[], help="its raw files: the entry's own (the kind's `own_files`), "
                                                    "else its raw sources'"),
        _arg("--input", type=_named_input, action="append", default=[], metavar="NAME=PATH",
             help="a file of another of its inputs (a JSON import's train and test, a partition's pool, "
                  "Sent140's glove), once a file"),
        _arg("--name", required=True, help=NAME_HELP),
        OUT)),
    Command("datasets-table", "devices and samples per device of dataset files: datasets.csv", _datasets_table, (
        OUT,
        _arg("datasets", nargs="+", help="dataset HDF5 files"))),
    Command("cost", "measure the seconds per LSTM step and row the workflow's cost estimate uses", _cost, (
        _arg("--calibrate", action="store_true",
             help="what the command does, with or without this flag (kept for scripts that give it): time a few "
                  "batched SGD steps, an evaluation and full gradients of each LSTM (about a minute)"),
        _arg("--steps", type=COUNT, default=4, help="SGD steps timed per setting (default: 4)"),
        _arg("--device", choices=["cpu", "cuda"], default="cpu",
             help="where to measure: a CPU core (CPU seconds) or the GPU (wall seconds; the estimate then "
                  "gives that GPU's hours)"),
        _arg("--out", help="write the constants here as JSON (the workflow reads "
                           "<results_dir>/benchmarks/cost_calibration.json)"))),
    Command("train", "run one federated training and write its metrics", _train, (
        _run_settings,
        _arg("--checkpoint", help="state file to resume from after a kill (removed when the run completes)"),
        _arg("--checkpoint-every", type=COUNT, default=settings.CHECKPOINT_EVERY,
             help=f"rounds between checkpoints (default: {settings.CHECKPOINT_EVERY})"),
        _arg("--checkpoint-seconds", type=NON_NEGATIVE, default=settings.CHECKPOINT_SECONDS,
             help=f"and at least this many seconds between them (default: {settings.CHECKPOINT_SECONDS:g}; "
                  "a shorter run never pays for a save)"),
        _progress_option,
        _arg("--metrics", required=True, help="output: per-round metrics CSV"),
        _arg("--info", required=True, help="output: the run's record (JSON)"))),
    Command("summarise", "one row per run: runs.csv", _summarise, (
        _tail(help="the tail columns average this last fraction of each run's rounds"),
        OUT,
        _arg("runs", nargs="+", help="run.json files"))),
    Command("findings", "a figure in numbers: per setting and method, tail means over seeds, min-max, rank",
            _findings, (
        _tail(help="the tail: this last fraction of each run's rounds"),
        OUT,
        _arg("--across-k", action="store_true",
             help="rank every K of a dataset in one panel (methods that need every device beside sampling ones)"),
        _arg("--tuned", help="chosen_settings.csv: says where each tuned value sits in its grid (grid_edge)"),
        _arg("runs", nargs="+", help="run.json files of one figure (one mu per method and setting)"))),
    Command("tables", "a figure's findings as the docs' Markdown tables, with their commit and config", _tables, (
        _arg("--findings", required=True, help="findings_<experiment>.csv"),
        _arg("--config", default="not given", help="the config that made them, as the line names it"),
        _arg("--commit", help="the commit that made them (default: the checkout's at --checkout)"),
        _arg("--checkout", default=".", help="the checkout whose commit to name"),
        _arg("--source", help="the findings file's path as the line names it (default: --findings)"),
        _arg("--out", help="the tables (.md); without it, or `-`: on the screen (stdout)"))),
    Command("tune", "pick each setting's mu by the tail of the training loss", _tune, (
        _tuned_methods_option, _tail(), OUT, RUNS)),
    *(Command(name, help_text, _figure, FIGURE_ARGUMENTS) for name, help_text in FIGURE_HELP.items()),
    Command("theory-figure", "Theorem 1 on the data: rho > 0 and the observed decrease, per dataset and mu",
            _theory_figure, (
        FIGURE_OUT,
        _arg("runs", nargs="+", help="run.json files of runs trained with --theory"))),
    Command("tuning-figure", "each tuned method's tail training loss against its setting (and client lr), "
                             "per dataset", _tuning_figure, (
        _arg("--tuned", required=True, help="chosen_settings.csv (marks the chosen mu)"),
        _arg("--methods", nargs="+", help="the tuned methods to show (default: those --tuned has rows of)"),
        _tail(), FIGURE_OUT, RUNS)),
)


def build_parser() -> argparse.ArgumentParser:
    """fedsim's parser: one subcommand per COMMANDS entry, its arguments in their order."""
    parser = argparse.ArgumentParser(prog="fedsim", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"fedsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help)
        for argument in command.arguments:
            for flags, kwargs in argument() if callable(argument) else (argument,):
                p.add_argument(*flags, **copy.deepcopy(kwargs))  # a parser's own default lists
        p.set_defaults(func=command.func)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with StopSignals():  # `train` stops at a round boundary instead (_train)
            args.func(args)
    except (ValueError, FileNotFoundError, OSError, EOFError) as err:  # EOFError: a truncated archive
        print(f"fedsim {args.command}: error: {err}", file=sys.stderr)
        return 2
    except Stopped as stopped:
        print(f"fedsim {args.command}: {stopped.line()}", file=sys.stderr)
        return exit_status(stopped.signum)
    return 0
