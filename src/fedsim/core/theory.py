"""The constants of the paper's convergence theorems, measured along a run (MCLR models).

Theorem 1 (convex F_k; softmax regression is convex) promises the sufficient decrease
E[f(w^t)] <= f(w^{t-1}) - rho ||grad f(w^{t-1})||^2 whenever

    rho = (2 - 3 gamma) / (2 mu) - (2 L (1 + gamma)^2 + 3 L) / (2 mu^2)
          - (B^2 - 1) ((L (1 + gamma)^2 + L) / mu^2 + gamma / mu)  >  0,

with L the gradients' Lipschitz constant, B^2 the dissimilarity at w^{t-1} (fedsim.core.metrics'
b_dissimilarity) and gamma how inexactly the local subproblems were solved. Measured here:

- L: the largest eigenvalue of the Hessian of f at w^{t-1}, by power iteration with
  Hessian-vector products; for softmax regression, with P = softmax(X W) and V a direction,
      H[V] = X^T (P * (X V) - P * rowsum(P * (X V))) / n,
  two matmuls over the training rows and no autograd;
- gamma: ||grad P_k(w_k)|| / ||grad P_k(w^{t-1})|| averaged over the solvers, P_k the local
  subproblem F_k(w) + <c_k, w - w^{t-1}> + mu/2 ||w - w^{t-1}||^2 and w_k its returned solution
  (a proxy for the paper's distance-based definition, which needs the exact minimiser).

`measure_theory` takes these measurements for one round of a run (`theory: true`: the columns
THEORY_COLUMNS of metrics.csv); the round loop (fedsim.core.train) only calls it. It lives here, not in
a module of its own, because this module is no lighter without it: the Hessian products above are
torch already, and the measurement adds only the engine's per-device gradients (fedsim.core.engine).
"""

from __future__ import annotations

import math

import torch

from .engine import Clients, all_device_grads, device_grads

POWER_ITERATIONS = 200
POWER_TOLERANCE = 1e-6  # relative change of the eigenvalue estimate at which the iteration stops


def hessian_vector(x: torch.Tensor, probabilities: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """H v for the mean softmax cross-entropy at the model whose softmax outputs on the rows x are
    `probabilities`; v and the result have the parameters' shape (features + 1, classes)."""
    return _hessian_vector_t(x, probabilities.mT.contiguous(), v)


def _hessian_vector_t(x: torch.Tensor, probabilities_t: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # Class-major (classes, rows) throughout: both products with the long side last, (V^T X^T) and
    # R^T X, and the elementwise ops on contiguous rows: faster than X V, X^T R on a few thousand
    # rows with MKL (as MCLR.logits).
    pz = probabilities_t * (v.mT @ x.mT)
    return (pz - probabilities_t * pz.sum(0)).matmul(x).mT / len(x)


def hessian_max(model, params: torch.Tensor, x: torch.Tensor, start: torch.Tensor | None = None):
    """(largest Hessian eigenvalue of the mean loss over the rows x at params, its eigenvector).
    The Hessian is positive semi-definite here, so plain power iteration finds the top of its
    spectrum; `start` (the last round's vector) makes it converge in a few steps."""
    probabilities_t = torch.softmax(model.logits(params, x), dim=-1).mT.contiguous()
    v = torch.ones_like(params) if start is None or not start.any() else start.clone()
    v /= v.norm()
    value = 0.0
    for _ in range(POWER_ITERATIONS):
        hv = _hessian_vector_t(x, probabilities_t, v)
        new = float((v * hv).sum())  # the Rayleigh quotient: converges twice as fast as ||Hv||
        norm = hv.norm()
        if norm == 0:
            return 0.0, v
        v = hv / norm
        if abs(new - value) <= POWER_TOLERANCE * abs(new):
            return new, v
        value = new
    return value, v


class LocalHessians:
    """Some devices' local Hessians at one model (MCLR): their products with one vector each, and
    their top eigenvalues. `count(samples)` is told the per-sample products each call computes."""

    def __init__(self, model, params: torch.Tensor, rows: list[torch.Tensor], count=lambda samples: None):
        self.model, self.params, self.rows, self.count = model, params, rows, count
        self.probabilities_t = [torch.softmax(model.logits(params, x), dim=-1).mT.contiguous() for x in rows]

    def product(self, vectors: torch.Tensor) -> torch.Tensor:
        """H_k V_k for each device k, vectors (devices, *params.shape)."""
        self.count(sum(len(x) for x in self.rows))
        return torch.stack([_hessian_vector_t(x, p, v) for x, p, v in zip(self.rows, self.probabilities_t, vectors)])

    def largest(self) -> list[float]:
        """Each device's top Hessian eigenvalue (power iteration)."""
        return [hessian_max(self.model, self.params, x)[0] for x in self.rows]


def inexactness(w0: torch.Tensor, local_models: torch.Tensor, mu: float, correction, grads_at_start: torch.Tensor,
                grads_at_end: torch.Tensor) -> float:
    """Mean over the solvers of ||grad P_k(w_k)|| / ||grad P_k(w0)||, from each solver's local
    gradient grad F_k at w0 and at its solution w_k (rows in the order of local_models) and its
    c_k (`correction`, or None)."""
    c = 0 if correction is None else correction
    at_start = (grads_at_start + c).flatten(1).norm(dim=1)
    at_end = (grads_at_end + c + mu * (local_models - w0)).flatten(1).norm(dim=1)
    ratios = torch.where(at_start > 0, at_end / at_start, math.nan)
    return float(ratios.mean())


def rho(mu: float, gamma: float, lipschitz: float, b_squared: float) -> float:
    """Theorem 1's sufficient-decrease constant; -inf without a proximal term (mu = 0)."""
    if mu <= 0:
        return -math.inf
    g = (1 + gamma) ** 2
    return ((2 - 3 * gamma) / (2 * mu) - (2 * lipschitz * g + 3 * lipschitz) / (2 * mu ** 2)
            - (b_squared - 1) * ((lipschitz * g + lipschitz) / mu ** 2 + gamma / mu))


THEORY_COLUMNS = ["hessian_max", "inexactness", "grad_norm_sq", "rho"]


def measure_theory(model, params, problem, local_models, train: Clients, solvers, eval_train: Clients, row: dict,
                   start: torch.Tensor) -> tuple[dict, torch.Tensor]:
    """Theorem 1's constants for the round that starts at `params` (metrics row `row`): L, gamma,
    ||grad f||^2 and rho; and the Hessian's top eigenvector, where the next round's power iteration
    starts (run state, checkpointed: the start moves L within the iteration's tolerance, and a
    resumed run must end bit-identical)."""
    # contiguous: x may be a view of padded rows (fedsim.core.loading.InputBuffer), and MKL's float64 products
    # round differently with the row stride (measured): the theorems' constants stay as they were
    lipschitz, vector = hessian_max(model, params, eval_train.x[:-1].contiguous(), start)
    at_end = torch.cat([device_grads(model, w, train, [k]) for w, k in zip(local_models, solvers)])
    gamma = inexactness(params, local_models, problem.mu, problem.correction,
                        device_grads(model, params, train, solvers), at_end)
    sizes = eval_train.sizes
    grads = all_device_grads(model, params, eval_train).flatten(1)
    grad_f = torch.from_numpy(sizes / sizes.sum()).to(grads) @ grads
    constants = {"hessian_max": lipschitz, "inexactness": gamma, "grad_norm_sq": float(grad_f.square().sum()),
                 "rho": rho(problem.mu, gamma, lipschitz, row["b_dissimilarity"])}
    return constants, vector
