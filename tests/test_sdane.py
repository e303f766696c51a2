"""S-DANE and Acc-S-DANE against hand computations: the proximal-point property with one device,
two rounds by hand, the adaptive lambda rule; and whole runs (engines agree, resume bit-identical)."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from fedsim.core.engine import ENGINES, SGDSettings, device_grads
from fedsim.methods import resolve, sdane
from fedsim.core.metrics import COLUMNS
from fedsim.core.checkpoint import Checkpoint
from fedsim.core.train import RunConfig, run

from methods_common import LR, context, device_arrays, hand_local_sgd, numpy_grad
from tiny import SIZES, tiny_clients, tiny_params

METHOD = sdane.METHOD
EVERYONE = np.arange(len(SIZES))


@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


@pytest.fixture(scope="module")
def tiny():
    model, clients = tiny_clients()
    return model, clients, tiny_params(model)


def sdane_round(tiny, params, state, solvers, epochs=3, engine="batched", round_=0, **options):
    """One round of the method on the tiny problem, the engine solving its local problems (one full
    batch per epoch): (problem, local models, new params, new state)."""
    model, clients, _ = tiny
    settings = SGDSettings(lr=LR, epochs=epochs, batch_size=1000, seed=0)

    def grads_at(points, devices):  # as fedsim.core.train gives it
        if points.dim() == params.dim():
            return device_grads(model, points, clients, devices)
        return torch.cat([device_grads(model, w, clients, [k]) for w, k in zip(points, devices)])

    ctx = context(model, clients, params, solvers, options=METHOD.resolve(options), settings=settings, round_=round_)
    ctx = dataclasses.replace(ctx, grads_at=grads_at)
    problem = METHOD.local_problem(ctx, state)
    models = ENGINES[engine](model, problem.center, problem, clients, np.asarray(solvers), settings, round_)
    return (problem, models, *METHOD.server_update(ctx, state, models))


def hand_round(tiny, x, state, solvers, lam, mu=0.0, accelerated=False, epochs=3):
    """The paper's round in numpy, the local problem solved by full-batch steps from y."""
    model, clients, _ = tiny
    v, A, B = state["v"], state["A"], state["B"]
    if accelerated:
        a = (B + np.sqrt(B**2 + 4 * lam * A * B)) / (2 * lam)
        assert lam * a**2 == pytest.approx((A + a) * B, rel=1e-12)
        y = (A * x + a * v) / (A + a)
    else:
        a, y = 1 / lam, v
    arrays = {k: device_arrays(clients, k) for k in solvers}
    n = clients.sizes[solvers].astype(float)
    p = n / n.sum()
    at_y = [numpy_grad(y, *arrays[k], model.num_classes) for k in solvers]
    mean_at_y = sum(p_j * g for p_j, g in zip(p, at_y))
    h = [g - mean_at_y for g in at_y]
    w = [hand_local_sgd(y, *arrays[k], model.num_classes, epochs, mu=lam, correction=-h_k)
         for k, h_k in zip(solvers, h)]
    x_new = sum(p_j * w_k for p_j, w_k in zip(p, w))
    g = sum(p_j * numpy_grad(w_k, *arrays[k], model.num_classes) for p_j, w_k, k in zip(p, w, solvers))
    b = B if accelerated else 1.0
    v_new = (mu * a * x_new + b * v - a * g) / (mu * a + b)
    new = {"v": v_new, "A": A + a, "B": B + mu * a} if accelerated else {"v": v_new, "A": A, "B": B}
    return {"y": y, "h": np.stack(h), "w": np.stack(w), "x": x_new, "g": g}, new


def numpy_state(state):
    return {"v": state["v"].numpy(), "A": float(state["A"]), "B": float(state["B"])}


def prox(tiny, device, v, lam):
    """argmin_w F(w) + lam/2 ||w - v||^2 by full gradient descent in numpy, to 1e-12."""
    model, clients, _ = tiny
    x, y = device_arrays(clients, device)
    w = np.zeros_like(v)
    for _ in range(100_000):
        step = LR * (numpy_grad(w, x, y, model.num_classes) + lam * (w - v))
        w = w - step
        if np.abs(step).max() < 1e-14:
            break
    assert np.abs(numpy_grad(w, x, y, model.num_classes) + lam * (w - v)).max() < 1e-12
    return w


