"""Large populations: training that reads only each round's devices, metrics on a device sample."""

import threading

import numpy as np
import pandas as pd
import pytest
import torch

from fedsim.data import format as data_module
from fedsim.core import loading, train as train_module
from fedsim.data.format import FederatedDataset
from tiny import read_dataset
from fedsim.core.engine import Clients
from fedsim.core.train import RunConfig, eval_sample, run

from tiny import tiny_dataset


@pytest.fixture
def data(tiny_data):
    return tiny_data(12)


def config(data, **kw):
    base = dict(data=data, method="feddane", mu=0.1, clients_per_round=4, epochs=2, batch_size=5, lr=0.05, rounds=3)
    return RunConfig(**{**base, **kw})


@pytest.mark.parametrize("selection", ["uniform", "weighted"])  # weighted: a device may be drawn twice
def test_streaming_the_rounds_devices_gives_the_same_run(data, selection):
    memory, r1 = run(config(data, selection=selection, load="memory"))
    stream, r2 = run(config(data, selection=selection, load="stream"))
    pd.testing.assert_frame_equal(memory, stream, check_exact=True)
    assert r1["data_access"]["load"] == "memory" and r2["data_access"]["load"] == "stream"
    assert r2["data_access"] == {"load": "stream", "eval_sampled": False, "eval_devices": 12}


def test_evaluation_sample_is_seeded_and_recorded(data):
    a, record = run(config(data, eval_devices=5))
    b, _ = run(config(data, eval_devices=5, load="stream"))
    full, _ = run(config(data))
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert record["data_access"] == {"load": "memory", "eval_sampled": True, "eval_devices": 5}
    assert record["config"]["eval_devices"] == 5
    assert not a["train_loss"].equals(full["train_loss"])
    everyone, _ = run(config(data, eval_devices=12))  # a sample of all devices is all devices
    pd.testing.assert_frame_equal(everyone, full, check_exact=True)
    sample = eval_sample(5, 12, seed=0)
    assert len(set(sample)) == 5 and list(sample) == sorted(sample)
    np.testing.assert_array_equal(sample, eval_sample(5, 12, seed=0))
    assert not np.array_equal(sample, eval_sample(5, 12, seed=1))


def test_auto_streams_large_splits_and_asks_for_an_evaluation_sample(data, monkeypatch):
    monkeypatch.setattr(loading, "STREAM_ABOVE_BYTES", 1000)
    _, record = run(config(data, eval_devices=4, rounds=1))
    assert record["data_access"]["load"] == "stream"
    with pytest.raises(ValueError, match="eval_devices"):
        run(config(data, rounds=1))


def test_clients_holding_some_devices_locate_them_by_dataset_index(data):
    with FederatedDataset(data) as dataset:
        part = dataset.load("train", [2, 5, 9])
    x = torch.as_tensor(part.x)
    clients = Clients.from_arrays(x, torch.as_tensor(part.y), part.offsets, ids=[2, 5, 9])
    np.testing.assert_array_equal(clients.locate([9, 2, 9]), [2, 0, 2])
    sub_x, _, offsets = clients.subset([9, 2])
    want = read_dataset(data, "train", [9, 2])
    np.testing.assert_array_equal(sub_x.numpy(), want.x)
    np.testing.assert_array_equal(offsets, want.offsets)
    with pytest.raises(KeyError, match="3"):
        clients.locate([3])


def test_reading_many_devices_at_once_matches_reading_each(tmp_path, monkeypatch):
    path = tiny_dataset(tmp_path / "many.h5", devices=100)
    wanted = np.flatnonzero(np.random.default_rng(0).random(100) < 0.5)  # many separate runs
    monkeypatch.setattr(data_module, "UNION_READ_RUNS", 4)
    with FederatedDataset(path) as dataset:
        for split in ("train", "test"):
            got = dataset.load(split, wanted)
            each = [dataset.load(split, [k]) for k in wanted]
            np.testing.assert_array_equal(got.x, np.concatenate([p.x for p in each]))
            np.testing.assert_array_equal(got.y, np.concatenate([p.y for p in each]))
            np.testing.assert_array_equal(got.sizes, [len(p.y) for p in each])


