import time

import h5py
import numpy as np
import pytest

from fedsim.data import FORMAT_VERSION, FederatedDataset, write_dataset, write_dataset_stream
from helpers.hdf5_damage import flip_byte
from tiny import read_dataset


def toy(sizes=(3, 0, 5, 2, 4), test_sizes=(1, 1, 0, 2, 1), d=3, seed=0):
    """Small dataset whose rows carry their device index and row number, so mixups show."""
    rng = np.random.default_rng(seed)
    out = dict(clients=[f"dev{k}" for k in range(len(sizes))], provenance={"seed": seed, "src": ["a", 1]})
    for split, n in (("train", sizes), ("test", test_sizes)):
        offsets = np.concatenate([[0], np.cumsum(n)])
        out[f"{split}_x"] = rng.normal(size=(offsets[-1], d)).astype(np.float32)
        out[f"{split}_y"] = rng.integers(0, 4, offsets[-1])
        out[f"{split}_offsets"] = offsets
    return out


def write(path, data, **kw):
    write_dataset(path, name="toy", kind="test", num_classes=4, **data, **kw)


def rows(data, split, devices):
    o = data[f"{split}_offsets"]
    idx = np.concatenate([[], *(np.arange(o[k], o[k + 1]) for k in devices)]).astype(int)
    return data[f"{split}_x"][idx], data[f"{split}_y"][idx]


@pytest.mark.parametrize("chunk_rows", [None, 2])
def test_round_trip(tmp_path, chunk_rows):
    data, path = toy(), tmp_path / "toy.h5"
    write(path, data, chunk_rows=chunk_rows)
    with FederatedDataset(path) as ds:
        assert (ds.name, ds.kind, ds.num_classes, ds.num_devices) == ("toy", "test", 4, 5)
        assert ds.clients == data["clients"] and ds.feature_shape == (3,)
        assert ds.attrs["format_version"] == FORMAT_VERSION and ds.attrs["provenance"] == data["provenance"]
        np.testing.assert_array_equal(ds.train_sizes, [3, 0, 5, 2, 4])
        np.testing.assert_array_equal(ds.test_sizes, [1, 1, 0, 2, 1])
        for split in ("train", "test"):
            for devices in (None, [3, 0, 1, 2], [4, 2, 2], [1], []):
                got = ds.load(split, devices)
                want = range(5) if devices is None else devices
                x, y = rows(data, split, want)
                np.testing.assert_array_equal(got.x, x)
                np.testing.assert_array_equal(got.y, y)
                np.testing.assert_array_equal(got.devices, list(want))
                np.testing.assert_array_equal(got.sizes, getattr(ds, f"{split}_sizes")[list(want)])
                assert got.offsets[0] == 0 and got.y.dtype == np.int64
    with h5py.File(path) as f:  # checksummed chunks: ~64 KiB, here the whole (14-row) array
        assert f["train/x"].chunks == ((14, 3) if chunk_rows is None else (2, 3)) and f["train/x"].fletcher32


def test_generic_rows(tmp_path):
    # token ids: integer x with a 2-D trailing shape
    data = toy()
    for split in ("train", "test"):
        data[f"{split}_x"] = np.arange(len(data[f"{split}_y"]) * 8, dtype=np.int32).reshape(-1, 2, 4)
    write(tmp_path / "tok.h5", data)
    got = read_dataset(tmp_path / "tok.h5", "test", [3])
    assert got.x.dtype == np.int32 and got.x.shape == (2, 2, 4)
    np.testing.assert_array_equal(got.x, rows(data, "test", [3])[0])


def test_identical_bytes(tmp_path):
    data = toy()
    write(tmp_path / "a.h5", data)
    time.sleep(1.1)  # HDF5 timestamps have one-second resolution
    write(tmp_path / "b.h5", data)
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()


def test_atomic_write(tmp_path):
    path = tmp_path / "toy.h5"
    write(path, toy())
    before = path.read_bytes()
    bad = toy(seed=1)
    bad["test_x"] = bad["test_x"].astype(np.float64)  # only caught after train rows are written
    with pytest.raises(ValueError, match="test_x"):
        write(path, bad)

    def blocks():
        yield toy(seed=2)["train_x"][:3], toy(seed=2)["train_y"][:3], np.zeros((0, 3), np.float32), np.zeros(0, int)
        raise RuntimeError("generator died")

    meta = {k: v for k, v in toy().items() if "offsets" in k or k in ("clients", "provenance")}
    with pytest.raises(RuntimeError, match="generator died"):
        write_dataset_stream(path, name="toy", kind="test", num_classes=4, feature_shape=(3,), x_dtype=np.float32,
                             blocks=blocks(), **meta)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["toy.h5"]


def _set(data, key, fn):
    data[key] = fn(data[key])
    return data


