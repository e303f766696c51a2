"""DONE against hand computations: its Richardson iterations reach the local Newton direction, a
round with one device is a Newton step, a too-large alpha is refused, and a run counts its
Hessian-vector products."""

import dataclasses

import numpy as np
import pytest
import torch

from fedsim.data.format import FederatedDataset
from fedsim.methods import done
from fedsim.core.theory import LocalHessians
from fedsim.core.train import RunConfig, run

from methods_common import context, device_arrays, numpy_grad
from tiny import tiny_clients, tiny_params


def one_device_round(alpha_of, iterations, device=4):
    """DONE's local solver and server step with one device (its gradient is g, its Hessian the only one)."""
    model, clients = tiny_clients()
    params = tiny_params(model)
    rows = [clients.subset([device])[0]]
    top = LocalHessians(model, params, rows).largest()[0]
    options = done.METHOD.resolve({"alpha": alpha_of(top), "iterations": iterations})
    ctx = context(model, clients, params, [device], options=options)
    ctx = dataclasses.replace(ctx, hessians=lambda devices: LocalHessians(model, params, rows))
    local = done.METHOD.local_solver(ctx, {})
    new, _ = done.METHOD.server_update(ctx, {}, local)
    return model, clients, params, new, device


def dense_hessian(model, params, x):
    """The local Hessian as a matrix, from Hessian-vector products on the basis vectors."""
    hessians, size = LocalHessians(model, params, [x]), params.numel()
    columns = [hessians.product(torch.eye(size, dtype=params.dtype)[i].reshape(1, *params.shape))[0].flatten()
               for i in range(size)]
    return torch.stack(columns, 1).numpy()


def test_one_device_and_many_iterations_make_a_round_a_newton_step():
    model, clients, params, new, device = one_device_round(lambda top: 1.0 / top, iterations=4000)
    x, y = device_arrays(clients, device)
    g = numpy_grad(params.numpy(), x, y, model.num_classes).flatten()
    hessian = dense_hessian(model, params, clients.subset([device])[0])
    newton = params.numpy().flatten() - np.linalg.pinv(hessian, rcond=1e-10) @ g  # softmax: H is singular
    np.testing.assert_allclose(new.numpy().flatten(), newton, rtol=1e-7, atol=1e-9)


def test_one_iteration_by_hand():
    """d_1 = d_0 - alpha (H d_0 + g) with d_0 = -g: d_1 = -g + alpha H g - alpha g... written out."""
    model, clients, params, new, device = one_device_round(lambda top: 0.5 / top, iterations=1)
    x = clients.subset([device])[0]
    hessian = dense_hessian(model, params, x)
    xs, ys = device_arrays(clients, device)
    g = numpy_grad(params.numpy(), xs, ys, model.num_classes).flatten()
    alpha = 0.5 / LocalHessians(model, params, [x]).largest()[0]
    d = -g - alpha * (hessian @ -g + g)
    np.testing.assert_allclose(new.numpy().flatten(), params.numpy().flatten() + d, rtol=1e-10, atol=1e-12)


def test_an_alpha_at_or_above_two_over_lambda_max_is_refused():
    with pytest.raises(ValueError, match=r"bad method option alpha=.*2 / lambda_max"):
        one_device_round(lambda top: 2.0 / top, iterations=3)


@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


def test_a_run_takes_every_device_and_counts_its_hessian_vector_products(data):
    config = RunConfig(data=data, method="done", clients_per_round=8, epochs=1, rounds=3, dtype="float64",
                       options={"alpha": 0.01, "iterations": 5})
    metrics, record = run(config)
    assert metrics["train_loss"].iloc[-1] < metrics["train_loss"].iloc[0]
    with FederatedDataset(data) as dataset:
        n = int(dataset.train_sizes.sum())
    # per round: every device's gradient (n samples) and 5 products over every sample (2 gradients each)
    np.testing.assert_array_equal(metrics["gradient_evaluations"], [t * (n + 5 * 2 * n) for t in range(4)])
    np.testing.assert_array_equal(metrics["vectors_down"], [t * 2 * 8 for t in range(4)])  # w, then g
    np.testing.assert_array_equal(metrics["vectors_up"], [t * 2 * 8 for t in range(4)])  # grad F_k, then d_k
    with pytest.raises(ValueError, match="clients_per_round=3: done needs every device"):
        run(dataclasses.replace(config, clients_per_round=3))


def test_theory_is_refused():
    with pytest.raises(ValueError, match="theory=True: done solves no local problem"):
        from fedsim.core.train import check_model
        model, _ = tiny_clients()
        check_model(RunConfig(data="d.h5", method="done", theory=True), model, torch.float64)
