"""MimeLite against hand computations: its local step (SGD with the frozen momentum as the
correction), its server update, SGD with momentum on f in the one-step limit, and FedAvg at beta = 0."""

import numpy as np
import pytest
import torch

from fedsim.core.engine import ENGINES, SGDSettings
from fedsim.methods import mimelite
from fedsim.core.metrics import COLUMNS
from fedsim.core.train import RunConfig, initial_params, run

from methods_common import mean_loss, train_split, LR, context, device_arrays, hand_local_sgd, numpy_grad
from tiny import tiny_clients, tiny_params

SOLVERS = [4, 2, 3]
METHOD = mimelite.METHOD


@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


@pytest.mark.parametrize("engine", ["kernel", "batched", "loop"])
def test_local_step_is_sgd_with_beta_m_and_the_server_update_matches_hand_computation(engine):
    model, clients = tiny_clients()
    params = tiny_params(model)
    epochs, beta, server_lr = 3, 0.9, 0.5
    settings = SGDSettings(lr=LR, epochs=epochs, batch_size=1000, seed=0)  # one full batch per epoch
    ctx = context(model, clients, params, SOLVERS, options=METHOD.resolve({"beta": beta, "server_lr": server_lr}),
                  settings=settings)
    m = np.random.default_rng(0).normal(size=params.shape)
    state = {"momentum": torch.as_tensor(m)}
    problem = METHOD.local_problem(ctx, state)
    assert problem.mu == 0 and problem.center is None
    models = ENGINES[engine](model, params, problem, clients, np.asarray(SOLVERS), settings, 0)
    w0 = params.numpy()
    for j, k in enumerate(SOLVERS):  # y <- y - lr (grad F_k(y) + beta m): the trace, frozen
        expected = hand_local_sgd(w0, *device_arrays(clients, k), model.num_classes, epochs=epochs,
                                  correction=beta * m)
        np.testing.assert_allclose(models[j].numpy(), expected, rtol=1e-10, atol=1e-12)
    new, after = METHOD.server_update(ctx, state, models)
    n = clients.sizes[SOLVERS].astype(float)
    a = n / n.sum()
    grads = [numpy_grad(w0, *device_arrays(clients, k), model.num_classes) for k in SOLVERS]  # at x, full batch
    np.testing.assert_allclose(new.numpy(), w0 - server_lr * sum(a_j * (w0 - y) for a_j, y in zip(a, models.numpy())),
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(after["momentum"].numpy(), beta * m + sum(a_j * g for a_j, g in zip(a, grads)),
                               rtol=1e-12, atol=1e-14)


def test_the_first_round_starts_from_zero_momentum():
    model, clients = tiny_clients()
    params = tiny_params(model)
    state = METHOD.init(params, len(clients.sizes))
    assert set(state) == {"momentum"} and not state["momentum"].any()
    ctx = context(model, clients, params, SOLVERS, options=METHOD.resolve({}))
    assert not METHOD.local_problem(ctx, state).correction.any()


@pytest.mark.parametrize("beta, server_lr", [(0.9, 1.0), (0.5, 0.3)])
def test_every_device_and_one_full_batch_step_is_sgd_with_momentum_on_f(data, beta, server_lr):
    """y_k = x - lr (grad F_k(x) + beta m); their n_k-weighted mean is x - lr (grad f(x) + beta m),
    and m <- beta m + grad f(x): x <- x - lr server_lr m, heavy-ball SGD on f (optax's trace)."""
    rounds, lr = 4, 0.3
    config = RunConfig(data=data, method="mimelite", clients_per_round=8, epochs=1, batch_size=10_000, lr=lr,
                       rounds=rounds, dtype="float64", engine="loop", options={"beta": beta, "server_lr": server_lr})
    metrics, _ = run(config)
    model, x, y, offsets = train_split(data)
    def loss(w):
        return mean_loss(w, x, y)

    w = gd = initial_params(config, model, torch.float64).numpy()
    m, losses, gd_losses = np.zeros_like(w), [], []
    for _ in range(rounds + 1):
        losses.append(loss(w))
        gd_losses.append(loss(gd))
        m = beta * m + numpy_grad(w, x, y, model.num_classes)
        w = w - lr * server_lr * m
        gd = gd - lr * server_lr * numpy_grad(gd, x, y, model.num_classes)
    np.testing.assert_allclose(metrics["train_loss"].to_numpy(), losses, rtol=1e-10)
    assert abs(losses[-1] - gd_losses[-1]) > 1e-4  # the momentum mattered: plain gradient descent ends elsewhere


def test_with_beta_zero_it_is_fedavg_bit_for_bit(data):
    common = dict(data=data, clients_per_round=3, epochs=2, batch_size=5, lr=0.05, rounds=4)
    fedavg, _ = run(RunConfig(method="fedavg", **common))
    mime, _ = run(RunConfig(method="mimelite", options={"beta": 0.0, "server_lr": 1.0}, **common))
    np.testing.assert_array_equal(mime[COLUMNS].to_numpy(), fedavg[COLUMNS].to_numpy())
    # it pays for the full gradients it sends: every solver's samples once more per round
    assert (mime["gradient_evaluations"] > fedavg["gradient_evaluations"]).iloc[1:].all()
    for column in ("vectors_up", "vectors_down"):  # (model, gradient) up, (model, momentum) down
        assert (mime[column] == 2 * fedavg[column]).all()
    with_momentum, _ = run(RunConfig(method="mimelite", **common))
    assert not np.array_equal(with_momentum[COLUMNS].to_numpy(), fedavg[COLUMNS].to_numpy())


def test_beta_outside_zero_one_stops_the_run_before_training():
    with pytest.raises(ValueError, match=r"beta=1.0: expected a number in \[0, 1\)"):
        METHOD.resolve({"beta": 1.0})
