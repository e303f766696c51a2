"""Time one round of local SGD with the LSTM models: the batched (stacked) engine vs the per-device loop.

    python benchmarks/lstm_round.py [--datasets shakespeare sent140] [--clients 10] [--epochs 20]
                                    [--samples N] [--batch-size 10] [--threads 1] [--repeats 1]
                                    [--engines batched eager loop] [--busy]

Engines: `batched`, the general rule as a run takes it (on CUDA each SGD step a replayed CUDA graph:
fedsim.core.engine.StepGraphs, captured in the model's first round and replayed in the later repeats);
`eager`, the same rule with every operation launched on its own (what CUDA ran before the graphs; on
a CPU the same as batched); `loop`, the per-device oracle. --busy
(CUDA): the GPU's busy share of one batched round, its kernels' summed time (torch profiler) over the
round's wall time.

Data are random ids in each dataset's format (Shakespeare: 80 chars over 80 symbols; Sent140:
25 ids into a random 300-d table of 5000 words), the paper's models at full size. K devices
with ragged sizes drawn uniformly in [N/2, 3N/2] (default N: the paper's mean samples per
device, 3616 and 53). The paper's setting (K=10, E=20) takes hours per Shakespeare round on
a CPU: use --epochs / --samples to shrink it; the ratio is what to read.
Prints s/round for each engine (best of --repeats) and loop / batched, and the round's flops and
their share of the FMA peak on the CPU (benchmarks/peak.py's probe, one core, float32, times the
threads), as round_time.py does for MCLR.

Flops are counted from the shapes, per real sample: a layer l of T steps with input width d_l and
hidden H computes gates of width G = 4H from [x, h] in 2 T (d_l + H) G flops forward (the input
part for all steps at once, the recurrent part step by step), the head 2 H C (Shakespeare's
output layer) or 2 (30 H + 30) (Sent140's dense and output layers). A training step is three
forward passes' worth (forward, gradients with respect to the inputs, with respect to the
weights), less the first layer's input gradient where the input is frozen (Sent140's GloVe rows;
Shakespeare's character embedding is trained, so its gradient is needed). The gates'
nonlinearities and the cell's elementwise products (~14 H T flops a layer) are left out: a few
per cent of the matmuls at H = 100, under 1 % at H = 256.

--estimate: also the cost model's figure for the same round (fedsim.planning.cost: these device sizes, all
K devices training, seconds per step and row from --calibration FILE, else a calibration measured
here first, else with --defaults fedsim.planning.cost.DEFAULTS) beside the measured batched round, and an
evaluation of the round's rows (model.stats + full gradients, as every round's metrics) beside its
estimate: the ratios are the check that the printed estimate is within a factor of 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedsim.planning import calibration  # noqa: E402
from fedsim.planning import cost  # noqa: E402
from fedsim.data.paper_table import PAPER_TABLE  # noqa: E402
from fedsim.core.engine import Clients, SGDSettings, StepGraphs, local_sgd_batched, local_sgd_loop  # noqa: E402
from fedsim.models.char_lstm import CharLSTM  # noqa: E402
from fedsim.models.sent140_lstm import Sent140LSTM  # noqa: E402
from fedsim.methods import LocalProblem  # noqa: E402
from peak import fma_peak  # noqa: E402

MEAN_SAMPLES = {kind: PAPER_TABLE[kind]["mean"] for kind in ("shakespeare", "sent140")}


def make(dataset: str, clients: int, samples: int, device, seed=0):
    rng = np.random.default_rng(seed)
    if dataset == "shakespeare":
        model, vocab = CharLSTM(), 80
    else:
        vocab = 5000
        model = Sent140LSTM(torch.from_numpy(rng.normal(size=(vocab + 1, 300)).astype(np.float32)).to(device))
    sizes = rng.integers(max(1, samples // 2), samples * 3 // 2 + 1, clients)
    n = int(sizes.sum())
    x = torch.from_numpy(rng.integers(0, vocab, (n, model.seq_len)).astype(np.int32))
    y = torch.from_numpy(rng.integers(0, model.num_classes, n))
    data = Clients.from_arrays(x.to(device), y.to(device), np.concatenate([[0], np.cumsum(sizes)]))
    return model, data, sizes


def forward_flops(model) -> int:
    """Flops of one sample's forward pass: the LSTM layers' matmuls and the head (see the docstring)."""
    shapes, steps = model.layout.shapes, model.seq_len
    lstm = sum(2 * steps * shape[0] * shape[1] for name, shape in shapes.items() if name.endswith(".kernel")
               and name.startswith("lstm"))
    head = sum(2 * shape[0] * shape[1] for name, shape in shapes.items() if name.endswith(".kernel")
               and not name.startswith("lstm"))
    return lstm + head


def training_flops(model) -> int:
    """Flops of one sample's SGD step: three forward passes' worth, less a frozen input's gradient."""
    frozen = isinstance(model, Sent140LSTM)
    first = model.layout.shapes["lstm0.kernel"]
    inputs = first[0] - model.hidden
    return 3 * forward_flops(model) - (2 * model.seq_len * inputs * first[1] if frozen else 0)


CPU_SECONDS = {}  # engine -> CPU seconds of its best repeat (the wall clock's, on a shared machine, varies)


