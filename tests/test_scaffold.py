"""SCAFFOLD against hand computations: its local step, its control variates, and gradient
descent on f when every device takes one full-batch step."""

import numpy as np
import pytest
import torch

from fedsim.data.format import FederatedDataset
from fedsim.methods import scaffold
from fedsim.core.checkpoint import Checkpoint
from fedsim.core.train import SELECTION_STREAM, RunConfig, initial_params, run, select_devices

from methods_common import mean_loss, train_split, LR, context, device_arrays, hand_local_sgd, local_models, numpy_grad
from tiny import tiny_clients, tiny_params


@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


def test_first_round_is_fedavg_and_later_rounds_correct_by_c_minus_c_k():
    model, clients = tiny_clients()
    params = tiny_params(model)
    method = scaffold.METHOD
    state = method.init(params, len(clients.sizes))
    assert not state["control"].any() and not state["device_controls"].any()
    rng = np.random.default_rng(0)
    state["control"] = torch.as_tensor(rng.normal(size=params.shape))
    state["device_controls"] = torch.as_tensor(rng.normal(size=(len(clients.sizes), *params.shape)))
    ctx = context(model, clients, params, [4, 1], options=method.resolve({}))
    problem = method.local_problem(ctx, state)
    assert problem.mu == 0
    for j, k in enumerate([4, 1]):
        np.testing.assert_array_equal(problem.correction[j].numpy(),
                                      (state["control"] - state["device_controls"][k]).numpy())


@pytest.mark.parametrize("engine", ["kernel", "batched", "loop"])
def test_local_step_and_control_update_match_hand_computation(engine):
    solvers, epochs = [4, 2, 3], 3
    model, clients, params, ctx, problem, models = local_models(scaffold, 0.0, solvers, epochs=epochs,
                                                                engine=engine, server_lr=0.5)
    w0, n = params.numpy(), clients.sizes.astype(float)
    # round 0: c = c_k = 0, so the local models are FedAvg's
    for j, k in enumerate(solvers):
        expected = hand_local_sgd(w0, *device_arrays(clients, k), model.num_classes, epochs=epochs)
        np.testing.assert_allclose(models[j].numpy(), expected, rtol=1e-10, atol=1e-12)
    state = scaffold.METHOD.init(params, len(n))
    new_params, state = scaffold.METHOD.server_update(ctx, state, models)
    w_k = models.numpy()
    c_k = {k: (w0 - w_k[j]) / (epochs * LR) for j, k in enumerate(solvers)}  # one full batch per epoch
    for k in range(len(n)):
        expected = c_k.get(k, np.zeros_like(w0))  # never selected: still zero
        np.testing.assert_allclose(state["device_controls"][k].numpy(), expected, rtol=1e-10, atol=1e-12)
    c = sum(n[k] / n.sum() * c_k[k] for k in solvers)
    np.testing.assert_allclose(state["control"].numpy(), c, rtol=1e-10, atol=1e-12)
    a = n[solvers] / n[solvers].sum()
    expected = w0 + 0.5 * sum(a_j * (w_k[j] - w0) for j, a_j in enumerate(a))
    np.testing.assert_allclose(new_params.numpy(), expected, rtol=1e-10, atol=1e-12)


def test_all_devices_and_one_full_batch_step_is_gradient_descent_on_f(data):
    """c_k = grad F_k(w^{t-1}) after a round, c = grad f(w^{t-1}): the local step
    w - lr (grad F_k(w) - grad F_k(w_prev) + grad f(w_prev)) averaged with n_k / n is w - lr grad f(w)."""
    rounds, lr = 4, 0.3
    config = RunConfig(data=data, method="scaffold", clients_per_round=8, epochs=1, batch_size=10_000, lr=lr,
                       rounds=rounds, dtype="float64", engine="loop")
    metrics, _ = run(config)
    model, x, y, offsets = train_split(data)
    w = initial_params(config, model, torch.float64).numpy()
    losses = []
    for t in range(rounds + 1):
        losses.append(mean_loss(w, x, y))
        w = w - lr * numpy_grad(w, x, y, model.num_classes)
    np.testing.assert_allclose(metrics["train_loss"].to_numpy(), losses, rtol=1e-10)


def test_devices_never_selected_keep_a_zero_control_and_the_state_is_checkpointed(data, tmp_path):
    config = RunConfig(data=data, method="scaffold", clients_per_round=2, epochs=2, batch_size=5, lr=0.05, rounds=4)
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=1, seconds=0)
    run(config, checkpoint=checkpoint)  # leaves the state after rounds 0-3 behind (saved at the start of round 4)
    state = torch.load(checkpoint.path, weights_only=True)["state"]
    with FederatedDataset(data) as dataset:
        sizes = dataset.train_sizes
    chosen = {int(k) for t in range(4) for k in select_devices(0, t, SELECTION_STREAM, 2, sizes, "uniform")}
    table = state["method.device_controls"]
    assert {k for k in range(len(sizes)) if table[k].any()} == chosen and len(chosen) < len(sizes)
    assert state["method.control"].any()
