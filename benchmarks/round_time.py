"""Time one federated round: the compiled kernel, the batched engine, the per-device loop, the
torch oracle and the floor, same process; and the kernel's and the floor's share of this core's
FMA peak.

    python benchmarks/round_time.py [--rounds 5] [--repeats 5] [--method fedavg] [--mu 0] [--threads 1]

Default setting: Synthetic (1,1) (30 devices, seed 0), K=10, E=20, B=10, lr=0.01. Each timed
round trains the devices that round t selects, from the same initial model, with each engine
(the method's local problem, local SGD and server update: training only). The engines take
turns within each repeat (so a burst of load elsewhere hits them alike), each timed call right
after an untimed one of the same engine (warm caches; not for the slow per-device loop); every
time is the best of --repeats tries, and of more (up to MOST_TRIES) for a row whose timed tries have
taken under BUDGET seconds in all (the millisecond rows: on a shared machine a few tries of a 2 ms call
may all be disturbed), averaged over the rounds. Seconds depend on the machine and on
what else runs on it; the ratios, measured within one process, are what compares across runs.

The floor is the tightest compiled loop over the same plans: a numba loop doing plain MCLR
softmax-regression SGD (no proximal or correction term, whatever --method says) on exactly the
kernel's batch plans and samples, the round's devices one after another, each step's batch laid
out beforehand as contiguous rows (zero-padded to the kernel's width), followed by the FedAvg
weighted average of the local models inside the same compiled call. It has no plan building, no
local-problem set-up, no per-call Python bookkeeping and no torch: it bounds the kernel. The
printed ratios kernel / floor (training only) and (kernel + evaluation) / floor, where evaluation
is one metrics.evaluate over all devices (what a run adds to every round) and the floor stays
training only, carry their targets (1.5 and 2).

The torch oracle does the same number of SGD steps (sum over the round's devices of
E ceil(n_k/B)) as plain batched matmuls: K equal lanes of ceil(steps/K) steps over data laid out
beforehand, with no batch plans, gathers, ragged devices, chunks or local-problem set-up, using
the batched engine's own step (MCLR.descend: with the constant term of FedProx and FedDANE's local
problems when the method has one). It ignores that one device's steps are sequential, so the longest
device bounds the batched engine from below: its step count is printed beside the oracle's
depth. It is the bound for the batched engine (torch ops); the floor is the bound for the kernel.

The kernel row's compiled call is also timed alone ("its compiled call": the local problem and
inputs made beforehand, no server update; it draws its batches itself): the rest of the kernel row
is what a round adds around the call.

Batch plans: the kernel draws each device's epoch orders inside its call (fedsim.core.shuffle's numbers,
no plan array), so the row times that drawing alone, compiled (`orders`: every epoch order of the
round's devices into one scratch), each timed call right after a kernel round, as in a run; the
stacked plans the batched engine builds (fedsim.core.shuffle.stacked_plans) are timed the same way
beside it.

Share of the FMA peak (CPU only). A round's floating-point work is counted from the plans the
kernel runs (fedsim.core.engine._stacked_plans: with the local problem's fixed step count where it
has one), d = the model's weights per class (features + 1), C = classes, a multiply-add = 2 flops:

    flops = dC (4 S + (2 + 2 [mu != 0] + [correction]) T + 2 K + 2 A + 4 G)

S: real samples summed over the round's steps (the batch sizes, padding slots not counted);
each costs its logits x W (dC multiply-adds) and its outer-product gradient term (dC). T: steps;
each costs the update W <- W - (lr/|b|) g (dC multiply-adds), plus mu (W - W0) (a subtraction
and a multiply-add a weight) where the local problem has a proximal term and + c_k (an addition)
where it has a correction. K: devices, each local model added into the weighted average (dC
multiply-adds). A: with an anchor (Mime), each sample's logits again at the anchor (A = S; else
0). G: samples whose full local gradient the method asks for (ctx.device_grads, counted as it
is called: FedDANE's correction), 4dC each. Left out: the softmax (a max, C exps counted as 0
flops, and about 4C other operations a sample: 1/d of the multiply-adds, 1.6 % at d = 61), the
label's subtraction, and any other server arithmetic (O(dC) a device). The kernel and the floor
run on rows zero-padded to a multiple of 64 (64 for d = 61): the count is the useful work, not
the padded. The step's work is what the update needs, not how the kernel writes it (it
evaluates lr (g/|b| + c + mu (W - W0)) whatever the method). The floor's count is the same with
its own plain-SGD terms (mu = 0, no correction, anchor or gradients): for FedAvg both counts are
equal. The call's share divides the kernel's count by the call's time: where the method asks for
full gradients (G), made outside the call, it overstates.

The peak is measured in the same process, after the rounds (benchmarks/peak.py): the best of 200
calls of a compiled probe of 12 independent vector FMA chains (about 0.2 ms each), in float32
and float64, with the vector FMA instructions found in its assembly; checked against numpy's
float32 sgemm (512 x 512, best of 20) on one BLAS thread, which should come out a little below
it (a tuned sgemm reaches 80-95 % of a core's FMA peak). Printed: the round's Mflop, the probe's
Gflop/s, the sgemm's and its share of the probe, and the kernel's and the floor's Gflop/s
(round flops / their mean seconds) and share of the peak in the model's dtype.

--threads sets torch's threads for these direct calls; a run (fedsim.core.train.run) computes on one
whatever its `threads`, so that its results do not depend on them. The kernel, the floor and
the probe run on one core.

Also timed: one evaluation of the metrics on all devices (metrics.evaluate), as a share of a
round made of training plus that evaluation.

--methods times every method of the registry instead: a whole run (fedsim.core.train.run: local SGD,
the method's gradients and server update, metrics every round) of --rounds rounds at the same
settings (methods that need every device at K = all devices), best of --repeats, as seconds per
round and as a ratio to FedAvg's, measured in the same process and taking turns.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedsim.data.format import FederatedDataset  # noqa: E402
from fedsim.core.engine import (SGDSettings, _stacked_plans, batch_plan, kernel_batches, local_sgd_batched,  # noqa: E402
                           local_sgd_kernel, local_sgd_loop, local_steps)
from fedsim.core import kernel, shuffle  # noqa: E402
from fedsim.core.kernel import padded  # noqa: E402
from fedsim.methods import REGISTRY, RoundContext, get_method  # noqa: E402
from fedsim.core.metrics import evaluate  # noqa: E402
from fedsim.data.synthetic import write_synthetic  # noqa: E402
from fedsim.core.train import RunConfig, round_devices, round_weights, run_data  # noqa: E402
from peak import CHAINS, PROBE_TRIES, fma_asm_check, fma_peak, sgemm_rate, vector_bits  # noqa: E402


BUDGET, MOST_TRIES = 0.25, 40  # seconds of timed tries a millisecond row gets at least, within this many


def more_tries(times: list, repeats: int, budget: float) -> bool:
    """Whether a row timed `times` so far takes another try: until `repeats`, then while its tries
    have taken under `budget` seconds in all, up to MOST_TRIES (a millisecond call on this shared
    machine needs more than a few tries to catch an undisturbed one; a slow one has had them)."""
    return len(times) < repeats or (sum(times) < budget and len(times) < MOST_TRIES)


def best_of(repeats: int, fns: dict, cold: tuple = (), budget: float = 0.0) -> dict:
    """Best time of each fn in `fns`, the fns taking turns, each tried as `more_tries` says.

    Each timed call follows an untimed call of the same fn (except those named in `cold`), so no
    engine is timed on caches that the one before it (the per-device loop, the evaluation) has
    just filled with its own data.
    """
    times = {name: [] for name in fns}
    while True:
        due = [name for name, values in times.items() if more_tries(values, repeats, budget)]
        if not due:
            return {name: min(values) for name, values in times.items()}
        for name in due:
            fn = fns[name]
            if name not in cold:
                fn()
            start = time.perf_counter()
            fn()
            if torch.cuda.is_available():
                torch.cuda.synchronize()  # GPU work is queued: wait for it before reading the clock
            times[name].append(time.perf_counter() - start)


@numba.njit(cache=False, nogil=True, fastmath={"reassoc", "contract"}, error_model="numpy")
def floor(xb, yb, counts, first, steps, weights, v0, lr, local, average):  # pragma: no cover (compiled)
    """Plain MCLR SGD of devices one after another, then their weighted average.

    Device k's steps are xb[s], yb[s] for s in first[k]:first[k] + steps[k], each with counts[s]
    real rows at its top; weights transposed, V = W^T (classes, features), as in the kernel.
    """
    classes, features = v0.shape
    zero = lr - lr
    one = zero + 1
    p = np.empty((xb.shape[1], classes), dtype=v0.dtype)
    g = np.empty(features, dtype=v0.dtype)
    average[:, :] = zero
    for k in range(first.shape[0]):
        v = local[k]
        v[:, :] = v0
        for s in range(first[k], first[k] + steps[k]):
            n, xs, ys = counts[s], xb[s], yb[s]
            for i in range(n):  # softmax(x_i V^T) - onehot(y_i)
                xi = xs[i]
                top = -one / zero
                for c in range(classes):
                    acc = zero
                    vc = v[c]
                    for d in range(features):
                        acc += xi[d] * vc[d]
                    p[i, c] = acc
                    top = max(top, acc)
                total = zero
                for c in range(classes):
                    e = math.exp(p[i, c] - top)
                    p[i, c] = e
                    total += e
                inverse = one / total
                for c in range(classes):
                    p[i, c] *= inverse
                p[i, ys[i]] -= one
            step = lr / (zero + n)
            for c in range(classes):  # V_c <- V_c - lr/n sum_i p_ic x_i
                for d in range(features):
                    g[d] = zero
                for i in range(n):
                    pic, xi = p[i, c], xs[i]
                    for d in range(features):
                        g[d] += pic * xi[d]
                vc = v[c]
                for d in range(features):
                    vc[d] -= step * g[d]
        average += weights[k] * v


@numba.njit(cache=False, nogil=True)
def orders(starts, sizes, devices, steps, batch_size, seed, round_):  # pragma: no cover (compiled)
    """What the kernel's call spends on its batches: every epoch order its devices' steps reach
    (fedsim.core.shuffle's), drawn into one scratch, as kernel._local_sgd draws them."""
    scratch = np.empty(max(sizes.max(), 1), np.int64)
    for k in range(sizes.shape[0]):
        n = sizes[k]
        per_epoch = max(-(-n // batch_size), 1)
        for epoch in range(-(-steps[k] // per_epoch) if n > 0 else 0):
            key = shuffle._epoch_key(seed, round_, np.uint64(devices[k]), np.uint64(epoch))
            shuffle._shuffle_into(scratch, 0, n, key, starts[k])
    return scratch[0]


def plan_seconds(train, settings, solver_sets, repeats: int, kernel_round) -> tuple[float, float]:
    """Drawing round t's batches as the kernel does (`orders`), and building its stacked plans as the
    batched engine does (_stacked_plans: fedsim.core.shuffle), each timed call right after
    `kernel_round(t)` (as in a run: the caches hold the kernel's data, not the plans'), best of its
    tries (more_tries), averaged over rounds 0, 1, ... with the device sets `solver_sets`."""
    best = {"orders": [], "stacked": []}
    for t, devices in enumerate(solver_sets):
        devices = np.asarray(devices, dtype=np.int64)
        starts, sizes, steps = kernel_batches(train, devices, settings)
        calls = {"orders": lambda: orders(starts, sizes, devices, steps, settings.batch_size,
                                          np.uint64(settings.seed), np.uint64(t)),
                 "stacked": lambda: _stacked_plans(train, devices, settings, t)}
        for name, call in calls.items():
            call()  # compile before timing
            times = []
            while more_tries(times, repeats, BUDGET):
                kernel_round(t)
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
            best[name].append(min(times))
    return statistics.mean(best["orders"]), statistics.mean(best["stacked"])


def round_flops(width: int, classes: int, samples: int, steps: int, devices: int, mu: float = 0.0,
                correction: bool = False, anchored: bool = False, gradient_samples: int = 0) -> int:
    """Floating-point work of a round (the module docstring's formula): `samples` real samples over
    `steps` SGD steps of `devices` devices, their weighted average, and `gradient_samples` samples'
    full local gradients; a multiply-add is 2 flops, the softmax is left out."""
    per_step = 2 + 2 * (mu != 0) + int(correction)
    per_sample = 4 + 2 * int(anchored)
    return width * classes * (per_sample * samples + per_step * steps + 2 * devices + 4 * gradient_samples)


def floor_inputs(train, devices, settings, t, params, weights):
    """The kernel's plans for round t as contiguous batches (the floor's data), and its buffers."""
    rows, first, steps, order = _stacked_plans(train, devices, settings, t)
    x = padded(train.x.numpy())
    xb, yb = np.ascontiguousarray(x[rows]), np.ascontiguousarray(train.y.numpy()[rows])
    counts = (rows != train.sentinel).sum(1)  # the plan pads only the tail of a remainder batch
    assert (np.sort(rows != train.sentinel, axis=1)[:, ::-1] == (rows != train.sentinel)).all()
    w0 = params.numpy()
    v0 = np.zeros((w0.shape[1], x.shape[1]), dtype=w0.dtype)
    v0[:, :w0.shape[0]] = w0.T
    local, average = np.empty((len(first), *v0.shape), dtype=w0.dtype), np.empty_like(v0)
    return (xb, yb, counts, first, steps, weights(devices).numpy()[order].astype(w0.dtype), v0,
            w0.dtype.type(settings.lr), local, average)


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
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--method", choices=list(REGISTRY), default="fedavg")
    parser.add_argument("--mu", type=float, default=0.0)
    parser.add_argument("--clients-per-round", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu")
    parser.add_argument("--methods", action="store_true", help="time a run of every method against FedAvg's")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.methods:
        return method_rows(args)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "synthetic.h5"
        write_synthetic(path, name="bench", alpha=args.alpha, beta=args.beta, iid=False, seed=0)
        config = RunConfig(data=str(path), method=args.method, mu=args.mu, load="memory", device=args.device)
        with FederatedDataset(path) as dataset:
            data = run_data(config, dataset)
    model, train, test = data.model, data.eval_train, data.eval_test
    method, sizes = get_method(args.method), train.sizes
    params = model.init(torch.Generator().manual_seed(0)).to(data.device)
    settings = SGDSettings(lr=0.01, epochs=args.epochs, batch_size=args.batch_size, seed=0)
    k = args.clients_per_round

    def round_context(t):
        gradient_devices, solvers = round_devices(config, method.gradients, t, sizes)
        return RoundContext(round=t, params=params, solvers=solvers, gradient_devices=gradient_devices,
                            device_grads=lambda devices: model.device_grads(params, *train.subset(devices)),
                            weights=round_weights(sizes, solvers, config.selection, params.dtype, params.device),
                            model=model, mu=args.mu, options=config.options, lr=settings.lr,
                            sizes=sizes, local_steps=lambda devices: local_steps(sizes[devices], settings))

    def training_round(engine, ctx, problems=None):
        """What a run does between two evaluations: the round's weights, local problem, local SGD,
        server update (the local problem appended to `problems` when given)."""
        ctx = dataclasses.replace(ctx, weights=round_weights(sizes, ctx.solvers, config.selection, params.dtype,
                                                             params.device))
        state = method.init(params, len(sizes))  # a fresh state each round: the timing is the same
        problem = method.local_problem(ctx, state)
        if problems is not None:
            problems.append(problem)
        return method.server_update(ctx, state, engine(model, params, problem, train, ctx.solvers, settings,
                                                        ctx.round))[0]

    def counted_round(ctx):
        """The kernel's round once, untimed: its flops (module docstring), counting the samples whose
        full gradients the method asks for as it asks."""
        gradient_samples, problems = [0], []

        def device_grads(devices):
            gradient_samples[0] += int(sizes[np.asarray(devices)].sum())
            return ctx.device_grads(devices)

        training_round(local_sgd_kernel, dataclasses.replace(ctx, device_grads=device_grads), problems)
        problem = problems[0]
        rows = _stacked_plans(train, np.asarray(ctx.solvers), settings, ctx.round, problem.steps)[0]
        return round_flops(params.shape[0], params.shape[1], int((rows != train.sentinel).sum()), len(rows),
                           len(ctx.solvers), problem.mu, problem.correction is not None, problem.anchor is not None,
                           gradient_samples[0])

    def kernel_call(ctx):
        """The kernel round's compiled call alone: its local problem and inputs made beforehand (what a
        round adds around it is the rest of the kernel row); it draws its batches, as in a run."""
        problem = method.local_problem(ctx, method.init(params, len(sizes)))
        devices = np.asarray(ctx.solvers, dtype=np.int64)
        starts, n, steps = kernel_batches(train, devices, settings, problem.steps)
        correction = None if problem.correction is None else problem.correction.numpy()
        anchor = None if problem.anchor is None else problem.anchor.numpy()
        x, y = train.kernel_inputs()
        w0 = params.numpy()
        return lambda: kernel.local_sgd_shuffled(x, y, starts, n, devices, steps, settings.batch_size, settings.seed,
                                                 ctx.round, w0, correction, settings.lr, problem.mu, anchor)

    times = {"kernel": [], "call": [], "engine": [], "loop": [], "oracle": [], "floor": [], "evaluation": []}
    flops = {"kernel": [], "floor": []}
    if data.device.type == "cpu":
        training_round(local_sgd_kernel, round_context(0))  # compile (or load the cache) before timing
    steps, longest, floor_check = [], [], []
    for t in range(args.rounds):
        ctx = round_context(t)
        plan_steps = [len(batch_plan(int(sizes[d]), settings, t, int(d))) for d in ctx.solvers]
        steps.append(sum(plan_steps))
        longest.append(max(plan_steps))
        inputs = oracle_inputs(train, ctx.solvers, steps[-1], args.batch_size, model.num_classes, params)
        shift = None if args.method == "fedavg" else 1e-4 * torch.randn_like(inputs[3])
        fns = {}
        if data.device.type == "cpu":
            fns["kernel"] = lambda: training_round(local_sgd_kernel, ctx)
            fns["call"] = kernel_call(ctx)
            flops["kernel"].append(counted_round(ctx))
            floor_args = floor_inputs(train, np.asarray(ctx.solvers), settings, t, params, ctx.weights)
            floor(*floor_args)  # compile before timing
            counts = floor_args[2]
            flops["floor"].append(round_flops(params.shape[0], params.shape[1], int(counts.sum()), len(counts),
                                              len(floor_args[3])))
            if args.method == "fedavg":  # the same job: the floor's new global model is the kernel's
                new = training_round(local_sgd_kernel, ctx).numpy()
                floor_check.append(np.abs(floor_args[-1][:, :new.shape[0]].T - new).max())
            fns["floor"] = lambda: floor(*floor_args)
        fns["engine"] = lambda: training_round(local_sgd_batched, ctx)
        fns["loop"] = lambda: training_round(local_sgd_loop, ctx)
        fns["oracle"] = lambda: oracle(*inputs[:3], inputs[3].clone(), settings.lr, args.mu, shift)
        fns["evaluation"] = lambda: evaluate(model, params, train, test)
        for name, value in best_of(args.repeats, fns, cold=("loop",), budget=BUDGET).items():
            times[name].append(value)
    mean = {name: statistics.mean(values) for name, values in times.items() if values}
    if "kernel" in mean:  # this core's peak, measured now, in the same process
        dtype = params.numpy().dtype
        peaks = {np.dtype(t).name: fma_peak(t) for t in (np.float32, np.float64)}
        asm = fma_asm_check(dtype)
        sgemm, blas_threads = sgemm_rate(512, repeats=20)
        work = {name: statistics.mean(values) for name, values in flops.items()}

    print(f"Synthetic ({args.alpha:g},{args.beta:g}): {len(sizes)} devices, {int(sizes.sum())} training samples; "
          f"{args.method} mu={args.mu:g} K={k}, E={args.epochs}, B={args.batch_size}; {args.rounds} rounds, "
          f"best of {args.repeats} tries or more (up to {MOST_TRIES} within {BUDGET} s a row); {data.device}, "
          f"{args.threads} thread(s), torch {torch.__version__}")
    print(f"SGD steps per round   {statistics.mean(steps):7.0f} (longest device {statistics.mean(longest):.0f}, "
          f"oracle depth {statistics.mean(-(-s // k) for s in steps):.0f})")
    if "kernel" in mean:
        print(f"compiled kernel     {mean['kernel']:8.4f} s/round   (the CPU engine for MCLR)")
        print(f"  its compiled call {mean['call']:8.4f} s/round   (alone: local problem, inputs made "
              f"beforehand; it draws its batches; no server update)")
    print(f"batched engine      {mean['engine']:8.4f} s/round")
    print(f"per-device loop     {mean['loop']:8.4f} s/round")
    print(f"torch oracle        {mean['oracle']:8.4f} s/round   (batched lanes, no plans: the batched engine's bound)")
    if "floor" in mean:
        print(f"floor               {mean['floor']:8.4f} s/round   (compiled plain SGD over the same plans; "
              f"new global model within {max(floor_check, default=float('nan')):.1e} of the kernel's)")
    print(f"loop / engine       {mean['loop'] / mean['engine']:8.1f}x")
    print(f"engine / oracle     {mean['engine'] / mean['oracle']:8.1f}x   (target <= 3)")
    if "kernel" in mean:
        print(f"engine / kernel     {mean['engine'] / mean['kernel']:8.1f}x")
        print(f"kernel / floor      {mean['kernel'] / mean['floor']:8.2f}x   (training only; target <= 1.5)")
        print(f"(kernel + evaluation) / floor {(mean['kernel'] + mean['evaluation']) / mean['floor']:5.2f}x   "
              f"(target <= 2)")
    if "kernel" in mean:
        drawn, stacked = plan_seconds(train, settings, [round_context(t).solvers for t in range(args.rounds)],
                                      args.repeats, lambda t: training_round(local_sgd_kernel, round_context(t)))
        print(f"batch plans         {drawn:8.6f} s/round = {100 * drawn / mean['kernel']:.1f}% of a kernel round "
              f"(the orders the kernel draws in its call, timed alone after a kernel round; target <= 3%)")
        print(f"  stacked plans     {stacked:8.6f} s/round = {100 * stacked / mean['kernel']:.1f}% (fedsim.core.shuffle."
              f"stacked_plans: the batched engine's, and the kernel's with the authors' shuffle)")
        width = floor_args[0].shape[2]
        print(f"round work          {work['kernel'] / 1e6:8.2f} Mflop/round (kernel; floor {work['floor'] / 1e6:.2f}: "
              f"d={params.shape[0]} ({width} padded), C={params.shape[1]}, multiply-add = 2 flops, "
              f"softmax not counted)")
        print(f"FMA peak (probe)    {peaks['float32'] / 1e9:8.1f} Gflop/s float32, {peaks['float64'] / 1e9:.1f} "
              f"float64 ({CHAINS} chains of {vector_bits()}-bit vectors, best of {PROBE_TRIES}; {asm})")
        print(f"numpy sgemm         {sgemm / 1e9:8.1f} Gflop/s float32 on {blas_threads} BLAS thread(s) "
              f"= {100 * sgemm / peaks['float32']:.0f}% of the probe's peak (512 x 512, best of 20)")
        for name, label in (("kernel", "kernel share"), ("call", "  its call's share"), ("floor", "floor share")):
            rate = work["kernel" if name == "call" else name] / mean[name]
            print(f"{label:20s}{rate / 1e9:8.2f} Gflop/s = {100 * rate / peaks[dtype.name]:5.2f}% of the "
                  f"{dtype.name} FMA peak")
    fastest = mean.get("kernel", mean["engine"])
    share = mean["evaluation"] / (mean["evaluation"] + fastest)
    print(f"evaluation          {mean['evaluation']:8.4f} s = {100 * share:.1f}% of a round "
          f"(fastest training + evaluation; target <= 10%)")

def method_rows(args) -> None:
    """Seconds per round of a whole run of each method, and its ratio to FedAvg's (same process)."""
    from fedsim.methods import TUNED_MU
    from fedsim.core.train import run

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "synthetic.h5"
        write_synthetic(path, name="bench", alpha=args.alpha, beta=args.beta, iid=False, seed=0)
        with FederatedDataset(path) as dataset:
            devices = dataset.num_devices
        configs = {}
        for name, method in REGISTRY.items():
            k = devices if method.full_participation else args.clients_per_round
            mu = 0.01 if method.mu != "none" else 0.0  # a proximal term where the method has one
            configs[name] = RunConfig(data=str(path), method=name, mu=mu, clients_per_round=k, epochs=args.epochs,
                                      batch_size=args.batch_size, rounds=args.rounds, lr=0.01, device=args.device)
        timed = best_of(args.repeats, {name: (lambda c=c: run(c)) for name, c in configs.items()})
    print(f"Synthetic ({args.alpha:g},{args.beta:g}), {args.rounds}-round runs (metrics every round), "
          f"E={args.epochs}, B={args.batch_size}, best of {args.repeats}:")
    for name, seconds in timed.items():
        k = configs[name].clients_per_round
        print(f"{name:24s} K={k:<3d} {seconds / args.rounds:8.4f} s/round  {seconds / timed['fedavg']:6.2f}x FedAvg"
              + ("" if REGISTRY[name].setting_name == TUNED_MU else f"  ({REGISTRY[name].setting_name} at its default)"))


if __name__ == "__main__":
    main()
