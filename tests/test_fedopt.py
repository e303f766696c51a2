"""FedOpt (FedAdagrad, FedYogi, FedAdam) against hand computations: two server rounds from the
tiny problem's local models, the bias corrections, a whole run, and its variants."""

import dataclasses

import numpy as np
import pytest
import torch

from fedsim.methods import fedopt, setting_value, variant_of
from fedsim.core.train import RunConfig, initial_params, run

from methods_common import mean_loss, train_split, context, local_models, numpy_grad

SOLVERS = [4, 2, 3]
BETA1, BETA2, TAU = 0.9, 0.99, 1e-3


@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


def hand_fedopt(x, rounds, optimizer, server_lr, v0, correction):
    """Algorithm 2 in numpy: `rounds` is a list of (local models, weights); the models after each
    round, and each round's v before its update and Delta^2 (for Yogi's sign)."""
    m, v = np.zeros_like(x), np.full_like(x, v0)
    out, signs = [], []
    for t, (models, a) in enumerate(rounds, start=1):
        delta = np.tensordot(a, models, axes=1) - x
        d2 = delta * delta
        signs.append(np.sign(v - d2))
        m = BETA1 * m + (1 - BETA1) * delta
        if optimizer == "adagrad":
            v = v + d2
        elif optimizer == "yogi":
            v = v - (1 - BETA2) * d2 * np.sign(v - d2)
        else:
            v = BETA2 * v + (1 - BETA2) * d2
        s = {"none": None, "kingma": t, "flower": t + 1}[correction]
        scale = 1.0 if s is None else (1 / (1 - BETA1**s)) * (1.0 if optimizer == "adagrad" else np.sqrt(1 - BETA2**s))
        x = x + server_lr * scale * m / (np.sqrt(v) + TAU)
        out.append(x)
    return out, signs


