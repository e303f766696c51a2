"""Subnormal floats flushed or kept: two runs that make them, each timed both ways, and their bits compared.

    python benchmarks/subnormals.py [--repeats 2] [--rounds N] [--quick]

Subnormal floats are the IEEE numbers below float32's smallest normal one (1.2e-38). A run flushes
them to zero in every thread it computes in (fedsim.core.machine); `keep_subnormals=True` keeps IEEE
arithmetic. The two runs make many (softmax probabilities below 1.2e-38, and the products made of
them in the gradients):

- feddane: FedDANE at mu = 0.001 on Synthetic (1,1) (fedsim.generate_synthetic(alpha=1, beta=1): 30
  devices, seed 0), every other setting at its default (K = 10, E = 20, B = 10, lr 0.01, 200 rounds,
  seed 0): the near-diverging run of issue 57, whose train loss climbs into the hundreds.
- lenet5: LeNet-5 trained by FedAdam (method `fedopt`) with a server learning rate of 30 (three times
  the top of its tuning grid; client lr 0.05, K = 3, E = 1, B = 10, 60 rounds, seed 0) on a small
  image file written here (`write_images`: 6 devices of 100 28x28 images, 75 to train and 25 to test,
  62 classes; each image uniform noise in [0, 0.5) plus 0.5 on the pixels whose index mod 62 is its
  label). The server's steps of about 30 a weight blow the logits up: the train loss jumps to
  millions after the first round, then stays in the tens and hundreds (above 87, where the label's
  probability is below 1.2e-38, in most rounds) and never leaves the reals (the run does not end as
  diverged); a few percent of the softmax probabilities its backward passes compute are subnormal.
  A large client lr does not do this with LeNet-5: its ReLUs die first, and the loss falls to
  ln(classes) and stays there.

Each run is made once untimed and short (2 rounds: numba loads or compiles the MCLR kernel, torch
makes its first calls), then timed flushed and kept taking turns (flushed, kept, flushed, kept, ...),
--repeats times each way; each way's time is its best. The runs compute on one torch thread (as every
run does). The metrics (the DataFrame `fedsim.run` returns, as CSV bytes) of every timed run of one
way are compared with those of the other.

Printed: a header with the CPU and the libraries (the first run's record["environment"]), then one
line per run: flushed seconds, kept seconds, kept / flushed, "bits equal: yes" or "NO", the CPU and
the kernel's target. kept / flushed is what subnormal arithmetic costs this CPU on that run: Intel
cores handle an operation with a subnormal operand or result about a hundred times slower than a
normal one, so there a run that makes many takes longer kept (FedDANE's near-diverging runs several
times longer); AMD's cores handle them at little cost, and the ratio stays near 1, give or take what
else runs on the machine (the shorter the run, the more that moves it). "bits equal: NO" means that
flushing changed the run's metrics: it is printed loudly, and the exit status is 0 all the same.
Where the CPU has no flush switch (not x86), both ways keep subnormals; the records say so, and so
does a line here. Seconds depend on the machine and on what else runs on it; the ratio, measured in
one process with the ways taking turns, is what compares across machines.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from fedsim import api  # noqa: E402
from fedsim.data.format import write_dataset  # noqa: E402

WARM_UP_ROUNDS = 2
QUICK_ROUNDS = 5


def write_images(path, devices: int = 6, per_device: int = 100, classes: int = 62, side: int = 28,
                 seed: int = 0) -> str:
    """A small image file (kind `images`): `devices` devices of `per_device` side x side images, three
    quarters to train and the rest to test; each image uniform noise in [0, 0.5) plus 0.5 on the pixels
    whose index mod `classes` is its label (learnable, labels uniform and the same across devices)."""
    rng = np.random.default_rng(seed)
    n, pixels = devices * per_device, side * side
    y = rng.integers(0, classes, n)
    x = (0.5 * rng.random((n, pixels)) + 0.5 * (y[:, None] == np.arange(pixels) % classes)).astype(np.float32)
    train = np.arange(n) % per_device < per_device * 3 // 4
    counts = (int(train[:per_device].sum()), int((~train[:per_device]).sum()))
    write_dataset(path, name="subnormal-images", kind="images", num_classes=classes,
                  clients=[f"d{k}" for k in range(devices)], train_x=x[train], train_y=y[train],
                  train_offsets=np.arange(devices + 1) * counts[0], test_x=x[~train], test_y=y[~train],
                  test_offsets=np.arange(devices + 1) * counts[1],
                  provenance={"generator": "benchmarks/subnormals.py", "seed": seed})
    return str(path)


def runs(folder: Path, rounds: int | None) -> dict:
    """name -> (description, dataset, method, settings) of the two runs; `rounds` replaces each run's own."""
    synthetic = api.generate_synthetic(folder / "synthetic_1_1.h5", alpha=1, beta=1)
    images = write_images(folder / "images.h5")
    feddane = dict(mu=0.001, rounds=200, seed=0)
    lenet5 = dict(model="lenet5", lr=0.05, clients_per_round=3, epochs=1, batch_size=10, rounds=60, seed=0,
                  options={"server_lr": 30.0})
    for settings in (feddane, lenet5):
        settings["rounds"] = settings["rounds"] if rounds is None else rounds
    return {"feddane": (f"FedDANE mu=0.001 on Synthetic (1,1), {feddane['rounds']} rounds", synthetic, "feddane",
                        feddane),
            "lenet5": (f"LeNet-5, FedAdam server_lr=30, {lenet5['rounds']} rounds", images, "fedopt", lenet5)}


