"""FedNova against hand computations: FedAvg where every device takes the same number of steps,
the normalised average of one round with unequal steps, and the proximal normaliser."""

import numpy as np
import pytest

from fedsim.core.engine import ENGINES, SGDSettings
from fedsim.methods import fednova
from fedsim.core.metrics import COLUMNS
from fedsim.core.train import RunConfig, run

from methods_common import LR, context
from tiny import tiny_clients, tiny_params

METHOD = fednova.METHOD
SOLVERS = [4, 1, 3, 0]  # 95, 7, 23 and 1 samples


@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


def test_equal_local_steps_is_fedavg_and_unequal_ones_are_not(data):
    """batch_size >= every n_k: tau_k = E for all, a_k equal, and the normalised average is the plain one."""
    def metrics(method, batch_size):
        config = RunConfig(data=data, method=method, clients_per_round=4, epochs=3, batch_size=batch_size, lr=0.05,
                           rounds=6, dtype="float64")
        return run(config)[0][COLUMNS].to_numpy(dtype=float)

    np.testing.assert_allclose(metrics("fednova", 10_000), metrics("fedavg", 10_000), rtol=1e-12, atol=0)
    assert not np.allclose(metrics("fednova", 10), metrics("fedavg", 10), rtol=1e-6)


def one_round(mu, tau_eff, batch_size=4, epochs=2):
    """(ctx, x, local models, the server's new model) of one round on the tiny problem."""
    model, clients = tiny_clients()
    params = tiny_params(model)
    settings = SGDSettings(lr=LR, epochs=epochs, batch_size=batch_size, seed=0)
    ctx = context(model, clients, params, SOLVERS, mu=mu, options=METHOD.resolve({"tau_eff": tau_eff}),
                  settings=settings)
    problem = METHOD.local_problem(ctx, METHOD.init(params, len(clients.sizes)))
    assert problem.mu == mu and problem.correction is None and problem.center is None  # FedAvg's (FedProx's) SGD
    models = ENGINES["batched"](model, params, problem, clients, np.asarray(SOLVERS), settings, 0)
    new, _ = METHOD.server_update(ctx, {}, models)
    return ctx, params.numpy(), models.numpy(), new.numpy()


@pytest.mark.parametrize("tau_eff", ["paper", "authors"])
def test_unequal_steps_are_normalised_by_hand(tau_eff):
    """mu = 0: a_k = tau_k = E ceil(n_k / B), and both tau_eff are sum_k p_k tau_k."""
    ctx, x, w, new = one_round(0.0, tau_eff)
    tau = np.array([48, 4, 12, 2])  # 2 epochs of ceil(n_k / 4) steps
    n = ctx.sizes[SOLVERS].astype(float)
    p = n / n.sum()
    expected = x - (p @ tau) * sum(p[j] * (x - w[j]) / tau[j] for j in range(len(SOLVERS)))
    np.testing.assert_allclose(new, expected, rtol=1e-12, atol=1e-14)
    fedavg = sum(p[j] * w[j] for j in range(len(SOLVERS)))
    assert np.abs(new - fedavg).max() > 1e-3


@pytest.mark.parametrize("tau_eff", ["paper", "authors"])
def test_proximal_normaliser_by_hand(tau_eff):
    """mu > 0: step j of tau_k weighs (1 - lr mu)^(tau_k - 1 - j), a_k their sum (built here as the
    authors' code does, a <- (1 - lr mu) a + 1 each step); tau_eff = sum p_k a_k (paper) or sum p_k tau_k
    (authors)."""
    mu = 0.5
    ctx, x, w, new = one_round(mu, tau_eff)
    tau = ctx.local_steps(np.asarray(SOLVERS))
    a = np.zeros(len(tau))
    for j, steps in enumerate(tau):
        for _ in range(steps):
            a[j] = (1 - LR * mu) * a[j] + 1
    assert np.all(a < tau) and np.all(a > 0)
    n = ctx.sizes[SOLVERS].astype(float)
    p = n / n.sum()
    effective = p @ a if tau_eff == "paper" else p @ tau
    expected = x - effective * sum(p[j] * (x - w[j]) / a[j] for j in range(len(SOLVERS)))
    np.testing.assert_allclose(new, expected, rtol=1e-12, atol=1e-14)


def test_the_normaliser_of_a_linear_loss_is_exact():
    """For a constant gradient c, proximal SGD moves x - x_k = lr a_k c exactly: the closed form a_k."""
    lr, mu, c, steps = 0.1, 0.7, 1.3, np.array([1, 2, 5, 17])
    for k, tau in enumerate(steps):
        w = 0.0
        for _ in range(tau):
            w -= lr * (c + mu * w)
        np.testing.assert_allclose(-w, lr * fednova.normaliser(steps, lr, mu)[k] * c, rtol=1e-13)
    np.testing.assert_array_equal(fednova.normaliser(steps, lr, 0.0), steps)
