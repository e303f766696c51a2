"""Exact-gradient FedDANE: g_t from every device, solvers those of a sampling FedDANE."""

import numpy as np
import pytest

from fedsim.methods import feddane_exact_gradient
from fedsim.core.train import RunConfig, round_devices, run

from methods_common import context, device_arrays, numpy_grad
from tiny import tiny_clients, tiny_params


@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


def test_correction_is_grad_f_minus_the_solvers_gradient_by_hand():
    model, clients = tiny_clients()
    params = tiny_params(model)
    everyone = np.arange(len(clients.sizes))
    ctx = context(model, clients, params, [4, 1], everyone, mu=0.2)
    problem = feddane_exact_gradient.METHOD.local_problem(ctx, {})
    n = clients.sizes.astype(float)
    grads = {k: numpy_grad(params.numpy(), *device_arrays(clients, k), model.num_classes) for k in everyone}
    grad_f = sum(n[k] * grads[k] for k in everyone) / n.sum()
    for j, k in enumerate([4, 1]):
        np.testing.assert_allclose(problem.correction[j].numpy(), grad_f - grads[k], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("second_subset", ["independent", "same"])
def test_it_asks_every_device_and_solves_on_feddanes_devices(second_subset):
    sizes = np.arange(10, 30)
    config = RunConfig(data="unused.h5", method="feddane", clients_per_round=4, second_subset=second_subset)
    for t in range(5):
        gradient, solvers = round_devices(config, "all", t, sizes)
        assert list(gradient) == list(range(20))
        assert list(solvers) == list(round_devices(config, "sampled", t, sizes)[1])


def test_with_every_device_selected_it_is_feddane(data):
    common = dict(data=data, mu=0.1, clients_per_round=8, epochs=2, batch_size=5, lr=0.05, rounds=3,
                  second_subset="same")
    exact, _ = run(RunConfig(method="feddane_exact_gradient", **common))
    sampled, _ = run(RunConfig(method="feddane", **common))
    assert exact.equals(sampled)
