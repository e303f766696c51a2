"""Evaluation's share of a CNN run: one run of `fedsim train` per evaluation chunk size, same process.

    python benchmarks/eval_share.py [--data results/datasets/femnist62.h5] [--model lenet5] [--rounds 40]
                                    [--dissimilarity] [--chunks 25 22]

The run is config/successors-cnn.yaml's setting for FedAvg (K = 10, E = 1, B = 10, lr 0.03, metrics
every 5th round and the last on 25 devices, without the gradient dissimilarities unless
--dissimilarity), its metrics computed over chunks of 2^n activations (`fedsim.models.EVAL_FLOATS`)
for each n of --chunks. Prints, per run, the evaluation's seconds and share of the run's wall time
(run.json's evaluation_seconds / wall_seconds) beside its local SGD's. The dataset comes from the
workflow (`snakemake results/datasets/femnist62.h5 --configfile config/successors-cnn.yaml`).

    python benchmarks/eval_share.py --example [--rows 60000] [--rounds 2]

--example: the own-data example of docs/leaf.md ("Your own data: CIFAR-10") instead: LeNet-5 on a
100-device Dirichlet split (alpha 0.5) of a stand-in of CIFAR-10's shapes (random 3 x 32 x 32 images, 10
classes, --rows of them), B = 50, Figure 1's K = 10 and E = 20, metrics every round on every device;
once with the model's default (LeNet-5: no gradient dissimilarities, fedsim.specs) and once with them.
Evaluation's share depends on the shapes, not on the pixels' values.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import fedsim.models  # noqa: E402
from fedsim import cli  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="results/datasets/femnist62.h5")
    parser.add_argument("--model", default="lenet5")
    parser.add_argument("--rounds", type=int, help="default: 40, --example 2")
    parser.add_argument("--dissimilarity", action="store_true")
    parser.add_argument("--chunks", type=int, nargs="+", default=[25, 22], help="log2 of the activations per chunk")
    parser.add_argument("--example", action="store_true", help="docs/leaf.md's CIFAR-10 example, on a stand-in")
    parser.add_argument("--rows", type=int, default=60000, help="--example: the stand-in's images")
    args = parser.parse_args()
    if args.example:
        example(args.rows, args.rounds or 2)
        return
    with tempfile.TemporaryDirectory() as folder:
        for n in args.chunks:
            fedsim.models.EVAL_FLOATS = 1 << n
            info = Path(folder, f"run_{n}.json")
            code = cli.main(["train", "--data", args.data, "--method", "fedavg", "--clients-per-round", "10",
                             "--epochs", "1", "--batch-size", "10", "--lr", "0.03", "--rounds", str(args.rounds or 40),
                             "--model", args.model, "--eval-devices", "25", "--eval-every", "5",
                             "--dissimilarity" if args.dissimilarity else "--no-dissimilarity",
                             "--metrics", str(info.with_suffix(".csv")), "--info", str(info)])
            if code:
                sys.exit(code)
            result = json.loads(info.read_text())["result"]
            wall, evaluation = result["wall_seconds"], result["evaluation_seconds"]
            print(f"chunks of 2^{n} activations: evaluation {evaluation:.2f} s = {100 * evaluation / wall:.1f} % of "
                  f"{wall:.1f} s; local SGD {result['local_sgd_seconds']:.1f} s")


def example(rows: int, rounds: int) -> None:
    import numpy as np

    import fedsim

    with tempfile.TemporaryDirectory() as folder:
        rng = np.random.default_rng(0)
        np.savez(Path(folder, "cifar.npz"), x=rng.random((rows, 3, 32, 32), dtype=np.float32),
                 y=rng.integers(0, 10, rows))
        pool = fedsim.import_arrays(Path(folder, "cifar.npz"), Path(folder, "pool.h5"), name="cifar10")
        data = fedsim.partition_dirichlet(pool, Path(folder, "dir.h5"), devices=100, alpha=0.5, name="cifar10_dir0.5")
        for dissimilarity in (None, True):
            _, record = fedsim.run(data, "fedavg", model="lenet5", clients_per_round=10, epochs=20, batch_size=50,
                                   lr=0.01, rounds=rounds, **({} if dissimilarity is None else {"dissimilarity": True}))
            result = record["result"]
            wall, evaluation = result["wall_seconds"], result["evaluation_seconds"]
            which = "with the dissimilarities" if dissimilarity else "the model's default (no dissimilarities)"
            print(f"LeNet-5, {rows} stand-in CIFAR-10 images on 100 devices, K=10 E=20 B=50, {rounds} rounds, metrics "
                  f"on every device every round, {which}: evaluation {evaluation:.1f} s = {100 * evaluation / wall:.1f} % "
                  f"of {wall:.1f} s; local SGD {result['local_sgd_seconds']:.1f} s", flush=True)


if __name__ == "__main__":
    main()
