"""Federated methods as small sets of pure functions.

Every method here is one choice of the local subproblem each selected device k solves
with E epochs of mini-batch SGD,

    min_w  F_k(w) + <c_k, w - w0> + mu/2 ||w - w0||^2,

plus a server rule that turns the returned local models into the next global model.
A method module provides:

    COMMUNICATION_ROUNDS   # server<->device exchanges per update round (FedDANE: 2)
    local_problem(ctx, mu) -> LocalProblem   # mu and the linear term c_k of each device
    server_update(ctx, local_models) -> params

The engine (fedsim.engine) runs the local SGD for any LocalProblem, batched or per
device; a new method is one short file, an entry in METHODS and a label in LABELS. A
method's run settings besides mu (FedDANE's `correction`) reach local_problem as keywords;
VARIANTS names a method with such a setting (feddane_authors) for the workflow and figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch


@dataclass(frozen=True)
class LocalProblem:
    """F_k(w) + <correction[k], w - w0> + mu/2 ||w - w0||^2 for each solving device k."""

    mu: float
    correction: torch.Tensor | None  # (devices, *params.shape), or None for no linear term


@dataclass
class RoundContext:
    """What the server knows in one round; methods read it, never mutate it."""

    round: int
    params: torch.Tensor                       # the global model w^{t-1}
    solvers: np.ndarray                        # devices that solve the local problem (S'_t)
    gradient_devices: np.ndarray               # devices asked for a full local gradient (S_t)
    device_grads: Callable[[np.ndarray], torch.Tensor]  # full local gradients at params
    weights: Callable[[np.ndarray], torch.Tensor]       # aggregation weights, summing to 1
    model: object = None                       # the model (its tensor layout, for methods that need it)


def weighted_average(stacked: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_k weights[k] * stacked[k] over the leading device dimension."""
    return torch.tensordot(weights.to(stacked.dtype), stacked, dims=1)


def average_models(ctx: RoundContext, local_models: torch.Tensor) -> torch.Tensor:
    """The server rule shared by FedAvg, FedProx and FedDANE."""
    return weighted_average(local_models, ctx.weights(ctx.solvers))


from . import fedavg, feddane, fedprox  # noqa: E402  (modules use the names above)

METHODS = {"fedavg": fedavg, "fedprox": fedprox, "feddane": feddane}


# The methods as the workflow and the figures name them: a method, or a method with a setting
# (FedDANE with the correction term the authors' code computed).
VARIANTS = {"feddane_authors": ("feddane", {"feddane_correction": "authors"})}
LABELS = {"fedavg": "FedAvg", "fedprox": "FedProx", "feddane": "FedDANE",
          "feddane_authors": "FedDANE, authors' code"}


def variant_of(config: dict) -> str:
    """The name of the method a run's config (run.json's `config`) ran, variants included."""
    for name, (method, settings) in VARIANTS.items():
        if config["method"] == method and all(config.get(k) == v for k, v in settings.items()):
            return name
    return config["method"]


def get_method(name: str):
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of {sorted(METHODS)}") from None
