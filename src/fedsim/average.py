"""The server's weighted average of device tensors, in fedsim's own order: sum_k weights[k] stacked[k]
from zeros, device by device (k = 0, 1, ...), each product rounded to the dtype and then each sum (no
fused multiply-add, no reordering, no pairwise or blocked sum). The order is fedsim's, not a BLAS's: a
BLAS's gemm or dot (torch.tensordot) sums in whatever order its kernel for that CPU takes (MKL's on
an Intel AVX-512 core is not its order on an AMD one), so a run averaged here has the same bits on
any CPU. tests/test_engine.py holds this to a plain numpy loop in the same order, bit for bit,
signed zeros included.

weighted_average, the methods' average (fedsim.methods.weighted_average hands every call here),
sends every CPU float32/float64 average to that compiled sum; the rest (CUDA, other dtypes, tensors
that need autograd) take torch.tensordot, held to this order within float tolerance.

One compiled call (its cost against tensordot's: docs/performance.md): numba, imported only by a run (the
registry, fedsim.methods, imports this module inside its weighted_average: it loads neither numba
nor torch). Compiled code is cached beside this file, as fedsim.core.kernel's.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numba
import numpy as np

if TYPE_CHECKING:
    import torch


@numba.njit(cache=True, nogil=True, error_model="numpy")  # no fastmath: the order and roundings as written
def _weighted_sum(weights, stacked, out):  # pragma: no cover (compiled)
    for k in range(stacked.shape[0]):
        for i in range(stacked.shape[1]):
            out[i] += weights[k] * stacked[k, i]


def weighted_sum(weights: np.ndarray, stacked: np.ndarray) -> np.ndarray:
    """sum_k weights[k] stacked[k, :] of stacked (devices, n), in stacked's dtype and fedsim's order."""
    out = np.zeros(stacked.shape[1], dtype=stacked.dtype)
    _weighted_sum(weights, stacked, out)
    return out


def weighted_average(stacked: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_k weights[k] * stacked[k] over the leading device dimension, in fedsim's order
    (weighted_sum) for every float32 and float64 tensor on the CPU, a model of one element and
    per-device scalars included: the same bits on any CPU and BLAS. CUDA, other dtypes (no run's)
    and tensors autograd tracks take torch.tensordot, whose order is its library's: equal to
    fedsim's within float tolerance, not in bits (tests/test_engine.py, tests/test_cuda.py)."""
    import torch  # here, not at the top: fedsim.core.kernel imports this module for weighted_sum alone

    if weights.dtype != stacked.dtype:  # a no-op .to() still costs a dispatch, and rounds are short
        weights = weights.to(stacked.dtype)
    if stacked.device.type == "cpu" and stacked.dtype in (torch.float32, torch.float64) and \
            not (stacked.requires_grad or weights.requires_grad):  # .numpy() refuses a tensor autograd tracks
        shape = stacked.shape  # numpy views and one compiled call, no torch op
        flat = np.ascontiguousarray(stacked.numpy().reshape(shape[0], math.prod(shape[1:])))  # prod: 0 devices too
        return torch.from_numpy(weighted_sum(weights.numpy(), flat).reshape(shape[1:]))
    return torch.tensordot(weights, stacked, dims=1)
