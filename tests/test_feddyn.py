"""FedDyn against hand computations: two rounds of its device and server rules, its state over a
run (h the mean of the g_k, zero g_k for devices never drawn), the optimistic-gradient recursion it
becomes with every device and one full-batch step, and a resume."""

import numpy as np
import pytest
import torch

from fedsim.data.format import FederatedDataset
from fedsim.core.engine import ENGINES, SGDSettings
from fedsim.methods import feddyn, setting_value
from fedsim.core.checkpoint import Checkpoint, _fingerprint
from fedsim.core.train import SELECTION_STREAM, RunConfig, initial_params, run, select_devices

from methods_common import mean_loss, train_split, LR, context, device_arrays, hand_local_sgd, numpy_grad
from tiny import tiny_clients, tiny_params

METHOD = feddyn.METHOD
EPOCHS, ALPHA = 3, 0.1
SETTINGS = SGDSettings(lr=LR, epochs=EPOCHS, batch_size=1000, seed=0)  # one full batch per epoch
ROUNDS = [[4, 1, 2], [5, 2, 2]]  # device 2 again, and twice in round 1 (weighted selection draws so)


@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


def test_alpha_is_the_tuned_setting():
    assert METHOD.mu == "none" and METHOD.tuned_setting == "alpha"
    assert setting_value({"method": "feddyn", "options": {"alpha": 0.1}, "mu": 0.0}) == 0.1
    assert all(a > 0 for a in METHOD.options["alpha"].grid)


def hand_rounds(clients, classes, w0, reported, weighting):
    """The paper's equations in numpy over ROUNDS: (params after each round, g, h)."""
    n = clients.sizes.astype(float)
    m = len(n)
    g, h, theta, out = np.zeros((m, *w0.shape)), np.zeros_like(w0), w0.copy(), []
    for solvers in ROUNDS:
        local = [hand_local_sgd(theta, *device_arrays(clients, k), classes, EPOCHS, mu=ALPHA, correction=-g[k])
                 for k in solvers]
        once = {k: local[solvers.index(k)] - theta for k in solvers}
        for k, change in once.items():
            g[k] = g[k] - ALPHA * change
        if weighting == "paper":
            h = h - ALPHA / m * sum(once.values())
            mean = sum(local) / len(local)
        else:
            h = h - ALPHA * sum(n[k] / n.sum() * change for k, change in once.items())
            mean = sum(n[k] * w for k, w in zip(solvers, local)) / n[solvers].sum()
        theta = mean - h / ALPHA
        out.append(theta if reported == "paper" else mean)
    return out, g, h


@pytest.mark.parametrize("engine", ["kernel", "batched", "loop"])
@pytest.mark.parametrize("reported", ["paper", "authors"])
@pytest.mark.parametrize("weighting", ["paper", "samples"])
def test_two_rounds_match_hand_computation(engine, reported, weighting):
    model, clients = tiny_clients()
    params = tiny_params(model)
    options = METHOD.resolve({"alpha": ALPHA, "reported": reported, "weighting": weighting})
    expected, g, h = hand_rounds(clients, model.num_classes, params.numpy(), reported, weighting)
    state = METHOD.init(params, len(clients.sizes))
    for t, solvers in enumerate(ROUNDS):
        ctx = context(model, clients, params, solvers, options=options, settings=SETTINGS, round_=t)
        problem = METHOD.local_problem(ctx, state)
        assert problem.mu == ALPHA
        models = ENGINES[engine](model, problem.center, problem, clients, np.asarray(solvers), SETTINGS, t)
        params, state = METHOD.server_update(ctx, state, models)
        np.testing.assert_allclose(params.numpy(), expected[t], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state["g"].numpy(), g, rtol=1e-10, atol=1e-12)  # devices 0 and 3: still zero
    assert not state["g"][[0, 3]].any()
    np.testing.assert_allclose(state["h"].numpy(), h, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("weighting, selection", [("paper", "uniform"), ("samples", "weighted")])
def test_h_is_the_mean_of_every_g_k_and_devices_never_drawn_keep_zero(data, tmp_path, weighting, selection):
    """h accumulates the g_k's increments: h = (1/m) sum_k g_k (paper) or sum_k p_k g_k (samples),
    every device's g_k, however stale. Weighted selection draws devices twice in a round: each
    counts once, in g_k and in h alike."""
    rounds, k = 5, 3
    config = RunConfig(data=data, method="feddyn", clients_per_round=k, epochs=2, batch_size=5, lr=0.05,
                       rounds=rounds, dtype="float64", selection=selection,
                       options={"alpha": 0.1, "weighting": weighting})
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=rounds, seconds=0)
    run(config, checkpoint=checkpoint)  # leaves the state after rounds 0-4 behind (saved before round 5)
    state = torch.load(checkpoint.path, weights_only=True)["state"]
    with FederatedDataset(data) as dataset:
        sizes = dataset.train_sizes
    draws = [select_devices(0, t, SELECTION_STREAM, k, sizes, selection) for t in range(rounds)]
    if selection == "weighted":
        assert any(len(set(d)) < len(d) for d in draws)  # the case this checks
    chosen = {int(d) for drawn in draws for d in drawn}
    g, h = state["method.g"].numpy(), state["method.h"].numpy()
    assert {j for j in range(len(sizes)) if g[j].any()} == chosen and len(chosen) < len(sizes)
    p = np.full(len(sizes), 1 / len(sizes)) if weighting == "paper" else sizes / sizes.sum()
    np.testing.assert_allclose(h, np.tensordot(p, g, 1), rtol=1e-10, atol=1e-13)
    assert np.abs(h).max() > 1e-3


