"""Evaluation's share of a CNN run: one run of `fedsim train` per evaluation chunk size, same process.

    python benchmarks/eval_share.py [--data results/datasets/femnist62.h5] [--model lenet5] [--rounds 40]
                                    [--dissimilarity] [--chunks 25 22]

The run is config/successors-cnn.yaml's setting for FedAvg (K = 10, E = 1, B = 10, lr 0.03, metrics
every 5th round and the last on 25 devices, without the gradient dissimilarities unless
--dissimilarity), its metrics computed over chunks of 2^n activations (`fedsim.models.EVAL_FLOATS`)
for each n of --chunks. Prints, per run, the evaluation's seconds and share of the run's wall time
(run.json's evaluation_seconds / wall_seconds) beside its local SGD's. The dataset comes from the
workflow (`snakemake results/datasets/femnist62.h5 --configfile config/successors-cnn.yaml`).
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
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--dissimilarity", action="store_true")
    parser.add_argument("--chunks", type=int, nargs="+", default=[25, 22], help="log2 of the activations per chunk")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for n in args.chunks:
            fedsim.models.EVAL_FLOATS = 1 << n
            info = Path(folder, f"run_{n}.json")
            code = cli.main(["train", "--data", args.data, "--method", "fedavg", "--clients-per-round", "10",
                             "--epochs", "1", "--batch-size", "10", "--lr", "0.03", "--rounds", str(args.rounds),
                             "--model", args.model, "--eval-devices", "25", "--eval-every", "5",
                             "--dissimilarity" if args.dissimilarity else "--no-dissimilarity",
                             "--metrics", str(info.with_suffix(".csv")), "--info", str(info)])
            if code:
                sys.exit(code)
            result = json.loads(info.read_text())["result"]
            wall, evaluation = result["wall_seconds"], result["evaluation_seconds"]
            print(f"chunks of 2^{n} activations: evaluation {evaluation:.2f} s = {100 * evaluation / wall:.1f} % of "
                  f"{wall:.1f} s; local SGD {result['local_sgd_seconds']:.1f} s")


if __name__ == "__main__":
    main()
