"""FedExP against hand computations: its server step, that it never steps less than FedAvg, the
authors' reported model, the eps decay, and a whole run."""

import numpy as np
import pytest
import torch

from fedsim.core.engine import ENGINES, SGDSettings
from fedsim.methods import fedexp
from fedsim.core.train import RunConfig, initial_params, run

from methods_common import mean_loss, train_split, LR, context, local_models, numpy_grad
from tiny import tiny_clients, tiny_params

SOLVERS = [4, 2, 3]
METHOD = fedexp.METHOD


@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


def hand_step(x, models, a, eps):
    """eta_g and the new model, in numpy."""
    deltas = models - x
    mean = np.tensordot(a, deltas, axes=1)
    spread = sum(a_k * np.sum(d * d) for a_k, d in zip(a, deltas))
    eta = max(1.0, spread / (2 * (np.sum(mean * mean) + eps)))
    return eta, x + eta * mean


def spread_models(x, a, seed=0):
    """Local models whose changes point different ways: their mean (weights a) much shorter than
    the changes."""
    rng = np.random.default_rng(seed)
    changes = rng.normal(scale=0.1, size=(len(a), *x.shape))
    changes += rng.normal(scale=0.01, size=x.shape) - np.tensordot(a, changes, axes=1)
    return x + torch.as_tensor(changes)


def weights(clients, solvers=SOLVERS):
    n = clients.sizes[solvers].astype(float)
    return n / n.sum()


def test_one_round_matches_hand_computation():
    model, clients, params, ctx, problem, models = local_models(fedexp, 0.0, SOLVERS, eps=0.01)
    assert problem.mu == 0 and problem.correction is None and torch.equal(problem.center, params)
    state = METHOD.init(params, len(clients.sizes))
    a = weights(clients)
    for local in (models, spread_models(params, a)):  # the engine's models, then diverse ones
        new, after = METHOD.server_update(ctx, state, local)
        eta, expected = hand_step(params.numpy(), local.numpy(), a, 0.01)
        np.testing.assert_allclose(new.numpy(), expected, rtol=1e-12, atol=1e-14)
        assert torch.equal(after["model"], new)  # paper: the reported model is the one sent next
    assert eta > 2  # the diverse models extrapolate: a test of eta_g, not of FedAvg


