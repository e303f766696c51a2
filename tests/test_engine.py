import dataclasses

import numpy as np
import pytest
import torch

from fedsim.core import engine
from fedsim.core.engine import SGDSettings, batch_plan, local_sgd_batched, local_sgd_loop
from fedsim.methods import LocalProblem, weighted_average

from tiny import SIZES, tiny_clients, tiny_params


def test_batch_plan_visits_every_sample_once_per_epoch():
    settings = SGDSettings(lr=0.1, epochs=3, batch_size=4, seed=5)
    plan = batch_plan(10, settings, round_=2, device=7)
    assert plan.shape == (3 * 3, 4)  # ceil(10/4) = 3 batches per epoch
    for epoch in plan.reshape(3, -1):
        assert sorted(epoch[epoch >= 0]) == list(range(10))
    assert (plan[:, :2] >= 0).all() and (plan[2::3, 2:] == -1).all()  # the remainder batch is partial
    assert not np.array_equal(plan[:3], plan[3:6])  # a fresh shuffle every epoch
    np.testing.assert_array_equal(plan, batch_plan(10, settings, round_=2, device=7))
    assert not np.array_equal(plan, batch_plan(10, settings, round_=3, device=7))


def whole_round(dtype, devices, batch_size=4, mu=0.2):
    model, clients = tiny_clients(dtype=dtype)
    params = tiny_params(model, dtype=dtype)
    correction = 0.05 * torch.randn(len(devices), *params.shape, generator=torch.Generator().manual_seed(3),
                                    dtype=torch.float64).to(dtype)
    problem = LocalProblem(mu=mu, correction=correction)
    settings = SGDSettings(lr=0.05, epochs=5, batch_size=batch_size, seed=11)
    batched = local_sgd_batched(model, params, problem, clients, devices, settings, 4)
    loop = local_sgd_loop(model, params, problem, clients, devices, settings, 4)
    return batched, loop, params


@pytest.mark.parametrize("batch_size", [1, 4, 10, 200])
def test_batched_engine_equals_per_device_loop(batch_size):
    """A whole round on ragged devices (1 to 95 samples), proximal and correction terms on."""
    devices = np.arange(len(SIZES))
    batched, loop, params = whole_round(torch.float64, devices, batch_size)
    assert batched.shape == (len(devices), *params.shape)
    assert (batched != params).any(dim=(1, 2)).all()  # every device moved
    torch.testing.assert_close(batched, loop, rtol=0, atol=1e-6)


def test_batched_engine_keeps_the_callers_device_order():
    devices = np.array([4, 0, 3, 1])  # not sorted by size: the engine reorders internally
    batched, loop, _ = whole_round(torch.float64, devices)
    torch.testing.assert_close(batched, loop, rtol=0, atol=1e-6)


def test_float32_engines_agree_to_rounding():
    batched, loop, _ = whole_round(torch.float32, np.arange(len(SIZES)))
    torch.testing.assert_close(batched, loop, rtol=1e-4, atol=1e-5)



@pytest.mark.parametrize("terms", ["none", "mu and correction", "anchor"])
def test_mclrs_closed_form_steps_are_the_general_rules(terms):
    """MCLR.descend (transposed weights, four operations a step) against Model.descend (each step's
    stacked gradients, then the terms and the update), over steps with padded slots."""
    from fedsim.models import Model

    model, _ = tiny_clients(dtype=torch.float64)
    params = tiny_params(model, dtype=torch.float64)
    g = torch.Generator().manual_seed(5)
    steps, k, b = 6, 3, 4
    x = torch.randn(steps, k, b, params.shape[0], generator=g, dtype=torch.float64)
    y = torch.randint(0, params.shape[1], (steps, k, b), generator=g)
    weight = torch.full((steps, k, b), 1 / b, dtype=torch.float64)
    weight[2, 1, 1:] = 0
    weight[2, 1, 0] = 1
    extra = {"none": {}, "anchor": {"anchor": params + 0.1 * torch.randn(params.shape, generator=g, dtype=torch.float64)},
             "mu and correction": {"mu": 0.3, "correction": 0.05 * torch.randn(k, *params.shape, generator=g,
                                                                                dtype=torch.float64)}}[terms]
    start = params + 0.1 * torch.randn(k, *params.shape, generator=g, dtype=torch.float64)
    closed, general = start.clone(), start.clone()
    model.descend(closed, x, y, weight, 0.05, center=params, **extra)
    Model.descend(model, general, x, y, weight, 0.05, center=params, **extra)
    assert (closed != start).any(dim=(1, 2)).all()
    torch.testing.assert_close(closed, general, rtol=0, atol=1e-12)