@pytest.mark.parametrize("accelerated, mu", [(False, 0.0), (False, 0.5), (True, 0.0), (True, 0.5)])
def test_one_device_solved_exactly_is_the_proximal_point_method(tiny, accelerated, mu):
    """h = 0, and the exact local solution is x+ = prox_{f/lambda}(v); then grad f(x+) = lambda (v - x+),
    so v+ = x+ for every mu (Acc's first round: A = 0, a = 1/lambda, y = v)."""
    _, _, params = tiny
    lam, device = 1.0, 4
    state = METHOD.init(params, len(SIZES))
    state["v"] = params + torch.as_tensor(np.random.default_rng(3).normal(size=params.shape))  # v != x
    problem, models, x_new, new = sdane_round(tiny, params, state, [device], epochs=800, engine="batched",
                                              accelerated=accelerated, strong_convexity=mu, **{"lambda": lam})
    assert problem.mu == lam and torch.equal(problem.center, state["v"])
    np.testing.assert_allclose(problem.correction.numpy(), 0.0, atol=1e-15)
    expected = prox(tiny, device, state["v"].numpy(), lam)
    np.testing.assert_allclose(x_new.numpy(), expected, rtol=0, atol=1e-8)
    np.testing.assert_allclose(new["v"].numpy(), expected, rtol=0, atol=1e-8)


