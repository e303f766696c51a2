"""StepGraphs across rounds: buffers and captures kept for the run, the plain stacked rule's bits.

On a CPU (here) the graphs' stand-in runs the same buffers, warm-up steps and per-key captures as on
CUDA, and a replay is the step called again: every number must equal the eager rule's. The graphs
themselves are checked on a GPU by tests/test_cuda.py.
"""

import threading

import numpy as np
import pytest
import torch

from fedsim.core.checkpoint import Checkpoint, _fingerprint
from fedsim.core.engine import SGDSettings, StepGraphs, local_sgd_batched
from fedsim.methods import LocalProblem
from fedsim.models.char_lstm import CharLSTM
from fedsim.models.sent140_lstm import Sent140LSTM
from fedsim.core.loading import RunData
from fedsim.core.train import RunConfig, run

from helpers.tiny_lstm import params_of, tiny_char, tiny_clients, tiny_sent, write_leaf_like

SETTINGS = SGDSettings(lr=0.3, epochs=2, batch_size=2, seed=11)


def graphs_on(monkeypatch, device_types):
    """The LSTMs' steps as StepGraphs on these device types (on a CPU: its buffers and warm-up, no graph).
    Set on each model class: a class's spec sets its own `graphs_on`, over LSTMModel's."""
    for cls in (CharLSTM, Sent140LSTM):
        monkeypatch.setattr(cls, "graphs_on", device_types)


def problem_of(params, devices, terms: str, seed: int) -> LocalProblem:
    """A local problem with the terms named in `terms` (c: correction, a: anchor, m: proximal)."""
    g = torch.Generator().manual_seed(seed)
    return LocalProblem(
        mu=0.2 if "m" in terms else 0.0,
        correction=0.05 * torch.randn(len(devices), len(params), generator=g, dtype=params.dtype) if "c" in terms
        else None,
        anchor=params + 0.01 * torch.randn(len(params), generator=g, dtype=params.dtype) if "a" in terms else None)


# (devices, terms) a round at a time: K grows after a small round, then shrinks; the terms change
ROUNDS = [([2, 0], "cm"), ([2, 0, 4, 3, 1], "cam"), ([1, 3], ""), ([4, 0, 3], "a"), ([3, 1, 4, 2, 0], "cm")]


def rounds_of(model, clients, params):
    """Each round of ROUNDS from its own model (as a run's server moves it), in order, with one model."""
    out = []
    for t, (devices, terms) in enumerate(ROUNDS):
        w0 = params + 0.01 * t
        out.append(local_sgd_batched(model, w0, problem_of(w0, devices, terms, seed=t), clients, np.array(devices),
                                     SETTINGS, t))
    return out


@pytest.mark.parametrize("make", [tiny_char, tiny_sent])
def test_graphed_rounds_give_the_eager_rounds_bits(make, monkeypatch):
    """Rounds with ragged devices, a larger K after a smaller one (the buffers grow), and with and without
    correction, anchor and proximal term: the graphs' stand-in gives the plain rule's bits every round."""
    model = make()
    clients, params = tiny_clients(model), params_of(model)
    eager = rounds_of(model, clients, params)
    assert StepGraphs.held(model) is None
    graphs_on(monkeypatch, ("cpu",))
    graphed = rounds_of(model, clients, params)
    assert StepGraphs.held(model).capacity == max(len(devices) for devices, _ in ROUNDS)
    for t, (got, expected) in enumerate(zip(graphed, eager)):
        assert (got != params).any(dim=1).all(), t
        assert torch.equal(got, expected), f"round {t}"


