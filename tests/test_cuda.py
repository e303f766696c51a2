"""The engines and a whole run on CUDA give the CPU's numbers. Skipped where there is no GPU (CI).

Run on a GPU machine with `python -m pytest tests/test_cuda.py`.
"""

import numpy as np
import pytest
import torch

from fedsim.core.engine import Clients, SGDSettings, StepGraphs, local_sgd_batched, local_sgd_loop
from fedsim.models import Model
from fedsim.models.char_lstm import CharLSTM
from fedsim.models.sent140_lstm import Sent140LSTM
from fedsim.methods import LocalProblem, weighted_average
from fedsim.core.train import RunConfig, run

from helpers.tiny_lstm import params_of, tiny_char, tiny_clients as tiny_lstm_clients, write_leaf_like
from test_cnn import SIZES, images, small_cnn, small_lenet
from test_engine import AVERAGE_CASES, assert_within_reordering, average_case, in_fedsims_order
from tiny import tiny_clients, tiny_dataset, tiny_params

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
CUDA = torch.device("cuda")


def on_cuda(clients: Clients) -> Clients:
    return Clients(x=clients.x.to(CUDA), y=clients.y.to(CUDA), offsets=clients.offsets, ids=clients.ids)


def round_on(model, params, clients, devices, settings, device):
    """One round of local SGD with proximal and correction terms, everything on `device`."""
    correction = 0.05 * torch.randn(len(devices), *params.shape, generator=torch.Generator().manual_seed(3),
                                    dtype=params.dtype)
    problem = LocalProblem(mu=0.2, correction=correction.to(device))
    if device.type == "cuda":
        clients = on_cuda(clients)
    out = local_sgd_batched(model, params.to(device), problem, clients, devices, settings, 4)
    return out.cpu()


