"""One federated training run: a pure function of (RunConfig, dataset file, seed).

Protocol (the reference code's, with the paper's text as options):
- selection `uniform`: K devices uniformly without replacement, models averaged with
  weights n_k (reference code); `weighted`: K draws with replacement with probability
  p_k = n_k / n, plain mean (the paper's text);
- the selection of round t depends only on (seed, t), so every method sees the same
  devices in the same round (a paired comparison, as the reference's re-seeding gives);
- FedDANE's solving subset S'_t is drawn independently of S_t (`second_subset:
  independent`, Algorithm 2 of the paper) or equals it (`same`, the reference code);
- metrics row t describes the global model after t rounds (row 0: the initial model);
- a non-finite training loss ends the run at that round: the run is recorded as
  diverged there, with every metric so far.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from . import __version__
from .atomic import write_csv, write_json
from .data import FederatedDataset
from .engine import ENGINES, Clients, SGDSettings
from .methods import RoundContext, get_method
from .metrics import COLUMNS, evaluate
from .models import MCLR

SELECTION_STREAM, SECOND_SUBSET_STREAM, INIT_STREAM = 10, 11, 12
DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class RunConfig:
    data: str
    method: str
    mu: float = 0.0
    clients_per_round: int = 10
    epochs: int = 20
    batch_size: int = 10
    lr: float = 0.01
    rounds: int = 200
    seed: int = 0
    selection: str = "uniform"
    second_subset: str = "independent"
    engine: str = "batched"
    device: str = "cpu"
    threads: int = 1
    dtype: str = "float32"

    def validate(self) -> None:
        """Raise ValueError naming the first bad field, before any expensive work."""
        get_method(self.method)
        checks = {
            "mu": self.mu >= 0 and math.isfinite(self.mu),
            "clients_per_round": self.clients_per_round >= 1,
            "epochs": self.epochs >= 1,
            "batch_size": self.batch_size >= 1,
            "lr": self.lr > 0 and math.isfinite(self.lr),
            "rounds": self.rounds >= 0,
            "threads": self.threads >= 1,
            "selection": self.selection in ("uniform", "weighted"),
            "second_subset": self.second_subset in ("independent", "same"),
            "engine": self.engine in ENGINES,
            "device": self.device in ("cpu", "cuda", "auto"),
            "dtype": self.dtype in DTYPES,
        }
        for field, ok in checks.items():
            if not ok:
                raise ValueError(f"bad run setting {field}={getattr(self, field)!r}")
        if self.method == "fedavg" and self.mu != 0:
            raise ValueError(f"bad run setting mu={self.mu!r}: fedavg has no proximal term")
        if not Path(self.data).is_file():
            raise ValueError(f"dataset file not found: {self.data}")


def select_devices(seed: int, round_: int, stream: int, k: int, sizes: np.ndarray, selection: str) -> np.ndarray:
    rng = np.random.default_rng([seed, round_, stream])
    n = len(sizes)
    if selection == "weighted":
        return rng.choice(n, size=k, replace=True, p=sizes / sizes.sum())
    if k > n:
        raise ValueError(f"clients_per_round={k} exceeds the {n} devices of the dataset")
    return np.sort(rng.choice(n, size=k, replace=False))


def _compute_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def _load_clients(dataset: FederatedDataset, split: str, model, dtype, device) -> Clients:
    part = dataset.load(split)
    x = model.prepare_inputs(torch.as_tensor(part.x, dtype=dtype))
    y = torch.as_tensor(part.y, dtype=torch.int64)
    return Clients.from_arrays(x.to(device), y.to(device), part.offsets)


def run(config: RunConfig) -> tuple[pd.DataFrame, dict]:
    """Train; return the per-round metrics and the run's record (config, result, provenance)."""
    config.validate()
    torch.set_num_threads(config.threads)
    started = time.perf_counter()
    device, dtype = _compute_device(config.device), DTYPES[config.dtype]
    method, local_sgd = get_method(config.method), ENGINES[config.engine]

    with FederatedDataset(config.data) as dataset:
        model = MCLR(int(np.prod(dataset.feature_shape)), dataset.num_classes)
        train = _load_clients(dataset, "train", model, dtype, device)
        test = _load_clients(dataset, "test", model, dtype, device)
        dataset_record = {"name": dataset.name, "kind": dataset.kind, "devices": dataset.num_devices,
                          "provenance": dataset.attrs.get("provenance")}
    sizes = train.sizes
    if config.selection == "uniform" and config.clients_per_round > len(sizes):
        raise ValueError(f"clients_per_round={config.clients_per_round} exceeds the {len(sizes)} devices")
    settings = SGDSettings(config.lr, config.epochs, config.batch_size, config.seed)

    def weights(devices: np.ndarray) -> torch.Tensor:
        if config.selection == "weighted":
            return torch.full((len(devices),), 1.0 / len(devices), dtype=dtype, device=device)
        n = torch.as_tensor(sizes[devices], dtype=dtype, device=device)
        return n / n.sum()

    def device_grads_at(params):
        def grads(devices: np.ndarray) -> torch.Tensor:
            x, y, offsets = train.subset(devices)
            return model.device_grads(params, x, y, offsets)
        return grads

    init_seed = int(np.random.SeedSequence([config.seed, INIT_STREAM]).generate_state(1)[0])
    params = model.init(torch.Generator().manual_seed(init_seed), dtype)
    params = params.to(device)
    rows, diverged_round = [], None
    for t in range(config.rounds + 1):
        rows.append({"round": t, "communication_rounds": t * method.COMMUNICATION_ROUNDS,
                     **evaluate(model, params, train, test)})
        if not (math.isfinite(rows[-1]["train_loss"]) and bool(torch.isfinite(params).all())):
            diverged_round = t
            break
        if t == config.rounds:
            break
        gradient_devices = select_devices(config.seed, t, SELECTION_STREAM, config.clients_per_round,
                                          sizes, config.selection)
        solvers = gradient_devices
        if config.method == "feddane" and config.second_subset == "independent":
            solvers = select_devices(config.seed, t, SECOND_SUBSET_STREAM, config.clients_per_round,
                                     sizes, config.selection)
        ctx = RoundContext(round=t, params=params, solvers=solvers, gradient_devices=gradient_devices,
                           device_grads=device_grads_at(params), weights=weights)
        problem = method.local_problem(ctx, config.mu)
        local_models = local_sgd(model, params, problem, train, solvers, settings, t)
        params = method.server_update(ctx, local_models)

    metrics = pd.DataFrame(rows, columns=["round", "communication_rounds", *COLUMNS])
    last = metrics.iloc[-1]
    record = {
        "config": dataclasses.asdict(config),
        "dataset": dataset_record,
        "fedsim_version": __version__,
        "torch_version": torch.__version__,
        "result": {
            "rounds_completed": int(last["round"]),
            "final_train_loss": float(last["train_loss"]),
            "final_train_acc": float(last["train_acc"]),
            "final_test_acc": float(last["test_acc"]),
            "diverged_round": diverged_round,
            "wall_seconds": round(time.perf_counter() - started, 3),
        },
    }
    return metrics, record


def write_run(metrics: pd.DataFrame, record: dict, metrics_path, info_path) -> None:
    """Metrics first, the record last: a run.json present means the run is complete."""
    write_csv(metrics_path, metrics)
    write_json(info_path, {**record, "metrics_file": Path(metrics_path).name})


def read_run(info_path) -> tuple[pd.DataFrame, dict]:
    info_path = Path(info_path)
    record = json.loads(info_path.read_text())
    return pd.read_csv(info_path.parent / record["metrics_file"]), record