@pytest.mark.parametrize("optimizer, correction, v0", [
    ("adagrad", "none", "tau_squared"), ("yogi", "none", "tau_squared"), ("adam", "none", "tau_squared"),
    ("adam", "kingma", "zero"), ("yogi", "flower", "tau_squared"), ("adagrad", "kingma", "zero"),
    ("adam", "flower", "zero"),
])
def test_two_server_rounds_match_hand_computation(optimizer, correction, v0):
    options = {"optimizer": optimizer, "server_lr": 0.1, "bias_correction": correction, "v0": v0}
    model, clients, params, ctx, problem, models = local_models(fedopt, 0.0, SOLVERS, **options)
    assert problem.mu == 0 and problem.correction is None  # FedAvg's local problem
    state = fedopt.METHOD.init(params, len(clients.sizes))
    x1, state = fedopt.METHOD.server_update(ctx, state, models)
    # round 2: local models around x1 with changes of every size from 1e-6 to 0.1, so that Yogi's
    # sign(v - Delta^2) takes both values
    rng = np.random.default_rng(3)
    shape = (len(SOLVERS), *params.shape)
    changes = rng.choice([-1.0, 1.0], size=shape) * 10.0 ** rng.uniform(-6, -1, size=shape)
    models2 = x1 + torch.as_tensor(changes)
    ctx2 = context(model, clients, x1, SOLVERS, options=ctx.options, round_=1)
    x2, state = fedopt.METHOD.server_update(ctx2, state, models2)

    n = clients.sizes[SOLVERS].astype(float)
    a = n / n.sum()
    expected, signs = hand_fedopt(params.numpy(), [(models.numpy(), a), (models2.numpy(), a)], optimizer, 0.1,
                                  TAU**2 if v0 == "tau_squared" else 0.0, correction)
    np.testing.assert_allclose(x1.numpy(), expected[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(x2.numpy(), expected[1], rtol=1e-12, atol=1e-14)
    if optimizer == "yogi":
        assert (signs[1] > 0).any() and (signs[1] < 0).any()
    assert not np.allclose(x2.numpy(), x1.numpy() + (models2.numpy() - x1.numpy()).mean(0))  # not FedAvg


def test_bias_correction_factors_by_hand():
    """Kingma and Ba's alpha_t in rounds 1 and 2, and Flower's one round later."""
    base = fedopt.METHOD.resolve({})
    assert fedopt.step_scale(base, 1) == 1.0  # Algorithm 2: none
    adam = {**base, "bias_correction": "kingma"}
    assert fedopt.step_scale(adam, 1) == pytest.approx(np.sqrt(0.01) / 0.1)          # = 1
    assert fedopt.step_scale(adam, 2) == pytest.approx(np.sqrt(1 - 0.99**2) / (1 - 0.81))
    flower = {**base, "bias_correction": "flower"}
    assert fedopt.step_scale(flower, 1) == pytest.approx(np.sqrt(1 - 0.99**2) / (1 - 0.81))
    adagrad = {**adam, "optimizer": "adagrad"}  # a sum, not a moving average: m's factor only
    assert fedopt.step_scale(adagrad, 2) == pytest.approx(1 / (1 - 0.81))


def test_a_run_with_every_device_and_one_full_batch_step_is_the_optimiser_on_minus_lr_grad_f(data):
    """With all devices (n_k-weighted) and one full-batch step each, Delta = -lr grad f(x): FedYogi
    (bias-corrected, v0 = 0) on that pseudo-gradient, round after round, in numpy."""
    rounds, lr, server_lr = 4, 0.3, 0.05
    config = RunConfig(data=data, method="fedyogi", clients_per_round=8, epochs=1, batch_size=10_000, lr=lr,
                       rounds=rounds, dtype="float64", engine="loop",
                       options={"server_lr": server_lr, "bias_correction": "kingma", "v0": "zero"})
    metrics, _ = run(config)
    model, x, y, offsets = train_split(data)
    w = initial_params(config, model, torch.float64).numpy()
    m, v, losses = np.zeros_like(w), np.zeros_like(w), []
    for t in range(rounds + 1):
        losses.append(mean_loss(w, x, y))
        delta = -lr * numpy_grad(w, x, y, model.num_classes)
        m = BETA1 * m + (1 - BETA1) * delta
        v = v - (1 - BETA2) * delta**2 * np.sign(v - delta**2)
        alpha = server_lr * np.sqrt(1 - BETA2 ** (t + 1)) / (1 - BETA1 ** (t + 1))
        w = w + alpha * m / (np.sqrt(v) + TAU)
    np.testing.assert_allclose(metrics["train_loss"].to_numpy(), losses, rtol=1e-10)
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("name, optimizer", [("fedopt", "adam"), ("fedadagrad", "adagrad"), ("fedyogi", "yogi")])
def test_variants_become_fedopt_with_their_optimizer_in_the_run_config(name, optimizer):
    config = RunConfig(data="d.h5", method=name, options={"server_lr": 1.0})
    assert config.method == "fedopt"
    assert config.options == {"optimizer": optimizer, "server_lr": 1.0, "beta1": 0.9, "beta2": 0.99, "tau": 1e-3,
                              "v0": "tau_squared", "bias_correction": "none"}
    row = dataclasses.asdict(config)
    assert variant_of(row) == name and setting_value(row) == 1.0  # tuned over server_lr
    assert fedopt.METHOD.tuned_setting == "server_lr" and fedopt.METHOD.mu == "none"


@pytest.mark.parametrize("options, message", [
    ({"optimizer": "sgd"}, "optimizer='sgd': expected one of adagrad, yogi, adam"),
    ({"bias_correction": "yes"}, "expected one of none, kingma, flower"),
    ({"tau": 0}, "tau=0.0: expected a number > 0"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        RunConfig(data="d.h5", method="fedopt", options=options)


@pytest.mark.parametrize("name", ["beta1", "beta2"])
@pytest.mark.parametrize("value", [1.0, -0.1, "1"])
def test_betas_outside_zero_one_stop_the_run_before_training(name, value):
    with pytest.raises(ValueError, match=rf"{name}=.*: expected a number in \[0, 1\)"):
        RunConfig(data="d.h5", method="fedopt", options={name: value})
    assert RunConfig(data="d.h5", method="fedopt", options={name: 0}).options[name] == 0.0
