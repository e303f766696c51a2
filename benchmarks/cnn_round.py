"""Time one round of local SGD with a CNN (LEAF's, or LeNet-5): fedsim's engines against a hand-written torch loop.

    python benchmarks/cnn_round.py [--model cnn|lenet5] [--clients 10] [--epochs 1] [--samples 200]
                                   [--batch-size 10] [--threads 1] [--repeats 3] [--device auto]
                                   [--engines batched stacked single loop torch]

The same K devices, the same mini-batches (fedsim's plans, `engine.batch_plan`), run by each engine:
- batched: fedsim's general local-step rule as the run takes it (the model's `stacks_on` says
  whether a round's devices run as one stack or one at a time on this device type);
- stacked: the same rule with all K devices as one stacked computation (their images as channel
  groups of one grouped convolution, the dense layers as batched matmuls), what a GPU runs;
- single: the same rule one device at a time (a stack of one), what a device type the model does not
  list in `stacks_on` runs;
- loop: fedsim's per-device oracle (functional model, torch.autograd.grad per step);
- torch: what a user would write by hand, one `nn.Module` (the model's `as_module`) and one
  `optim.SGD` per device.
Images are random 28x28 in [0, 1], 62 classes; device sizes drawn uniformly in [N/2, 3N/2] (LEAF's
FEMNIST writers hold ~230 samples on average).

Flops are counted from the shapes, per real sample (padded batch slots are not useful work), by the
model (`CNN.training_flops`): a training step is three forward passes' worth (forward, the gradient
with respect to the inputs, the gradient with respect to the weights) less the first convolution's
input gradient, which nobody needs. ReLU, pooling and the loss are left out (well under 1 %). The FMA
peak is the compiled probe's (benchmarks/peak.py, one core, float32) times the threads; the
share is flops / (seconds x peak). Prints s/round for each engine (best of --repeats) and the
ratios to the first engine named.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedsim.core.engine import (Clients, SGDSettings, _local_sgd_stacked, batch_plan, local_sgd_batched,  # noqa: E402
                           local_sgd_loop)
from fedsim.methods import LocalProblem  # noqa: E402
from fedsim.models import get_model  # noqa: E402
from peak import fma_peak  # noqa: E402


def torch_loop(model, params, problem, clients: Clients, devices, settings, round_):
    """One nn.Module and one optim.SGD per device over the same batches (plain FedAvg local steps)."""
    out = []
    for device in devices:
        net = model.as_module(params)
        opt = torch.optim.SGD(net.parameters(), lr=settings.lr)
        base = int(clients.offsets[device])
        for batch in batch_plan(int(clients.sizes[device]), settings, round_, int(device)):
            rows = torch.from_numpy(batch[batch >= 0] + base)
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(net(clients.x[rows]), clients.y[rows]).backward()
            opt.step()
        out.append(net)
    return out


def single(model, *args):
    """The general rule one device at a time: the model's `stacks_on` emptied (the instance's, over its class's)."""
    model.stacks_on = ()
    try:
        return local_sgd_batched(model, *args)
    finally:
        del model.stacks_on


def timed(engine, *args, repeats=1) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        engine(*args)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--samples", type=int, default=200, help="mean samples per device")
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--model", default="cnn", choices=["cnn", "lenet5"], help="LEAF's CNN or LeNet-5")
    parser.add_argument("--engines", nargs="+", default=["batched", "stacked", "loop", "torch"],
                        choices=["batched", "stacked", "single", "loop", "torch"])
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    model = get_model(args.model)()
    rng = np.random.default_rng(0)
    sizes = rng.integers(max(1, args.samples // 2), args.samples * 3 // 2 + 1, args.clients)
    n = int(sizes.sum())
    x = torch.from_numpy(rng.random((n, math.prod(model.image)), dtype=np.float32)).to(device)
    y = torch.from_numpy(rng.integers(0, model.num_classes, n)).to(device)
    clients = Clients.from_arrays(x, y, np.concatenate([[0], np.cumsum(sizes)]))
    params = model.init(torch.Generator().manual_seed(0)).to(device)
    settings = SGDSettings(lr=0.05, epochs=args.epochs, batch_size=args.batch_size, seed=0)
    call = (model, params, LocalProblem(mu=0.0, correction=None), clients, np.arange(args.clients), settings, 0)
    engines = {"batched": local_sgd_batched, "stacked": _local_sgd_stacked, "single": single, "loop": local_sgd_loop,
               "torch": torch_loop}
    seconds = {name: timed(engines[name], *call, repeats=args.repeats) for name in args.engines}
    flops = model.training_flops() * args.epochs * n
    print(f"{model.label} {model.layout.size:,} parameters: K={args.clients} E={args.epochs} B={args.batch_size} "
          f"samples/device~{args.samples} ({n * args.epochs} sample-steps, {flops / 1e9:.1f} Gflop a round) on "
          f"{device}, {args.threads} thread(s)", flush=True)
    peak = fma_peak(np.float32) * args.threads if device.type == "cpu" else None
    first = args.engines[0]
    for name, s in seconds.items():
        share = f", {flops / s / peak:.1%} of the FMA peak" if peak else ""
        ratio = f", {s / seconds[first]:.2f}x {first}'s time" if name != first else ""
        print(f"  {name}: {s:.3f} s/round, {flops / s / 1e9:.1f} Gflop/s{share}{ratio}", flush=True)
    if peak:
        print(f"  FMA peak (probe, float32): {peak / 1e9:.1f} Gflop/s", flush=True)


if __name__ == "__main__":
    main()
