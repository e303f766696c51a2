"""The authors' code's own randomness and initial model, offered beside fedsim's.

fedsim keys every draw by (seed, round, device). The authors' code (litian96/FedDANE on top of
litian96/FedProx; facts in ../shared/fidelity/README.md) draws differently, and `rng: authors`
replays it:

- selection in round t: legacy NumPy seeded with t, K devices uniformly without replacement,
  in the order drawn. FedDANE draws twice with the same seed, so its solvers are its gradient
  devices (S'_t = S_t). The run's seed plays no part.
- mini-batches: every local epoch re-seeds legacy NumPy with 100 and shuffles the device's
  arrays IN PLACE. The permutation p is the same at every call, but it acts on the order the
  previous call left, so a device's c-th local epoch ever visits its rows in the order "p
  applied c times", compounding across rounds. Only local training epochs count (gradient
  and loss evaluations do not shuffle); the state is each device's count of epochs so far.
- their `--seed` changes only the TensorFlow initial model: `load_init` reads such a model
  (an .npz with `kernel` (features, classes) and `bias` (classes,)).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from .settings import check_clients_per_round

SHUFFLE_SEED = 100  # batch_data's np.random.seed(100)


def select_devices(round_: int, num_devices: int, k: int) -> np.ndarray:
    """`np.random.seed(round_); np.random.choice(N, K, replace=False)`, in the order drawn."""
    check_clients_per_round(k, num_devices)
    return np.random.RandomState(round_).choice(num_devices, k, replace=False)


@lru_cache(maxsize=1 << 12)
def _permutation(n: int) -> np.ndarray:
    """The permutation one in-place shuffle of n rows applies: a -> a[p]."""
    p = np.random.RandomState(SHUFFLE_SEED).permutation(n)
    p.flags.writeable = False  # cached and shared
    return p


def epoch_order(n: int, epochs_before: int) -> np.ndarray:
    """Row order after `epochs_before` in-place shuffles of n rows: p applied that many times
    (by squaring: every power of p commutes with every other)."""
    order, power, c = np.arange(n), _permutation(n), int(epochs_before)
    while c:
        if c & 1:
            order = order[power]
        power, c = power[power], c >> 1
    return order


def batch_plan(size: int, batch_size: int, epochs: int, epochs_before: int) -> np.ndarray:
    """Local row indices of a round's mini-batches, (steps, batch_size), padded with -1: the
    epochs after a device's first `epochs_before`, each one shuffle further, in order."""
    per_epoch = -(-size // batch_size)
    plan = np.full((epochs, per_epoch * batch_size), -1, dtype=np.int64)
    order, p = epoch_order(size, epochs_before), _permutation(size)
    for epoch in range(epochs):
        order = order[p]
        plan[epoch, :size] = order
    return plan.reshape(epochs * per_epoch, batch_size)


def load_init(path: Path, model, dtype: torch.dtype) -> torch.Tensor:
    """The initial parameters in an .npz file (MCLR: `kernel` and `bias`), as the model's tensor.
    Raises ValueError naming the file and what does not fit."""
    if not model.linear_softmax:
        raise ValueError(f"init file {path}: only MCLR models (synthetic, FEMNIST) take an initial model file")
    try:
        with np.load(path) as arrays:
            tensors = {name: arrays[name] for name in arrays.files}
    except (OSError, ValueError) as err:
        raise ValueError(f"init file {path}: not a readable .npz ({err})") from None
    return model.from_tensors(tensors, dtype, source=path)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
