"""Local training of a round's selected devices: the execution strategies.

Both strategies solve the same LocalProblem with the same mini-batches (one seeded
shuffle per device, round and epoch, so they agree to rounding):

- `local_sgd_batched` trains all K devices as ONE computation: their models are stacked
  along a leading device dimension and every SGD step is a few batched matmuls. Devices
  with fewer steps simply drop out of the stack: devices are ordered longest-first, so
  the ones still training are always a prefix of the stack and no masking is needed.
- `local_sgd_loop` is the plain per-device loop with autograd: the test oracle and the
  benchmark baseline, and the path for models without a closed-form batched step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .methods import LocalProblem

SHUFFLE_STREAM = 1  # keeps the shuffling seeds apart from the selection seeds


@dataclass
class Clients:
    """All devices' samples of one split, prepared for the model, on the compute device.

    Row `sentinel` (the last one) is all zeros: padded batch slots gather it and get
    weight zero, so ragged batches need no special case.
    """

    x: torch.Tensor        # (rows + 1, features)
    y: torch.Tensor        # (rows + 1,)
    offsets: np.ndarray    # (devices + 1,): device k owns rows offsets[k]:offsets[k+1]

    @classmethod
    def from_arrays(cls, x: torch.Tensor, y: torch.Tensor, offsets: np.ndarray) -> "Clients":
        x = torch.cat([x, torch.zeros(1, *x.shape[1:], dtype=x.dtype, device=x.device)])
        y = torch.cat([y, torch.zeros(1, dtype=y.dtype, device=y.device)])
        return cls(x=x, y=y, offsets=np.asarray(offsets, dtype=np.int64))

    @property
    def sentinel(self) -> int:
        return len(self.x) - 1

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def subset(self, devices) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        """The rows of `devices`, concatenated in that order, and their offsets."""
        sizes = self.sizes[devices]
        rows = np.concatenate([np.arange(self.offsets[d], self.offsets[d + 1]) for d in devices])
        index = torch.from_numpy(rows).to(self.x.device)
        return self.x[index], self.y[index], np.concatenate([[0], np.cumsum(sizes)])


@dataclass(frozen=True)
class SGDSettings:
    lr: float
    epochs: int
    batch_size: int
    seed: int


def batch_plan(size: int, settings: SGDSettings, round_: int, device: int) -> np.ndarray:
    """Local row indices of every mini-batch, (steps, batch_size), padded with -1.

    Each epoch visits the device's samples in a fresh seeded order; the last batch of an
    epoch holds the remainder (as in the reference code, which never drops samples).
    """
    rng = np.random.default_rng([settings.seed, round_, device, SHUFFLE_STREAM])
    b = settings.batch_size
    per_epoch = -(-size // b)
    plan = np.full((settings.epochs, per_epoch * b), -1, dtype=np.int64)
    for epoch in range(settings.epochs):
        plan[epoch, :size] = rng.permutation(size)
    return plan.reshape(settings.epochs * per_epoch, b)


def local_sgd_loop(model, params, problem: LocalProblem, clients: Clients, devices, settings, round_):
    """Per-device SGD with autograd: w <- w - lr (grad_batch F_k(w) + c_k + mu (w - w0))."""
    models = []
    for j, device in enumerate(devices):
        w = params.clone().requires_grad_(True)
        base = int(clients.offsets[device])
        for batch in batch_plan(int(clients.sizes[device]), settings, round_, int(device)):
            rows = torch.from_numpy(batch[batch >= 0] + base).to(clients.x.device)
            (grad,) = torch.autograd.grad(model.loss(w, clients.x[rows], clients.y[rows]), w)
            with torch.no_grad():
                if problem.correction is not None:
                    grad = grad + problem.correction[j]
                if problem.mu:
                    grad = grad + problem.mu * (w - params)
                w -= settings.lr * grad
        models.append(w.detach())
    return torch.stack(models)


def local_sgd_batched(model, params, problem: LocalProblem, clients: Clients, devices, settings, round_,
                      chunk_steps: int = 256):
    """All devices' SGD at once, for models that are one linear layer + softmax (MCLR).

    With X_w = X^T scaled by each sample's 1/batch-count (0 for padding), one step is
        W <- (1 - lr mu) W - lr X_w softmax(X W) + [lr X_w Y + lr (mu w0 - c)]
    and the bracket does not depend on W, so it is computed for a whole chunk of steps
    in one large matmul, leaving 4 small ops per step.
    """
    devices = np.asarray(devices, dtype=np.int64)
    plans = [batch_plan(int(clients.sizes[d]), settings, round_, int(d)) for d in devices]
    steps = np.array([len(p) for p in plans])
    order = np.argsort(-steps, kind="stable")  # longest first: the active devices form a prefix
    rows = _global_rows(plans, order, devices, clients)  # (steps, K, B)

    lr, mu = settings.lr, problem.mu
    stacked = params.expand(len(devices), *params.shape).clone()
    constant = None
    if mu or problem.correction is not None:
        constant = lr * mu * params
        if problem.correction is not None:
            constant = constant - lr * problem.correction[torch.from_numpy(order).to(params.device)]
        constant = constant.expand_as(stacked)

    for start, stop, active in _chunks(steps[order], chunk_steps):
        idx = torch.from_numpy(rows[start:stop, :active]).to(clients.x.device)
        x = clients.x[idx]                                          # (T, m, B, D)
        count = (idx != clients.sentinel).sum(-1, keepdim=True).clamp(min=1)
        weight = (idx != clients.sentinel).to(x.dtype) / count      # (T, m, B)
        xw_t = (x * weight.unsqueeze(-1)).transpose(-1, -2).contiguous()  # (T, m, D, B)
        onehot = F.one_hot(clients.y[idx], model.num_classes).to(x.dtype)
        bracket = lr * (xw_t @ onehot)                              # (T, m, D, C)
        if constant is not None:
            bracket += constant[:active]
        w = stacked[:active]
        for x_s, xw_t_s, bracket_s in zip(x.unbind(0), xw_t.unbind(0), bracket.unbind(0)):
            probs = torch.bmm(x_s, w).softmax(-1)
            w.baddbmm_(xw_t_s, probs, beta=1 - lr * mu, alpha=-lr)
            w.add_(bracket_s)
    return stacked[torch.from_numpy(np.argsort(order)).to(params.device)]


def _global_rows(plans, order, devices, clients: Clients) -> np.ndarray:
    """Stack the devices' batch plans (in `order`) as global row indices, padding -> sentinel."""
    rows = np.full((max(len(p) for p in plans), len(plans), plans[0].shape[1]), clients.sentinel, np.int64)
    for j, k in enumerate(order):
        plan = plans[k]
        rows[: len(plan), j] = np.where(plan >= 0, plan + clients.offsets[devices[k]], clients.sentinel)
    return rows


def _chunks(steps_desc: np.ndarray, chunk_steps: int):
    """(start, stop, active) step ranges in which the first `active` devices still train."""
    start = 0
    for active in range(len(steps_desc), 0, -1):
        end = int(steps_desc[active - 1])
        for lo in range(start, end, chunk_steps):
            yield lo, min(lo + chunk_steps, end), active
        start = max(start, end)


ENGINES = {"batched": local_sgd_batched, "loop": local_sgd_loop}
