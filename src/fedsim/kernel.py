"""MCLR local SGD compiled for one CPU core (numba): the CPU engine for MCLR datasets, and the
per-device losses, accuracies and gradients that evaluation and FedDANE's correction term need.

The batched torch engine spends most of a round in per-op overhead: ~17,000 small torch calls
of tens of microseconds each against ~0.1 us of arithmetic, and most of its sequential steps
have one or two devices left. Here a round is one compiled call: the devices one after another,
each SGD step a few loops over its batch. It runs the same LocalProblem (mu, correction) on the
same batch plans as every engine, so it agrees with them to rounding (tests/test_engine.py).

One step of device k, batch b (real rows only; padding slots point at the sentinel row):
    g = (1/|b|) sum_i x_i (softmax(x_i W) - onehot(y_i))^T
    W <- W - lr (g + c_k + mu (W - W0))

Compiled code is cached beside this file (numba's `cache=True`; NUMBA_CACHE_DIR moves it), so
only the first job after an install or an edit compiles (a few seconds).
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, error_model="numpy")
def _local_sgd(x, y, rows, first, steps, v0, correction, lr, mu, zero, anchor, out):  # pragma: no cover (compiled)
    # Weights transposed, V = W^T (classes, features): the logits are dot products and the gradient
    # axpys over contiguous features, which the compiler vectorises ("reassoc" lets it reorder the
    # dot products' sums: the same order on a given machine, not torch's; NaN and inf keep their
    # meaning, so a diverging run still shows as one).
    # With an `anchor` (one row per class; none: zero rows), each sample's gradient is taken minus its
    # gradient at the anchor (Mime's SVRG-style step): the one-hot terms cancel, p - q remains.
    classes, features = v0.shape
    batch, sentinel, one = rows.shape[1], x.shape[0] - 1, zero + 1
    anchored = anchor.shape[0] > 0
    p = np.empty(classes, dtype=v0.dtype)
    q = np.empty(classes, dtype=v0.dtype)
    grad = np.empty_like(v0)
    for k in range(first.shape[0]):
        v = out[k]
        v[:, :] = v0
        for step in range(steps[k]):
            grad[:, :] = zero
            count, base = 0, first[k] + step
            for b in range(batch):
                r = rows[base, b]
                if r == sentinel:  # a padding slot
                    continue
                count += 1
                xr = x[r]
                for c in range(classes):
                    acc = zero
                    vc = v[c]
                    for d in range(features):
                        acc += xr[d] * vc[d]
                    p[c] = acc
                top = p.max()
                total = zero
                for c in range(classes):
                    p[c] = math.exp(p[c] - top)
                    total += p[c]
                inverse = one / total
                for c in range(classes):
                    p[c] *= inverse
                if anchored:
                    _softmax_into(q, anchor, xr, zero)
                    for c in range(classes):
                        p[c] -= q[c]
                else:
                    p[y[r]] -= 1
                for c in range(classes):
                    pc, gc = p[c], grad[c]
                    for d in range(features):
                        gc[d] += pc * xr[d]
            scale = one / (zero + max(count, 1))
            for c in range(classes):
                for d in range(features):
                    v[c, d] -= lr * (grad[c, d] * scale + correction[k, c, d] + mu * (v[c, d] - v0[c, d]))


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, error_model="numpy", inline="always")
def _softmax_into(q, v, xr, zero):  # pragma: no cover (compiled)
    # q <- softmax(v xr), v one row per class
    classes, features = v.shape
    for c in range(classes):
        acc = zero
        vc = v[c]
        for d in range(features):
            acc += xr[d] * vc[d]
        q[c] = acc
    top = q.max()
    total = zero
    for c in range(classes):
        q[c] = math.exp(q[c] - top)
        total += q[c]
    inverse = (zero + 1) / total
    for c in range(classes):
        q[c] *= inverse


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, error_model="numpy")
def _device_stats(x, y, starts, stops, v, zero, loss, correct, grads):  # pragma: no cover (compiled)
    # Device j owns rows starts[j]:stops[j]: its summed cross-entropy (accumulated in float64), its
    # count of correct argmaxes (the first largest logit or first NaN, as torch's argmax) and, when `grads` has a
    # row per device, its summed gradient sum_i (softmax(x_i V^T) - onehot(y_i)) x_i, as V is laid out.
    classes, features = v.shape
    with_grads = grads.shape[0] > 0
    p = np.empty(classes, dtype=v.dtype)
    for j in range(starts.shape[0]):
        if with_grads:
            grads[j, :, :] = 0
        total, hits = 0.0, 0
        for r in range(starts[j], stops[j]):
            xr = x[r]
            best = 0
            for c in range(classes):
                acc = zero
                vc = v[c]
                for d in range(features):
                    acc += xr[d] * vc[d]
                p[c] = acc
                if acc > p[best] or (acc != acc and p[best] == p[best]):  # the first NaN wins, as in torch
                    best = c
            label = y[r]
            top, picked, norm = p[best], p[label], zero
            for c in range(classes):
                p[c] = math.exp(p[c] - top)
                norm += p[c]
            total += math.log(norm) + (top - picked)  # log-sum-exp minus the label's logit, as torch
            hits += best == label
            if with_grads:
                inverse = (zero + 1) / norm
                for c in range(classes):
                    p[c] *= inverse
                p[label] -= 1
                for c in range(classes):
                    pc, gc = p[c], grads[j, c]
                    for d in range(features):
                        gc[d] += pc * xr[d]
        loss[j], correct[j] = total, hits


def device_stats(x: np.ndarray, y: np.ndarray, starts: np.ndarray, stops: np.ndarray, w: np.ndarray,
                 with_grads: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Per device (rows starts[j]:stops[j] of x, as `padded` gives it) at weights w (features + 1,
    classes): the summed cross-entropy (float64), the count of correct predictions and, with
    `with_grads`, the summed loss gradient (devices, features + 1, classes), in w's dtype."""
    features, classes = w.shape
    v = np.zeros((classes, x.shape[1]), dtype=w.dtype)
    v[:, :features] = w.T
    devices = len(starts)
    loss, correct = np.empty(devices), np.empty(devices, dtype=np.int64)
    grads = np.empty((devices if with_grads else 0, classes, x.shape[1]), dtype=w.dtype)
    _device_stats(x, y, np.asarray(starts, np.int64), np.asarray(stops, np.int64), v, w.dtype.type(0), loss, correct,
                  grads)
    return loss, correct, (grads[:, :, :features].transpose(0, 2, 1) if with_grads else None)


