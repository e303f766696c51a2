"""Time one federated round: the compiled kernel, the batched engine, the per-device loop and an
oracle, same process.

    python benchmarks/round_time.py [--rounds 5] [--repeats 3] [--method fedavg] [--mu 0] [--threads 1]

Default setting: Synthetic (1,1) (30 devices, seed 0), K=10, E=20, B=10, lr=0.01. Each timed
round trains the devices that round t selects, from the same initial model, with each engine
(the method's local problem, local SGD and server update: training only); every time is the
best of --repeats, averaged over the rounds.

The oracle does the same number of SGD steps (sum over the round's devices of E ceil(n_k/B))
as plain batched matmuls: K equal lanes of ceil(steps/K) steps over data laid out beforehand,
with no batch plans, gathers, ragged devices, chunks or local-problem set-up, using the
engine's own step (the fastest layout found; with the constant term of FedProx and FedDANE's
local problems when the method has one). It ignores that one device's steps are sequential, so the longest
device bounds the engine from below: its step count is printed beside the oracle's depth.

--threads sets torch's threads for these direct calls; a run (fedsim.train.run) computes on one
whatever its `threads`, so that its results do not depend on them.

Also timed: one evaluation of the metrics on all devices (metrics.evaluate), as a share of a
round made of training plus that evaluation.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from fedsim.data import FederatedDataset  # noqa: E402
from fedsim.engine import (SGDSettings, batch_plan, local_sgd_batched, local_sgd_kernel, local_sgd_loop,  # noqa: E402
                           local_steps)
from fedsim.methods import REGISTRY, RoundContext, get_method  # noqa: E402
from fedsim.metrics import evaluate  # noqa: E402
from fedsim.synthetic import write_synthetic  # noqa: E402
from fedsim.train import RunConfig, RunData, round_devices  # noqa: E402


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # GPU work is queued: wait for it before reading the clock
        times.append(time.perf_counter() - start)
    return min(times)


def oracle_inputs(train, devices, steps: int, batch_size: int, num_classes: int, params):
    """The round's samples, tiled into K lanes of ceil(steps / K) full batches, in the engine's layout."""
    x, y, _ = train.subset(devices)
    lanes, depth = len(devices), -(-steps // len(devices))
    take = torch.arange(depth * lanes * batch_size, device=x.device) % len(x)
    x, y = x[take].view(depth, lanes, batch_size, -1), y[take].view(depth, lanes, batch_size)
    y_t = (y.unsqueeze(-2) == torch.arange(num_classes, device=x.device)[:, None]).to(x.dtype)
    v = params.mT.expand(lanes, *params.mT.shape).contiguous()
    return x / batch_size, x.mT.contiguous(), y_t, v


def oracle(x_w, x_t, y_t, v, lr: float, mu: float, shift) -> None:
    """The engine's step; `shift` (the local problem's constant term, or None) as in the engine."""
    for x_t_s, x_w_s, y_t_s in zip(x_t.unbind(0), x_w.unbind(0), y_t.unbind(0)):
        residual = torch.bmm(v, x_t_s).softmax(1).sub_(y_t_s)
        v.baddbmm_(residual, x_w_s, beta=1 - lr * mu, alpha=-lr)
        if shift is not None:
            v.add_(shift)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--method", choices=list(REGISTRY), default="fedavg")
    parser.add_argument("--mu", type=float, default=0.0)
    parser.add_argument("--clients-per-round", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "synthetic.h5"
        write_synthetic(path, name="bench", alpha=args.alpha, beta=args.beta, iid=False, seed=0)
        config = RunConfig(data=str(path), method=args.method, mu=args.mu, load="memory", device=args.device)
        with FederatedDataset(path) as dataset:
            data = RunData(config, dataset)
    model, train, test = data.model, data.eval_train, data.eval_test
    method, sizes = get_method(args.method), train.sizes
    params = model.init(torch.Generator().manual_seed(0)).to(data.device)
    settings = SGDSettings(lr=0.01, epochs=args.epochs, batch_size=args.batch_size, seed=0)
    k = args.clients_per_round

    def weights(devices):
        n = torch.as_tensor(sizes[devices], dtype=params.dtype, device=params.device)
        return n / n.sum()

    def round_context(t):
        gradient_devices, solvers = round_devices(config, method.gradients, t, sizes)
        return RoundContext(round=t, params=params, solvers=solvers, gradient_devices=gradient_devices,
                            device_grads=lambda devices: model.device_grads(params, *train.subset(devices)),
                            weights=weights, model=model, mu=args.mu, options=config.options, lr=settings.lr,
                            sizes=sizes, local_steps=lambda devices: local_steps(sizes[devices], settings))

    def training_round(engine, ctx):
        """What a run does between two evaluations: local problem, local SGD, server update."""
        state = method.init(params, len(sizes))  # a fresh state each round: the timing is the same
        problem = method.local_problem(ctx, state)
        return method.server_update(ctx, state, engine(model, params, problem, train, ctx.solvers, settings,
                                                        ctx.round))[0]

    times = {"kernel": [], "engine": [], "loop": [], "oracle": [], "evaluation": []}
    if data.device.type == "cpu":
        training_round(local_sgd_kernel, round_context(0))  # compile (or load the cache) before timing
    steps, longest = [], []
    for t in range(args.rounds):
        ctx = round_context(t)
        plan_steps = [len(batch_plan(int(sizes[d]), settings, t, int(d))) for d in ctx.solvers]
        steps.append(sum(plan_steps))
        longest.append(max(plan_steps))
        inputs = oracle_inputs(train, ctx.solvers, steps[-1], args.batch_size, model.num_classes, params)
        shift = None if args.method == "fedavg" else 1e-4 * torch.randn_like(inputs[3])
        if data.device.type == "cpu":
            times["kernel"].append(best_of(args.repeats, lambda: training_round(local_sgd_kernel, ctx)))
        times["engine"].append(best_of(args.repeats, lambda: training_round(local_sgd_batched, ctx)))
        times["loop"].append(best_of(args.repeats, lambda: training_round(local_sgd_loop, ctx)))
        times["oracle"].append(best_of(args.repeats, lambda: oracle(*inputs[:3], inputs[3].clone(), settings.lr,
                                                                    args.mu, shift)))
        times["evaluation"].append(best_of(args.repeats, lambda: evaluate(model, params, train, test)))
    mean = {name: statistics.mean(values) for name, values in times.items() if values}

    print(f"Synthetic ({args.alpha:g},{args.beta:g}): {len(sizes)} devices, {int(sizes.sum())} training samples; "
          f"{args.method} mu={args.mu:g} K={k}, E={args.epochs}, B={args.batch_size}; {args.rounds} rounds, "
          f"best of {args.repeats}; {data.device}, {args.threads} thread(s), torch {torch.__version__}")
    print(f"SGD steps per round   {statistics.mean(steps):7.0f} (longest device {statistics.mean(longest):.0f}, "
          f"oracle depth {statistics.mean(-(-s // k) for s in steps):.0f})")
    if "kernel" in mean:
        print(f"compiled kernel     {mean['kernel']:8.4f} s/round   (the CPU engine for MCLR)")
    print(f"batched engine      {mean['engine']:8.4f} s/round")
    print(f"per-device loop     {mean['loop']:8.4f} s/round")
    print(f"oracle              {mean['oracle']:8.4f} s/round")
    print(f"loop / engine       {mean['loop'] / mean['engine']:8.1f}x")
    print(f"engine / oracle     {mean['engine'] / mean['oracle']:8.1f}x   (target <= 3)")
    if "kernel" in mean:
        print(f"engine / kernel     {mean['engine'] / mean['kernel']:8.1f}x")
    fastest = mean.get("kernel", mean["engine"])
    share = mean["evaluation"] / (mean["evaluation"] + fastest)
    print(f"evaluation          {mean['evaluation']:8.4f} s = {100 * share:.1f}% of a round "
          f"(fastest training + evaluation; target <= 20%)")


if __name__ == "__main__":
    main()