@pytest.mark.parametrize("field, corrupt", [
    ("train_offsets", lambda d: _set(d, "train_offsets", lambda o: o + 1)),
    ("test_offsets", lambda d: _set(d, "test_offsets", lambda o: o[::-1])),
    ("test_offsets", lambda d: _set(d, "test_offsets", lambda o: o[:-1])),
    ("clients", lambda d: _set(d, "clients", lambda c: c[:-1])),
    ("clients", lambda d: _set(d, "clients", lambda c: ["same"] * len(c))),
    ("train_y", lambda d: _set(d, "train_y", lambda y: y[:-1])),
    ("train_y", lambda d: _set(d, "train_y", lambda y: y + 4)),
    ("test_y", lambda d: _set(d, "test_y", lambda y: y.astype(float))),
    ("test_x", lambda d: _set(d, "test_x", lambda x: x[:, :2])),
    ("train_x", lambda d: _set(_set(d, "train_x", lambda x: x[:-1]), "train_y", lambda y: y[:-1])),
    ("provenance", lambda d: _set(d, "provenance", lambda p: "seed=0")),
])
def test_bad_input_names_field(tmp_path, field, corrupt):
    with pytest.raises(ValueError, match=field):
        write(tmp_path / "bad.h5", corrupt(toy()))
    assert list(tmp_path.iterdir()) == []


def test_open_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.h5"):
        FederatedDataset(tmp_path / "missing.h5")
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(ValueError, match="text.h5"):
        FederatedDataset(tmp_path / "text.h5")
    path = tmp_path / "future.h5"
    write(path, toy())
    with h5py.File(path, "r+") as f:
        f.attrs["format_version"] = FORMAT_VERSION + 1
    with pytest.raises(ValueError, match="future.h5.*format_version"):
        FederatedDataset(path)


def test_load_errors(tmp_path):
    write(tmp_path / "toy.h5", toy())
    with FederatedDataset(tmp_path / "toy.h5") as ds:
        with pytest.raises(ValueError, match="split"):
            ds.load("valid")
        for devices in ([0, 5], [-1], [0.5]):
            with pytest.raises(ValueError, match="devices"):
                ds.load("train", devices)


def test_subset_reads_only_requested_devices(tmp_path, monkeypatch):
    """The row ranges actually read must be exactly the requested devices' (merged when adjacent)."""
    data, path = toy(sizes=(4, 3, 5, 2, 6, 3), test_sizes=(1,) * 6, d=7), tmp_path / "toy.h5"
    write(path, data)
    wanted = [4, 1, 2]
    o = data["train_offsets"]

    reads = []  # (dataset, rows) of every high-level h5py read
    for method, sel_arg in (("__getitem__", 0), ("read_direct", 1)):
        def spy(self, *args, _orig=getattr(h5py.Dataset, method), _i=sel_arg, **kw):
            sel = args[_i] if len(args) > _i else None
            sel = sel[0] if isinstance(sel, tuple) else sel
            reads.append((self.name, (sel.start, sel.stop) if isinstance(sel, slice) else repr(sel)))
            return _orig(self, *args, **kw)
        monkeypatch.setattr(h5py.Dataset, method, spy)

    with FederatedDataset(path) as ds:
        reads.clear()  # metadata (offsets, clients) is read at open
        got = ds.load("train", wanted)
        runs = ((o[1], o[3]), (o[4], o[5]))  # devices [1, 2] are adjacent: one read
        assert len(reads) == 4 and set(reads) == {(n, r) for n in ("/train/x", "/train/y") for r in runs}
        x, y = rows(data, "train", wanted)
        np.testing.assert_array_equal(got.x, x)
        np.testing.assert_array_equal(got.y, y)


def test_a_flipped_byte_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "toy.h5"
    write(path, toy())
    flip_byte(path, "train/x")
    with FederatedDataset(path) as ds:  # opening reads the labels and offsets, not the features
        ds.load("test")
        with pytest.raises(ValueError, match="toy.h5: train data cannot be read back intact.*damaged"):
            ds.load("train")
    write(path, toy())
    flip_byte(path, "test/y")
    with pytest.raises(ValueError, match="toy.h5: not a readable fedsim dataset"):
        FederatedDataset(path)


@pytest.mark.parametrize("damage, message", [
    (lambda f: f["train/y"].__setitem__(0, 99), "train/y holds label 99, outside \\[0, 4\\)"),
    (lambda f: f["test/y"].__setitem__(1, -1), "test/y holds label -1"),
    (lambda f: f["train/offsets"].__setitem__(2, 1), "train/offsets must start at 0 and never decrease"),
    (lambda f: f["train/offsets"].__setitem__(-1, 99), "train/offsets end at 99, but train/x has 14 rows"),
    (lambda f: f["test/offsets"].__setitem__(0, 1), "test/offsets must start at 0"),
    (lambda f: f.attrs.__setitem__("num_classes", 0), "num_classes is 0"),
    (lambda f: f.__delitem__("test/x"), "not a readable fedsim dataset"),
])
def test_an_inconsistent_file_fails_at_open_naming_it(tmp_path, damage, message):
    path = tmp_path / "toy.h5"
    write(path, toy())
    with h5py.File(path, "r+") as f:
        damage(f)
    with pytest.raises(ValueError, match=f"toy.h5: {message}"):
        FederatedDataset(path)


def test_format_1_files_without_checksums_still_open(tmp_path):
    path = tmp_path / "old.h5"
    data = toy()
    write(path, data)
    with h5py.File(path, "r") as f, h5py.File(tmp_path / "v1.h5", "w") as g:
        for key, value in f.attrs.items():
            g.attrs[key] = value
        g.attrs["format_version"] = 1
        f.copy("clients", g)
        for split in ("train", "test"):
            for name in ("x", "y", "offsets"):
                g.create_dataset(f"{split}/{name}", data=f[f"{split}/{name}"][:])  # contiguous, unchecked
    with FederatedDataset(tmp_path / "v1.h5") as ds:
        np.testing.assert_array_equal(ds.load("train").y, data["train_y"])
