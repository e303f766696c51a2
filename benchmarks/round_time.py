"""Time one federated round: the batched engine against the per-device loop, same process.

    python benchmarks/round_time.py [--rounds 5] [--method fedavg] [--alpha 1 --beta 1]

Default setting: Synthetic (1,1) (30 devices, seed 0), K=10, E=20, B=10, lr=0.01. Each
timed round trains the devices that round t selects, from the same initial model, with
both engines; the printout gives seconds per round for each and their ratio (loop/batched).
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

from fedsim.engine import SGDSettings, local_sgd_batched, local_sgd_loop  # noqa: E402
from fedsim.methods import LocalProblem  # noqa: E402
from fedsim.synthetic import write_synthetic  # noqa: E402
from fedsim.train import SELECTION_STREAM, _load_clients, select_devices  # noqa: E402
from fedsim.data import FederatedDataset  # noqa: E402
from fedsim.models import MCLR  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--clients-per-round", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--mu", type=float, default=0.0, help="proximal term (0: FedAvg)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "synthetic.h5"
        write_synthetic(path, name="bench", alpha=args.alpha, beta=args.beta, iid=False, seed=0)
        with FederatedDataset(path) as dataset:
            model = MCLR(60, dataset.num_classes)
            clients = _load_clients(dataset, "train", model, torch.float32, torch.device("cpu"))
    params = model.init(torch.Generator().manual_seed(0))
    settings = SGDSettings(lr=0.01, epochs=args.epochs, batch_size=args.batch_size, seed=0)
    problem = LocalProblem(mu=args.mu, correction=None)

    times = {"batched": [], "loop": []}
    for t in range(args.rounds):
        devices = select_devices(0, t, SELECTION_STREAM, args.clients_per_round, clients.sizes, "uniform")
        for name, engine in (("batched", local_sgd_batched), ("loop", local_sgd_loop)):
            start = time.perf_counter()
            engine(model, params, problem, clients, devices, settings, t)
            times[name].append(time.perf_counter() - start)
    batched, loop = statistics.mean(times["batched"]), statistics.mean(times["loop"])
    samples = int(clients.sizes.sum())
    print(f"Synthetic ({args.alpha:g},{args.beta:g}): {len(clients.sizes)} devices, {samples} training samples; "
          f"K={args.clients_per_round}, E={args.epochs}, B={args.batch_size}, {args.rounds} rounds, "
          f"{args.threads} thread(s), torch {torch.__version__}")
    print(f"batched engine    {batched:8.4f} s/round")
    print(f"per-device loop   {loop:8.4f} s/round")
    print(f"ratio loop/batched {loop / batched:7.1f}x")


if __name__ == "__main__":
    main()
