"""The LSTM models: gradients, batched == per-device engine, device_grads, runs on tiny LEAF-format files."""

import numpy as np
import pandas as pd
import pytest
import torch

from fedsim import models
from fedsim.core.engine import SGDSettings, StepGraphs, local_sgd_batched, local_sgd_loop
from fedsim.methods import LocalProblem
from fedsim.models.char_lstm import CharLSTM
from fedsim.models.sent140_lstm import Sent140LSTM
from fedsim.core.train import RunConfig, run

from helpers.tiny_lstm import params_of, tiny_char, tiny_clients, tiny_inputs, tiny_sent, write_leaf_like


@pytest.mark.parametrize("make", [tiny_char, tiny_sent])
def test_gradients_match_finite_differences(make):
    model = make()
    params = params_of(model) + 0.1 * torch.randn(model.layout.size, dtype=torch.float64)  # nonzero biases
    x, y = tiny_inputs(model, 6)
    eps, numeric = 1e-6, torch.zeros_like(params)
    for i in range(len(params)):
        step = torch.zeros_like(params)
        step[i] = eps
        numeric[i] = (model.loss(params + step, x, y) - model.loss(params - step, x, y)) / (2 * eps)
    w = params.clone().requires_grad_(True)
    (autograd,) = torch.autograd.grad(model.loss(w, x, y), w)
    torch.testing.assert_close(autograd, numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("make", [tiny_char, tiny_sent])
def test_stacked_forward_equals_per_device(make):
    model = make()
    stack = torch.stack([params_of(model), params_of(model) * 0.5])
    x, y = tiny_inputs(model, 6)
    stacked = model.logits(stack, x.view(2, 3, -1))
    single = torch.stack([model.logits(stack[k], x.view(2, 3, -1)[k]) for k in range(2)])
    torch.testing.assert_close(stacked, single, rtol=0, atol=1e-12)


@pytest.mark.parametrize("make", [tiny_char, tiny_sent])
@pytest.mark.parametrize("batch_size", [1, 5])
def test_batched_engine_equals_per_device_loop(make, batch_size):
    """A whole round on ragged devices, in a shuffled device order, correction and proximal terms on."""
    model = make()
    clients, params = tiny_clients(model), params_of(model)
    devices = np.array([2, 0, 4, 3, 1])
    correction = 0.05 * torch.randn(len(devices), len(params), generator=torch.Generator().manual_seed(3),
                                    dtype=torch.float64)
    problem = LocalProblem(mu=0.2, correction=correction)
    settings = SGDSettings(lr=0.3, epochs=3, batch_size=batch_size, seed=11)
    batched = local_sgd_batched(model, params, problem, clients, devices, settings, 4)
    loop = local_sgd_loop(model, params, problem, clients, devices, settings, 4)
    assert batched.shape == (len(devices), len(params))
    assert (batched != params).any(dim=1).all()
    torch.testing.assert_close(batched, loop, rtol=0, atol=1e-6)


def test_device_grads_use_at_most_four_batches_of_fifty(monkeypatch):
    model = tiny_char()
    sizes = [30, 120, 260]  # all of them; the first 100; the first 200
    clients, params = tiny_clients(model, sizes), params_of(model)
    x, y = clients.x[:-1], clients.y[:-1]
    monkeypatch.setattr(models, "GRAD_FLOATS", 1)  # one device per chunk: chunking changes nothing
    grads = model.device_grads(params, x, y, clients.offsets)
    for k, used in enumerate([30, 100, 200]):
        w = params.clone().requires_grad_(True)
        rows = slice(int(clients.offsets[k]), int(clients.offsets[k]) + used)
        (expected,) = torch.autograd.grad(model.loss(w, x[rows], y[rows]), w)
        torch.testing.assert_close(grads[k], expected, rtol=0, atol=1e-12)


def test_chunked_stats_equal_one_pass(monkeypatch):
    model = tiny_sent()
    clients, params = tiny_clients(model), params_of(model)
    x, y = clients.x[:-1], clients.y[:-1]
    whole = model.stats(params, x, y)
    monkeypatch.setattr(models, "EVAL_FLOATS", 1)  # one row per chunk
    assert model.stats(params, x, y) == pytest.approx(whole, rel=1e-12)


def test_a_gpu_evaluates_in_fewer_larger_chunks():
    """On CUDA an evaluation chunk holds EVAL_FLOATS_GPU activations (an LSTM's chunk is hundreds of
    sequential kernels, so fewer chunks are fewer launches); on a CPU EVAL_FLOATS (near the cache)."""
    per_sample = 80 * 256 * 2  # the char LSTM's order of magnitude
    cpu, gpu = models.eval_chunk_rows(per_sample, "cpu"), models.eval_chunk_rows(per_sample, "cuda")
    assert cpu == models.EVAL_FLOATS // per_sample and gpu == models.EVAL_FLOATS_GPU // per_sample and gpu >= 64 * cpu
    assert models.eval_chunk_rows(models.EVAL_FLOATS_GPU * 2, "cuda") == 1  # at least a row


@pytest.mark.parametrize("kind, lr", [("shakespeare", 0.8), ("sent140", 0.3)])
def test_few_round_runs_decrease_the_loss(tmp_path, kind, lr):
    """The paper's models at full size (LSTM 256 / 100) on a few samples: small and slow enough."""
    data = write_leaf_like(tmp_path / f"{kind}.h5", kind, per_device=12 if kind == "shakespeare" else 30)
    for method, mu in [("fedavg", 0.0), ("feddane", 0.01)]:
        config = RunConfig(data=data, method=method, mu=mu, clients_per_round=2, epochs=1, batch_size=10,
                           lr=lr, rounds=3, second_subset="same")
        metrics, record = run(config)
        assert len(metrics) == 4 and np.isfinite(metrics[["train_loss", "b_dissimilarity"]].values).all()
        if method == "fedavg":
            assert metrics.train_loss.iloc[-1] < metrics.train_loss.iloc[0]
        assert record["result"]["diverged_round"] is None


@pytest.mark.parametrize("kind", ["shakespeare", "sent140"])
def test_authors_feddane_correction_is_refused_on_the_lstms(tmp_path, kind):
    """The authors' FedDANE stops with a TypeError before its first round on these models (README):
    there is no behaviour of theirs to replay, so the run refuses at once, naming the setting."""
    data = write_leaf_like(tmp_path / f"{kind}.h5", kind)
    config = RunConfig(data=data, method="feddane_authors", mu=0.01, clients_per_round=2)
    with pytest.raises(ValueError, match="method='feddane_authors'.*defined for the MCLR models only"):
        run(config)


def graphs_on(monkeypatch, device_types):
    """The LSTMs' steps as StepGraphs on these device types (on a CPU: its buffers and warm-up, no graph).
    Set on each model class: a class's spec sets its own `graphs_on`, over LSTMModel's."""
    for cls in (CharLSTM, Sent140LSTM):
        monkeypatch.setattr(cls, "graphs_on", device_types)


@pytest.mark.parametrize("make", [tiny_char, tiny_sent])
def test_graphed_steps_give_the_stacked_rules_bits(make, monkeypatch):
    """StepGraphs' fixed buffers, per-size captures and undone warm-up steps change no bit: ragged
    devices (the stack shrinks), correction, proximal term and Mime's anchor on."""
    model = make()
    clients, params = tiny_clients(model), params_of(model)
    devices = np.array([2, 0, 4, 3, 1])
    g = torch.Generator().manual_seed(3)
    problem = LocalProblem(mu=0.2, correction=0.05 * torch.randn(len(devices), len(params), generator=g,
                                                                 dtype=torch.float64),
                           anchor=params + 0.01 * torch.randn(len(params), generator=g, dtype=torch.float64))
    settings = SGDSettings(lr=0.3, epochs=3, batch_size=2, seed=11)
    plain = local_sgd_batched(model, params, problem, clients, devices, settings, 4)
    graphs_on(monkeypatch, ("cpu",))
    graphed = local_sgd_batched(model, params, problem, clients, devices, settings, 4)
    assert StepGraphs.held(model).captures > 1  # the steps ran as StepGraphs, one capture per stack size
    assert (graphed != params).any(dim=1).all()
    assert torch.equal(graphed, plain)


@pytest.mark.parametrize("kind, lr", [("shakespeare", 0.8), ("sent140", 0.3)])
def test_five_graphed_rounds_give_the_same_losses_and_model(tmp_path, kind, lr, monkeypatch):
    """The paper's LSTMs over 5 rounds of FedDANE, float32: graphed steps against the plain rule, every
    metric equal (on a CPU the graph's stand-in runs the same operations: equal bits; on CUDA,
    tests/test_cuda.py)."""
    data = write_leaf_like(tmp_path / f"{kind}.h5", kind, per_device=12 if kind == "shakespeare" else 30)
    config = RunConfig(data=data, method="feddane", mu=0.01, clients_per_round=2, epochs=1, batch_size=10, lr=lr,
                       rounds=5)
    plain, _ = run(config)
    graphs_on(monkeypatch, ("cpu",))
    used, real_round = [], StepGraphs.round
    monkeypatch.setattr(StepGraphs, "round", lambda self, *args: used.append(self) or real_round(self, *args))
    graphed, _ = run(config)
    assert len(used) == 5 and all(graphs is used[0] for graphs in used)  # one StepGraphs for the run's rounds
    pd.testing.assert_frame_equal(graphed, plain, check_exact=True)
