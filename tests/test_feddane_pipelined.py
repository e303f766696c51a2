"""Pipelined FedDANE: one exchange per round with last round's aggregate gradient; its first
round is FedProx's."""

import numpy as np
import pytest

from fedsim.methods import feddane_pipelined
from fedsim.core.metrics import COLUMNS
from fedsim.core.train import RunConfig, run

from methods_common import context, device_arrays, numpy_grad
from tiny import tiny_clients, tiny_params


@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


def test_first_round_is_fedprox_bit_for_bit_and_one_exchange_per_round(data):
    common = dict(data=data, mu=0.1, clients_per_round=3, epochs=2, batch_size=5, lr=0.05, rounds=3)
    pipelined, _ = run(RunConfig(method="feddane_pipelined", **common))
    fedprox, _ = run(RunConfig(method="fedprox", **common))
    model = ["round", *COLUMNS]  # the model's metrics (the costs differ: pipelined sends gradients too)
    assert pipelined[model].iloc[:2].equals(fedprox[model].iloc[:2])  # rounds 0 and 1: the same model
    assert not pipelined[model].iloc[2:].equals(fedprox[model].iloc[2:])  # then the stale gradient acts
    assert list(pipelined["communication_rounds"]) == [0, 1, 2, 3]


def test_second_round_uses_the_first_rounds_aggregate_gradient_by_hand():
    model, clients = tiny_clients()
    method = feddane_pipelined.METHOD
    w_prev, w = tiny_params(model, seed=1), tiny_params(model, seed=2)
    first, second = [0, 2, 4], [4, 1]
    n = clients.sizes.astype(float)
    state = method.init(w_prev, len(n))
    # round 0 ends: the server keeps the first solvers' gradients at the model they received
    ctx0 = context(model, clients, w_prev, first, mu=0.3)
    _, state = method.server_update(ctx0, state, w_prev.expand(3, *w_prev.shape).clone())
    grads_prev = {k: numpy_grad(w_prev.numpy(), *device_arrays(clients, k), model.num_classes) for k in first}
    g_prev = sum(n[k] * grads_prev[k] for k in first) / n[first].sum()
    np.testing.assert_allclose(state["gradient"].numpy(), g_prev, rtol=1e-12)
    # round 1: the correction is g_{t-1} - grad F_k(w^{t-1}), gradients at the model just received
    ctx1 = context(model, clients, w, second, mu=0.3, round_=1)
    problem = method.local_problem(ctx1, state)
    for j, k in enumerate(second):
        x, y = device_arrays(clients, k)
        correction = g_prev - numpy_grad(w.numpy(), x, y, model.num_classes)
        np.testing.assert_allclose(problem.correction[j].numpy(), correction, rtol=1e-10, atol=1e-12)
