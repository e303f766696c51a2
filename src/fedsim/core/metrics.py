"""Per-round metrics of a global model, as the reference code logs them.

- train_loss / train_acc: over ALL devices' training samples, i.e. the n_k-weighted mean
  of the local losses (the objective f(w) = sum_k p_k F_k(w));
- test_loss / test_acc: over all devices' test samples;
- grad_dissimilarity: FedProx's diagnostic, the plain mean over devices of
  ||grad F_k(w) - grad f(w)||^2;
- b_dissimilarity: B(w)^2 = sum_k p_k ||grad F_k(w)||^2 / ||grad f(w)||^2, the quantity of
  the paper's Theorems 1-3.

For the LSTM models the local gradients are the reference's approximation (at most 4 batches of
50 samples per device, fedsim.models._lstm); every model's losses are computed in chunks of rows.
For MCLR on the CPU (the kernel accelerator) one compiled call gives all six
(fedsim.core.kernel.evaluation, the dissimilarities summed in float64; equal to the torch ops to
rounding, tests/test_engine.py).
"""

from __future__ import annotations

import math

import torch

from .engine import Clients, accelerator_for

DISSIMILARITIES = ["grad_dissimilarity", "b_dissimilarity"]
COLUMNS = ["train_loss", "train_acc", "test_loss", "test_acc", *DISSIMILARITIES]


def evaluate(model, params: torch.Tensor, train: Clients, test: Clients, dissimilarity: bool = True) -> dict[str, float]:
    """The metrics of `params`; without `dissimilarity`, the two dissimilarities are NaN and, off the
    compiled pass, not computed (they need every evaluated device's full gradient)."""
    accelerator = accelerator_for(model, params.device.type)
    if accelerator is not None:  # MCLR on the CPU: all of it one compiled call
        values = dict(zip(COLUMNS, accelerator.evaluation(params, train, test)))
        return values if dissimilarity else {**values, **dict.fromkeys(DISSIMILARITIES, math.nan)}
    (train_loss, train_acc), (test_loss, test_acc) = (model.stats(params, split.x[:-1], split.y[:-1])
                                                      for split in (train, test))  # [:-1]: not the padding row
    values = {"train_loss": train_loss, "train_acc": train_acc, "test_loss": test_loss, "test_acc": test_acc}
    if not dissimilarity:
        return {**values, **dict.fromkeys(DISSIMILARITIES, math.nan)}
    grads = model.device_grads(params, train.x[:-1], train.y[:-1], train.offsets).flatten(1)
    p = torch.from_numpy(train.sizes / train.sizes.sum()).to(grads)
    return {**values, **_dissimilarities(grads, p)}


def _dissimilarities(grads, p) -> dict[str, float]:
    """The two dissimilarities of local gradients grads (devices, weights) with weights p (devices,)
    (the torch path; fedsim.core.kernel.evaluation computes the same for MCLR on the CPU)."""
    global_grad = p @ grads
    global_sq = float((global_grad ** 2).sum())
    return {"grad_dissimilarity": float(((grads - global_grad) ** 2).sum(1).mean()),
            "b_dissimilarity": float(p @ (grads ** 2).sum(1)) / global_sq if global_sq > 0 else float("nan")}
