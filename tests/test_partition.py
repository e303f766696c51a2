"""Dirichlet label partitions (fedsim.data.partition): each scheme's per-class proportions against a direct
count of the labels the devices got, the minimum size and its retries, the refusals, and the same
(seed, alpha, N) giving the same partition and the same file."""

import h5py
import numpy as np
import pytest

from fedsim.data.format import FederatedDataset, write_dataset
from fedsim.data.partition import dirichlet_partition, write_dirichlet

CLASSES = 10


def pool_labels(samples=4000, seed=3):
    """Imbalanced classes, as FEMNIST's (digits outnumber letters)."""
    weights = np.linspace(3, 1, CLASSES)
    return np.random.default_rng(seed).choice(CLASSES, samples, p=weights / weights.sum())


def counts(part, labels):
    """(devices, classes): how many samples of each class each device holds, counted directly."""
    return np.stack([np.bincount(labels[d], minlength=CLASSES) for d in part.devices])


def test_a_partition_deals_every_sample_once():
    labels = pool_labels()
    per_class = dirichlet_partition(labels, 20, 0.5, seed=1)
    dealt = np.concatenate(per_class.devices)
    assert sorted(dealt) == list(range(len(labels))) and per_class.unused == 0
    per_device = dirichlet_partition(labels, 30, 0.5, scheme="per_device", seed=1)
    dealt = np.concatenate(per_device.devices)
    assert len(set(dealt)) == len(dealt) == 30 * (4000 // 30) and per_device.unused == 4000 % 30


def test_per_class_cuts_each_class_by_its_proportions():
    """Device d's share of class c is floor(cumsum(p_c) n_c) differenced: exactly the recorded
    proportions, and where a device held more than the mean before c (self-balancing) none of c."""
    labels = pool_labels()
    part = dirichlet_partition(labels, 12, 0.3, seed=5, min_partition_size=1)
    got, n_c = counts(part, labels), np.bincount(labels, minlength=CLASSES)
    np.testing.assert_allclose(part.proportions.sum(axis=1), 1.0)
    held, balanced = np.zeros(12, np.int64), 0
    for c in range(CLASSES):
        cuts = np.concatenate([[0], (np.cumsum(part.proportions[c]) * n_c[c]).astype(np.int64)[:-1], [n_c[c]]])
        np.testing.assert_array_equal(got[:, c], np.diff(cuts))
        over = held > len(labels) / 12
        balanced += over.any()
        assert (part.proportions[c][over] == 0).all() and (got[over, c] == 0).all()
        held += got[:, c]
    assert balanced  # the balancing had something to do


def test_per_class_without_balancing_follows_the_dirichlet_draw():
    """Unbalanced, a large alpha spreads every class evenly and a small one concentrates it."""
    labels = pool_labels(20000)
    even = counts(dirichlet_partition(labels, 10, 1000.0, self_balancing=False, seed=0), labels)
    share = even / even.sum(axis=0)
    assert np.abs(share - 0.1).max() < 0.02
    skewed = counts(dirichlet_partition(labels, 10, 0.05, self_balancing=False, min_partition_size=1,
                                        max_retries=50, seed=0), labels)
    assert (skewed.max(axis=0) / skewed.sum(axis=0)).mean() > 0.6


def test_per_device_gives_equal_devices_with_their_class_mixes():
    """Hsu et al.: every device floor(M / N) samples, its class shares (counted directly) those of its
    own mix q_d, nearer it than any other device's. Only approximately: the pool is dealt whole, so
    near the end classes run out and the last turns take what is left (at alpha 10, a little)."""
    labels = pool_labels(20000)
    part = dirichlet_partition(labels, 40, 10.0, scheme="per_device", seed=2)
    got = counts(part, labels)
    assert set(got.sum(axis=1)) == {500}
    mixes = part.proportions
    np.testing.assert_allclose(mixes.sum(axis=1), 1.0)
    distance = 0.5 * np.abs(got[:, None, :] / 500 - mixes[None]).sum(axis=2)  # total variation, device x mix
    assert np.diag(distance).mean() < 0.1
    assert (np.diag(distance) == distance.min(axis=1)).all()


def test_per_device_draws_among_the_classes_left():
    """A pool too small for the mixes: classes run out and the devices take what is left; still equal
    sizes and every sample at most once."""
    labels = np.repeat(np.arange(CLASSES), [300, 5, 5, 5, 5, 5, 5, 5, 5, 5])
    part = dirichlet_partition(labels, 7, 0.1, scheme="per_device", min_partition_size=1, seed=0)
    assert {len(d) for d in part.devices} == {len(labels) // 7}
    dealt = np.concatenate(part.devices)
    assert len(set(dealt)) == len(dealt)


def test_the_minimum_size_is_met_or_refused_after_the_retries():
    labels = pool_labels(1000)
    part = dirichlet_partition(labels, 20, 0.2, min_partition_size=15, self_balancing=False, max_retries=200, seed=0)
    assert min(map(len, part.devices)) >= 15 and part.draws > 1  # it took retries
    with pytest.raises(ValueError) as err:
        dirichlet_partition(labels, 20, 0.2, min_partition_size=15, self_balancing=False, max_retries=0, seed=0)
    message = str(err.value)
    assert "\n" not in message and "min_partition_size" in message and "after 1 draws" in message


@pytest.mark.parametrize("settings, named", [
    (dict(alpha=0.0), "alpha"),
    (dict(alpha=-1.0), "alpha"),
    (dict(alpha=float("nan")), "alpha"),
    (dict(devices=101), "devices: 101 devices, but the pool holds only 100"),
    (dict(devices=11), "need 110"),
    (dict(devices=11, scheme="per_device"), "hold 9 samples each, fewer than min_partition_size 10"),
    (dict(scheme="by_writer"), "scheme"),
    (dict(devices=0), "devices"),
])
def test_refusals_are_one_line_naming_the_setting(settings, named):
    args = {"devices": 5, "alpha": 0.5, "scheme": "per_class", **settings}
    with pytest.raises(ValueError) as err:
        dirichlet_partition(pool_labels(100), args.pop("devices"), args.pop("alpha"), seed=0, **args)
    assert named in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("scheme", ["per_class", "per_device"])
def test_the_same_seed_gives_the_same_partition(scheme):
    labels = pool_labels()
    a, b = (dirichlet_partition(labels, 15, 0.3, scheme=scheme, seed=7) for _ in range(2))
    for x, y in zip(a.devices, b.devices):
        np.testing.assert_array_equal(x, y)
    other = dirichlet_partition(labels, 15, 0.3, scheme=scheme, seed=8)
    assert any(len(x) != len(y) or (x != y).any() for x, y in zip(a.devices, other.devices))


def image_pool(path, samples=600, seed=0, nan_at=None):
    """A small dataset file of 784-pixel images and 62 classes, as FEMNIST-62, over 6 writers
    (`nan_at`: a NaN pixel in that row of the train split)."""
    rng = np.random.default_rng(seed)
    x = rng.random((samples, 784), dtype=np.float32)
    if nan_at is not None:
        x[nan_at, 7] = np.nan
    y = rng.integers(0, 62, samples)
    train, test = np.arange(0, samples, 100), np.arange(0, samples, 100) + 90
    write_dataset(path, name="pool", kind="femnist", num_classes=62, clients=[f"w{k}" for k in range(6)],
                  train_x=np.concatenate([x[t:t + 90] for t in train]), train_y=np.concatenate([y[t:t + 90] for t in train]),
                  train_offsets=np.arange(0, 541, 90), test_x=np.concatenate([x[t:t + 10] for t in test]),
                  test_y=np.concatenate([y[t:t + 10] for t in test]), test_offsets=np.arange(0, 61, 10),
                  provenance={"generator": "test"})
    return x, y


def test_a_pool_holding_a_nan_is_refused_naming_the_row(tmp_path):
    """A dataset file written before the importers refused non-finite values: its NaN would be dealt on."""
    image_pool(tmp_path / "pool.h5", nan_at=205)  # train row 185: writer 2's 6th
    with pytest.raises(ValueError) as refused:
        write_dirichlet(tmp_path / "pool.h5", tmp_path / "part.h5", devices=12, alpha=0.5, min_partition_size=20)
    assert str(refused.value) == (f"{tmp_path / 'pool.h5'}: the pool's row 185 (train and test rows in turn) "
                                  "holds nan: every value must be finite")
    assert not (tmp_path / "part.h5").exists()


@pytest.mark.parametrize("scheme", ["per_class", "per_device"])
def test_the_file_holds_the_pools_rows_split_per_device(tmp_path, scheme):
    x, y = image_pool(tmp_path / "pool.h5")
    out = tmp_path / "part.h5"
    prov = write_dirichlet(tmp_path / "pool.h5", out, devices=12, alpha=0.5, scheme=scheme, seed=3,
                           min_partition_size=20)
    with FederatedDataset(out) as ds:
        assert (ds.kind, ds.num_classes, ds.num_devices) == ("femnist", 62, 12)
        train, test = ds.load("train"), ds.load("test")
        assert (prov["scheme"], prov["alpha"], prov["devices"], prov["seed"]) == (scheme, 0.5, 12, 3)
        assert ds.attrs["provenance"]["pool"]["samples"] == 600
        sizes = ds.train_sizes + ds.test_sizes
        assert (ds.train_sizes == np.maximum(1, (0.9 * sizes).astype(int))).all()
    rows = np.concatenate([train.x, test.x])
    pool = {r.tobytes(): label for r, label in zip(x, y)}
    assert len({r.tobytes() for r in rows}) == len(rows) == 600 - prov["unused_samples"]
    assert all(pool[r.tobytes()] == label for r, label in zip(rows, np.concatenate([train.y, test.y])))


@pytest.mark.parametrize("scheme", ["per_class", "per_device"])
def test_the_same_seed_alpha_and_devices_give_the_same_file(tmp_path, scheme):
    image_pool(tmp_path / "pool.h5")
    files = [tmp_path / f"{k}.h5" for k in range(3)]
    for path, seed in zip(files, (1, 1, 2)):
        write_dirichlet(tmp_path / "pool.h5", path, devices=10, alpha=0.3, scheme=scheme, seed=seed,
                        min_partition_size=20, name="same")
    assert files[0].read_bytes() == files[1].read_bytes()
    assert files[0].read_bytes() != files[2].read_bytes()


def test_a_pool_it_cannot_partition_writes_nothing(tmp_path):
    image_pool(tmp_path / "pool.h5")
    with pytest.raises(ValueError, match="devices: 601 devices, but the pool holds only 600"):
        write_dirichlet(tmp_path / "pool.h5", tmp_path / "out.h5", devices=601, alpha=0.3)
    assert not (tmp_path / "out.h5").exists()
    with h5py.File(tmp_path / "pool.h5", "r") as f:
        assert f.attrs["kind"] == "femnist"