@pytest.mark.parametrize("weighting", ["paper", "samples"])
def test_all_devices_one_full_batch_step_and_alpha_lr_1_is_optimistic_gradient_descent(data, weighting):
    """With every device, one full-batch step and alpha = 1 / lr, g_k becomes grad F_k(theta^{t-1})
    and h grad f(theta^{t-1}), so theta^t = theta^{t-1} - lr (2 grad f(theta^{t-1}) - grad f(theta^{t-2})),
    grad f(theta^{-1}) = 0: f the plain mean of the F_k (paper) or sum_k p_k F_k (samples)."""
    rounds, lr = 4, 0.3
    config = RunConfig(data=data, method="feddyn", clients_per_round=8, epochs=1, batch_size=10_000, lr=lr,
                       rounds=rounds, dtype="float64", options={"alpha": 1 / lr, "weighting": weighting})
    metrics, _ = run(config)
    model, x, y, offsets = train_split(data)
    n = np.diff(offsets)
    p = np.full(len(n), 1 / len(n)) if weighting == "paper" else n / n.sum()

    def grad_f(w):
        return sum(p[k] * numpy_grad(w, x[a:b], y[a:b], model.num_classes)
                   for k, (a, b) in enumerate(zip(offsets[:-1], offsets[1:])))

    w = initial_params(config, model, torch.float64).numpy()
    previous, losses = np.zeros_like(w), []
    for t in range(rounds + 1):
        losses.append(mean_loss(w, x, y))
        current = grad_f(w)
        w, previous = w - lr * (2 * current - previous), current
    np.testing.assert_allclose(metrics["train_loss"].to_numpy(), losses, rtol=1e-10)


@pytest.mark.parametrize("reported", ["paper", "authors"])
def test_state_survives_a_resume_bit_identical_and_matters(data, tmp_path, reported):
    def config(rounds):
        return RunConfig(data=data, method="feddyn", clients_per_round=3, epochs=2, batch_size=5, lr=0.05,
                         rounds=rounds, options={"alpha": 0.1, "reported": reported})

    def metrics_of(checkpoint=None):
        metrics, record = run(config(12), checkpoint=checkpoint)
        return metrics.to_csv(index=False), record

    reference, _ = metrics_of()
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=5, seconds=0)
    run(config(11), checkpoint=checkpoint)  # leaves round 10 behind
    saved = torch.load(checkpoint.path, weights_only=True)
    assert saved["round"] == 10 and {"method.g", "method.h", "method.model"} <= set(saved["state"])
    saved["settings"] = _fingerprint(config(12))  # as this run's own
    torch.save(saved, checkpoint.path)
    resumed, record = metrics_of(checkpoint)
    assert record["result"]["resumed_from_round"] == 10 and resumed == reference
    for name in ("method.g", "method.h"):
        saved["state"][name].zero_()
    torch.save(saved, checkpoint.path)
    assert metrics_of(checkpoint)[0] != reference
