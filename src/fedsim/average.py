"""The server's weighted average of device tensors, in fedsim's own order: sum_k weights[k] stacked[k]
from zeros, device by device (k = 0, 1, ...), each product rounded to the dtype and then each sum (no
fused multiply-add, no reordering, no pairwise or blocked sum). The order is fedsim's, not a BLAS's: a
BLAS's gemm or dot (torch.tensordot) sums in whatever order its kernel for that CPU takes (MKL's on
an Intel AVX-512 core is not its order on an AMD one), so a run averaged here has the same bits on
any CPU. tests/test_engine.py holds this to a plain numpy loop in the same order, bit for bit,
signed zeros included.

methods.weighted_average sends every CPU float32/float64 average here; the rest (CUDA, other dtypes,
tensors that need autograd) take torch.tensordot, held to this order within float tolerance.

One compiled call (about 4 us warm against tensordot's 18): numba, imported only by a run (the
registry, fedsim.methods, imports this module inside weighted_average). Compiled code is cached
beside this file, as fedsim.core.kernel's.
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
    """sum_k weights[k] stacked[k, :] of stacked (devices, n), in stacked's dtype and fedsim's order."""
    out = np.zeros(stacked.shape[1], dtype=stacked.dtype)
    _weighted_sum(weights, stacked, out)
    return out