def test_mclr_engine_on_cuda_equals_the_cpu_loop():
    model, clients = tiny_clients(dtype=torch.float64)
    params = tiny_params(model)
    devices = np.array([4, 0, 3, 1, 5, 2])
    settings = SGDSettings(lr=0.05, epochs=5, batch_size=4, seed=11)
    cuda = round_on(model, params, clients, devices, settings, CUDA)
    problem = LocalProblem(mu=0.2, correction=0.05 * torch.randn(len(devices), *params.shape,
                                                                generator=torch.Generator().manual_seed(3),
                                                                dtype=params.dtype))
    loop = local_sgd_loop(model, params, problem, clients, devices, settings, 4)
    assert (cuda != params).any(dim=(1, 2)).all()
    torch.testing.assert_close(cuda, loop, rtol=0, atol=1e-9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_server_average_on_cuda_is_fedsims_within_rounding(dtype):
    """On CUDA weighted_average is torch.tensordot (cuBLAS: its own order, fused multiply-adds), not
    fedsim's order: held to it within rounding, not in bits (fedsim.average)."""
    for devices, shape in AVERAGE_CASES:
        weights, stacked = average_case(devices, shape, dtype)
        got = weighted_average(torch.from_numpy(stacked).to(CUDA), torch.from_numpy(weights).to(CUDA))
        assert got.device.type == "cuda" and got.shape == shape
        assert_within_reordering(got.cpu().numpy(), in_fedsims_order(weights, stacked), weights, stacked)


def tiny_sent_on(device, vocab=9):
    table = torch.randn(vocab + 1, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    table[-1] = 0
    return Sent140LSTM(table.to(device), seq_len=5, hidden=4, dense=3)


@pytest.mark.parametrize("kind", ["char", "sent140"])
def test_lstm_engine_on_cuda_equals_the_cpu(kind):
    cpu_model = tiny_char() if kind == "char" else tiny_sent_on("cpu")
    cuda_model = tiny_char() if kind == "char" else tiny_sent_on(CUDA)
    clients, params = tiny_lstm_clients(cpu_model), params_of(cpu_model)
    devices = np.array([2, 0, 4, 3, 1])
    settings = SGDSettings(lr=0.3, epochs=3, batch_size=5, seed=11)
    cpu = round_on(cpu_model, params, clients, devices, settings, torch.device("cpu"))
    cuda = round_on(cuda_model, params, clients, devices, settings, CUDA)
    assert (cuda != params).any(dim=1).all()
    torch.testing.assert_close(cuda, cpu, rtol=0, atol=1e-9)


@pytest.mark.parametrize("make", [small_cnn, small_lenet])
def test_cnn_rounds_on_cuda_stacked_equal_the_cpus(make):
    """A round on ragged devices with proximal and correction terms: on CUDA the CNNs train as one stack
    of devices (grouped convolutions, the written-out backward); in float64 it gives the CPU's numbers
    (there the CNN one device at a time, LeNet-5 as a stack; cuDNN may sum in another order: a
    tolerance, not bits)."""
    model = make()
    params = model.init(torch.Generator().manual_seed(1), torch.float64)
    x, y = images(model, sum(SIZES), seed=3)
    clients = Clients.from_arrays(model.prepare_inputs(x), y, np.concatenate([[0], np.cumsum(SIZES)]))
    devices = np.array([2, 0, 3, 1])
    settings = SGDSettings(lr=0.1, epochs=2, batch_size=4, seed=7)
    cuda = round_on(model, params, clients, devices, settings, CUDA)
    cpu = round_on(model, params, clients, devices, settings, torch.device("cpu"))
    assert (cuda != params).any(dim=1).all()
    np.testing.assert_allclose(cuda.numpy(), cpu.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("make", [small_cnn, small_lenet])
def test_a_cnns_hand_written_module_runs_where_its_params_are(make):
    """as_module on CUDA params gives a CUDA module computing the model's forward (benchmarks/cnn_round.py's
    hand-written loop on a GPU)."""
    model = make()
    params = model.init(torch.Generator().manual_seed(0), torch.float64).to(CUDA)
    x = torch.rand(5, model.side * model.side, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    net = model.as_module(params)
    assert all(p.device.type == "cuda" for p in net.parameters())
    torch.testing.assert_close(net(x.to(CUDA)).cpu(), model.as_module(params.cpu())(x), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("make", [small_cnn, small_lenet])
def test_the_cnns_written_out_backward_on_cuda_equals_autograd(make):
    """CNN.stacked_grads on CUDA (each layer's gradients written into `out`) against autograd's, float64."""
    model = make()
    g = torch.Generator().manual_seed(3)
    stacked = torch.stack([model.init(torch.Generator().manual_seed(s), torch.float64) for s in range(3)]).to(CUDA)
    x = torch.rand(3, 7, model.side * model.side, generator=g, dtype=torch.float64).to(CUDA)
    y = torch.randint(0, model.num_classes, (3, 7), generator=g).to(CUDA)
    weight = torch.rand(3, 7, generator=g, dtype=torch.float64).to(CUDA)
    expected = Model.stacked_grads(model, stacked, x, y, weight)
    np.testing.assert_allclose(model.stacked_grads(stacked, x, y, weight).cpu().numpy(), expected.cpu().numpy(),
                               rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("kind", ["synthetic", "shakespeare", "sent140"])
def test_a_run_on_cuda_gives_the_cpu_metrics(tmp_path, kind):
    """float64 so that the comparison is about the code path, not float32 kernel rounding."""
    if kind == "synthetic":
        data, lr = tiny_dataset(tmp_path / "tiny.h5"), 0.05
    else:
        data = write_leaf_like(tmp_path / f"{kind}.h5", kind, per_device=12 if kind == "shakespeare" else 30)
        lr = 0.8 if kind == "shakespeare" else 0.3
    results = {}
    for device in ["cpu", "cuda"]:
        config = RunConfig(data=data, method="feddane", mu=0.01, clients_per_round=2, epochs=1, batch_size=10,
                           lr=lr, rounds=3, dtype="float64", device=device)
        results[device], record = run(config)
        assert record["config"]["device"] == device
    np.testing.assert_allclose(results["cuda"].to_numpy(float), results["cpu"].to_numpy(float),
                               rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("kind, lr", [("shakespeare", 0.8), ("sent140", 0.3)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_graphed_lstm_rounds_give_the_eager_rounds_numbers(tmp_path, kind, lr, dtype, monkeypatch):
    """5 rounds of FedDANE on CUDA, each SGD step a replayed CUDA graph (the LSTMs' default there) against
    the same steps launched one operation at a time. A graph replays the very kernels the eager step
    launched, on the same inputs: the same bits are expected in both precisions; the tolerance only
    allows a library that picks another algorithm under capture (a cuBLAS workspace) one float32 ulp
    of drift a step, well under what tells two methods or two seeds apart."""
    data = write_leaf_like(tmp_path / f"{kind}.h5", kind, per_device=12 if kind == "shakespeare" else 30)
    config = RunConfig(data=data, method="feddane", mu=0.01, clients_per_round=2, epochs=1, batch_size=10, lr=lr,
                       rounds=5, dtype=dtype, device="cuda")
    graphed, _ = run(config)
    for cls in (CharLSTM, Sent140LSTM):  # each class's spec sets its own graphs_on
        monkeypatch.setattr(cls, "graphs_on", ())
    eager, _ = run(config)
    tolerance = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(graphed.to_numpy(float), eager.to_numpy(float), **tolerance)


@pytest.mark.parametrize("kind, lr", [("shakespeare", 0.8), ("sent140", 0.3)])
def test_a_streamed_graphed_cuda_run_gives_the_in_memory_bits(tmp_path, kind, lr):
    """Streamed, each round's rows are read on a second thread while the round before captures and
    replays its graphs; that thread must leave CUDA alone (RunData.load's to_device), or a capture
    fails. The run is the in-memory run bit for bit."""
    data = write_leaf_like(tmp_path / f"{kind}.h5", kind, per_device=12 if kind == "shakespeare" else 30)
    settings = dict(data=data, method="feddane", mu=0.01, clients_per_round=2, epochs=1, batch_size=10, lr=lr,
                    rounds=5, device="cuda", dtype="float64")
    in_memory, _ = run(RunConfig(**settings, load="memory"))
    streamed, _ = run(RunConfig(**settings, load="stream"))
    assert streamed.equals(in_memory)


@pytest.mark.parametrize("kind", ["char", "sent140"])
def test_graphed_rounds_keep_their_captures_and_give_the_eager_numbers(kind):
    """Rounds of one model on CUDA, float64: K grows after a small round (the buffers grow), then a round
    of the same devices as the last replays the graphs it has (nothing captured); every round equals
    the same steps launched one operation at a time."""
    make = tiny_char if kind == "char" else (lambda: tiny_sent_on(CUDA))
    graphed_model, eager_model = make(), make()
    eager_model.graphs_on = ()  # the instance's, over its class's
    clients = on_cuda(tiny_lstm_clients(graphed_model))
    params = params_of(graphed_model).to(CUDA)
    settings = SGDSettings(lr=0.3, epochs=2, batch_size=2, seed=11)
    captures = []
    for t, devices in enumerate([[2, 0], [2, 0, 4, 3, 1], [2, 0, 4, 3, 1], [1, 3]]):
        w0 = params + 0.01 * t
        correction = 0.05 * torch.randn(len(devices), len(params), generator=torch.Generator().manual_seed(t),
                                        dtype=params.dtype)
        problem = LocalProblem(mu=0.2, correction=correction.to(CUDA))
        graphed = local_sgd_batched(graphed_model, w0, problem, clients, np.array(devices), settings, t)
        eager = local_sgd_batched(eager_model, w0, problem, clients, np.array(devices), settings, t)
        captures.append(StepGraphs.held(graphed_model).captures)
        assert (graphed != w0).any(dim=1).all()
        torch.testing.assert_close(graphed, eager, rtol=1e-12, atol=1e-12)
    assert StepGraphs.held(graphed_model).capacity == 5
    assert captures[2] == captures[1] > 0 and captures[3] == captures[2]


def test_a_graphed_cuda_run_resumes_bit_identical(tmp_path):
    """A Shakespeare run on CUDA stopped after round 3 and resumed from its checkpoint ends with the
    bits of the run never stopped (the resumed run's model captures its graphs anew)."""
    from fedsim.core.checkpoint import Checkpoint

    data = write_leaf_like(tmp_path / "s.h5", "shakespeare", per_device=12)
    settings = dict(data=data, method="feddane", mu=0.01, clients_per_round=2, epochs=1, batch_size=10, lr=0.8,
                    device="cuda")
    whole, _ = run(RunConfig(**settings, rounds=5))
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=1, seconds=0)
    run(RunConfig(**settings, rounds=4), checkpoint=checkpoint)  # saved at every round boundary, the last at 4
    saved = torch.load(checkpoint.path, weights_only=True)
    from fedsim.core.checkpoint import _fingerprint
    saved["settings"] = _fingerprint(RunConfig(**settings, rounds=5))
    torch.save(saved, checkpoint.path)
    resumed, record = run(RunConfig(**settings, rounds=5), checkpoint=checkpoint)
    assert record["result"]["resumed_from_round"] == saved["round"]
    assert resumed.equals(whole)
