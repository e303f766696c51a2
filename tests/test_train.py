import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest

from fedsim.core import authors, settings, train
from fedsim.core.engine import ENGINES
from fedsim.core.train import RunConfig, read_run, run, select_devices, write_run



@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


def config(data, **kw):
    base = dict(data=data, method="fedavg", clients_per_round=3, epochs=2, batch_size=5, lr=0.05, rounds=4)
    return RunConfig(**{**base, **kw})


def test_run_records_every_round_from_the_initial_model(data):
    metrics, record = run(config(data))
    assert list(metrics["round"]) == [0, 1, 2, 3, 4]
    assert metrics["train_loss"].iloc[-1] < metrics["train_loss"].iloc[0]
    assert metrics[["train_acc", "test_acc"]].apply(lambda c: c.between(0, 1)).all().all()
    assert record["result"]["diverged_round"] is None
    assert record["result"]["final_train_loss"] == metrics["train_loss"].iloc[-1]
    assert record["config"]["method"] == "fedavg" and record["dataset"]["name"] == "tiny"


def test_eval_every_keeps_the_metrics_of_every_nth_round_and_the_last_and_trains_the_same(data):
    every, _ = run(config(data, method="feddane", mu=0.1, rounds=7))
    sparse, record = run(config(data, method="feddane", mu=0.1, rounds=7, eval_every=3))
    assert list(sparse["round"]) == [0, 3, 6, 7]
    pd.testing.assert_frame_equal(sparse, every[every["round"].isin([0, 3, 6, 7])].reset_index(drop=True))
    assert record["config"]["eval_every"] == 3
    assert settings.fingerprint(config(data)) == settings.fingerprint(config(data, eval_every=1))
    assert "eval_every" in settings.fingerprint(config(data, eval_every=3))


def test_eval_every_stops_a_diverging_run_at_the_round_its_model_is_no_longer_finite(data):
    metrics, record = run(config(data, method="feddane", mu=0.0, lr=1e38, rounds=20, eval_every=10))
    diverged = record["result"]["diverged_round"]
    assert diverged is not None and diverged < 10 and list(metrics["round"]) == [0, diverged]
    with pytest.raises(ValueError, match="bad run setting eval_every=2: theory=True measures every round"):
        run(config(data, theory=True, eval_every=2))


def test_run_is_a_pure_function_of_config_and_seed(data):
    a, _ = run(config(data, method="feddane", mu=0.1, seed=3))
    b, _ = run(config(data, method="feddane", mu=0.1, seed=3))
    c, _ = run(config(data, method="feddane", mu=0.1, seed=4))
    pd.testing.assert_frame_equal(a, b)
    assert not a["train_loss"].equals(c["train_loss"])


def test_fedprox_with_mu_zero_is_fedavg_bit_for_bit(data):
    avg, _ = run(config(data))
    prox, _ = run(config(data, method="fedprox", mu=0.0))
    pd.testing.assert_frame_equal(avg, prox)


def test_batched_and_loop_engines_give_the_same_run(data):
    batched, _ = run(config(data, method="feddane", mu=0.1, dtype="float64"))
    loop, _ = run(config(data, method="feddane", mu=0.1, dtype="float64", engine="loop"))
    np.testing.assert_allclose(batched["train_loss"], loop["train_loss"], rtol=1e-9)


def test_feddane_same_subset_differs_from_independent(data):
    same, r1 = run(config(data, method="feddane", mu=0.1, second_subset="same"))
    indep, r2 = run(config(data, method="feddane", mu=0.1, second_subset="independent"))
    assert r1["config"]["second_subset"] == "same" and r2["config"]["second_subset"] == "independent"
    assert not same["train_loss"].equals(indep["train_loss"])
    assert (same["communication_rounds"] == 2 * same["round"]).all()


def test_selection_is_paired_across_methods(data, monkeypatch):
    """Every method trains the same devices in the same round of a seed (the comparisons of the
    figures are paired): FedAvg's and FedProx's selections, and FedDANE's gradient subset, agree."""
    drawn = {}
    original = train.round_devices

    def recording(config, gradients, t, sizes):
        devices = original(config, gradients, t, sizes)
        drawn.setdefault(config.method, []).append(devices[0].tolist())
        return devices

    monkeypatch.setattr(train, "round_devices", recording)
    for method, mu in (("fedavg", 0.0), ("fedprox", 1.0), ("feddane", 0.1)):
        run(config(data, method=method, mu=mu, rounds=6, clients_per_round=2))
    assert len(drawn["fedavg"]) == 6 and len({tuple(d) for d in drawn["fedavg"]}) > 1
    assert drawn["fedavg"] == drawn["fedprox"] == drawn["feddane"]


def test_selection_is_seeded_and_varies_by_round():
    sizes = np.array([5, 50, 500, 5, 50, 500, 7, 8])
    first = select_devices(0, 7, 10, 3, sizes, "uniform")
    assert len(set(first)) == 3
    np.testing.assert_array_equal(first, select_devices(0, 7, 10, 3, sizes, "uniform"))
    rounds = {tuple(select_devices(0, t, 10, 3, sizes, "uniform")) for t in range(20)}
    assert len(rounds) > 5


