"""Scale: federated rounds over a large population, reading only each round's devices from the file.

    python benchmarks/scale.py [--data PATH] [--devices 100000] [--features 60] [--clients-per-round 1000]
                               [--epochs 1] [--rounds 3] [--eval-devices 1000] [--method fedavg] [--threads 1]

Synthetic (1,1) with --devices devices of --features features is generated first, by a child
process (so its memory does not count), at PATH (kept, and reused when it already holds that
dataset) or in a temporary directory. Then one run trains with load=stream (each round reads its
K devices from the file) and computes the metrics on a seeded sample of --eval-devices devices;
printed: seconds per round (training with its reads, plus the evaluation that follows it; the
mean over rounds after the first), the reading and evaluation parts of that, and this process's
peak resident memory (RSS).

Generation is the long part, and is timed and printed as its own figure. Before generating, the
script prints the dataset's exact size (the device sizes are the generator's first draw, so they
are drawn here the same way: N = 100,000 devices hold 46.0 M samples, 11.4 GB at 60 features)
and how long writing it takes at the rates measured on this 2-core machine (75 MB/s idle on
2026-11-22, 21 MB/s with another job beside it on 2026-11-25: 2.5 to 9 minutes for the
default); it stops with one line when the target disk has less free space than the file needs.
The default stays the paper's 60 features at N = 100,000, which fits the 20 minutes it is meant
to: on 2026-11-25, loaded, generation took 542 s and the whole benchmark 584 s (idle, with the
152 s generation of 2026-11-22, about 3 minutes); peak RSS 1.18 GiB in the training process and
1.42 GiB in the generating child (its largest device has 0.7 M rows), under the 4 GiB target.
--features 20 makes the file 3.5x smaller for a quick look (the rounds then do less work per
sample than the paper's data).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

from fedsim import train  # noqa: E402
from fedsim.data import FederatedDataset  # noqa: E402


GENERATION_MB_PER_S = {"idle": 75.0, "loaded": 21.0}  # this 2-core machine, 2026-11-22 and 2026-11-25


def dataset_size(devices: int, features: int, seed: int = 0) -> tuple[int, int, int]:
    """(samples, largest device, bytes on disk) of the Synthetic dataset the generator writes: its
    first draw is the device sizes, repeated here (float32 features and int64 labels per row)."""
    sizes = np.random.default_rng(seed).lognormal(4.0, 2.0, devices).astype(np.int64) + 50
    samples = int(sizes.sum())
    return samples, int(sizes.max()), samples * (4 * features + 8) + 64 * devices


def generate(path: Path, devices: int, features: int) -> float | None:
    """Write Synthetic (1,1) with `devices` devices at `path` unless it is there; seconds spent (None:
    reused). Says first how large the file will be and how long writing it takes, and stops with one
    line when its disk lacks the space."""
    wanted = {"alpha": 1.0, "beta": 1.0, "num_devices": devices, "num_features": features, "seed": 0}
    if path.is_file():
        with FederatedDataset(path) as dataset:
            if all(dataset.attrs["provenance"].get(k) == v for k, v in wanted.items()):
                return None
        raise SystemExit(f"{path} holds another dataset; pass a new path")
    samples, largest, size = dataset_size(devices, features)
    minutes = {name: size / 1e6 / rate / 60 for name, rate in GENERATION_MB_PER_S.items()}
    print(f"generating Synthetic (1,1), {devices} devices x {features} features: {samples / 1e6:.1f} M samples "
          f"(largest device {largest}), {size / 1e9:.1f} GB at {path.parent}; expect {minutes['idle']:.1f} min "
          f"(idle) to {minutes['loaded']:.1f} min (loaded) on a 2-core machine", flush=True)
    free = shutil.disk_usage(path.parent).free
    if free < size * 1.05 + 2**28:
        raise SystemExit(f"not enough disk space at {path.parent}: the dataset needs {size / 1e9:.1f} GB, "
                         f"{free / 1e9:.1f} GB free (pass --data on a larger disk, or fewer --devices or --features)")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fedsim", "generate-synthetic", "--name", f"synthetic_1_1_n{devices}",
                    "--alpha", "1", "--beta", "1", "--devices", str(devices), "--features", str(features),
                    "--seed", "0", "--out", str(path)],
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
    parser.add_argument("--features", type=int, default=60)
    parser.add_argument("--clients-per-round", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--eval-devices", type=int, default=1000)
    parser.add_argument("--method", choices=["fedavg", "fedprox", "feddane"], default="fedavg")
    parser.add_argument("--mu", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    begin = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp:
        path = args.data or Path(tmp) / "synthetic_1_1.h5"
        generation = generate(path, args.devices, args.features)
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
    print(f"Synthetic (1,1): {args.devices} devices x {args.features} features, {samples} training samples; "
          f"{args.method} K={args.clients_per_round}, E={args.epochs}, B=10; load=stream, metrics on "
          f"{record['data_access']['eval_devices']} devices; {args.threads} thread(s), torch {torch.__version__}")
    print(f"dataset generation  {'reused ' + str(path) if generation is None else f'{generation:7.1f} s'}"
          f"   (a child process; not in the figures below)")
    print(f"set-up (open, evaluation sample, round 0 metrics) {stamps[0] - start:7.2f} s")
    print(f"seconds per round   {statistics.mean(steady):7.2f}   (rounds: {', '.join(f'{r:.2f}' for r in rounds)})")
    print(f"  reading devices   {statistics.mean(reads[eval_sample_reads:]):7.2f}")
    print(f"  evaluation        {statistics.mean(evals[1:]):7.2f}")
    print(f"peak RSS            {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:7.2f} GiB   (target < 4)")
    print(f"whole benchmark     {time.perf_counter() - begin:7.1f} s   (generation included; target < 20 min)")
    print(f"final train loss    {metrics['train_loss'].iloc[-1]:.4f} (round 0: {metrics['train_loss'].iloc[0]:.4f})")


if __name__ == "__main__":
    main()