def timed(data, method, settings, keep: bool):
    start = time.perf_counter()
    metrics, record = api.run(data, method, keep_subnormals=keep, **settings)
    return time.perf_counter() - start, metrics, record


def header(env: dict) -> str:
    target = env["kernel_target"]
    vectors = f", {target['vector_bits']}-bit vectors" if target.get("vector_bits") else ""
    return (f"CPU: {env['cpu']} ({env['machine']}); kernel target {target['cpu_name']}{vectors}, "
            f"{env['simd_lanes']} SIMD lanes; python {env['python']}, numba {env['numba']}, llvmlite "
            f"{env['llvmlite']}, numpy {env['numpy']}, torch {env['torch']}; one torch thread per run")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="timed runs each way (best of them)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds of both runs (default: each its own, 200 and 60)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke test: {QUICK_ROUNDS} rounds, one timed run each way")
    args = parser.parse_args(argv)
    if args.repeats < 1 or (args.rounds is not None and args.rounds < 1):
        parser.error("--repeats and --rounds take a positive count")
    if args.quick:
        args.rounds, args.repeats = args.rounds or QUICK_ROUNDS, 1

    with tempfile.TemporaryDirectory() as tmp:
        printed = False
        for name, (what, data, method, settings) in runs(Path(tmp), args.rounds).items():
            _, _, record = timed(data, method, {**settings, "rounds": min(WARM_UP_ROUNDS, settings["rounds"])},
                                 keep=False)
            env = record["environment"]
            if not printed:
                print(header(env), flush=True)
                printed = True
            seconds, csv, records, metrics = {False: [], True: []}, {False: [], True: []}, {}, {}
            for _ in range(args.repeats):
                for keep in (False, True):
                    s, metrics[keep], records[keep] = timed(data, method, settings, keep)
                    seconds[keep].append(s)
                    csv[keep].append(metrics[keep].to_csv())
            flushed, kept = min(seconds[False]), min(seconds[True])
            equal = len(set(csv[False]) | set(csv[True])) == 1
            result = records[False]["result"]
            loss = float(metrics[False]["train_loss"].max())
            ended = (f", diverged at round {result['diverged_round']}" if result["diverged_round"] is not None
                     else "")
            print(f"{name}: {what} (train loss up to {loss:.3g}{ended}): flushed {flushed:.3f} s, kept {kept:.3f} s, "
                  f"kept/flushed {kept / flushed:.2f}x, bits equal: {'yes' if equal else 'NO'} "
                  f"[{env['cpu']}, kernel {env['kernel_target']['cpu_name']}]", flush=True)
            if not equal:
                within = [len(set(csv[keep])) > 1 for keep in (False, True)]
                print(f"!!! {name}: THE METRICS DIFFER, flushed against kept"
                      + (" (and between repeats of one way: the run is not reproducible here)" if any(within) else "")
                      + " !!!", flush=True)
            said = [records[keep]["environment"]["subnormals"] for keep in (False, True)]
            if said != ["flushed", "kept"]:
                print(f"!!! {name}: the records say subnormals were {said[0]} and {said[1]}: this CPU has no "
                      "flush switch, both ways kept them !!!", flush=True)


if __name__ == "__main__":
    main()