def test_the_steps_chunks_change_no_bit(monkeypatch):
    """The general rule gathers the batches of many steps at once (engine._step_chunks): a chunk a step
    gives the same bits."""
    many = whole_round(torch.float32, np.arange(len(SIZES)))[0]
    monkeypatch.setattr(engine, "CHUNK_STEPS", 1)
    assert torch.equal(whole_round(torch.float32, np.arange(len(SIZES)))[0], many)

@pytest.mark.parametrize("batch_size", [1, 4, 10, 200])
@pytest.mark.parametrize("with_terms", [True, False])
def test_kernel_equals_per_device_loop(batch_size, with_terms):
    """The compiled kernel on whole rounds: ragged devices, mu and a correction term (or neither)."""
    model, clients = tiny_clients(dtype=torch.float64)
    params = tiny_params(model, dtype=torch.float64)
    devices = np.array([4, 0, 3, 1, 5, 2])
    correction = 0.05 * torch.randn(len(devices), *params.shape, generator=torch.Generator().manual_seed(3),
                                    dtype=torch.float64)
    problem = LocalProblem(mu=0.2, correction=correction) if with_terms else LocalProblem(mu=0.0, correction=None)
    settings = SGDSettings(lr=0.05, epochs=5, batch_size=batch_size, seed=11)
    kernel = engine.local_sgd_kernel(model, params, problem, clients, devices, settings, 4)
    loop = local_sgd_loop(model, params, problem, clients, devices, settings, 4)
    assert (kernel != params).any(dim=(1, 2)).all()
    torch.testing.assert_close(kernel, loop, rtol=0, atol=1e-6)


@pytest.mark.parametrize("fixed_steps", [None, 13])
@pytest.mark.parametrize("batch_size", [1, 4, 10])
def test_kernel_draws_the_batches_the_plans_hold(fixed_steps, batch_size):
    """The kernel draws fedsim's batches inside its call (local_sgd_shuffled): the same bits as the
    same call over the stacked plans, for E epochs and for a fixed step count (Scaffnew's), with a
    device that has no rows and the devices in any order."""
    from fedsim.core import kernel

    model, clients = tiny_clients(sizes=[1, 7, 0, 10, 23, 95, 4], dtype=torch.float32)
    w0 = tiny_params(model, dtype=torch.float32).numpy()
    devices = np.array([5, 2, 0, 6, 3, 1, 4])
    settings = SGDSettings(lr=0.05, epochs=3, batch_size=batch_size, seed=11)
    x, y = clients.kernel_inputs()
    rows, first, steps, order = engine._stacked_plans(clients, devices, settings, 7, fixed_steps)
    planned = np.empty((len(devices), *w0.shape), w0.dtype)
    planned[order] = kernel.local_sgd(x, y, rows, first, steps, w0, None, settings.lr, 0.1)
    sizes = np.diff(clients.offsets)[devices]
    drawn = kernel.local_sgd_shuffled(x, y, clients.offsets[devices], sizes, devices, steps[np.argsort(order)],
                                      batch_size, settings.seed, 7, w0, None, settings.lr, 0.1)
    np.testing.assert_array_equal(drawn, planned)
    assert not np.array_equal(drawn[0], w0) and np.array_equal(drawn[1], w0)  # no rows: it stays at w0


