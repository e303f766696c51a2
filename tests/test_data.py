import time

import h5py
import numpy as np
import pytest

from fedsim.data import format as data_module
from fedsim.data.format import FORMAT_VERSION, FederatedDataset, fletcher32_mismatches, write_dataset, write_dataset_stream
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


def test_subset_reads_only_requested_devices_through_hdf5(tmp_path, monkeypatch):
    """The HDF5 path (format 1 files; raw_chunks off): the row ranges read are exactly the requested
    devices' (merged when adjacent)."""
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
        ds.raw_chunks = False
        reads.clear()  # metadata (offsets, clients) is read at open
        got = ds.load("train", wanted)
        runs = ((o[1], o[3]), (o[4], o[5]))  # devices [1, 2] are adjacent: one read
        assert len(reads) == 4 and set(reads) == {(n, r) for n in ("/train/x", "/train/y") for r in runs}
        x, y = rows(data, "train", wanted)
        np.testing.assert_array_equal(got.x, x)
        np.testing.assert_array_equal(got.y, y)


def spy_fetches(monkeypatch):
    """{dataset name: chunk indices} of every chunk the raw path fetches from now on."""
    fetched = {}
    original = data_module._ChunkSource.fetch

    def spy(self, ids, chunks, usable):
        fetched.setdefault(self.dset.name, []).extend(np.asarray(ids).tolist())
        return original(self, ids, chunks, usable)
    monkeypatch.setattr(data_module._ChunkSource, "fetch", spy)
    return fetched


