"""Decayed FedDANE: FedDANE's correction scaled by 1 / (1 + t / tau), against a hand computation."""

import numpy as np
import pytest

from fedsim.methods import feddane, feddane_decayed

from methods_common import context, device_arrays, hand_local_sgd, local_models, numpy_grad
from tiny import tiny_clients, tiny_params


@pytest.mark.parametrize("round_, tau, scale", [(0, 20.0, 1.0), (20, 20.0, 0.5), (30, 10.0, 0.25)])
def test_correction_is_feddanes_times_the_schedule(round_, tau, scale):
    model, clients = tiny_clients()
    params = tiny_params(model)
    method = feddane_decayed.METHOD
    ctx = context(model, clients, params, [4, 1], [0, 2, 4], mu=0.3, options=method.resolve({"tau": tau}),
                  round_=round_)
    problem = method.local_problem(ctx, {})
    exact = feddane.correction_term(ctx)
    np.testing.assert_allclose(problem.correction.numpy(), scale * exact.numpy(), rtol=1e-15)
    assert problem.mu == 0.3


@pytest.mark.parametrize("engine", ["kernel", "batched", "loop"])
def test_first_round_local_models_are_feddanes_by_hand(engine):
    gradient_devices, solvers = [0, 2, 4], [4, 1]
    model, clients, params, _, problem, models = local_models(feddane_decayed, 0.3, solvers, gradient_devices,
                                                              engine=engine)
    w0 = params.numpy()
    grads = {k: numpy_grad(w0, *device_arrays(clients, k), model.num_classes) for k in {0, 1, 2, 4}}
    n = clients.sizes[gradient_devices].astype(float)
    g_t = sum(n_k * grads[k] for n_k, k in zip(n, gradient_devices)) / n.sum()
    for j, k in enumerate(solvers):
        expected = hand_local_sgd(w0, *device_arrays(clients, k), model.num_classes, epochs=3, mu=0.3,
                                  correction=g_t - grads[k])
        np.testing.assert_allclose(models[j].numpy(), expected, rtol=1e-10, atol=1e-12)


def test_tau_must_be_positive():
    with pytest.raises(ValueError, match="tau=0.0: expected a number > 0"):
        feddane_decayed.METHOD.resolve({"tau": 0.0})
