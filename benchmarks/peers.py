"""Time fedsim's round against the loop a researcher writes by hand and, when installed, Flower's
simulation: same process, same data, same settings.

    python benchmarks/peers.py [--rounds 5] [--repeats 3] [--flwr-rounds 5]

Setting: Synthetic (1,1) (30 devices, seed 0, generated as benchmarks/round_time.py does), FedAvg,
K=10, E=20, B=10, lr=0.01, float32, one thread; training only (no evaluation). Each round t
trains the K devices fedsim's selection draws for t, from the same initial model; every
engine's time is the best of --repeats (the engines take turns within each repeat, fedsim's
timed call right after an untimed one), averaged over the rounds.

- fedsim: what a run does between two evaluations, with the engine a run picks (`auto`: the
  compiled kernel for MCLR on the CPU): local problem, local SGD, server update.
- by hand: the loop of a tutorial: a torch `nn.Linear` model (bias included, i.e. the same
  MCLR), a `DataLoader(TensorDataset(x_k, y_k), batch_size=10, shuffle=True)` per client, a
  model copy per client (copy.deepcopy), `torch.optim.SGD` with `zero_grad`, cross-entropy,
  `backward` and `optimizer.step()`, then FedAvg's n_k-weighted average of the state dicts.
  Sanity check: it counts its SGD steps, printed beside fedsim's (sum over the round's devices
  of E ceil(n_k/B)): the same work, shuffled by a different generator.
- Flower: `flwr.simulation.start_simulation` (its Ray backend) with a NumPyClient doing the
  same hand-written local training and Flower's FedAvg strategy sampling K of the 30 clients
  per round, --flwr-rounds rounds (at least 2): the clock runs in the driver from the first
  round's aggregation to the last one's, so the first round (Ray's start-up, its workers'
  imports) is left out. Ray runs the clients side by side, one per core (`num_cpus: 1`), where
  fedsim and the loop by hand use one core. Only when `flwr` imports; otherwise one line says how to install it
  (`pip install 'flwr[simulation]'`; it is not a dependency of fedsim). Written against flwr
  1.x's legacy API (`start_simulation`; run with flwr 1.42.0 and ray 2.55.1 on 2026-11-25); if
  it fails, the error is printed in one line.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from fedsim.data.format import FederatedDataset  # noqa: E402
from fedsim.core.engine import SGDSettings, local_sgd_auto, local_steps  # noqa: E402
from fedsim.methods import RoundContext, get_method  # noqa: E402
from fedsim.data.synthetic import write_synthetic  # noqa: E402
from fedsim.core.train import RunConfig, round_devices, run_data, server_weights  # noqa: E402
from round_time import best_of  # noqa: E402  (benchmarks/ is the script's folder: on sys.path)


def linear_from(params: torch.Tensor) -> nn.Linear:
    """fedsim's MCLR parameters (features + 1, classes), bias last, as an nn.Linear."""
    model = nn.Linear(params.shape[0] - 1, params.shape[1])
    with torch.no_grad():
        model.weight.copy_(params[:-1].T)
        model.bias.copy_(params[-1])
    return model


def local_train(global_model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, batch_size: int,
                lr: float) -> tuple[dict, int]:
    """One client's training as a tutorial writes it; (its state dict, SGD steps taken)."""
    model = copy.deepcopy(global_model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True)
    steps = 0
    model.train()
    for _ in range(epochs):
        for xb, yb in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            optimizer.step()
            steps += 1
    return model.state_dict(), steps


def fedavg(states: list[dict], sizes: list[int]) -> dict:
    total = sum(sizes)
    return {name: sum(state[name] * (n / total) for state, n in zip(states, sizes)) for name in states[0]}


def by_hand_round(global_model: nn.Module, client_data: list, devices, epochs: int, batch_size: int, lr: float,
                  counted: list) -> nn.Module:
    states, sizes, steps = [], [], 0
    for d in devices:
        x, y = client_data[d]
        state, s = local_train(global_model, x, y, epochs, batch_size, lr)
        states.append(state)
        sizes.append(len(y))
        steps += s
    counted.append(steps)
    model = copy.deepcopy(global_model)
    model.load_state_dict(fedavg(states, sizes))
    return model


