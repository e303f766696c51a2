"""fedsim under the authors' protocol against their own code's curves, all 200 rounds.

    python benchmarks/authors_replay.py [--rounds 200] [--fidelity ../shared/fidelity]

Imports their Synthetic IID files, runs FedAvg, FedProx (mu 1) and their FedDANE (mu 0, 0.01,
1) with config/authors.yaml's protocol (their draws, their FedDANE correction, their initial
model; K = 10, E = 20, B = 10, lr = 0.01) and prints, per run, the largest relative gap in
training loss over the first 20 and over all rounds, the mean training loss over rounds
150-199 (ours, theirs) and the largest test-accuracy gap. tests/test_fidelity.py checks the
first 20 rounds in CI; this is the whole picture (about 2 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from fedsim.data.leaf.leafjson import import_leaf_json
from fedsim.methods import resolve
from fedsim.core.train import RunConfig, run

ROOT = Path(__file__).resolve().parents[1]
CASES = [("fedavg", 0.0), ("fedprox", 1.0), ("feddane_authors", 0.0), ("feddane_authors", 0.01),
         ("feddane_authors", 1.0)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--fidelity", type=Path, default=ROOT.parent / "shared" / "fidelity")
    args = parser.parse_args(argv)
    gold_file = args.fidelity / "authors-runs-synthetic-iid.csv"
    if not gold_file.is_file():
        print(f"skipped: {gold_file} absent (the authors' golden case lives in the shared folder)")
        return 0
    gold = pd.read_csv(gold_file)
    sim = yaml.safe_load((ROOT / "config" / "authors.yaml").read_text())["simulator"]
    with tempfile.TemporaryDirectory() as tmp:
        data = str(Path(tmp) / "synthetic_iid.h5")
        import_leaf_json(args.fidelity / "synthetic_iid-train.json.gz", args.fidelity / "synthetic_iid-test.json.gz",
                         data, name="synthetic_iid")
        print(f"{'method':<17}{'mu':>5}{'gap 1-20':>11}{'gap all':>11}{'tail ours':>11}{'tail theirs':>12}"
              f"{'acc gap':>9}{'s/run':>7}")
        for method, mu in CASES:
            base = resolve(method)[0]
            config = RunConfig(data=data, method=method, mu=mu, rounds=args.rounds, selection=sim["selection"],
                               second_subset=sim["second_subset"], rng=sim["rng"],
                               init=str(args.fidelity / "authors-init-seed{seed}.npz"))
            started = time.perf_counter()
            metrics, _ = run(config)
            seconds = time.perf_counter() - started
            theirs = gold[(gold["method"] == base) & np.isclose(gold["mu"], mu)].set_index("round")
            ours = metrics.set_index("round")
            gap = ((ours["train_loss"] - theirs["train_loss"]).abs() / theirs["train_loss"]).dropna()
            tail = slice(max(0, args.rounds - 50), args.rounds - 1)
            acc = (ours["test_acc"] - theirs["test_acc"]).abs().max()
            print(f"{method:<17}{mu:>5g}{gap.loc[:20].max():>11.1e}{gap.max():>11.1e}"
                  f"{ours['train_loss'].loc[tail].mean():>11.4f}{theirs['train_loss'].loc[tail].mean():>12.4f}"
                  f"{acc:>9.1e}{seconds:>7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
