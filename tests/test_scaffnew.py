"""Scaffnew against hand computations: with p = 1 a round is a gradient step on f, its control
variates average to zero, its random local work has mean 1/p, every engine takes the same steps,
and a killed run resumes bit-identical."""

import numpy as np
import pytest
import torch

from fedsim.core.engine import ENGINES, SGDSettings, batch_plan
from fedsim.methods import LocalProblem, scaffnew
from fedsim.core.checkpoint import Checkpoint
from fedsim.core.train import RunConfig, initial_params, run

from methods_common import mean_loss, numpy_grad, train_split
from tiny import tiny_clients, tiny_params


@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


def config(data, **kwargs):
    settings = dict(data=data, method="scaffnew", clients_per_round=8, epochs=1, batch_size=5, lr=0.05, rounds=6,
                    dtype="float64")
    return RunConfig(**{**settings, **kwargs})


def test_p_one_and_full_batches_make_a_round_a_gradient_step_on_f(data):
    rounds, lr = 4, 0.3
    metrics, _ = run(config(data, batch_size=10_000, lr=lr, rounds=rounds, engine="loop",
                            options={"p": 1.0, "weighting": "samples"}))
    model, x, y, offsets = train_split(data)
    w = initial_params(config(data), model, torch.float64).numpy()
    losses = []
    for _ in range(rounds + 1):
        losses.append(mean_loss(w, x, y))
        w = w - lr * numpy_grad(w, x, y, model.num_classes)
    np.testing.assert_allclose(metrics["train_loss"].to_numpy(), losses, rtol=1e-10)
    assert (metrics["gradient_evaluations"].diff().dropna() == len(y)).all()  # one full batch a round


@pytest.mark.parametrize("weighting", ["paper", "samples"])
def test_the_control_variates_average_to_zero(data, tmp_path, weighting):
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=1, seconds=0)
    run(config(data, rounds=5, options={"p": 0.2, "weighting": weighting}), checkpoint=checkpoint)
    h = torch.load(checkpoint.path, weights_only=True)["state"]["method.h"].numpy()  # after rounds 0-3
    sizes = np.diff(train_split(data)[3])
    a = np.full(len(sizes), 1 / len(sizes)) if weighting == "paper" else sizes / sizes.sum()
    assert np.abs(h).max() > 1e-3
    np.testing.assert_allclose(np.tensordot(a, h, axes=1), 0, atol=1e-12)


def test_the_local_steps_are_geometric_with_mean_one_over_p():
    p, rounds = 0.05, 4000
    steps = np.array([scaffnew.local_steps(7, t, p) for t in range(rounds)])
    assert steps.min() >= 1
    standard_error = np.sqrt(1 - p) / p / np.sqrt(rounds)
    assert abs(steps.mean() - 1 / p) < 4 * standard_error
    assert scaffnew.local_steps(7, 3, p) == steps[3]  # a function of (seed, round): a resumed run draws it again


def test_a_fixed_number_of_steps_is_the_start_of_the_epochs_plan():
    settings = SGDSettings(lr=0.1, epochs=3, batch_size=4, seed=5)
    long = batch_plan(23, settings, 2, 1)  # 3 epochs of 6 batches
    np.testing.assert_array_equal(batch_plan(23, settings, 2, 1, steps=11), long[:11])
    assert len(batch_plan(23, settings, 2, 1, steps=40)) == 40


@pytest.mark.parametrize("engine", ["kernel", "batched"])
def test_every_engine_takes_the_same_fixed_steps(engine):
    model, clients = tiny_clients()
    params = tiny_params(model)
    devices = np.array([4, 1, 3])
    correction = torch.as_tensor(np.random.default_rng(0).normal(size=(3, *params.shape)))
    problem = LocalProblem(mu=0.0, correction=correction, steps=9)
    settings = SGDSettings(lr=0.05, epochs=1, batch_size=4, seed=0)
    expected = ENGINES["loop"](model, params, problem, clients, devices, settings, 3)
    got = ENGINES[engine](model, params, problem, clients, devices, settings, 3)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-10, atol=1e-12)


def test_a_killed_run_resumes_bit_identical(data, tmp_path):
    reference, _ = run(config(data, rounds=8, options={"p": 0.1}))
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=3, seconds=0)
    run(config(data, rounds=7, options={"p": 0.1}), checkpoint=checkpoint)  # leaves round 6 behind
    saved = torch.load(checkpoint.path, weights_only=True)
    from fedsim.core.checkpoint import _fingerprint
    saved["settings"] = _fingerprint(config(data, rounds=8, options={"p": 0.1}))
    torch.save(saved, checkpoint.path)
    resumed, record = run(config(data, rounds=8, options={"p": 0.1}), checkpoint=checkpoint)
    assert record["result"]["resumed_from_round"] == 6
    assert resumed.equals(reference)


def test_partial_participation_and_a_probability_above_one_are_refused(data):
    with pytest.raises(ValueError, match="clients_per_round=3: scaffnew needs every device"):
        run(config(data, clients_per_round=3))
    with pytest.raises(ValueError, match=r"p=1.5: expected a number in \(0, 1\]"):
        run(config(data, options={"p": 1.5}))