def test_scale_benchmark_predicts_the_dataset_it_generates(tmp_path):
    """benchmarks/scale.py states the dataset's size before generating it: the same device sizes."""
    import importlib.util
    from pathlib import Path

    from fedsim.data.synthetic import write_synthetic

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "scale.py"
    spec = importlib.util.spec_from_file_location("scale_benchmark", script)
    scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale)
    samples, largest, size = scale.dataset_size(40, 7)
    path = tmp_path / "s.h5"
    write_synthetic(path, name="s", alpha=1.0, beta=1.0, iid=False, num_devices=40, num_features=7, seed=0)
    with FederatedDataset(path) as dataset:
        sizes = dataset.train_sizes + dataset.test_sizes
    assert (samples, largest) == (int(sizes.sum()), int(sizes.max()))
    assert size == samples * (4 * 7 + 8) + 64 * 40


def kernel_layout(path, split, devices):
    """What a round's inputs must hold, made as before InputBuffer: the rows with their bias input 1,
    the zero sentinel row, then kernel.padded's zero columns; and the labels with the sentinel's 0."""
    from fedsim.core import kernel
    from fedsim.models.mclr import MCLR

    part = read_dataset(path, split, devices)
    x = MCLR(part.x.shape[1], 1).prepare_inputs(torch.from_numpy(part.x))
    x = torch.cat([x, torch.zeros(1, x.shape[1], dtype=x.dtype)])
    return kernel.padded(x.numpy()), np.append(part.y, 0)


def test_round_inputs_reuse_memory_once_let_go_and_never_the_evaluation_samples(data):
    """A round's rows are written into memory an earlier round had, once nothing refers to it: never
    into a round still held, nor into the evaluation sample's, which the whole run reads. Rounds that
    shrink and grow again leave no stale sentinel row or bias behind."""
    with FederatedDataset(data) as dataset:
        run_data = train_module.run_data(config(data, load="stream", eval_devices=5), dataset)
        evaluation = [(c, c.kernel_x.copy(), c.y.clone()) for c in (run_data.eval_train, run_data.eval_test)]
        everyone = list(range(12))
        held = run_data.load("train", everyone, reuse=True)
        kept = held.kernel_x.copy()
        other = run_data.load("train", [5], reuse=True)  # while `held` is referred to: other memory
        assert not np.shares_memory(other.kernel_x, held.kernel_x)
        np.testing.assert_array_equal(held.kernel_x, kept)
        del held, other
        addresses = []
        for devices in ([3, 7], everyone, [5], [0, 11], everyone, [2]):
            clients = run_data.load("train", devices, reuse=True)
            want_x, want_y = kernel_layout(data, "train", devices)
            np.testing.assert_array_equal(clients.kernel_x, want_x)
            np.testing.assert_array_equal(clients.x.numpy(), want_x[:, :clients.x.shape[1]])
            assert clients.x.shape[1] == 11 and clients.sentinel == len(want_y) - 1
            np.testing.assert_array_equal(clients.y.numpy(), want_y)
            addresses.append(clients.kernel_x.__array_interface__["data"][0])
            del clients  # let go: the next round may take its memory
        assert len(set(addresses)) == 1  # one buffer served every round
        for clients, x, y in evaluation:
            np.testing.assert_array_equal(clients.kernel_x, x)
            assert torch.equal(clients.y, y)
            assert not any(np.shares_memory(clients.kernel_x, b.x) for b in run_data.round_inputs.buffers)


@pytest.mark.parametrize("settings", [{}, {"dtype": "float64", "theory": True, "method": "fedprox"},
                                      {"dtype": "float64", "threads": 2}])  # 2: copies on 2 threads, read ahead on 1
def test_streamed_rounds_in_reused_memory_give_the_in_memory_run(data, settings):
    """Many rounds read into reused memory, metrics on a sample: the same run, bit for bit, as holding
    the train split (float64: the rows converted on their way into the padded layout)."""
    many = dict(rounds=8, clients_per_round=3, eval_devices=6, **settings)
    memory, _ = run(config(data, load="memory", **many))
    stream, _ = run(config(data, load="stream", **many))
    pd.testing.assert_frame_equal(memory, stream, check_exact=True)


