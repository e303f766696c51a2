"""The authors' randomness (rng: authors), initial model files and JSON import (fedsim.core.authors)."""

import gzip
import json

import numpy as np
import pytest
import torch

from fedsim.core import authors
from fedsim.data.format import FederatedDataset
from fedsim.data.leaf.leafjson import import_leaf_json
from fedsim.models.mclr import MCLR
from fedsim.core.train import RunConfig, run



@pytest.fixture
def data(tiny_data):
    return tiny_data(10)


def authors_config(data, **kw):
    base = dict(data=data, method="feddane_authors", mu=0.1, rng="authors",
                second_subset="same", clients_per_round=4, epochs=3, batch_size=5, lr=0.05, rounds=5)
    return RunConfig(**{**base, **kw})


def test_selection_is_legacy_numpy_seeded_by_the_round():
    clients = [f"client{k}" for k in range(30)]
    for t in (0, 1, 17, 199):
        np.random.seed(t)  # what their select_clients does, on a list of client objects
        theirs = np.random.choice(clients, 10, replace=False)
        assert [clients[k] for k in authors.select_devices(t, 30, 10)] == list(theirs)


@pytest.mark.parametrize("n", [1, 7, 23])
def test_epoch_c_visits_rows_in_the_order_of_c_in_place_shuffles(n):
    """Their batch_data: re-seed with 100, shuffle x and y in place with the same state, every
    epoch; the arrays keep the order the last call left."""
    x = np.arange(n * 3, dtype=np.float64).reshape(n, 3)  # rows know where they came from
    y = np.arange(n)
    for c in range(1, 12):
        np.random.seed(100)
        state = np.random.get_state()
        np.random.shuffle(x)
        np.random.set_state(state)
        np.random.shuffle(y)
        order = authors.epoch_order(n, c)
        assert (y == order).all() and (x[:, 0] == 3 * order).all()


def test_batch_plan_continues_the_device_epochs_and_keeps_the_remainder():
    n, b = 23, 5
    plan = authors.batch_plan(n, b, epochs=2, epochs_before=3)
    assert plan.shape == (2 * 5, b)
    for e, c in enumerate((4, 5)):
        rows = plan[5 * e:5 * (e + 1)].ravel()
        assert (rows[:n] == authors.epoch_order(n, c)).all() and (rows[n:] == -1).all()
    # one round of 5 epochs = the plans of two rounds of 2 and 3 epochs
    whole = authors.batch_plan(n, b, epochs=5, epochs_before=0)
    parts = np.concatenate([authors.batch_plan(n, b, 2, 0), authors.batch_plan(n, b, 3, 2)])
    assert (whole == parts).all()


def test_authors_rng_ignores_the_seed_but_not_the_round_history(data):
    # their --seed changes only the initial model: with one init file, two seeds give one run
    init = data.replace(".h5", "-init.npz")
    np.savez(init, kernel=np.full((10, 4), 0.01, np.float32), bias=np.zeros(4, np.float32))
    a, _ = run(authors_config(data, seed=0, init=init))
    b, _ = run(authors_config(data, seed=5, init=init))
    assert a.equals(b)
    c, _ = run(authors_config(data, seed=5))  # fedsim's seeded initial model instead
    assert not a["train_loss"].equals(c["train_loss"])


def test_init_file_is_the_round_0_model(data, tmp_path):
    kernel = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
    bias = np.arange(4, dtype=np.float32)
    np.savez(tmp_path / "init-seed3.npz", kernel=kernel, bias=bias)
    metrics, record = run(authors_config(data, rounds=0, seed=3, init=str(tmp_path / "init-seed{seed}.npz")))
    with FederatedDataset(data) as ds:
        part = ds.load("train")
    logits = part.x @ kernel + bias
    shifted = logits - logits.max(1, keepdims=True)
    loss = np.mean(np.log(np.exp(shifted).sum(1)) - shifted[np.arange(len(part.y)), part.y])
    assert metrics["train_loss"].iloc[0] == pytest.approx(loss, rel=1e-5)
    assert record["init"]["file"].endswith("init-seed3.npz") and len(record["init"]["sha256"]) == 64
    assert record["config"]["rng"] == "authors" and record["config"]["options"] == {"correction": "authors"}
    assert record["config"]["method"] == "feddane"