def flower(client_data: list, params: torch.Tensor, clients_per_round: int, rounds: int, epochs: int,
           batch_size: int, lr: float) -> str:
    """Seconds per round of Flower's simulation, as a printed line (or why there is none)."""
    try:
        import flwr  # noqa: F401
    except ImportError:
        return "flwr not installed: pip install 'flwr[simulation]' to time it"
    try:
        from flwr.client import NumPyClient
        from flwr.common import ndarrays_to_parameters
        from flwr.server import ServerConfig
        from flwr.server.strategy import FedAvg
        from flwr.simulation import start_simulation

        template = linear_from(params)
        stamps = []

        class Client(NumPyClient):
            def __init__(self, cid: int):
                self.x, self.y = client_data[cid]

            def fit(self, parameters, config):
                model = copy.deepcopy(template)
                model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in
                                       zip(model.state_dict(), parameters)})
                state, _ = local_train(model, self.x, self.y, epochs, batch_size, lr)
                return [v.numpy() for v in state.values()], len(self.y), {}

        class Timed(FedAvg):
            def aggregate_fit(self, server_round, results, failures):
                out = super().aggregate_fit(server_round, results, failures)
                stamps.append(time.perf_counter())
                return out

        def client_fn(context):  # flwr >= 1.9 passes a Context, older versions the client id
            cid = context if isinstance(context, str) else context.node_config["partition-id"]
            return Client(int(cid)).to_client()

        n = len(client_data)
        strategy = Timed(fraction_fit=clients_per_round / n, min_fit_clients=clients_per_round,
                         min_available_clients=n, fraction_evaluate=0.0, min_evaluate_clients=0,
                         initial_parameters=ndarrays_to_parameters(
                             [v.detach().numpy() for v in template.state_dict().values()]))
        start_simulation(client_fn=client_fn, num_clients=n, config=ServerConfig(num_rounds=rounds),
                         strategy=strategy, client_resources={"num_cpus": 1})
        # Clients fit in Ray's worker processes: the clock is the driver's, from one aggregation to
        # the next (a whole round: sampling, K fits, the average), the first round left out (start-up).
        per_round = (stamps[-1] - stamps[0]) / (rounds - 1)
        return (f"Flower simulation   {per_round:8.4f} s/round   (rounds 2-{rounds}; Ray start-up excluded; clients "
                f"run side by side on up to {os.cpu_count()} cores, fedsim and the loop on 1)")
    except Exception as error:  # an API that moved: say so in one line, keep the other figures
        return f"Flower simulation failed (flwr {getattr(flwr, '__version__', '?')}): " \
               f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--flwr-rounds", type=int, default=5)
    args = parser.parse_args()
    if args.flwr_rounds < 2:
        parser.error("--flwr-rounds must be at least 2 (the first round is left out of the timing)")
    torch.set_num_threads(1)
    epochs, batch_size, lr, k = 20, 10, 0.01, 10

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "synthetic.h5"
        write_synthetic(path, name="bench", alpha=1.0, beta=1.0, iid=False, seed=0)
        config = RunConfig(data=str(path), method="fedavg", clients_per_round=k, epochs=epochs, batch_size=batch_size,
                           lr=lr, load="memory", device="cpu")
        with FederatedDataset(path) as dataset:
            data = run_data(config, dataset)
    model, train = data.model, data.eval_train
    method, sizes = get_method("fedavg"), train.sizes
    params = model.init(torch.Generator().manual_seed(0))
    settings = SGDSettings(lr=lr, epochs=epochs, batch_size=batch_size, seed=0)
    # the hand-written loop's data: each client's own tensors, features without fedsim's bias column
    client_data = [(train.x[a:b, :-1].clone(), train.y[a:b].clone()) for a, b in zip(train.offsets, train.offsets[1:])]

    def weights(devices):
        return server_weights(sizes, devices, config.selection, params.dtype)

    def fedsim_round(ctx):
        state = method.init(params, len(sizes))
        problem = method.local_problem(ctx, state)
        return method.server_update(ctx, state, local_sgd_auto(model, params, problem, train, ctx.solvers, settings,
                                                                ctx.round))[0]

    global_model = linear_from(params)
    times = {"fedsim": [], "by hand": []}
    steps_fedsim, steps_hand = [], []
    for t in range(args.rounds):
        _, solvers = round_devices(config, method.gradients, t, sizes)
        ctx = RoundContext(round=t, params=params, solvers=solvers, gradient_devices=solvers, device_grads=None,
                           weights=weights, model=model, lr=lr, sizes=sizes,
                           local_steps=lambda devices: local_steps(sizes[devices], settings))
        if t == 0:
            fedsim_round(ctx)  # compile the kernel (or load its cache) before timing
        steps_fedsim.append(int(local_steps(sizes[solvers], settings).sum()))
        counted = []
        best = best_of(args.repeats, {
            "fedsim": lambda: fedsim_round(ctx),
            "by hand": lambda: by_hand_round(global_model, client_data, solvers, epochs, batch_size, lr, counted)},
            cold=("by hand",))
        assert len(set(counted)) == 1
        steps_hand.append(counted[0])
        for name, value in best.items():
            times[name].append(value)
    mean = {name: statistics.mean(values) for name, values in times.items()}

    print(f"Synthetic (1,1): {len(sizes)} devices, {int(sizes.sum())} training samples; FedAvg K={k}, E={epochs}, "
          f"B={batch_size}, lr={lr:g}; {args.rounds} rounds, best of {args.repeats}; training only; cpu, 1 thread, "
          f"torch {torch.__version__}")
    print(f"SGD steps per round   fedsim {statistics.mean(steps_fedsim):.0f}, by hand {statistics.mean(steps_hand):.0f}"
          f"   ({'the same work' if steps_fedsim == steps_hand else 'DIFFERENT WORK: check the settings'})")
    print(f"fedsim (kernel)     {mean['fedsim']:8.4f} s/round")
    print(f"by hand (torch)     {mean['by hand']:8.4f} s/round   = {mean['by hand'] / mean['fedsim']:.1f}x fedsim")
    line = flower(client_data, params, k, args.flwr_rounds, epochs, batch_size, lr)
    print(line)
    if line.startswith("Flower simulation ") and "s/round" in line:
        per_round = float(line.split()[2])
        print(f"Flower / fedsim     {per_round / mean['fedsim']:8.1f}x")


if __name__ == "__main__":
    main()