def spy_loads(monkeypatch, fail_at=None):
    """Record (thread name, devices) of every RunData.load of the train split; with `fail_at`, that
    call (0 = the first) raises the error a damaged chunk gives."""
    calls, load = [], loading.RunData.load

    def spied(self, split, devices=None, reuse=False, copy_threads=True, to_device=True):
        if split == "train" and reuse:
            calls.append((threading.current_thread().name, np.unique(devices), copy_threads and to_device))
            if len(calls) - 1 == fail_at:
                raise ValueError(f"{self.dataset.path}: train data cannot be read back intact (Fletcher-32 "
                                 "mismatch); the file is damaged: rebuild it")
        return load(self, split, devices, reuse, copy_threads, to_device)
    monkeypatch.setattr(loading.RunData, "load", spied)
    return calls


@pytest.mark.parametrize("draw_ahead", [train_module.DRAW_AHEAD, 2])  # 2: round t + 1 often in the next block
def test_streamed_rounds_are_read_ahead_while_the_round_before_trains(data, monkeypatch, draw_ahead):
    """Round t + 1's devices are read on a second thread during round t, exactly those devices (the
    second subset's too), once each; the run is the in-memory run bit for bit, and leaves no thread."""
    monkeypatch.setattr(train_module, "DRAW_AHEAD", draw_ahead)
    settings = dict(rounds=5, second_subset="independent")
    memory, _ = run(config(data, load="memory", **settings))
    calls = spy_loads(monkeypatch)
    stream, _ = run(config(data, load="stream", **settings))
    pd.testing.assert_frame_equal(memory, stream, check_exact=True)
    with FederatedDataset(data) as dataset:
        sizes = dataset.train_sizes
    cfg, gradients = config(data, **settings), train_module.get_method("feddane").gradients
    wanted = [np.unique(np.concatenate(train_module.round_devices(cfg, gradients, t, sizes))) for t in range(5)]
    assert len(calls) == 5
    for t, ((thread, devices, as_the_round), want) in enumerate(zip(calls, wanted)):
        np.testing.assert_array_equal(devices, want)
        assert thread.startswith("fedsim-read-ahead") == (t > 0), (t, thread)
        assert as_the_round == (t == 0)  # a read ahead leaves torch's thread count and the accelerator alone
    assert not [t for t in threading.enumerate() if t.name.startswith("fedsim-read-ahead")]


def test_a_damaged_read_ahead_stops_the_round_that_needs_its_rows(data, monkeypatch):
    """A read ahead that fails (a damaged chunk) raises its error when its round begins, as a read
    made then would: the rounds before it were reported, and no thread is left behind."""
    spy_loads(monkeypatch, fail_at=2)  # round 2's rows, read during round 1
    reported = []
    with pytest.raises(ValueError, match="tiny.h5: train data cannot be read back intact.*damaged"):
        run(config(data, load="stream", rounds=5), on_round=lambda row: reported.append(row["round"]))
    assert reported == [0, 1, 2]
    assert not [t for t in threading.enumerate() if t.name.startswith("fedsim-read-ahead")]


def test_a_round_asking_for_other_devices_than_read_ahead_reads_them_itself(data):
    with FederatedDataset(data) as dataset:
        run_data = train_module.run_data(config(data, load="stream", eval_devices=5), dataset)
        run_data.round_train(np.array([0, 1]), upcoming=np.array([2, 3]))
        got = run_data.round_train(np.array([4, 5]))  # not what was read ahead
        want_x, want_y = kernel_layout(data, "train", [4, 5])
        np.testing.assert_array_equal(got.kernel_x, want_x)
        np.testing.assert_array_equal(got.y.numpy(), want_y)
        run_data.close()


def test_a_streamed_run_stopped_mid_round_resumes_to_the_same_metrics(data, tmp_path):
    """A run stopped by an error while a read ahead is under way leaves no thread behind, and its
    checkpoint continues it to the uninterrupted run's metrics (the first resumed round reads its
    rows itself)."""
    from fedsim.core.checkpoint import Checkpoint

    settings = dict(load="stream", rounds=9, eval_devices=6)
    reference, _ = run(config(data, **settings))

    def stop_at_round_5(row):
        if row["round"] == 5:
            raise KeyboardInterrupt
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=2, seconds=0)
    with pytest.raises(KeyboardInterrupt):
        run(config(data, **settings), on_round=stop_at_round_5, checkpoint=checkpoint)
    assert not [t for t in threading.enumerate() if t.name.startswith("fedsim-read-ahead")]
    resumed, record = run(config(data, **settings), checkpoint=checkpoint)
    assert record["result"]["resumed_from_round"] == 4
    pd.testing.assert_frame_equal(resumed, reference, check_exact=True)
