"""The server's weighted average of device tensors on the CPU, compiled: sum_k weights[k] stacked[k]
from zeros, device by device, each product rounded and then each sum (no fused multiply-add, no
reordering). That is the order MKL's sgemm/dgemm takes for torch.tensordot(weights, stacked, dims=1)
(one row of weights): the same bits, float32 and float64, every device count (1-1000) and model width
(2-48,670) tried, signed zeros included (tests/test_engine.py), and the same whatever BLAS torch links.

One compiled call (about 4 us warm against tensordot's 18): numba, imported only by a run (the
registry, fedsim.methods, imports this module inside weighted_average). Compiled code is cached
beside this file, as fedsim.kernel's.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, error_model="numpy")  # no fastmath: the order and roundings as written
def _weighted_sum(weights, stacked, out):  # pragma: no cover (compiled)
    for k in range(stacked.shape[0]):
        for i in range(stacked.shape[1]):
            out[i] += weights[k] * stacked[k, i]


def weighted_sum(weights: np.ndarray, stacked: np.ndarray) -> np.ndarray:
    """sum_k weights[k] stacked[k, :] of stacked (devices, n), in stacked's dtype."""
    out = np.zeros(stacked.shape[1], dtype=stacked.dtype)
    _weighted_sum(weights, stacked, out)
    return out
