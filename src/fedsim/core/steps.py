"""A device's sequential local SGD steps in a round: E epochs of ceil(n_k / B) mini-batches.

One definition for the run and for its plan: the engine's batch plans have this many rows
(fedsim.core.engine.local_steps) and the cost model counts them (fedsim.planning.cost). Here, importing nothing
of fedsim and no torch, because each of the two must not import the other: the cost model is
read at every snakemake call without torch, and a training job's code fingerprint
(fedsim.planning.jobs.package_code) would otherwise grow by the cost model and the runs table.
"""

from __future__ import annotations

import numpy as np


def local_steps(sizes, epochs: int, batch_size: int) -> np.ndarray:
    """E x ceil(n_k / B) for devices of `sizes` samples (int64; a scalar size gives an int64 scalar)."""
    return int(epochs) * -(-np.asarray(sizes, dtype=np.int64) // int(batch_size))