def timed(engine, *args, repeats=1) -> float:
    best = float("inf")
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        engine(*args)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
        if wall < best:
            best, CPU_SECONDS[engine.__name__] = wall, time.process_time() - cpu
    return best


def eager(model, *args):
    """The general rule with each operation launched on its own (no StepGraphs)."""
    model.graphs_on = ()  # the instance's, over its class's
    try:
        return local_sgd_batched(model, *args)
    finally:
        del model.graphs_on


def busy_share(engine, *args) -> float:
    """The GPU's kernels' summed time over the wall time of one call (torch profiler, CUDA activity)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        engine(*args)
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.time_range.elapsed_us() for e in kernels) / 1e6 / wall


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["shakespeare", "sent140"], choices=list(MEAN_SAMPLES))
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--samples", type=int, default=None, help="mean samples per device")
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--engines", nargs="+", default=["batched", "loop"], choices=["batched", "eager", "loop"],
                        help="leave out the loop where it would take too long (the paper's Shakespeare round)")
    parser.add_argument("--estimate", action="store_true", help="print the cost model's estimate beside the measure")
    parser.add_argument("--busy", action="store_true", help="CUDA: the GPU's busy share of a batched round")
    parser.add_argument("--calibration", help="a `fedsim cost --calibrate --out` JSON file (default: calibrate here)")
    parser.add_argument("--defaults", action="store_true", help="use fedsim.planning.cost.DEFAULTS instead of calibrating")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    constants = None
    if args.estimate:
        constants = (cost.load_constants(args.calibration)[0] if args.calibration else cost.DEFAULTS if args.defaults
                     else calibration.calibrate(args.datasets))
        torch.set_num_threads(args.threads)
    for dataset in args.datasets:
        samples = args.samples or MEAN_SAMPLES[dataset]
        model, data, sizes = make(dataset, args.clients, samples, device)
        params = model.init(torch.Generator().manual_seed(0)).to(device)
        settings = SGDSettings(lr=0.1, epochs=args.epochs, batch_size=args.batch_size, seed=0)
        problem, devices = LocalProblem(mu=0.0, correction=None), np.arange(args.clients)
        steps = int(sum(args.epochs * -(-sizes // args.batch_size)))
        call = (model, params, problem, data, devices, settings, 0)
        engines = {"batched": local_sgd_batched, "eager": eager, "loop": local_sgd_loop}
        seconds = {name: timed(engines[name], *call, repeats=args.repeats) for name in args.engines}
        ratio = "".join(f", {name}/batched {s / seconds['batched']:.2f}x" for name, s in seconds.items()
                        if "batched" in seconds and name != "batched")
        print(f"{dataset}: K={args.clients} E={args.epochs} B={args.batch_size} samples/device~{samples} "
              f"({steps} SGD steps, longest device {args.epochs * -(-sizes.max() // args.batch_size)}) on "
              f"{device}, {args.threads} thread(s): "
              + ", ".join(f"{name} {s:.2f} s/round" for name, s in seconds.items()) + ratio, flush=True)
        flops = training_flops(model) * args.epochs * int(sizes.sum())
        peak = fma_peak(np.float32) * args.threads if device.type == "cpu" else None
        print(f"  {flops / 1e9:.2f} Gflop a round: " + ", ".join(
            f"{name} {flops / s / 1e9:.2f} Gflop/s" + (f" ({flops / s / peak:.1%} of the FMA peak, "
                                                        f"{peak / 1e9:.0f} Gflop/s)" if peak else "")
            for name, s in seconds.items()), flush=True)
        if args.busy and device.type == "cuda":
            print(f"  GPU busy {busy_share(local_sgd_batched, *call):.1%} of a batched round", flush=True)
        graphs = StepGraphs.held(model)
        if graphs is not None:  # captured in the first batched round, replayed in the later ones
            print(f"  {graphs.captures} step graphs captured in all ({len(graphs.graphs)} kept)", flush=True)
        if constants is not None:
            consts = constants[dataset]
            estimate = cost.round_train_seconds(sizes, args.clients, args.epochs, args.batch_size, consts)
            if "batched" in seconds:
                wall, cpu = seconds["batched"], CPU_SECONDS[local_sgd_batched.__name__]
                print(f"  round: estimate {estimate:.2f} s, measured {cpu:.2f} s CPU ({wall:.2f} s wall): "
                      f"measured / estimate {cpu / estimate:.2f} CPU, {wall / estimate:.2f} wall", flush=True)
            x, y = data.x[:-1], data.y[:-1]
            start, cpu = time.perf_counter(), time.process_time()
            model.stats(params, x, y)
            model.device_grads(params, x, y, data.offsets)
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            rows = int(sizes.sum())
            est_eval = consts["eval_row_s"] * rows + consts["grad_row_s"] * float(cost.grad_rows(sizes).sum())
            print(f"  evaluation of these {rows} rows: estimate {est_eval:.2f} s, measured {cpu:.2f} s CPU "
                  f"({wall:.2f} s wall): measured / estimate {cpu / est_eval:.2f} CPU, {wall / est_eval:.2f} wall",
                  flush=True)


if __name__ == "__main__":
    main()