def warm_up() -> None:
    """Compile (or load from the cache) the float32 and float64 versions now: a process that forks
    jobs (fedsim.warm) then hands them compiled code."""
    for dtype in (np.float32, np.float64):
        x = padded(np.zeros((3, 2), dtype))
        local_sgd(x, np.zeros(3, np.int64), np.array([[0, 2]]), np.array([0]), np.array([1]), np.zeros((2, 2), dtype),
                  None, 0.1, 0.0)
        device_stats(x, np.zeros(3, np.int64), np.array([0]), np.array([2]), np.zeros((2, 2), dtype))


LANES = 16  # feature rows padded to a multiple of this: whole vectors, no remainder loop (1.4x)


def padded(x: np.ndarray) -> np.ndarray:
    """x with zero columns appended up to a multiple of LANES (what local_sgd wants as x)."""
    width = -(-x.shape[1] // LANES) * LANES
    out = np.zeros((x.shape[0], width), dtype=x.dtype)
    out[:, :x.shape[1]] = x
    return out


def local_sgd(x: np.ndarray, y: np.ndarray, rows: np.ndarray, first: np.ndarray, steps: np.ndarray,
              w0: np.ndarray, correction: np.ndarray | None, lr: float, mu: float,
              anchor: np.ndarray | None = None) -> np.ndarray:
    """Local models (devices, features + 1, classes) of the devices whose steps are rows[first[k]:
    first[k] + steps[k]] (rows of x, as `padded` gives it; its last row is the zero sentinel); with an
    `anchor` model, each step's batch gradient minus the same batch's gradient there."""
    dtype, (features, classes) = w0.dtype.type, w0.shape
    v0 = np.zeros((classes, x.shape[1]), dtype=w0.dtype)  # zero weights on the padding columns
    v0[:, :features] = w0.T
    out = np.empty((len(first), *v0.shape), dtype=w0.dtype)
    pad = np.zeros_like(out)
    if correction is not None:
        pad[:, :, :features] = correction.transpose(0, 2, 1)
    at = np.zeros((0 if anchor is None else classes, x.shape[1]), dtype=w0.dtype)
    if anchor is not None:
        at[:, :features] = anchor.T
    _local_sgd(x, y, rows, first.astype(np.int64), steps.astype(np.int64), v0, pad, dtype(lr), dtype(mu),
               dtype(0), at, out)
    return out[:, :, :features].transpose(0, 2, 1)