def test_equal_changes_give_eta_one_and_the_round_is_fedavg():
    model, clients = tiny_clients()
    params = tiny_params(model)
    ctx = context(model, clients, params, SOLVERS, options=METHOD.resolve({"eps": 1e-9}))
    change = torch.as_tensor(np.random.default_rng(1).normal(size=params.shape))
    local = params + change.expand(len(SOLVERS), *params.shape)
    eta, _ = fedexp.server_step(ctx, local - params)
    assert float(eta) == 1.0  # ||D||^2 / (2 (||D||^2 + eps)) < 1/2
    new, _ = METHOD.server_update(ctx, METHOD.init(params, len(clients.sizes)), local)
    fedavg = torch.tensordot(ctx.weights(ctx.solvers), local, dims=1)
    np.testing.assert_allclose(new.numpy(), fedavg.numpy(), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("seed", range(5))
def test_it_never_steps_less_far_than_fedavg(seed):
    model, clients = tiny_clients()
    params = tiny_params(model)
    ctx = context(model, clients, params, SOLVERS, options=METHOD.resolve({"eps": 1e-3}))
    rng = np.random.default_rng(seed)
    # any local models: random changes, with a shared drift of random size
    drift = torch.as_tensor(rng.normal(size=params.shape) * rng.uniform(0, 2))
    local = spread_models(params, weights(clients), seed) + drift
    new, _ = METHOD.server_update(ctx, METHOD.init(params, len(clients.sizes)), local)
    fedavg = torch.tensordot(ctx.weights(ctx.solvers), local, dims=1)
    step, fedavg_step = new - params, fedavg - params
    eta = float(step.norm() / fedavg_step.norm())
    assert eta >= 1 - 1e-12
    np.testing.assert_allclose(step.numpy(), eta * fedavg_step.numpy(), rtol=1e-10, atol=1e-14)  # same direction


def test_the_authors_reported_model_is_the_mean_of_the_last_two_and_devices_train_from_the_sent_one():
    """Three rounds through an engine: `authors` reports x^1, then (x^t + x^{t-1})/2; the models
    sent (and so the local models) are the paper's, round for round."""
    model, clients = tiny_clients()
    x0 = tiny_params(model)
    settings = SGDSettings(lr=LR, epochs=3, batch_size=1000, seed=0)
    a = weights(clients)
    runs = {}
    for reported in ("paper", "authors"):
        options = METHOD.resolve({"reported": reported, "eps": 1e-4})
        params, state, trace = x0, METHOD.init(x0, len(clients.sizes)), []
        for t in range(3):
            ctx = context(model, clients, params, SOLVERS, options=options, settings=settings, round_=t)
            problem = METHOD.local_problem(ctx, state)
            local = ENGINES["batched"](model, problem.center, problem, clients, np.asarray(SOLVERS), settings, t)
            sent = state["model"].numpy()
            params, state = METHOD.server_update(ctx, state, local)
            trace.append((sent, local.numpy(), params.numpy(), state["model"].numpy()))
        runs[reported] = trace
    for t, ((sent, local, params, model_t), (a_sent, a_local, a_params, a_model)) in enumerate(
            zip(runs["paper"], runs["authors"])):
        np.testing.assert_array_equal(a_sent, sent)
        np.testing.assert_array_equal(a_local, local)
        _, expected = hand_step(sent, local, a, 1e-4)
        np.testing.assert_allclose(model_t, expected, rtol=1e-12, atol=1e-14)
        np.testing.assert_array_equal(params, model_t)  # paper: reports x^t
        np.testing.assert_array_equal(a_model, model_t)
        reported = model_t if t == 0 else (model_t + sent) / 2
        np.testing.assert_allclose(a_params, reported, rtol=1e-14, atol=1e-15)
    assert not np.allclose(runs["authors"][2][2], runs["paper"][2][2])


def test_eps_decays_before_every_round():
    model, clients = tiny_clients()
    params = tiny_params(model)
    a = weights(clients)
    local = spread_models(params, a)
    decay, eps = 0.998**2, 0.01  # an eps that matters: ||Delta_bar||^2 is about 0.002
    options = METHOD.resolve({"eps": eps, "eps_decay": decay})
    for t in (0, 3):
        ctx = context(model, clients, params, SOLVERS, options=options, round_=t)
        new, _ = METHOD.server_update(ctx, METHOD.init(params, len(clients.sizes)), local)
        eta, expected = hand_step(params.numpy(), local.numpy(), a, eps * decay ** (t + 1))
        assert eta > 1
        np.testing.assert_allclose(new.numpy(), expected, rtol=1e-12, atol=1e-14)
    assert not np.allclose(hand_step(params.numpy(), local.numpy(), a, eps)[1], expected)


def test_a_run_with_the_authors_reported_model_matches_hand_computation(data):
    """Every device, one full-batch step: Delta_k = -lr grad F_k(x^t); the run reports the mean of
    the last two models from round 2 on."""
    rounds, lr, eps = 4, 0.3, 1e-3
    config = RunConfig(data=data, method="fedexp", clients_per_round=8, epochs=1, batch_size=10_000, lr=lr,
                       rounds=rounds, dtype="float64", engine="loop", options={"eps": eps, "reported": "authors"})
    metrics, _ = run(config)
    model, x, y, offsets = train_split(data)
    sizes = np.diff(offsets)
    a = sizes / sizes.sum()

    def loss(w):
        return mean_loss(w, x, y)

    w = initial_params(config, model, torch.float64).numpy()
    losses, etas = [loss(w)], []
    for t in range(rounds):
        local = np.stack([w - lr * numpy_grad(w, x[s:e], y[s:e], model.num_classes)
                          for s, e in zip(offsets[:-1], offsets[1:])])
        eta, new = hand_step(w, local, a, eps)
        etas.append(eta)
        losses.append(loss(new if t == 0 else (new + w) / 2))
        w = new
    np.testing.assert_allclose(metrics["train_loss"].to_numpy(), losses, rtol=1e-10)
    assert max(etas) > 1  # the run extrapolated


def test_huge_eps_is_fedavg(data):
    common = dict(data=data, clients_per_round=3, epochs=2, batch_size=5, lr=0.05, rounds=3, dtype="float64")
    fedavg, _ = run(RunConfig(method="fedavg", **common))
    exp, _ = run(RunConfig(method="fedexp", options={"eps": 1e12}, **common))
    np.testing.assert_allclose(exp["train_loss"].to_numpy(), fedavg["train_loss"].to_numpy(), rtol=1e-12)
