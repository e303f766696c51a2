"""Command line: the steps the Snakemake rules call, usable on their own.

    python -m fedsim generate-synthetic --name synthetic_1_1 --alpha 1 --beta 1 --out d.h5
    python -m fedsim train --data d.h5 --method feddane --mu 0.01 --metrics m.csv --info run.json
    python -m fedsim summarise --out runs.csv RUN_JSON...
    python -m fedsim tune --method feddane --fraction 0.1 --out tuned_mu.csv RUN_JSON...
    python -m fedsim figure1 --tuned tuned_mu.csv --out figure1.pdf RUN_JSON...
    python -m fedsim figure2 --metric test_acc --x-axis communication_rounds --out f.pdf RUN_JSON...
    python -m fedsim tuning-figure --tuned tuned_mu.csv --fraction 0.1 --out tuning.pdf RUN_JSON...

Errors in the input end the command with one line naming the bad value (exit code 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from .atomic import write_csv


def _generate_synthetic(args) -> None:
    from .synthetic import write_synthetic

    write_synthetic(args.out, name=args.name, alpha=args.alpha, beta=args.beta, iid=args.iid,
                    num_devices=args.devices, num_features=args.features, num_classes=args.classes,
                    seed=args.seed, train_fraction=args.train_fraction)


def _train(args) -> None:
    from pathlib import Path

    from .train import Checkpoint, RunConfig, run, write_run

    fields = {f.name for f in dataclasses.fields(RunConfig)}
    config = RunConfig(**{k: v for k, v in vars(args).items() if k in fields})
    checkpoint = Checkpoint(Path(args.checkpoint), args.checkpoint_every) if args.checkpoint else None
    metrics, record = run(config, checkpoint=checkpoint)
    write_run(metrics, record, args.metrics, args.info)
    if checkpoint is not None:
        checkpoint.remove()  # only now: the outputs it stood in for are complete
    result = record["result"]
    status = f"diverged at round {result['diverged_round']}" if result["diverged_round"] is not None else "done"
    print(f"{config.method} mu={config.mu:g} on {record['dataset']['name']}: {status}, "
          f"final train loss {result['final_train_loss']:.4f}, {result['wall_seconds']:.1f} s")


def _summarise(args) -> None:
    from .summary import summarise

    write_csv(args.out, summarise(args.runs))


def _tune(args) -> None:
    from .summary import tune

    write_csv(args.out, tune(args.runs, args.method, args.fraction))


def _figure(args) -> None:
    import pandas as pd

    from .figures import experiment_figure

    tuned = pd.read_csv(args.tuned) if args.tuned else None
    experiment_figure(args.runs, tuned, args.out, metric=args.metric, x_axis=args.x_axis)


def _tuning_figure(args) -> None:
    import pandas as pd

    from .figures import tuning_figure

    tuning_figure(args.runs, pd.read_csv(args.tuned), args.out, args.fraction, args.method)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedsim", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("generate-synthetic", help="write a Synthetic(alpha, beta) dataset as HDF5")
    p.add_argument("--name", required=True)
    p.add_argument("--alpha", type=float, default=0.0)
    p.add_argument("--beta", type=float, default=0.0)
    p.add_argument("--iid", action="store_true")
    p.add_argument("--devices", type=int, default=30)
    p.add_argument("--features", type=int, default=60)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--train-fraction", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.set_defaults(func=_generate_synthetic)

    p = sub.add_parser("train", help="run one federated training and write its metrics")
    p.add_argument("--data", required=True, help="dataset HDF5 file")
    p.add_argument("--method", required=True, choices=["fedavg", "fedprox", "feddane"])
    p.add_argument("--mu", type=float, default=0.0)
    p.add_argument("--clients-per-round", type=int, default=10)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--selection", choices=["uniform", "weighted"], default="uniform")
    p.add_argument("--second-subset", choices=["independent", "same"], default="independent")
    p.add_argument("--engine", choices=["batched", "loop"], default="batched")
    p.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--load", choices=["auto", "memory", "stream"], default="auto",
                   help="train split held in memory, or each round's devices read from the file "
                        "(auto: stream above 1 GiB)")
    p.add_argument("--eval-devices", type=int, default=None,
                   help="compute the metrics on a seeded sample of this many devices (default: all)")
    p.add_argument("--checkpoint", help="state file to resume from after a kill (removed when the run completes)")
    p.add_argument("--checkpoint-every", type=int, default=10, help="rounds between checkpoints")
    p.add_argument("--metrics", required=True, help="output: per-round metrics CSV")
    p.add_argument("--info", required=True, help="output: the run's record (JSON)")
    p.set_defaults(func=_train)

    p = sub.add_parser("summarise", help="one row per run: runs.csv")
    p.add_argument("--out", required=True)
    p.add_argument("runs", nargs="+", help="run.json files")
    p.set_defaults(func=_summarise)

    p = sub.add_parser("tune", help="pick each setting's mu by the tail of the training loss")
    p.add_argument("--method", default="feddane")
    p.add_argument("--fraction", type=float, default=0.1)
    p.add_argument("--out", required=True)
    p.add_argument("runs", nargs="+")
    p.set_defaults(func=_tune)

    figures = {"figure1": "Figure 1: FedAvg, FedProx, FedDANE per dataset (K = 10, E = 20)",
               "figure2": "Figure 2: participation, one row per dataset, one column per K",
               "figure3": "Figure 3: E = 1 and many devices per round, one panel per dataset"}
    for name, help_text in figures.items():
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--tuned", help="tuned_mu.csv: shows FedDANE at the chosen mu where the runs hold several")
        p.add_argument("--metric", choices=["train_loss", "test_acc"], default="train_loss")
        p.add_argument("--x-axis", choices=["rounds", "communication_rounds"], default="rounds",
                       help="communication_rounds counts FedDANE's two per round")
        p.add_argument("--out", required=True, help="figure .pdf (a .png is written beside it)")
        p.add_argument("runs", nargs="+")
        p.set_defaults(func=_figure)

    p = sub.add_parser("tuning-figure", help="FedDANE's tail training loss against mu, per dataset")
    p.add_argument("--tuned", required=True, help="tuned_mu.csv (marks the chosen mu)")
    p.add_argument("--method", default="feddane")
    p.add_argument("--fraction", type=float, default=0.1)
    p.add_argument("--out", required=True, help="figure .pdf (a .png is written beside it)")
    p.add_argument("runs", nargs="+")
    p.set_defaults(func=_tuning_figure)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (ValueError, FileNotFoundError, OSError) as err:
        print(f"fedsim {args.command}: error: {err}", file=sys.stderr)
        return 2
    return 0