@pytest.mark.parametrize("engine", ["kernel", "loop"])
@pytest.mark.parametrize("accelerated, mu", [(False, 0.0), (False, 0.3), (True, 0.0), (True, 0.3)])
def test_two_rounds_match_hand_computation(tiny, engine, accelerated, mu):
    _, _, params = tiny
    lam, options = 0.7, {"accelerated": accelerated, "strong_convexity": mu}
    x, state = params, METHOD.init(params, len(SIZES))
    hand_x, hand_state = params.numpy(), numpy_state(state)
    for t, solvers in enumerate([[4, 1, 2], [0, 4, 5, 3]]):  # partial participation, other devices each round
        problem, models, x, state = sdane_round(tiny, x, state, solvers, engine=engine, round_=t,
                                                **options, **{"lambda": lam})
        hand, hand_state = hand_round(tiny, hand_x, hand_state, solvers, lam, mu, accelerated)
        assert problem.mu == lam
        np.testing.assert_allclose(problem.center.numpy(), hand["y"], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(problem.correction.numpy(), -hand["h"], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(models.numpy(), hand["w"], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(x.numpy(), hand["x"], rtol=1e-10, atol=1e-12)
        for key in ("v", "A", "B"):
            np.testing.assert_allclose(np.asarray(state[key]), hand_state[key], rtol=1e-10, atol=1e-12)
        assert float(state["lambda_scale"]) == 1.0  # fixed lambda
        hand_x = hand["x"]
    assert accelerated or (float(state["A"]), float(state["B"])) == (0.0, 1.0)
    if accelerated:  # the second round's centre mixes x and v: not v itself
        assert not np.allclose(hand["y"], hand_state["v"])


@pytest.mark.parametrize("solvers", [[0, 1, 2], [0, 0, 1, 2, 3, 4]])  # a sample; a draw with a repeat
def test_adaptive_lambda_refuses_partial_participation(tiny, solvers):
    _, _, params = tiny
    with pytest.raises(ValueError, match="clients_per_round=.*every device") as err:
        sdane_round(tiny, params, METHOD.init(params, len(SIZES)), solvers, adaptive=True)
    assert "\n" not in str(err.value)
    sdane_round(tiny, params, METHOD.init(params, len(SIZES)), solvers)  # without it, fine


def test_adaptive_lambda_refuses_partial_participation_in_a_run(data):
    with pytest.raises(ValueError, match="^bad run setting clients_per_round=4: sdane with adaptive=True"):
        run(RunConfig(data=data, method="sdane", options={"adaptive": True}, clients_per_round=4, rounds=1))


@pytest.mark.parametrize("lam, accepted", [(1.0, True), (0.01, False)])
@pytest.mark.parametrize("accelerated", [False, True])
def test_adaptive_lambda_halves_on_accept_and_doubles_and_keeps_the_model_on_reject(tiny, lam, accepted,
                                                                                    accelerated):
    """Accept iff mean <grad f_k(w_k) - h_k(x+), y - w_k> >= ||g||^2 / (2 lambda), h_k at the new mean x+."""
    model, clients, params = tiny
    options = {"adaptive": True, "accelerated": accelerated, "lambda": lam}
    state = METHOD.init(params, len(SIZES))
    problem, models, x_new, new = sdane_round(tiny, params, state, EVERYONE, epochs=300, **options)
    hand, hand_state = hand_round(tiny, params.numpy(), numpy_state(state), EVERYONE, lam, 0.0, accelerated,
                                  epochs=300)
    n = clients.sizes.astype(float)
    p = n / n.sum()
    arrays = [device_arrays(clients, k) for k in EVERYONE]
    grads = [numpy_grad(w, *xy, model.num_classes) for w, xy in zip(hand["w"], arrays)]
    at_x = [numpy_grad(hand["x"], *xy, model.num_classes) for xy in arrays]
    h_x = [g - sum(p_j * g_j for p_j, g_j in zip(p, at_x)) for g in at_x]
    gap = sum(p_k * np.sum((g - h) * (hand["y"] - w)) for p_k, g, h, w in zip(p, grads, h_x, hand["w"]))
    threshold = np.sum(hand["g"] ** 2) / (2 * lam)
    assert (gap >= threshold) == accepted and abs(gap - threshold) > 1e-6 * abs(threshold)  # a clear verdict
    # with h_k at y instead, this local solve passes either way: the rule would not see lambda too small
    gap_at_y = sum(p_k * np.sum((g - h) * (hand["y"] - w)) for p_k, g, h, w in zip(p, grads, hand["h"], hand["w"]))
    assert gap_at_y >= threshold
    if accepted:
        np.testing.assert_allclose(x_new.numpy(), hand["x"], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(new["v"].numpy(), hand_state["v"], rtol=1e-10, atol=1e-12)
        assert float(new["A"]) == pytest.approx(hand_state["A"], rel=1e-12)
        assert float(new["lambda_scale"]) == 0.5
    else:  # x, v, A, B as they were
        assert torch.equal(x_new, params) and torch.equal(new["v"], state["v"])
        assert (float(new["A"]), float(new["B"])) == (0.0, 1.0)
        assert float(new["lambda_scale"]) == 2.0
    next_problem = sdane_round(tiny, x_new, new, EVERYONE, epochs=1, round_=1, **options)[0]
    assert next_problem.mu == (lam / 2 if accepted else lam * 2)


VARIANTS = {"sdane": {}, "sdane_accelerated": {"strong_convexity": 0.01},
            "sdane_adaptive": {"adaptive": True}, "sdane_accelerated_adaptive": {"adaptive": True, "accelerated": True}}


def run_config(data, name, **kw):
    method = "sdane_accelerated" if name == "sdane_accelerated" else "sdane"
    k = 8 if VARIANTS[name].get("adaptive") else 4
    return RunConfig(**{**dict(data=data, method=method, options={**VARIANTS[name], "lambda": 0.5}, clients_per_round=k,
                               epochs=2, batch_size=5, lr=0.05, rounds=6, dtype="float64"), **kw})


@pytest.mark.parametrize("name", VARIANTS)
def test_kernel_and_loop_engines_agree_on_a_run(data, name):
    kernel, _ = run(run_config(data, name, engine="kernel"))
    loop, _ = run(run_config(data, name, engine="loop"))
    assert kernel["train_loss"].iloc[-1] < kernel["train_loss"].iloc[0]
    np.testing.assert_allclose(kernel[COLUMNS].to_numpy(), loop[COLUMNS].to_numpy(), rtol=1e-10, atol=1e-12)


class Killed(Exception):
    pass


@pytest.mark.parametrize("name", VARIANTS)
def test_a_resumed_run_ends_bit_identical(data, tmp_path, name):
    config = run_config(data, name)
    reference, _ = run(config)
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=1, seconds=0)

    def kill_at_round_4(row):
        if row["round"] == 4:
            raise Killed
    with pytest.raises(Killed):
        run(config, on_round=kill_at_round_4, checkpoint=checkpoint)  # saved before round 4: after rounds 0-3
    saved = torch.load(checkpoint.path, weights_only=True)["state"]
    assert {"method.v", "method.A", "method.B", "method.lambda_scale"} <= set(saved)
    if VARIANTS[name].get("accelerated") or name == "sdane_accelerated":
        assert float(saved["method.A"]) > 0  # the scalars of the accelerated form moved, and were saved
    resumed, record = run(config, checkpoint=checkpoint)
    assert record["result"]["resumed_from_round"] == 4
    pd.testing.assert_frame_equal(resumed, reference, check_exact=True)


def test_the_variant_sets_accelerated_and_lambda_is_tuned():
    assert resolve("sdane_accelerated")[1]["accelerated"] is True and resolve("sdane")[1]["accelerated"] is False
    assert METHOD.tuned == "lambda" and METHOD.mu == "none" and all(v > 0 for v in METHOD.options["lambda"].grid)
    assert (METHOD.exchanges, METHOD.gradients, METHOD.down, METHOD.up) == (2, "none", 2, 3)
    with pytest.raises(ValueError, match="lambda"):
        METHOD.resolve({"lambda": 0.0})


def test_a_negative_strong_convexity_is_refused():
    with pytest.raises(ValueError, match="strong_convexity=-0.1: expected a number >= 0"):
        METHOD.resolve({"strong_convexity": -0.1})
