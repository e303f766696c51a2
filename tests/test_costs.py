"""What a run costs, as metrics.csv and runs.csv record it: per-sample gradient evaluations on the
devices and model-sized vectors each way, counted from what each method sends (fedsim.methods.traffic)."""

import numpy as np
import pytest

from fedsim.data.format import FederatedDataset
from fedsim.core.train import SELECTION_STREAM, SECOND_SUBSET_STREAM, RunConfig, run, select_devices

from tiny import tiny_dataset

K, E, ROUNDS = 3, 2, 4


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tiny_dataset(tmp_path_factory.mktemp("costs") / "tiny.h5", devices=8)
    with FederatedDataset(path) as dataset:
        return path, dataset.train_sizes


def config(path, method, **kwargs):
    return RunConfig(data=path, method=method, clients_per_round=K, epochs=E, batch_size=5, lr=0.05,
                     rounds=ROUNDS, **kwargs)


def chosen(sizes, t, stream=SELECTION_STREAM):
    return select_devices(0, t, stream, K, sizes, "uniform")


def test_fedavg_sends_the_model_both_ways_and_computes_e_epochs_of_sample_gradients(data):
    path, sizes = data
    metrics, record = run(config(path, "fedavg"))
    samples = np.cumsum([0] + [E * sizes[chosen(sizes, t)].sum() for t in range(ROUNDS)])
    np.testing.assert_array_equal(metrics["gradient_evaluations"], samples)
    np.testing.assert_array_equal(metrics["vectors_down"], K * np.arange(ROUNDS + 1))
    np.testing.assert_array_equal(metrics["vectors_up"], K * np.arange(ROUNDS + 1))
    assert record["result"]["gradient_evaluations"] == samples[-1] and record["result"]["vectors_up"] == K * ROUNDS


@pytest.mark.parametrize("second_subset", ["same", "independent"])
def test_feddane_counts_its_gradient_exchange(data, second_subset):
    """S_t send a gradient (one full pass each) after receiving the model; S'_t receive g_t, and the
    model where they are not in S_t, and send their model."""
    path, sizes = data
    metrics, _ = run(config(path, "feddane", mu=0.1, second_subset=second_subset))
    grads, down, up = [0], [0], [0]
    for t in range(ROUNDS):
        s = chosen(sizes, t)
        s2 = s if second_subset == "same" else chosen(sizes, t, SECOND_SUBSET_STREAM)
        # a full pass for each device's gradient at w^{t-1} (a solver in S_t reuses its own), E for SGD
        grads.append(grads[-1] + sizes[np.union1d(s, s2)].sum() + E * sizes[s2].sum())
        down.append(down[-1] + K + 2 * K - len(np.intersect1d(s, s2)))
        up.append(up[-1] + 2 * K)
    np.testing.assert_array_equal(metrics["gradient_evaluations"], grads)
    np.testing.assert_array_equal(metrics["vectors_down"], down)
    np.testing.assert_array_equal(metrics["vectors_up"], up)


def test_costs_are_in_runs_csv(data, tmp_path):
    from fedsim.core.records import write_run
    from fedsim.outputs.summary import summarise

    path, _ = data
    metrics, record = run(config(path, "scaffold"))
    write_run(metrics, record, tmp_path / "metrics.csv", tmp_path / "run.json")
    row = summarise([tmp_path / "run.json"]).iloc[0]
    assert row["vectors_down"] == row["vectors_up"] == 2 * K * ROUNDS  # SCAFFOLD: model and control variate
    assert row["gradient_evaluations"] == metrics["gradient_evaluations"].iloc[-1] > 0