def test_subset_reads_only_the_chunks_of_requested_devices(tmp_path, monkeypatch):
    """The raw path fetches each chunk of x holding a requested row once, and no other chunk; the
    labels, all read and checked at open, are not read again."""
    data, path = toy(sizes=(4, 3, 5, 2, 6, 3, 0, 9), test_sizes=(1,) * 8, d=7), tmp_path / "toy.h5"
    write(path, data, chunk_rows=3)
    o = data["train_offsets"]
    fetched = spy_fetches(monkeypatch)
    with FederatedDataset(path) as ds:
        for wanted in ([4, 1, 2], [7, 6, 7, 0], [6], []):
            fetched.clear()
            got = ds.load("train", wanted)
            holding = sorted({r // 3 for k in set(wanted) for r in range(o[k], o[k + 1])})
            assert {name: sorted(ids) for name, ids in fetched.items()} == ({"/train/x": holding} if holding else {})
            x, y = rows(data, "train", wanted)
            np.testing.assert_array_equal(got.x, x)
            np.testing.assert_array_equal(got.y, y)


def plain_read(path, split, devices):
    """The reference: each device's rows by a plain h5py slice, concatenated in the order asked."""
    with h5py.File(path, "r") as f:
        o, x, y = f[f"{split}/offsets"][:], f[f"{split}/x"], f[f"{split}/y"]
        return (np.concatenate([x[o[k]:o[k + 1]] for k in devices]) if len(devices) else x[:0],
                np.concatenate([y[o[k]:o[k + 1]] for k in devices]) if len(devices) else y[:0])


@pytest.mark.parametrize("chunk_rows", [None, 1, 5, 64])
@pytest.mark.parametrize("x_dtype, row_shape", [(np.float32, (6,)), (np.int8, (3,)), (np.float64, (2, 3))])
def test_load_is_the_plain_read_bit_for_bit(tmp_path, monkeypatch, chunk_rows, x_dtype, row_shape):
    """load() against per-device h5py slices: ragged devices that straddle chunks, empty devices,
    selections sorted, shuffled, with repeats, all and none; float and integer rows (int8 rows of 3
    bytes: chunks of an odd number of bytes), through the raw path and through HDF5."""
    rng = np.random.default_rng(7)
    sizes = [0, 1, 7, 300, 2, 0, 55, 131, 3, 17, 64, 65, 1, 0]
    test_sizes = rng.integers(0, 9, len(sizes))
    data = toy(sizes=sizes, test_sizes=test_sizes)
    for split in ("train", "test"):
        n = len(data[f"{split}_y"])
        data[f"{split}_x"] = (rng.normal(size=(n, *row_shape)) * 50).astype(x_dtype)
    path = tmp_path / "ragged.h5"
    write(path, data, chunk_rows=chunk_rows)
    picks = [None, [], [3], [0, 5, 13], list(range(len(sizes))), [3, 7, 6, 8], [6, 7, 8, 9, 10],
             rng.permutation(len(sizes)), [9, 3, 9, 0, 3, 12, 7, 7], rng.integers(0, len(sizes), 40)]
    fetched = spy_fetches(monkeypatch)
    with FederatedDataset(path) as ds:
        for raw in (True, False):
            ds.raw_chunks = raw
            for split in ("train", "test"):
                for devices in picks:
                    got = ds.load(split, devices)
                    asked = range(len(sizes)) if devices is None else list(devices)
                    x, y = plain_read(path, split, asked)
                    assert got.x.dtype == x.dtype and got.y.dtype == y.dtype == np.int64
                    assert got.x.shape == x.shape and got.x.flags.c_contiguous
                    assert got.x.tobytes() == x.tobytes() and got.y.tobytes() == y.tobytes()
                    np.testing.assert_array_equal(got.devices, list(asked))
                    np.testing.assert_array_equal(got.offsets, np.concatenate(
                        [[0], np.cumsum(getattr(ds, f"{split}_sizes")[list(asked)])]))
            assert bool(fetched) == raw  # the raw path did the reading (and only when on)
            fetched.clear()


def test_without_hdf5s_chunk_index_chunks_are_fetched_by_hdf5(tmp_path, monkeypatch):
    """Another file driver, or an HDF5 without H5Dchunk_iter: each chunk comes from H5Dread_chunk."""
    data, path = toy(sizes=(4, 3, 5, 2, 6, 3), test_sizes=(1,) * 6, d=7), tmp_path / "toy.h5"
    write(path, data, chunk_rows=2)
    original = data_module._ChunkSource.__init__
    fetched = spy_fetches(monkeypatch)

    def no_index(self, dset):
        original(self, dset)
        self.fd = self.address = None
    monkeypatch.setattr(data_module._ChunkSource, "__init__", no_index)
    with FederatedDataset(path) as ds:
        for wanted in ([4, 1, 2], [5, 5, 0], None):
            got = ds.load("train", wanted)
            x, y = rows(data, "train", range(6) if wanted is None else wanted)
            np.testing.assert_array_equal(got.x, x)
            np.testing.assert_array_equal(got.y, y)
        assert ds._chunks["/train/x"].fd is None and fetched["/train/x"]


@pytest.mark.parametrize("where", [-1, 1 << 40])  # not in HDF5's index; past the end of the file
def test_chunks_the_raw_path_cannot_fetch_come_through_hdf5(tmp_path, monkeypatch, where):
    """A chunk the raw path cannot fetch whole is read through HDF5: the same rows, bit for bit."""
    data, path = toy(sizes=(4, 3, 5, 2, 6, 3), test_sizes=(1,) * 6, d=7), tmp_path / "toy.h5"
    write(path, data, chunk_rows=2)
    hdf5 = spy_hdf5_reads(monkeypatch)
    with FederatedDataset(path) as ds:
        ds.load("train", [0])
        ds._chunks["/train/x"].address[[1, 4]] = where  # rows 2-3 and 8-9
        for wanted in ([0, 2, 1], [5, 3], [2, 0, 2]):
            hdf5.clear()
            got = ds.load("train", wanted)
            x, y = rows(data, "train", wanted)
            np.testing.assert_array_equal(got.x, x)
            np.testing.assert_array_equal(got.y, y)
            o = data["train_offsets"]
            asked = {r for k in wanted for r in range(o[k], o[k + 1])}
            # HDF5 read exactly the asked rows of those two chunks, and nothing else
            assert sorted(r for _, sel in hdf5 for r in range(sel.start, sel.stop)) == sorted(asked & {2, 3, 8, 9})


def test_load_reuses_its_memory_only_once_nothing_refers_to_it(tmp_path):
    """A round's output memory is reused by the next load once dropped (fresh memory costs page
    faults); never while the DeviceData, a view of it or a tensor sharing it is alive."""
    torch = pytest.importorskip("torch")
    data, path = toy(sizes=(40000, 50000, 45000), test_sizes=(1, 1, 1), d=8), tmp_path / "big.h5"
    write(path, data)

    def address(a):
        return a.__array_interface__["data"][0]
    holders = [lambda d: d, lambda d: d.x[5:], lambda d: torch.from_numpy(d.x), lambda d: d.x.reshape(-1)[7:]]
    with FederatedDataset(path) as ds:
        for hold in holders:
            held = hold(ds.load("train", [1, 2]))
            x = np.asarray(held.x if hasattr(held, "x") else held).copy()
            other = ds.load("train", [2, 0])  # while the first one's memory is held: elsewhere
            np.testing.assert_array_equal(np.asarray(held.x if hasattr(held, "x") else held), x)
            last = address(other.x)
            del held, other
        again = ds.load("train", [0, 1])
        assert address(again.x) == last  # the same memory, now free
        x, y = rows(data, "train", [0, 1])
        np.testing.assert_array_equal(again.x, x)
        np.testing.assert_array_equal(again.y, y)


@pytest.mark.parametrize("dtype, chunk, fill", [
    (np.float32, (273, 60), "normal"), (np.int64, (8192,), "normal"), (np.int8, (5, 3), "normal"),
    (np.uint8, (7,), "ones"), (np.uint8, (1,), "normal"), (np.float32, (4, 2), "zeros"),
    (np.uint16, (40000,), "ones"),  # long runs of 0xffff: the largest sums
    (np.uint8, (8193,), "normal"),  # an odd byte count past the vector blocks (2 of 2,048 words)
])
def test_fletcher32_is_hdf5s(tmp_path, dtype, chunk, fill):
    """The compiled checksum accepts every chunk HDF5 wrote (odd byte counts, all zeros, all ones)
    and rejects each with one flipped bit."""
    rng = np.random.default_rng(3)
    shape = (chunk[0] * 3 + 1, *chunk[1:])  # a partial last chunk too
    values = {"normal": lambda: rng.normal(size=shape) * 1000, "zeros": lambda: np.zeros(shape),
              "ones": lambda: np.full(shape, np.iinfo(dtype).max if np.dtype(dtype).kind in "iu" else 1)}[fill]()
    with h5py.File(tmp_path / "c.h5", "w") as f:
        d = f.create_dataset("a", data=values.astype(dtype), chunks=chunk, fletcher32=True)
        nbytes = int(np.prod(chunk)) * np.dtype(dtype).itemsize
        raw = np.stack([np.frombuffer(d.id.read_direct_chunk((c * chunk[0], *(0,) * (len(chunk) - 1)))[1], np.uint8)
                        for c in range(4)])
    assert raw.shape == (4, nbytes + 4)
    assert not fletcher32_mismatches(raw, nbytes).any()
    for c, byte, bit in ((0, 0, 0), (1, nbytes - 1, 7), (2, nbytes // 2, 3), (3, nbytes + 2, 1)):
        damaged = raw.copy()
        damaged[c, byte] ^= 1 << bit
        np.testing.assert_array_equal(fletcher32_mismatches(damaged, nbytes), np.arange(4) == c)


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


@pytest.mark.parametrize("raw", [True, False])
def test_a_flipped_byte_in_any_chunk_read_is_an_error(tmp_path, monkeypatch, raw):
    """Small chunks: a flipped byte in the chunk holding device 2's rows fails every read that
    touches it (alone, among others, shuffled, repeated), by either path; reads of devices in other
    chunks still succeed, bit for bit. (Labels are all read, so checked, at open: a flipped byte
    there fails the open, test_a_flipped_byte_is_an_error_naming_the_file.)"""
    data, path = toy(sizes=(4, 3, 5, 2, 6, 3), test_sizes=(1,) * 6), tmp_path / "toy.h5"
    write(path, data, chunk_rows=2)
    flip_byte(path, "train/x", chunk=data["train_offsets"][2] // 2 + 1)  # rows 8-9, of device 2 (7-11)
    fallback = spy_hdf5_reads(monkeypatch)
    with FederatedDataset(path) as ds:
        ds.raw_chunks = raw
        for devices in ([2], [0, 1, 2, 3], [5, 2, 0, 2], None):
            with pytest.raises(ValueError, match="toy.h5: train data cannot be read back intact.*damaged"):
                ds.load("train", devices)
        assert not raw or fallback  # the raw path handed the damaged chunk to HDF5, which refused it
        for devices in ([0, 1], [5, 3, 4, 5]):
            got = ds.load("train", devices)
            x, y = rows(data, "train", devices)
            np.testing.assert_array_equal(got.x, x)
            np.testing.assert_array_equal(got.y, y)
    write(path, data, chunk_rows=2)
    flip_byte(path, "train/y", chunk=4)
    with pytest.raises(ValueError, match="toy.h5: not a readable fedsim dataset"):
        FederatedDataset(path)


def spy_hdf5_reads(monkeypatch):
    """(dataset name, rows) of every read_direct from now on."""
    reads = []
    original = h5py.Dataset.read_direct

    def spy(self, dest, source_sel=None, dest_sel=None):
        reads.append((self.name, source_sel))
        return original(self, dest, source_sel, dest_sel)
    monkeypatch.setattr(h5py.Dataset, "read_direct", spy)
    return reads


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


@pytest.mark.parametrize("raw_chunks", [True, False])  # False: every read through h5py
@pytest.mark.parametrize("unfetchable", [False, True])  # True: two chunks come through HDF5 instead
def test_load_into_padded_rows_writes_the_rows_and_nothing_else(tmp_path, monkeypatch, raw_chunks, unfetchable):
    """x_into: each row lands in the first columns of a wider row (a model input's padded layout),
    the other columns and the rows past the read untouched, whatever path the chunks take; y_into
    receives the labels. The same rows as a plain load, bit for bit."""
    data, path = toy(sizes=(4, 3, 5, 2, 6, 3), test_sizes=(1,) * 6, d=7), tmp_path / "toy.h5"
    write(path, data, chunk_rows=2)
    monkeypatch.setattr(FederatedDataset, "raw_chunks", raw_chunks)
    with FederatedDataset(path) as ds:
        ds.load("train", [0])
        if unfetchable and raw_chunks:
            ds._chunks["/train/x"].address[[1, 4]] = -1  # rows 2-3 and 8-9
        for wanted in ([0, 2, 5], [4, 1, 2], [5, 5, 0], None):
            x, y = rows(data, "train", range(6) if wanted is None else wanted)
            padded, labels = np.full((30, 16), 7.0, np.float32), np.full(30, -5)
            got = ds.load("train", wanted, x_into=padded, y_into=labels)
            np.testing.assert_array_equal(got.x, x)
            np.testing.assert_array_equal(padded[:len(x), :7], x)
            assert (padded[:, 7:] == 7).all() and (padded[len(x):] == 7).all()
            np.testing.assert_array_equal(labels[:len(y)], y)
            assert (labels[len(y):] == -5).all() and np.shares_memory(got.x, padded)
        with pytest.raises(ValueError, match="x_into"):
            ds.load("train", [0], x_into=np.zeros((30, 6), np.float32))  # narrower than a row
        with pytest.raises(ValueError, match="x_into"):
            ds.load("train", [0], x_into=np.zeros((30, 16), np.float64))  # another dtype
