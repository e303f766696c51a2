"""The theorems' constants, against hand computations: the Hessian-vector product against
autograd, the top eigenvalue against a dense eigendecomposition, gamma and rho by hand."""

import math

import numpy as np
import pytest
import torch

from fedsim.core import theory

from tiny import tiny_clients, tiny_params


def pooled():
    model, clients = tiny_clients()
    return model, clients, tiny_params(model), clients.x[:-1], clients.y[:-1]


def test_hessian_vector_product_is_autograds():
    model, _, params, x, y = pooled()
    v = torch.randn(params.shape, generator=torch.Generator().manual_seed(3), dtype=params.dtype)
    w = params.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(model.loss(w, x, y), w, create_graph=True)
    (expected,) = torch.autograd.grad((grad * v).sum(), w)
    probabilities = torch.softmax(model.logits(params, x), dim=-1)
    torch.testing.assert_close(theory.hessian_vector(x, probabilities, v), expected, rtol=1e-10, atol=1e-12)


def test_power_iteration_finds_the_largest_hessian_eigenvalue():
    model, _, params, x, y = pooled()
    hessian = torch.autograd.functional.hessian(lambda w: model.loss(w, x, y), params).reshape(params.numel(), -1)
    expected = float(torch.linalg.eigvalsh(hessian).max())
    value, vector = theory.hessian_max(model, params, x)
    assert value == pytest.approx(expected, rel=1e-3)
    again, _ = theory.hessian_max(model, params, x, start=vector)  # warm start: already there
    assert again == pytest.approx(expected, rel=1e-3)


def test_inexactness_is_zero_at_the_exact_solution_and_one_when_nothing_moved():
    model, clients, params, _, _ = pooled()
    x, y, _ = clients.subset([4])
    correction = 0.1 * torch.ones(1, *params.shape, dtype=params.dtype)

    def gamma(w):
        return theory.inexactness(params, w.unsqueeze(0), 0.5, correction, grad(params), grad(w))

    def grad(w):
        return model.device_grads(w, x, y, np.array([0, len(y)]))

    assert gamma(params) == pytest.approx(1.0)
    # the minimiser of F_k + <c_k, w - w0> + mu/2 ||w - w0||^2, by many full-batch gradient steps
    w = params.clone()
    for _ in range(3000):
        step = 0.5 * (grad(w)[0] + correction[0] + 0.5 * (w - params))
        w -= step
        if step.abs().max() < 1e-15:  # converged (after about 150 steps)
            break
    assert gamma(w) < 1e-6
    halfway = params + 0.5 * (w - params)
    assert 0.1 < gamma(halfway) < 0.9


def test_rho_by_hand():
    mu, gamma, L, b2 = 10.0, 0.1, 0.5, 2.0
    expected = (2 - 0.3) / 20 - (2 * 0.5 * 1.21 + 1.5) / 200 - 1.0 * ((0.5 * 1.21 + 0.5) / 100 + 0.01)
    assert theory.rho(mu, gamma, L, b2) == pytest.approx(expected, rel=1e-12)
    assert theory.rho(0.0, gamma, L, b2) == -math.inf
    # the paper's corollary: gamma = 0, mu = 5 L B^2 with B >> 1 gives rho about 3 / (25 L B^2)
    L, b2 = 1.0, 1e4
    assert theory.rho(5 * L * b2, 0.0, L, b2) == pytest.approx(3 / (25 * L * b2), rel=0.01)


def test_a_run_logs_the_constants_and_its_decrease_can_be_checked(tmp_path):
    """--theory adds L, gamma, ||grad f||^2 and rho to every round that trains; rho follows from
    the logged values by Theorem 1's formula; the trajectory is the run's without it."""
    from fedsim.core.train import RunConfig, run

    from tiny import tiny_dataset

    data = tiny_dataset(tmp_path / "tiny.h5", devices=8)
    common = dict(data=data, method="feddane", mu=1.0, clients_per_round=3, epochs=2, batch_size=5, lr=0.05,
                  rounds=4)
    metrics, _ = run(RunConfig(**common, theory=True))
    plain, _ = run(RunConfig(**common))
    assert metrics[plain.columns].equals(plain)
    trained = metrics.iloc[:-1]  # the last row has no round after it
    assert trained[["hessian_max", "inexactness", "grad_norm_sq"]].gt(0).all().all()
    assert metrics.iloc[-1][["hessian_max", "rho"]].isna().all()
    for _, row in trained.iterrows():
        expected = theory.rho(1.0, row["inexactness"], row["hessian_max"], row["b_dissimilarity"])
        assert row["rho"] == pytest.approx(expected)
