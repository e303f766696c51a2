"""Mime against hand computations: its anchored local step in every engine, MimeLite when the
correction is off, and server-side SGD with momentum on f with one full-batch step."""

import numpy as np
import pytest
import torch

from fedsim.core.metrics import COLUMNS
from fedsim.methods import mime
from fedsim.core.train import RunConfig, initial_params, run

from methods_common import LR, device_arrays, local_models, mean_loss, numpy_grad, train_split


@pytest.mark.parametrize("engine", ["kernel", "batched", "loop"])
def test_the_anchored_local_steps_match_hand_computation(engine):
    solvers, epochs = [4, 2, 3], 3  # one full batch an epoch: each step's batch is the device's data
    model, clients, params, ctx, problem, models = local_models(mime, 0.0, solvers, epochs=epochs, engine=engine)
    x = params.numpy()
    grads = {k: numpy_grad(x, *device_arrays(clients, k), model.num_classes) for k in solvers}
    n = clients.sizes[solvers].astype(float)
    c = sum(n_k * grads[k] for n_k, k in zip(n, solvers)) / n.sum()  # the momentum starts at 0
    for j, k in enumerate(solvers):
        w = x.copy()
        for _ in range(epochs):
            w = w - LR * (numpy_grad(w, *device_arrays(clients, k), model.num_classes) - grads[k] + c)
        np.testing.assert_allclose(models[j].numpy(), w, rtol=1e-10, atol=1e-12)


@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


def test_without_the_correction_it_is_mimelite_model_for_model(data):
    common = dict(data=data, clients_per_round=3, epochs=2, batch_size=5, lr=0.05, rounds=4)
    plain, _ = run(RunConfig(method="mime", options={"correction": "none", "server_lr": 0.3}, **common))
    lite, _ = run(RunConfig(method="mimelite", options={"server_lr": 0.3}, **common))
    assert plain[COLUMNS].equals(lite[COLUMNS])
    corrected, _ = run(RunConfig(method="mime", options={"server_lr": 0.3}, **common))
    assert not corrected[COLUMNS].equals(lite[COLUMNS])
    assert (corrected["gradient_evaluations"] > plain["gradient_evaluations"]).iloc[1:].all()


def test_one_full_batch_step_on_every_device_is_sgd_with_momentum_on_f(data):
    rounds, lr, beta, server_lr = 4, 0.3, 0.5, 0.7
    metrics, _ = run(RunConfig(data=data, method="mime", clients_per_round=8, epochs=1, batch_size=10_000, lr=lr,
                               rounds=rounds, dtype="float64", engine="loop",
                               options={"beta": beta, "server_lr": server_lr}))
    model, x, y, _ = train_split(data)
    w = initial_params(RunConfig(data=data, method="mime"), model, torch.float64).numpy()
    m, losses = np.zeros_like(w), []
    for _ in range(rounds + 1):
        losses.append(mean_loss(w, x, y))
        g = numpy_grad(w, x, y, model.num_classes)
        w = w - lr * server_lr * (g + beta * m)
        m = beta * m + g
    np.testing.assert_allclose(metrics["train_loss"].to_numpy(), losses, rtol=1e-10)