def test_float32_kernel_agrees_with_the_batched_engine_to_rounding():
    model, clients = tiny_clients(dtype=torch.float32)
    params = tiny_params(model, dtype=torch.float32)
    devices = np.arange(len(SIZES))
    problem = LocalProblem(mu=0.2, correction=None)
    settings = SGDSettings(lr=0.05, epochs=5, batch_size=4, seed=11)
    kernel = engine.local_sgd_kernel(model, params, problem, clients, devices, settings, 4)
    batched = local_sgd_batched(model, params, problem, clients, devices, settings, 4)
    assert kernel.dtype == torch.float32
    torch.testing.assert_close(kernel, batched, rtol=1e-4, atol=1e-5)


def test_auto_engine_takes_the_accelerator_a_model_declares(monkeypatch):
    """auto: the model's accelerator on its device, the general rule for a model that names none,
    and for a problem asking what the accelerator does not implement."""
    calls = []
    monkeypatch.setitem(engine.ACCELERATORS, "kernel", dataclasses.replace(
        engine.KERNEL, local_sgd=lambda *a: calls.append("kernel")))
    monkeypatch.setattr(engine, "local_sgd_batched", lambda *a, **k: calls.append("batched"))
    model, clients = tiny_clients()
    params, plain = tiny_params(model), LocalProblem(0.0, None)
    engine.local_sgd_auto(model, params, plain, clients, [0], None, 0)

    class Unaccelerated(type(model)):
        accelerators = ()
    engine.local_sgd_auto(Unaccelerated(5, 3), params, plain, clients, [0], None, 0)
    monkeypatch.setitem(engine.ACCELERATORS, "kernel", dataclasses.replace(
        engine.ACCELERATORS["kernel"], fields=frozenset({"correction"})))
    engine.local_sgd_auto(model, params, LocalProblem(0.5, None), clients, [0], None, 0)  # mu: not in its fields
    assert calls == ["kernel", "batched", "batched"]


@dataclasses.dataclass(frozen=True)
class PlantedProblem(LocalProblem):
    """A local problem with a field no engine implements (as a new method might add one)."""

    planted: object = None


@pytest.mark.parametrize("name", ["auto", "kernel", "batched", "loop"])
def test_no_engine_runs_a_problem_without_a_field_it_asks_for(name):
    model, clients = tiny_clients()
    params = tiny_params(model)
    settings = SGDSettings(lr=0.05, epochs=1, batch_size=4, seed=11)
    unset = PlantedProblem(mu=0.0, correction=None)
    assert engine.ENGINES[name](model, params, unset, clients, [0, 1], settings, 0).shape == (2, *params.shape)
    with pytest.raises(ValueError, match="local problem field 'planted' is not implemented by the batched engine"
                       if name in ("auto", "batched") else f"field 'planted' is not implemented by the {name} engine"):
        engine.ENGINES[name](model, params, PlantedProblem(mu=0.0, correction=None, planted=1.0), clients, [0, 1],
                             settings, 0)


def test_every_declared_accelerator_exists_and_declares_the_fields_it_implements():
    from fedsim import models

    for model in models.REGISTRY.values():
        assert set(model.accelerators) <= set(engine.ACCELERATORS), model.name
    assert engine.KERNEL.fields == engine.GENERAL_FIELDS
    assert engine.GENERAL_FIELDS == {f.name for f in dataclasses.fields(LocalProblem)}


def _torch_only(monkeypatch):
    """Route metrics and gradients through torch (the reference) instead of the compiled kernel."""
    from fedsim.core import metrics

    monkeypatch.setattr(metrics, "accelerator_for", lambda *a: None)
    monkeypatch.setattr(engine, "accelerator_for", lambda *a: None)


@pytest.mark.parametrize("classes", [3, 10, 16])  # the gradient's class tiles: pairs, fives, both
@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
def test_compiled_evaluation_equals_torchs(monkeypatch, dtype, tolerance, classes):
    """Every metric of a round, ragged devices with an empty one, a model large enough that some
    samples' logits differ by hundreds (the loss must stay finite where softmax underflows)."""
    from fedsim.core.metrics import evaluate

    model, train = tiny_clients(sizes=[*SIZES, 0], classes=classes, dtype=dtype)
    _, test = tiny_clients(sizes=[3, 0, 5, 2, 9, 1, 4], classes=classes, seed=2, dtype=dtype)
    params = 40 * tiny_params(model, dtype=dtype)
    compiled = evaluate(model, params, train, test)
    _torch_only(monkeypatch)
    reference = evaluate(model, params, train, test)
    assert 0 < compiled["train_acc"] < 1 and np.isfinite(compiled["train_loss"]) and compiled["train_loss"] > 10
    for name, value in reference.items():
        assert compiled[name] == pytest.approx(value, rel=tolerance, abs=tolerance), name


