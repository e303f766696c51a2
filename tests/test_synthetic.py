import numpy as np
import pytest

from fedsim.data.format import FederatedDataset, write_dataset
from fedsim.data.synthetic import generate_synthetic, write_synthetic

KEYS = ("train_x", "train_y", "train_offsets", "test_x", "test_y", "test_offsets")


def sizes(data, split):
    return np.diff(data[f"{split}_offsets"])


def devices(data, split):
    o = data[f"{split}_offsets"]
    return [(data[f"{split}_x"][a:b], data[f"{split}_y"][a:b]) for a, b in zip(o[:-1], o[1:])]


def test_shapes_labels_and_sizes():
    data = generate_synthetic(alpha=1, beta=1, iid=False, num_devices=20, num_features=12, num_classes=7, seed=3)
    assert data["clients"] == [f"f_{k:05d}" for k in range(20)]
    for split in ("train", "test"):
        x, y = data[f"{split}_x"], data[f"{split}_y"]
        assert x.dtype == np.float32 and x.shape == (len(y), 12) and y.dtype == np.int64
        assert y.min() >= 0 and y.max() < 7
        assert len(data[f"{split}_offsets"]) == 21 and data[f"{split}_offsets"][-1] == len(y)
    n = sizes(data, "train") + sizes(data, "test")
    # sizes are the generator's first draws: n_k = int(lognormal(4, 2)) + 50
    np.testing.assert_array_equal(n, np.random.default_rng(3).lognormal(4, 2, 20).astype(int) + 50)
    assert n.min() >= 50
    assert [int(0.9 * m) for m in n] == sizes(data, "train").tolist()
    half = generate_synthetic(alpha=1, beta=1, iid=False, num_devices=20, seed=3, train_fraction=0.5)
    assert [int(0.5 * m) for m in n] == sizes(half, "train").tolist()
    assert len(np.unique(data["train_y"])) == 7  # all classes occur, labels are not degenerate


def test_reproducible(tmp_path):
    kw = dict(alpha=0.5, beta=0.5, iid=False, num_devices=10, seed=7)
    a, b, c = generate_synthetic(**kw), generate_synthetic(**kw), generate_synthetic(**{**kw, "seed": 8})
    for k in KEYS:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["train_y"], c["train_y"]) or not np.array_equal(a["train_x"], c["train_x"])
    write_synthetic(tmp_path / "1.h5", name="s", **kw)
    write_synthetic(tmp_path / "2.h5", name="s", block_rows=50, **kw)  # streamed in many small blocks
    write_dataset(tmp_path / "3.h5", name="s", kind="synthetic", num_classes=10, **a)
    assert (tmp_path / "1.h5").read_bytes() == (tmp_path / "2.h5").read_bytes() == (tmp_path / "3.h5").read_bytes()


def test_write_synthetic_file(tmp_path):
    write_synthetic(tmp_path / "s.h5", name="synthetic_1_1", alpha=1, beta=1, iid=False, num_devices=5, seed=2)
    with FederatedDataset(tmp_path / "s.h5") as ds:
        assert (ds.name, ds.kind, ds.num_classes, ds.num_devices) == ("synthetic_1_1", "synthetic", 10, 5)
        assert ds.feature_shape == (60,)
        p = ds.attrs["provenance"]
        assert (p["alpha"], p["beta"], p["iid"], p["seed"], p["num_devices"]) == (1, 1, False, 2, 5)
        assert p["generator"] == "fedsim.synthetic"
        data = generate_synthetic(alpha=1, beta=1, iid=False, num_devices=5, seed=2)
        np.testing.assert_array_equal(ds.load("test", [4]).x, devices(data, "test")[4][0])


def test_iid_labels_follow_one_shared_rule():
    data = generate_synthetic(alpha=0, beta=0, iid=True, num_devices=15, seed=5)
    # documented draw order: sizes, then the shared W (d, C) and b (C,)
    rng = np.random.default_rng(5)
    rng.lognormal(4, 2, 15)
    W, b = rng.normal(0, 1, (60, 10)), rng.normal(0, 1, 10)
    for split in ("train", "test"):
        x, y = data[f"{split}_x"], data[f"{split}_y"]
        np.testing.assert_array_equal(y, np.argmax(x @ W + b, axis=1))
        for xk, _ in devices(data, split):
            assert np.abs(xk.mean(0)).max() < 6 / np.sqrt(len(xk))  # x ~ N(0, Sigma), Sigma_jj <= 1: no device shift
    with pytest.raises(ValueError, match="alpha"):
        generate_synthetic(alpha=1, beta=0, iid=True)


def test_non_iid_device_rule():
    # beta != 1 so a variance/std mixup changes v_k; the rule replays the documented draw order
    alpha, beta, N = 0.5, 2.0, 4
    data = generate_synthetic(alpha=alpha, beta=beta, iid=False, num_devices=N, seed=11)
    rng = np.random.default_rng(11)
    n = rng.lognormal(4, 2, N).astype(int) + 50
    u, B = rng.normal(0, alpha, N), rng.normal(0, beta, N)
    for k in range(N):
        v, W, b = rng.normal(B[k], 1, 60), rng.normal(u[k], 1, (60, 10)), rng.normal(u[k], 1, 10)
        z = rng.standard_normal((n[k], 60))
        perm = rng.permutation(n[k])
        x = (v + np.arange(1, 61) ** -0.6 * z).astype(np.float32)[perm]
        t = int(0.9 * n[k])
        for split, rows in (("train", slice(0, t)), ("test", slice(t, None))):
            xk, yk = devices(data, split)[k]
            np.testing.assert_array_equal(xk, x[rows])
            np.testing.assert_array_equal(yk, np.argmax(x[rows] @ W + b, axis=1))


def test_alpha_does_not_change_the_data():
    # u_k is added to every logit of device k alike (W_k, b_k ~ N(u_k, 1)), so argmax ignores it: with the
    # same seed, alpha only rescales u and every stored number is unchanged (true of the reference too)
    a = generate_synthetic(alpha=0.0, beta=1, iid=False, num_devices=8, seed=2)
    b = generate_synthetic(alpha=3.0, beta=1, iid=False, num_devices=8, seed=2)
    for k in KEYS:
        np.testing.assert_array_equal(a[k], b[k])


def test_device_means_spread_with_beta():
    # mean over features of device k's x ~ N(B_k, 1/d), B_k ~ N(0, beta): the spread across devices is ~beta
    data = generate_synthetic(alpha=0, beta=2.0, iid=False, num_devices=300, seed=1)
    means = np.array([xk.mean() for xk, _ in devices(data, "train")])
    assert 1.7 < means.std() < 2.3
    flat = generate_synthetic(alpha=0, beta=0.0, iid=False, num_devices=300, seed=1)
    assert np.array([xk.mean() for xk, _ in devices(flat, "train")]).std() < 0.3


def test_within_device_covariance_is_sigma():
    # centering each device removes v_k, leaving x - v_k ~ N(0, diag((j+1)^-1.2))
    data = generate_synthetic(alpha=1, beta=1, iid=False, num_devices=60, seed=4)
    centered = np.concatenate([xk - xk.mean(0) for xk, _ in devices(data, "train")])
    assert len(centered) > 10_000
    ratio = centered.var(0) / np.arange(1, 61) ** -1.2
    assert np.all((ratio > 0.9) & (ratio < 1.1)), ratio
