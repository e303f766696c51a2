"""The constants of the paper's convergence theorems, measured along a run (MCLR models).

Theorem 1 (convex F_k; softmax regression is convex) promises the sufficient decrease
E[f(w^t)] <= f(w^{t-1}) - rho ||grad f(w^{t-1})||^2 whenever

    rho = (2 - 3 gamma) / (2 mu) - (2 L (1 + gamma)^2 + 3 L) / (2 mu^2)
          - (B^2 - 1) ((L (1 + gamma)^2 + L) / mu^2 + gamma / mu)  >  0,

with L the gradients' Lipschitz constant, B^2 the dissimilarity at w^{t-1} (fedsim.metrics'
b_dissimilarity) and gamma how inexactly the local subproblems were solved. Measured here:

- L: the largest eigenvalue of the Hessian of f at w^{t-1}, by power iteration with
  Hessian-vector products; for softmax regression, with P = softmax(X W) and V a direction,
      H[V] = X^T (P * (X V) - P * rowsum(P * (X V))) / n,
  two matmuls over the training rows and no autograd;
- gamma: ||grad P_k(w_k)|| / ||grad P_k(w^{t-1})|| averaged over the solvers, P_k the local
  subproblem F_k(w) + <c_k, w - w^{t-1}> + mu/2 ||w - w^{t-1}||^2 and w_k its returned solution
  (a proxy for the paper's distance-based definition, which needs the exact minimiser).
"""

from __future__ import annotations

import math

import torch

POWER_ITERATIONS = 200
POWER_TOLERANCE = 1e-6  # relative change of the eigenvalue estimate at which the iteration stops


def hessian_vector(x: torch.Tensor, probabilities: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """H v for the mean softmax cross-entropy at the model whose softmax outputs on the rows x are
    `probabilities`; v and the result have the parameters' shape (features + 1, classes)."""
    z = x @ v
    pz = probabilities * z
    return x.T @ (pz - probabilities * pz.sum(1, keepdim=True)) / len(x)


def hessian_max(model, params: torch.Tensor, x: torch.Tensor, start: torch.Tensor | None = None):
    """(largest Hessian eigenvalue of the mean loss over the rows x at params, its eigenvector).
    The Hessian is positive semi-definite here, so plain power iteration finds the top of its
    spectrum; `start` (the last round's vector) makes it converge in a few steps."""
    probabilities = torch.softmax(model.logits(params, x), dim=-1)
    v = torch.ones_like(params) if start is None or not start.any() else start.clone()
    v /= v.norm()
    value = 0.0
    for _ in range(POWER_ITERATIONS):
        hv = hessian_vector(x, probabilities, v)
        new = float((v * hv).sum())  # the Rayleigh quotient: converges twice as fast as ||Hv||
        norm = hv.norm()
        if norm == 0:
            return 0.0, v
        v = hv / norm
        if abs(new - value) <= POWER_TOLERANCE * abs(new):
            return new, v
        value = new
    return value, v


def inexactness(model, w0: torch.Tensor, local_models: torch.Tensor, mu: float, correction, solver_data) -> float:
    """Mean over the solvers of ||grad P_k(w_k)|| / ||grad P_k(w0)||; `solver_data` gives each
    solver's (x, y) rows in the order of local_models, `correction` its c_k (or None)."""
    ratios = []
    for j, (x, y) in enumerate(solver_data):
        c = 0 if correction is None else correction[j]
        at_start = _grad(model, w0, x, y) + c
        at_end = _grad(model, local_models[j], x, y) + c + mu * (local_models[j] - w0)
        ratios.append(float(at_end.norm() / at_start.norm()) if at_start.norm() > 0 else math.nan)
    return sum(ratios) / len(ratios)


def _grad(model, params, x, y):
    return model.device_grads(params, x, y, torch.tensor([0, len(y)]).numpy())[0]


def rho(mu: float, gamma: float, lipschitz: float, b_squared: float) -> float:
    """Theorem 1's sufficient-decrease constant; -inf without a proximal term (mu = 0)."""
    if mu <= 0:
        return -math.inf
    g = (1 + gamma) ** 2
    return ((2 - 3 * gamma) / (2 * mu) - (2 * lipschitz * g + 3 * lipschitz) / (2 * mu ** 2)
            - (b_squared - 1) * ((lipschitz * g + lipschitz) / mu ** 2 + gamma / mu))
