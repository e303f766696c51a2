"""Scale: federated rounds over a large population, reading only each round's devices from the file.

    python benchmarks/scale.py [--data PATH] [--devices 100000] [--clients-per-round 1000] [--epochs 1]
                               [--rounds 3] [--eval-devices 1000] [--method fedavg] [--threads 1]

Synthetic (1,1) with --devices devices is generated first, by a child process (so neither its
time nor its memory counts), at PATH (kept, and reused when it already holds that dataset) or in
a temporary directory. Then one run trains with load=stream (each round reads its K devices
from the file) and computes the metrics on a seeded sample of --eval-devices devices; printed:
seconds per round (training with its reads, plus the evaluation that follows it; the mean
over rounds after the first), the reading and evaluation parts of that, and this process's
peak resident memory (RSS).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

from fedsim import train  # noqa: E402
from fedsim.data import FederatedDataset  # noqa: E402


def generate(path: Path, devices: int) -> float:
    """Write Synthetic (1,1) with `devices` devices at `path` unless it is there; seconds spent."""
    wanted = {"alpha": 1.0, "beta": 1.0, "num_devices": devices, "seed": 0}
    if path.is_file():
        with FederatedDataset(path) as dataset:
            if all(dataset.attrs["provenance"].get(k) == v for k, v in wanted.items()):
                return 0.0
        raise SystemExit(f"{path} holds another dataset; pass a new path")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fedsim", "generate-synthetic", "--name", f"synthetic_1_1_n{devices}",
                    "--alpha", "1", "--beta", "1", "--devices", str(devices), "--seed", "0", "--out", str(path)],
                   check=True, env={**os.environ, "PYTHONPATH": str(SRC)})
    return time.perf_counter() - start


@contextmanager
def timed(owner, name: str, spent: list):
    """Add the seconds of every call of owner.name to `spent` while inside the block."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)
    setattr(owner, name, wrapper)
    try:
        yield
    finally:
        setattr(owner, name, original)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, help="dataset file (generated there if missing)")
    parser.add_argument("--devices", type=int, default=100_000)
    parser.add_argument("--clients-per-round", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--eval-devices", type=int, default=1000)
    parser.add_argument("--method", choices=["fedavg", "fedprox", "feddane"], default="fedavg")
    parser.add_argument("--mu", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = args.data or Path(tmp) / "synthetic_1_1.h5"
        generation = generate(path, args.devices)
        config = train.RunConfig(data=str(path), method=args.method, mu=args.mu, rounds=args.rounds,
                                 clients_per_round=args.clients_per_round, epochs=args.epochs,
                                 load="stream", eval_devices=args.eval_devices, threads=args.threads)
        stamps, reads, evals = [], [], []
        start = time.perf_counter()
        with timed(train.RunData, "load", reads), timed(train, "evaluate", evals):
            metrics, record = train.run(config, on_round=lambda row: stamps.append(time.perf_counter()))
        with FederatedDataset(path) as dataset:
            samples = int(dataset.train_sizes.sum())

    rounds = [b - a for a, b in zip(stamps, stamps[1:])]
    steady = rounds[1:] or rounds
    eval_sample_reads = 2  # the evaluation sample's train and test rows, read once before round 0
    print(f"Synthetic (1,1): {args.devices} devices, {samples} training samples"
          f"{'' if generation == 0 else f' (generated in {generation:.0f} s, not counted)'}; "
          f"{args.method} K={args.clients_per_round}, E={args.epochs}, B=10; load=stream, metrics on "
          f"{record['data_access']['eval_devices']} devices; {args.threads} thread(s), torch {torch.__version__}")
    print(f"set-up (open, evaluation sample, round 0 metrics) {stamps[0] - start:7.2f} s")
    print(f"seconds per round   {statistics.mean(steady):7.2f}   (rounds: {', '.join(f'{r:.2f}' for r in rounds)})")
    print(f"  reading devices   {statistics.mean(reads[eval_sample_reads:]):7.2f}")
    print(f"  evaluation        {statistics.mean(evals[1:]):7.2f}")
    print(f"peak RSS            {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:7.2f} GiB   (target < 4)")
    print(f"final train loss    {metrics['train_loss'].iloc[-1]:.4f} (round 0: {metrics['train_loss'].iloc[0]:.4f})")


if __name__ == "__main__":
    main()