@pytest.mark.parametrize("arrays, message", [
    (dict(kernel=np.zeros((10, 3)), bias=np.zeros(3)), r"kernel must have shape \(10, 4\).*\(10, 3\)"),
    (dict(kernel=np.zeros((10, 4))), "bias must have shape .* missing"),
])
def test_init_file_that_does_not_fit_is_refused_naming_it(data, tmp_path, arrays, message):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match=f"bad.npz: {message}"):
        run(authors_config(data, init=str(tmp_path / "bad.npz")))


@pytest.mark.parametrize("settings, bad", [
    (dict(method="fedavg", mu=0, rng="fedsim", options={"correction": "authors"}), "'correction': fedavg takes none"),
    (dict(selection="weighted"), "selection"),
    (dict(second_subset="independent"), "second_subset"),
    (dict(rng="numpy"), "rng"),
    (dict(options={"correction": "bias"}), "correction='bias': expected one of exact, authors"),
    (dict(init="nowhere-{seed}.npz"), "init file not found: nowhere-0.npz"),
])
def test_settings_that_contradict_the_authors_protocol_are_refused(data, settings, bad):
    with pytest.raises(ValueError, match=bad):
        authors_config(data, **settings).validate()


def write_fedprox_json(path, users):
    """FedProx's synthetic layout: labels written as floats, users in the order given."""
    body = {"users": list(users), "num_samples": [len(v[1]) for v in users.values()],
            "user_data": {u: {"x": x, "y": [float(v) for v in y]} for u, (x, y) in users.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(body).encode()))


def test_import_fedprox_synthetic_json_sorts_users_like_their_read_data(tmp_path):
    rng = np.random.default_rng(0)
    users = {u: (rng.normal(size=(n, 6)).tolist(), rng.integers(0, 5, n).tolist())
             for u, n in (("f_00002", 4), ("f_00000", 3), ("f_00001", 5))}
    write_fedprox_json(tmp_path / "train" / "mytrain.json.gz", users)
    write_fedprox_json(tmp_path / "test" / "mytest.json.gz", {u: (x[:1], y[:1]) for u, (x, y) in users.items()})
    prov = import_leaf_json(tmp_path / "train", tmp_path / "test", tmp_path / "s.h5", name="s", num_classes=7)
    with FederatedDataset(tmp_path / "s.h5") as ds:
        assert ds.kind == "synthetic" and ds.clients == ["f_00000", "f_00001", "f_00002"]
        assert ds.feature_shape == (6,) and ds.num_classes == 7 and list(ds.train_sizes) == [3, 5, 4]
        part = ds.load("train", [2])
        assert np.allclose(part.x, np.float32(users["f_00002"][0])) and part.y.tolist() == users["f_00002"][1]
    assert prov["user_order"] == "sorted"
    import_leaf_json(tmp_path / "train", tmp_path / "test", tmp_path / "f.h5", order="file")
    with FederatedDataset(tmp_path / "f.h5") as ds:
        assert ds.clients == ["f_00002", "f_00000", "f_00001"]
        assert ds.num_classes == max(max(y) for _, y in users.values()) + 1  # default: largest label + 1


def test_import_refuses_fractional_labels(tmp_path):
    write_fedprox_json(tmp_path / "train" / "a.json.gz", {"u": ([[0.0, 1.0]], [0.5])})
    write_fedprox_json(tmp_path / "test" / "a.json.gz", {"u": ([[0.0, 1.0]], [1])})
    with pytest.raises(ValueError, match="non-negative integers, got 0.5"):
        import_leaf_json(tmp_path / "train", tmp_path / "test", tmp_path / "x.h5")
    assert not (tmp_path / "x.h5").exists()


def test_mclr_tensors_are_views_in_the_reference_variable_order():
    model = MCLR(3, 2)
    params = torch.arange(8.0).reshape(4, 2)
    kernel, bias = model.tensors(params)
    assert kernel.shape == (3, 2) and bias.tolist() == [6.0, 7.0]
    stacked = torch.stack([params, -params])
    assert model.tensors(stacked)[1].tolist() == [[6.0, 7.0], [-6.0, -7.0]]