def test_captures_are_kept_across_rounds_and_grow_with_k(monkeypatch):
    """A second round with the same devices and terms captures nothing new (the run's graphs are
    replayed with its values); other terms capture their own steps; a round of more devices than the
    buffers hold makes larger ones and captures again."""
    graphs_on(monkeypatch, ("cpu",))
    model = tiny_char()
    clients, params = tiny_clients(model), params_of(model)
    devices = np.array([2, 0, 4])

    def round_(t, devices, terms="cm"):
        return local_sgd_batched(model, params + 0.01 * t, problem_of(params, devices, terms, seed=t), clients,
                                 devices, SETTINGS, t)

    round_(0, devices)
    graphs = StepGraphs.held(model)
    first = graphs.captures
    assert first == len({key[0] for key in graphs.graphs}) > 1  # one per stack size: the stack shrinks
    round_(1, devices)
    assert StepGraphs.held(model) is graphs and graphs.captures == first
    round_(2, devices, terms="a")
    assert graphs.captures > first
    kept = graphs.captures
    round_(3, devices[:2], terms="a")  # fewer devices fit the buffers: nothing made, nothing captured
    assert StepGraphs.held(model) is graphs and graphs.captures == kept
    round_(4, np.array([2, 0, 4, 3, 1]))
    grown = StepGraphs.held(model)
    assert grown is not graphs and grown.capacity == 5 and grown.captures == len(grown.graphs) > 0


def test_a_graphed_run_resumes_bit_identical(tmp_path, monkeypatch):
    """A Sent140 run stopped after round 3 and resumed from its checkpoint (its graphs captured anew in
    the resumed rounds, their warm-up steps undone) ends with the bits of the run never stopped. (The
    engine's path is the same for both LSTMs; Sent140's paper model is the smaller one.)"""
    graphs_on(monkeypatch, ("cpu",))
    data = write_leaf_like(tmp_path / "sent140.h5", "sent140")
    settings = {"data": data, "method": "feddane", "mu": 0.01, "clients_per_round": 2, "epochs": 1, "batch_size": 10,
                "lr": 0.3}
    whole, _ = run(RunConfig(**settings, rounds=5))
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=3, seconds=0)
    run(RunConfig(**settings, rounds=4), checkpoint=checkpoint)  # its last save: round 3
    saved = torch.load(checkpoint.path, weights_only=True)
    saved["settings"] = _fingerprint(RunConfig(**settings, rounds=5))  # as the 5-round run's own checkpoint
    torch.save(saved, checkpoint.path)
    resumed, record = run(RunConfig(**settings, rounds=5), checkpoint=checkpoint)
    assert record["result"]["resumed_from_round"] == 3
    assert resumed.equals(whole)


def test_a_streamed_graphed_run_moves_the_read_ahead_rows_on_its_own_thread(tmp_path, monkeypatch):
    """Streamed, round t + 1's rows are read on a second thread while round t's steps are captured and
    replayed. On CUDA a copy or an allocation from that thread would break a capture, so the rows reach
    the compute device on the run's own thread, and the run is the in-memory run bit for bit."""
    graphs_on(monkeypatch, ("cpu",))
    data = write_leaf_like(tmp_path / "sent140.h5", "sent140")
    settings = {"data": data, "method": "feddane", "mu": 0.01, "clients_per_round": 2, "epochs": 1, "batch_size": 10,
                "lr": 0.3, "rounds": 4}
    whole, _ = run(RunConfig(**settings, load="memory"))
    threads, on_device = [], RunData.on_device

    def spied(self, clients):
        threads.append(threading.current_thread().name)
        return on_device(self, clients)
    monkeypatch.setattr(RunData, "on_device", spied)
    read, load = [], RunData.load

    def spied_load(self, *args, **kwargs):
        read.append(threading.current_thread().name)
        return load(self, *args, **kwargs)
    monkeypatch.setattr(RunData, "load", spied_load)
    streamed, _ = run(RunConfig(**settings, load="stream"))
    assert streamed.equals(whole)
    assert sum(name.startswith("fedsim-read-ahead") for name in read) == settings["rounds"] - 1
    assert len(threads) >= settings["rounds"] and set(threads) == {threading.main_thread().name}
