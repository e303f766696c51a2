import numpy as np
import pytest
import torch

from fedsim.methods import feddane, fedprox

from methods_common import device_arrays, hand_local_sgd, local_models, numpy_grad


@pytest.mark.parametrize("engine", ["kernel", "batched", "loop"])
def test_local_steps_match_hand_computation(engine):
    gradient_devices, solvers = [0, 2, 4], [4, 1]
    model, clients, params, _, problem, models = local_models(feddane, 0.3, solvers, gradient_devices, engine=engine)
    w0 = params.numpy()
    grads = {k: numpy_grad(w0, *device_arrays(clients, k), model.num_classes) for k in set(gradient_devices + solvers)}
    n = clients.sizes[gradient_devices].astype(float)
    g_t = sum(n_k * grads[k] for n_k, k in zip(n, gradient_devices)) / n.sum()
    for j, device in enumerate(solvers):
        correction = g_t - grads[device]
        np.testing.assert_allclose(problem.correction[j].numpy(), correction, rtol=1e-10, atol=1e-12)
        x, y = device_arrays(clients, device)
        expected = hand_local_sgd(w0, x, y, model.num_classes, epochs=3, mu=0.3, correction=correction)
        np.testing.assert_allclose(models[j].numpy(), expected, rtol=1e-10, atol=1e-12)


def test_correction_is_zero_when_g_t_is_the_devices_own_gradient():
    _, _, _, _, problem, models = local_models(feddane, 0.3, [4], [4])
    assert torch.count_nonzero(problem.correction) == 0
    # ...and then FedDANE's local model is FedProx's, to the bit
    assert (models == local_models(fedprox, 0.3, [4])[-1]).all()


def test_same_subset_reuses_the_gradients():
    calls = []
    model, clients, params, ctx, _, _ = local_models(feddane, 0.1, [1, 2], [1, 2])
    counting = type(ctx)(**{**ctx.__dict__, "device_grads": lambda d: calls.append(list(d)) or ctx.device_grads(d)})
    feddane.local_problem(counting, {})
    assert calls == [[1, 2]]


@pytest.mark.parametrize("engine", ["kernel", "batched", "loop"])
def test_authors_correction_matches_hand_computation(engine):
    """Their pggd.py: `_, gprev = client.get_grads()` keeps the bias gradient, and zip(g_t, gprev)
    subtracts its first entry from every kernel entry of g_t and its second from every bias entry."""
    gradient_devices = solvers = [0, 2, 4]
    run = local_models(feddane, 0.3, solvers, gradient_devices, engine=engine, correction="authors")
    model, clients, params, _, problem, models = run
    w0 = params.numpy()
    grads = {k: numpy_grad(w0, *device_arrays(clients, k), model.num_classes) for k in solvers}
    n = clients.sizes[solvers].astype(float)
    g_t = sum(n_k * grads[k] for n_k, k in zip(n, solvers)) / n.sum()
    for j, device in enumerate(solvers):
        bias_grad = grads[device][-1]  # the last row of the (features + 1, classes) matrix
        correction = g_t.copy()
        correction[:-1] -= bias_grad[0]
        correction[-1] -= bias_grad[1]
        np.testing.assert_allclose(problem.correction[j].numpy(), correction, rtol=1e-10, atol=1e-12)
        x, y = device_arrays(clients, device)
        expected = hand_local_sgd(w0, x, y, model.num_classes, epochs=3, mu=0.3, correction=correction)
        np.testing.assert_allclose(models[j].numpy(), expected, rtol=1e-10, atol=1e-12)


def test_authors_correction_is_refused_for_a_model_without_its_tensor_layout():
    class FlatModel:  # like the LSTMs: one flat parameter vector, no kernel/bias split
        linear_softmax = False
    with pytest.raises(ValueError, match="MCLR models only"):
        feddane.authors_subtrahend(FlatModel(), torch.zeros(2, 5))