@pytest.mark.parametrize("classes", [3, 10, 16])
def test_compiled_device_grads_equal_the_models(monkeypatch, classes):
    """FedDANE's local gradients: any devices, in the caller's order, of a Clients holding only some."""
    model, clients = tiny_clients(classes=classes)
    held = engine.Clients.from_arrays(*clients.subset([1, 3, 4])[:2], np.array([0, 7, 30, 125]), ids=[1, 3, 4])
    params = tiny_params(model)
    compiled = engine.device_grads(model, params, held, [4, 1])
    _torch_only(monkeypatch)
    torch.testing.assert_close(compiled, engine.device_grads(model, params, held, [4, 1]), rtol=0, atol=1e-12)
    torch.testing.assert_close(compiled, model.device_grads(params, *clients.subset([4, 1])), rtol=0, atol=1e-12)


def test_compiled_evaluation_of_a_diverged_model_reads_as_torchs(monkeypatch):
    """A NaN logit: torch's argmax takes the first NaN, so the diverged round's accuracies agree too."""
    from fedsim.core.metrics import evaluate

    model, train = tiny_clients()
    _, test = tiny_clients(sizes=[3, 5, 2, 9, 1, 4], seed=2)
    params = tiny_params(model)
    params[0, 1] = float("nan")  # class 1's logit is NaN for every sample with a nonzero first feature
    compiled = evaluate(model, params, train, test)
    _torch_only(monkeypatch)
    reference = evaluate(model, params, train, test)
    assert np.isnan(compiled["train_loss"]) and np.isnan(reference["train_loss"])
    assert 0 < compiled["train_acc"] < 1
    assert (compiled["train_acc"], compiled["test_acc"]) == (reference["train_acc"], reference["test_acc"])
    for name in ("grad_dissimilarity", "b_dissimilarity"):  # a NaN gradient: NaN both ways
        assert np.isnan(compiled[name]) and np.isnan(reference[name]), name


def test_compiled_evaluation_refuses_weights_wider_than_the_rows():
    """The compiled call writes W^T into rows of x's padded width without bounds checks: weights for
    more features than that must be an error, not a write past the buffer."""
    from fedsim.core import kernel

    x, y, offsets = kernel.padded(np.zeros((3, 2), np.float32)), np.zeros(4, np.int64), np.array([0, 3])
    with pytest.raises(ValueError, match=f"weights with {x.shape[1] + 1} rows, for x's rows {x.shape[1]} wide"):
        kernel.evaluation(x, y, offsets, x, y, offsets, np.zeros((x.shape[1] + 1, 2), np.float32))
    assert np.isfinite(kernel.evaluation(x, y, offsets, x, y, offsets, np.zeros((x.shape[1], 2), np.float32))[0])


# The server's averages: (devices, model shape), a model of one element and per-device scalars
# (FedExP's spread, S-DANE's gap) included.
AVERAGE_CASES = [(1, (3, 2)), (2, (2,)), (7, (61, 10)), (10, (785, 10)), (30, (13, 5)), (200, (64,)),
                 (10, (1,)), (5, ()), (1000, (3,))]


def average_case(devices, shape, dtype, seed=0):
    """Device tensors, a fifth of them -0.0 and one element -0.0 on every device, and weights with a
    zero first: the signed zeros a sum's order decides."""
    rng = np.random.default_rng(seed)
    stacked = rng.normal(size=(devices, *shape)).astype(dtype)
    stacked[rng.random(stacked.shape) < 0.2] = -0.0
    stacked.reshape(devices, -1)[:, 0] = -0.0
    weights = rng.random(devices).astype(dtype)
    weights[0] = 0
    return weights, stacked