def test_weighted_selection_follows_sample_counts():
    sizes = np.array([1, 1, 1, 997])
    draws = np.concatenate([select_devices(0, t, 10, 5, sizes, "weighted") for t in range(200)])
    assert (draws == 3).mean() > 0.95  # with replacement, probability p_k = n_k / n


def test_devices_drawn_rounds_ahead_give_the_same_run(data, monkeypatch):
    """A run draws its rounds' devices DRAW_AHEAD rounds at a time: one at a time, or in blocks that
    end mid-run, it is the same run (both subsets of FedDANE's rounds)."""
    settings = dict(method="feddane", mu=0.1, rounds=7, second_subset="independent")
    usual, _ = run(config(data, **settings))
    for draw_ahead in (1, 3):
        monkeypatch.setattr(train, "DRAW_AHEAD", draw_ahead)
        pd.testing.assert_frame_equal(usual, run(config(data, **settings))[0], check_exact=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_all_finite_finds_any_nan_or_inf_weight(dtype):
    """The divergence check on the weights: one NaN or infinite weight anywhere is enough."""
    import torch

    weights = torch.zeros(7, 3, dtype=train.DTYPES[dtype])
    assert train.all_finite(weights)
    for bad in (math.nan, math.inf, -math.inf):
        broken = weights.clone()
        broken[6, 2] = bad
        assert not train.all_finite(broken)
        assert not train.all_finite(broken.t())  # a transposed view, as some methods hand over


def test_divergence_stops_cleanly_and_keeps_the_metrics(data, tmp_path):
    metrics, record = run(config(data, method="feddane", mu=0.0, lr=1e38, rounds=10))
    stop = record["result"]["diverged_round"]
    assert stop is not None and 1 <= stop <= 10
    assert list(metrics["round"]) == list(range(stop + 1))
    assert not math.isfinite(metrics["train_loss"].iloc[-1])
    assert math.isfinite(metrics["train_loss"].iloc[0])
    write_run(metrics, record, tmp_path / "m.csv", tmp_path / "run.json")
    again, saved = read_run(tmp_path / "run.json")
    assert saved["result"]["diverged_round"] == stop and len(again) == stop + 1


def nan_dataset(data, path):
    """The tiny dataset with one NaN feature in a train row (a file from before the importers refused it)."""
    from fedsim.data.format import FederatedDataset, write_dataset

    with FederatedDataset(data) as ds:
        splits = {s: ds.load(s) for s in ("train", "test")}
        offsets = {s: np.concatenate([[0], np.cumsum(sizes)]) for s, sizes in (("train", ds.train_sizes),
                                                                               ("test", ds.test_sizes))}
        meta = dict(name="part_nan", kind=ds.kind, num_classes=ds.num_classes, clients=list(ds.clients))
    x = np.array(splits["train"].x)
    x[4, 2] = np.nan
    write_dataset(path, **meta, train_x=x, train_y=splits["train"].y, train_offsets=offsets["train"],
                  test_x=splits["test"].x, test_y=splits["test"].y, test_offsets=offsets["test"],
                  provenance={"generator": "test"})
    return str(path)


def test_a_run_on_non_finite_data_blames_the_data_not_the_method(data, tmp_path, capsys):
    """Round 0 is the initial model before any training: a non-finite loss there is the data's (or the
    initial model's), never the method's divergence; a later one says the lr may be too large."""
    from fedsim import cli

    bad = nan_dataset(data, tmp_path / "part_nan.h5")
    metrics, record = run(config(bad))
    assert record["result"]["diverged_round"] == 0 and record["result"]["diverged_reason"] == "data"
    assert list(metrics["round"]) == [0] and math.isnan(metrics["train_loss"].iloc[0])
    argv = ["train", "--data", bad, "--method", "fedavg", "--rounds", "2", "--clients-per-round", "2",
            "--metrics", str(tmp_path / "m.csv"), "--info", str(tmp_path / "run.json")]
    assert cli.main(argv) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("fedavg mu=0 on part_nan: not trained: the initial model's train loss is nan: the data "
                           "(or the initial model) hold a non-finite value, not the method"), last
    assert "diverged" not in last
    assert json.loads((tmp_path / "run.json").read_text())["result"]["diverged_reason"] == "data"
    _, record = run(config(data))
    assert record["result"]["diverged_reason"] is None
    _, record = run(config(data, method="feddane", mu=0.0, lr=1e38, rounds=10))
    assert record["result"]["diverged_reason"] == "training"
    assert cli.main([*argv[:1], "--data", data, *argv[3:], "--lr", "1e38"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert " diverged at round " in last and "(the lr, 1e+38, may be too large)" in last, last


@pytest.mark.parametrize("field,value", [("clients_per_round", 0), ("lr", -1.0), ("selection", "random"),
                                         ("method", "fedsgd"), ("mu", float("nan")), ("load", "disk"),
                                         ("eval_devices", 0)])
def test_bad_settings_are_named(data, field, value):
    with pytest.raises(ValueError, match=field if field != "method" else "fedsgd"):
        run(config(data, **{field: value}))


def test_every_choice_and_range_of_a_setting_is_checked(data):
    """validate() reads the choices and ranges from RunConfig's fields (fedsim.core.settings)."""
    for f in dataclasses.fields(RunConfig):
        bad = "bogus" if f.metadata["choices"] else -1 if f.metadata["check"] else None
        if bad is not None and f.name != "method":
            with pytest.raises(ValueError, match=f"bad run setting {f.name}={bad!r}"):
                config(data, **{f.name: bad}).validate()


def test_the_settings_name_every_engine_and_dtype():
    """fedsim.core.settings names them without importing torch: the names must be these."""
    assert settings.ENGINE_NAMES == tuple(ENGINES) and settings.DTYPE_NAMES == tuple(train.DTYPES)
    from fedsim import models
    assert settings.MODEL_NAMES == tuple(sorted(models.REGISTRY))


def test_more_clients_per_round_than_devices_is_one_message(data):
    """Uniform selection draws without replacement: K <= devices, checked in one place for
    fedsim's draws and the authors'; weighted selection draws with replacement."""
    message = "bad run setting clients_per_round=7: 7 is more than the 6 devices"
    with pytest.raises(ValueError, match=message):
        select_devices(0, 0, 10, 7, np.ones(6), "uniform")
    with pytest.raises(ValueError, match=message):
        authors.select_devices(0, 6, 7)
    assert len(select_devices(0, 0, 10, 7, np.ones(6), "weighted")) == 7
    with pytest.raises(ValueError, match="clients_per_round=99: 99 is more than the"):
        run(config(data, clients_per_round=99))


def test_missing_dataset_is_named(tmp_path):
    with pytest.raises(ValueError, match="nothere.h5"):
        run(config(str(tmp_path / "nothere.h5")))


def test_write_run_is_complete_json(data, tmp_path):
    metrics, record = run(config(data, rounds=1))
    write_run(metrics, record, tmp_path / "m.csv", tmp_path / "run.json")
    saved = json.loads((tmp_path / "run.json").read_text())
    assert saved["metrics_file"] == "m.csv" and "wall_seconds" in saved["result"]
    assert not list(tmp_path.glob(".*tmp"))


def test_a_run_without_the_dissimilarities_trains_and_measures_the_same_less_their_columns(data):
    """--no-dissimilarity: the metrics but the two dissimilarities are the full run's, bit for bit; those
    two are empty (NaN); theory, which reads B's dissimilarity, refuses it."""
    full, _ = run(config(data, method="feddane", mu=0.1))
    lean, record = run(config(data, method="feddane", mu=0.1, dissimilarity=False))
    dissimilarities = ["grad_dissimilarity", "b_dissimilarity"]
    assert lean[dissimilarities].isna().all().all() and full[dissimilarities].notna().all().all()
    pd.testing.assert_frame_equal(lean.drop(columns=dissimilarities), full.drop(columns=dissimilarities))
    assert record["config"]["dissimilarity"] is False
    assert "dissimilarity" in settings.fingerprint(config(data, dissimilarity=False))
    assert settings.fingerprint(config(data)) == settings.fingerprint(config(data, dissimilarity=True))
    with pytest.raises(ValueError, match="bad run setting dissimilarity=False: theory=True needs"):
        run(config(data, theory=True, dissimilarity=False))


def test_a_cnns_metrics_without_the_dissimilarities_skip_their_gradients(monkeypatch):
    """Off the compiled pass the dissimilarities cost every evaluated device's full gradient: without
    them, no gradient is computed and the losses are the same."""
    import torch

    from fedsim.core.engine import Clients
    from fedsim.core.metrics import evaluate
    from fedsim.models.lenet5 import LeNet5

    model = LeNet5(num_classes=3)
    params = model.init(torch.Generator().manual_seed(0))
    x, y = torch.rand(13, 784, generator=torch.Generator().manual_seed(1)), torch.arange(13) % 3
    train, test = Clients.from_arrays(x, y, np.array([0, 4, 9, 13])), Clients.from_arrays(x[:5], y[:5], np.array([0, 5]))
    full = evaluate(model, params, train, test)
    monkeypatch.setattr(LeNet5, "device_grads", lambda *a: pytest.fail("a gradient was computed"))
    lean = evaluate(model, params, train, test, dissimilarity=False)
    assert {k: v for k, v in lean.items() if "dissimilarity" not in k} == \
        {k: v for k, v in full.items() if "dissimilarity" not in k}
    assert math.isnan(lean["grad_dissimilarity"]) and math.isnan(lean["b_dissimilarity"])