def in_fedsims_order(weights, stacked, devices=None):
    """sum_k weights[k] stacked[k] as fedsim.average defines it, written out: from zeros, device by
    device, each product rounded to the dtype (numpy's multiply) and then each sum (its add). Two
    elementwise operations, never a reduction: no fused multiply-add, no pairwise sum.
    `devices`: the devices in another order."""
    acc = np.zeros(stacked.shape[1:], stacked.dtype)
    for k in range(len(stacked)) if devices is None else devices:
        product = weights[k] * stacked[k]  # a dtype scalar times dtype values: rounded to the dtype
        acc = acc + product
    return np.asarray(acc, stacked.dtype)


def pairwise(weights, stacked):
    """The same products summed by pairs, as a blocked or vectorised BLAS kernel may."""
    terms = [weights[k] * stacked[k] for k in range(len(stacked))]
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return np.asarray(terms[0], stacked.dtype)


def assert_within_reordering(got, expected, weights, stacked):
    """|got - expected| <= (devices + 1) eps sum_k |w_k x_k|: the rounding any two orders of the sum
    (fused multiply-adds too) can differ by. The tolerance a vendor's reduction is held to."""
    eps = np.finfo(stacked.dtype).eps
    scale = np.tensordot(np.abs(weights).astype(np.float64), np.abs(stacked).astype(np.float64), axes=1)
    error = np.abs(np.asarray(got, np.float64) - np.asarray(expected, np.float64))
    assert (error <= (len(stacked) + 1) * eps * scale).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_server_average_on_the_cpu_is_fedsims_order_bit_for_bit(dtype):
    """methods.weighted_average on the CPU (fedsim.average's compiled sum) equals fedsim's order written
    out in numpy, bit for bit and signed zeros included, for any device count and model shape, from a
    strided view too: the same bits whatever CPU or BLAS runs it."""
    for devices, shape in AVERAGE_CASES:
        weights, stacked = average_case(devices, shape, dtype)
        expected = in_fedsims_order(weights, stacked).tobytes()
        got = weighted_average(torch.from_numpy(stacked), torch.from_numpy(weights))
        assert got.shape == shape and got.numpy().dtype == dtype
        assert got.numpy().tobytes() == expected, (devices, shape)
        if len(shape) == 2:  # the same values, not contiguous
            strided = torch.from_numpy(np.ascontiguousarray(stacked.transpose(0, 2, 1))).transpose(1, 2)
            assert weighted_average(strided, torch.from_numpy(weights)).numpy().tobytes() == expected


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tensordot_where_the_average_takes_it_is_fedsims_within_rounding(dtype):
    """weighted_average takes torch.tensordot for a tensor autograd tracks (as on CUDA, tests/test_cuda.py):
    its order is its BLAS's, on this CPU, so it is held to fedsim's within rounding, not in bits."""
    for devices, shape in AVERAGE_CASES:
        weights, stacked = average_case(devices, shape, dtype)
        expected = in_fedsims_order(weights, stacked)
        tracked = torch.from_numpy(stacked).requires_grad_()
        for got in (torch.tensordot(torch.from_numpy(weights), torch.from_numpy(stacked), dims=1),
                    weighted_average(tracked, torch.from_numpy(weights)).detach()):
            assert got.shape == shape
            assert_within_reordering(got.numpy(), expected, weights, stacked)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_sum_in_another_order_differs_in_bits_within_rounding(dtype):
    """Why the bits are tested against fedsim's order and a BLAS's only within rounding: the same
    average summed in another order (devices reversed; by pairs), as tensordot may on another CPU
    (MKL on an Intel AVX-512 core), differs in value for a default run's average (10 devices, MCLR's
    61 x 10), within the rounding bound. A bit test against such a sum fails, though nothing is wrong."""
    weights, stacked = average_case(10, (61, 10), dtype)
    ours = weighted_average(torch.from_numpy(stacked), torch.from_numpy(weights)).numpy()
    for other in (in_fedsims_order(weights, stacked, devices=range(9, -1, -1)), pairwise(weights, stacked)):
        assert (other != ours).any()  # values, not only signed zeros
        assert_within_reordering(other, ours, weights, stacked)
