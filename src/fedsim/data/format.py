"""Per-dataset HDF5 files: one file holds every device's train and test rows.

Layout (FORMAT_VERSION 2; version 1 files, the same without checksums, still open):
    train/x, train/y, test/x, test/y   all devices' rows, device k owns rows offsets[k]:offsets[k+1]
    train/offsets, test/offsets        int64, num_devices + 1 entries, monotone, starting at 0
    clients                            device ids, variable-length UTF-8
    root attrs                         format_version, fedsim_version, name, kind, num_classes,
                                       provenance (JSON object: generator parameters, seed, source, ...)

Files carry no timestamps, so the same inputs give byte-identical files. Every array is stored in
chunks of about 64 KiB with HDF5's Fletcher-32 checksum, so a flipped byte on disk is an error naming
the file, not silently different data (the cost: benchmarks/checksums.py, docs/data-format.md).
Opening a file checks what is cheap to check: the format version, offsets that start at 0, never
decrease and end at the arrays' lengths, consistent shapes, labels within [0, num_classes) (read in
blocks, so large files stay cheap, and kept: 1 byte a label); a bad file fails with one line naming it.

Reading some devices' rows (load) fetches each 64 KiB chunk of x that holds some of them once, as
stored, checks its checksum in a compiled loop exactly as HDF5 would, and copies the rows out;
anything it cannot vouch for is read through HDF5 instead (see "reading checksummed chunks" below).
The labels come from those checked at open. A round's few devices of many: much faster than through
h5py (the figure: docs/data-format.md, benchmarks/scale.py --compare).
"""

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from .. import __version__
from .atomic import atomic_path

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)  # 1: no checksums
SPLITS = ("train", "test")
CHUNK_BYTES = 1 << 16  # checksummed chunks: small, as a device's rows are read alone
LABEL_BLOCK = 1 << 22  # labels checked this many at a time
UNION_READ_RUNS = 32  # above this many runs of devices, read their union at once (each h5py read has a fixed cost)
REUSE_MAX_BYTES = 1 << 29  # load()'s output arrays up to this size are kept for the next load to reuse


# -----------------------------------------------------------------------------
# writing

def _offsets(field, offsets):
    offsets = np.asarray(offsets)
    if offsets.ndim != 1 or len(offsets) < 1 or offsets.dtype.kind not in "iu":
        raise ValueError(f"{field}: expected a 1-D integer array, got {offsets.dtype} {offsets.shape}")
    if offsets[0] != 0 or np.any(np.diff(offsets) < 0):
        raise ValueError(f"{field}: must start at 0 and be non-decreasing")
    return offsets.astype(np.int64)


def _json_default(obj):
    # numpy scalars and arrays sneak into provenance dicts; store them as plain JSON
    if isinstance(obj, (np.generic, np.ndarray)):
        return obj.tolist()
    raise TypeError(f"provenance: {type(obj).__name__} is not JSON serializable")


def _group(f, name):
    # explicit property list: older h5py lets groups record creation times, which breaks byte-identity
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_obj_track_times(False)
    return h5py.Group(h5py.h5g.create(f.id, name.encode(), gcpl=gcpl))


def _create_split(group, n, feature_shape, x_dtype, chunk_rows):
    def chunks(dtype, *row_shape):
        # HDF5 chunks must be non-empty and may not exceed the (fixed) dataset extent
        rows = chunk_rows or CHUNK_BYTES // (np.dtype(dtype).itemsize * int(np.prod(row_shape, dtype=np.int64)))
        return (max(1, min(rows, n)), *row_shape)
    checked = dict(fletcher32=n > 0, track_times=False)  # HDF5 cannot chunk an empty array
    x = group.create_dataset("x", (n, *feature_shape), x_dtype, chunks=chunks(x_dtype, *feature_shape) if n else None,
                             **checked)
    y = group.create_dataset("y", (n,), np.int64, chunks=chunks(np.int64) if n else None, **checked)
    return x, y


def write_dataset_stream(path, *, name, kind, num_classes, clients, train_offsets, test_offsets,
                         feature_shape, x_dtype, provenance, blocks, chunk_rows=None):
    """Write a dataset whose rows arrive as `blocks`, so huge datasets never sit in memory.

    Each block is (train_x, train_y, test_x, test_y) holding the next rows of each split, in device
    order (a block may span any number of devices). The file appears at `path` only when complete.
    """
    offsets = {"train": _offsets("train_offsets", train_offsets), "test": _offsets("test_offsets", test_offsets)}
    num_devices = len(offsets["train"]) - 1
    if len(offsets["test"]) != num_devices + 1:
        raise ValueError(f"test_offsets: {len(offsets['test'])} entries, train_offsets has {num_devices + 1}")
    clients = [str(c) for c in clients]
    if len(clients) != num_devices or len(set(clients)) != num_devices:
        raise ValueError(f"clients: expected {num_devices} unique ids, got {len(set(clients))} of {len(clients)}")
    if not (isinstance(name, str) and name and isinstance(kind, str) and kind):
        raise ValueError(f"name/kind: expected non-empty strings, got {name!r}, {kind!r}")
    if int(num_classes) < 1:
        raise ValueError(f"num_classes: expected >= 1, got {num_classes}")
    if not isinstance(provenance, dict):
        raise ValueError(f"provenance: expected a dict, got {type(provenance).__name__}")
    feature_shape, x_dtype = tuple(int(s) for s in feature_shape), np.dtype(x_dtype)
    provenance = json.dumps(provenance, sort_keys=True, default=_json_default)

    with atomic_path(path) as tmp:  # an empty file of its own, which h5py writes over ("w")
        with h5py.File(tmp, "w") as f:
            f.attrs.update(format_version=FORMAT_VERSION, fedsim_version=__version__, name=name, kind=kind,
                           num_classes=int(num_classes), provenance=provenance)
            f.create_dataset("clients", data=clients, dtype=h5py.string_dtype(), track_times=False)
            dsets, filled = {}, dict.fromkeys(SPLITS, 0)
            for split in SPLITS:
                g = _group(f, split)
                g.create_dataset("offsets", data=offsets[split], track_times=False)
                dsets[split] = _create_split(g, int(offsets[split][-1]), feature_shape, x_dtype, chunk_rows)
            for block in blocks:
                for split, (x, y) in zip(SPLITS, (block[:2], block[2:])):
                    filled[split] = _write_rows(split, dsets[split], filled[split], x, y, num_classes)
            for split in SPLITS:
                if filled[split] != offsets[split][-1]:
                    raise ValueError(f"{split}_x: got {filled[split]} rows, "
                                     f"{split}_offsets[-1] is {offsets[split][-1]}")


def _write_rows(split, dsets, start, x, y, num_classes):
    xd, yd = dsets
    x, y = np.asarray(x), np.asarray(y)
    if x.shape[1:] != xd.shape[1:] or x.dtype != xd.dtype:
        raise ValueError(f"{split}_x: expected rows of shape {xd.shape[1:]} and dtype {xd.dtype}, "
                         f"got {x.shape[1:]} {x.dtype}")
    if y.shape != x.shape[:1] or y.dtype.kind not in "iu":
        raise ValueError(f"{split}_y: expected {len(x)} integer labels, got {y.dtype} {y.shape}")
    if len(y) and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(f"{split}_y: labels must lie in [0, {num_classes}), got [{y.min()}, {y.max()}]")
    stop = start + len(x)
    if stop > len(xd):
        raise ValueError(f"{split}_x: more than {split}_offsets[-1] = {len(xd)} rows")
    if len(x):
        xd[start:stop] = x
        yd[start:stop] = y
    return stop


def write_dataset(path, *, name, kind, num_classes, clients, train_x, train_y, train_offsets,
                  test_x, test_y, test_offsets, provenance, chunk_rows=None):
    """Write in-memory arrays as one dataset file (atomically; see write_dataset_stream)."""
    train_x = np.asarray(train_x)
    write_dataset_stream(path, name=name, kind=kind, num_classes=num_classes, clients=clients,
                         train_offsets=train_offsets, test_offsets=test_offsets,
                         feature_shape=train_x.shape[1:], x_dtype=train_x.dtype, provenance=provenance,
                         blocks=[(train_x, train_y, test_x, test_y)], chunk_rows=chunk_rows)


CHECK_ROWS = 4096  # rows of x tested for finiteness at a time: a bounded mask beside a large image array


def first_non_finite_row(x: np.ndarray) -> int | None:
    """The first row of `x` (n x ...) holding a NaN or an infinity; None if every value is finite."""
    if x.dtype.kind not in "fc":
        return None  # integers are finite
    for start in range(0, len(x), CHECK_ROWS):
        block = x[start:start + CHECK_ROWS].reshape(min(CHECK_ROWS, len(x) - start), -1)
        bad = np.flatnonzero(~np.isfinite(block).all(axis=1))
        if len(bad):
            return start + int(bad[0])
    return None


def non_finite_text(x: np.ndarray, row: int) -> str:
    """`row holds nan` (the row's first non-finite value)."""
    values = x[row].ravel()
    return f"row {row} holds {values[~np.isfinite(values)][0]}"


# -----------------------------------------------------------------------------
# reading

@dataclass
class DeviceData:
    """Rows of some devices, concatenated in the order they were asked for."""
    x: np.ndarray
    y: np.ndarray
    offsets: np.ndarray  # len(devices) + 1, starting at 0
    devices: np.ndarray  # int64 device indices

    @property
    def sizes(self):
        return np.diff(self.offsets)


class FederatedDataset:
    """A dataset file opened read-only; only metadata is read until load() is called."""

    def __init__(self, path):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: dataset file not found")
        if not h5py.is_hdf5(self.path):
            raise ValueError(f"{self.path}: not an HDF5 file")
        self._f = h5py.File(self.path, "r")
        self._chunks = {}  # dataset name -> _ChunkSource, made at its first read
        self._spare = {}  # (split, "x" or "y") -> memory of load()'s last output, see _output
        self._labels = {}  # split -> every label, as checked at open
        try:
            version = self._f.attrs.get("format_version")
            if version not in READABLE_VERSIONS:
                raise ValueError(f"{self.path}: unsupported format_version {version!r} (fedsim reads "
                                 f"{', '.join(map(str, READABLE_VERSIONS))})")
            self.attrs = {k: v.item() if isinstance(v, np.generic) else v for k, v in self._f.attrs.items()}
            self.attrs["provenance"] = json.loads(self.attrs.get("provenance", "{}"))
            self.name, self.kind, self.num_classes = self.attrs["name"], self.attrs["kind"], self.attrs["num_classes"]
            self.clients = self._f["clients"].asstr()[:].tolist()
            # arrays a builder stored beside the format's (Sent140's `embedding`), by name
            self.extras = sorted(set(self._f) - {"clients", *SPLITS})
            self._offsets = {s: self._f[f"{s}/offsets"][:] for s in SPLITS}
            self.feature_shape = self._f["train/x"].shape[1:]
            self.x_dtypes = {s: self._f[f"{s}/x"].dtype for s in SPLITS}  # as stored (load's x_into takes it)
            self._check()
        except (KeyError, OSError) as err:  # a missing array or attribute, an unreadable block
            self._f.close()
            raise ValueError(f"{self.path}: not a readable fedsim dataset ({err})") from None
        except Exception:
            self._f.close()
            raise
        self.num_devices = len(self.clients)
        self.train_sizes, self.test_sizes = (np.diff(self._offsets[s]) for s in SPLITS)

    def _check(self) -> None:
        """Raise ValueError naming the file and the first inconsistency found (cheap checks only)."""
        if not (isinstance(self.num_classes, (int, np.integer)) and self.num_classes >= 1):
            raise ValueError(f"{self.path}: num_classes is {self.num_classes!r}, expected an integer >= 1")
        for split in SPLITS:
            self._check_layout(split)
            self._check_labels(split)

    def _check_layout(self, split) -> None:
        """Offsets: one more than the devices, from 0, never decreasing, ending at the arrays'
        lengths; rows of train/x's shape."""
        devices = len(self.clients)
        offsets, x, y = self._offsets[split], self._f[f"{split}/x"], self._f[f"{split}/y"]
        where = f"{self.path}: {split}/offsets"
        if offsets.ndim != 1 or len(offsets) != devices + 1 or offsets.dtype.kind not in "iu":
            raise ValueError(f"{where} must hold {devices + 1} integers (one more than the devices), "
                             f"has {offsets.dtype} {offsets.shape}")
        if offsets[0] != 0 or np.any(np.diff(offsets) < 0):
            raise ValueError(f"{where} must start at 0 and never decrease")
        if offsets[-1] != len(x) or len(x) != len(y):
            raise ValueError(f"{where} end at {offsets[-1]}, but {split}/x has {len(x)} rows and "
                             f"{split}/y {len(y)}")
        if x.shape[1:] != self.feature_shape:
            raise ValueError(f"{self.path}: {split}/x rows have shape {x.shape[1:]}, train/x {self.feature_shape}")

    def _check_labels(self, split) -> None:
        """Every label in [0, num_classes): all of them read (their chunks' checksums with them),
        in blocks, so large files stay cheap in memory; kept, checked, in the smallest integer type
        that holds them (1 byte a label up to 256 classes), for load() to hand out."""
        y = self._f[f"{split}/y"]
        labels = np.empty(len(y), np.min_scalar_type(max(int(self.num_classes) - 1, 0)))
        for start in range(0, len(y), LABEL_BLOCK):
            block = y[start:start + LABEL_BLOCK]
            if block.min() < 0 or block.max() >= self.num_classes:
                bad = int(block[(block < 0) | (block >= self.num_classes)][0])
                raise ValueError(f"{self.path}: {split}/y holds label {bad}, outside [0, {self.num_classes})")
            labels[start:start + len(block)] = block
        self._labels[split] = labels

    def load(self, split, devices=None, x_into=None, y_into=None):
        """Rows of `devices` (default: all) from `split`, reading nothing of the other devices.

        `x_into` (optional): a C-contiguous 2-D array of x's dtype, with at least as many rows as are
        read and at least a row's feature count of columns; each row is written into the first
        columns of a row of it, the others left as they are (a model input's padded layout, filled
        by the read itself: no second copy). `y_into` (optional): a 1-D integer array, at least as
        long, for the labels. The DeviceData returned then holds views of them.
        """
        if split not in SPLITS:
            raise ValueError(f"split: expected one of {SPLITS}, got {split!r}")
        whole = devices is None
        devices = self._device_indices(devices)
        offsets = self._offsets[split]
        starts, stops = offsets[devices], offsets[devices + 1]
        out = np.concatenate([[0], np.cumsum(stops - starts)])
        xd, yd = self._f[f"{split}/x"], self._f[f"{split}/y"]
        if x_into is not None:
            x = _rows_of(x_into, out[-1], xd)
        elif whole:  # a whole split (load: memory) is read once: its memory is not kept
            x = np.empty((out[-1], *xd.shape[1:]), xd.dtype)
        else:
            x = self._output((split, "x"), (out[-1], *xd.shape[1:]), xd.dtype)
        if y_into is not None:
            y = _labels_of(y_into, out[-1])
        elif whole:
            y = np.empty(out[-1], yd.dtype)
        else:
            y = self._output((split, "y"), (out[-1],), yd.dtype)
        try:
            self._read(split, xd, yd, devices, starts, stops, out, x, y, x_into)
        except OSError as err:  # a chunk's checksum (or another filter) failed: the file is damaged
            raise ValueError(f"{self.path}: {split} data cannot be read back intact ({err}); "
                             "the file is damaged: rebuild it") from None
        return DeviceData(x=x, y=y, offsets=out, devices=devices)

    def _device_indices(self, devices) -> np.ndarray:
        """`devices` (default: all) as int64 indices, each checked to be a device of this file."""
        devices = np.arange(self.num_devices) if devices is None else np.atleast_1d(np.asarray(devices))
        if devices.size == 0:
            devices = devices.astype(np.int64)
        if devices.ndim != 1 or devices.dtype.kind not in "iu":
            raise ValueError(f"devices: expected a 1-D list of integer indices, got {devices.dtype} {devices.shape}")
        bad = devices[(devices < 0) | (devices >= self.num_devices)]
        if len(bad):
            raise ValueError(f"devices: index {bad[0]} out of range [0, {self.num_devices}) in {self.path}")
        return devices.astype(np.int64)

    raw_chunks = True  # False: every read through h5py (the reference; benchmarks/scale.py --compare)

    def _read(self, split, xd, yd, devices, starts, stops, out, x, y, x_into=None) -> None:
        """Fill x and y; x's rows lie in x_into's (padded) rows where it is given, else x is contiguous."""
        if self.raw_chunks and _raw_chunk_layout(xd):
            if xd.name not in self._chunks:
                self._chunks[xd.name] = _ChunkSource(xd)
            _read_raw_chunks(self._chunks[xd.name], devices, starts, stops, out, x,
                             _byte_rows(x if x_into is None else x_into))
        elif x_into is None:
            _read_hdf5(xd, devices, starts, stops, out, x)
        else:  # h5py reads into contiguous memory only
            stage = np.empty(x.shape, x.dtype)
            _read_hdf5(xd, devices, starts, stops, out, stage)
            x[...] = stage
        if self.raw_chunks:  # the labels checked at open (checksums and range), not read again
            rows = np.repeat(starts - out[:-1], stops - starts) + np.arange(out[-1])
            y[:] = self._labels[split][rows]
        elif y.flags.c_contiguous and y.dtype == yd.dtype:
            _read_hdf5(yd, devices, starts, stops, out, y)
        else:
            stage = np.empty(y.shape, yd.dtype)
            _read_hdf5(yd, devices, starts, stops, out, stage)
            y[...] = stage

    def _output(self, role, shape, dtype) -> np.ndarray:
        """A new C-contiguous array for load() to fill: in the memory of the previous one of the same
        role (split and array) once nothing refers to that any more, else newly allocated.

        A round's ~100 MB of fresh memory costs 0.03 s to 0.5 s of page faults on the project's
        (virtual) machine, as much as the read itself; reused memory costs none. Memory still
        referred to (the DeviceData, a view, a torch tensor sharing it) is never reused.
        """
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        spare = self._spare.get(role)
        # three references when free: the dict's, `spare`'s and getrefcount's argument
        if spare is not None and nbytes <= spare.nbytes and hasattr(sys, "getrefcount") and \
                sys.getrefcount(spare) == 3:
            return spare[:nbytes].view(dtype).reshape(shape)
        if nbytes < (1 << 20) or nbytes * 5 // 4 > REUSE_MAX_BYTES:  # small, or too large to keep
            return np.empty(shape, dtype)
        self._spare.pop(role, None)
        spare = self._spare[role] = np.empty(nbytes * 5 // 4, np.uint8)  # room for larger rounds
        return spare[:nbytes].view(dtype).reshape(shape)

    def close(self):
        self._spare.clear()
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _rows_of(into, rows, xd) -> np.ndarray:
    """The first `rows` rows of `into` (see load's x_into), as rows of xd's shape: a view whose rows
    lie where into's do."""
    features = int(np.prod(xd.shape[1:], dtype=np.int64))
    if not (isinstance(into, np.ndarray) and into.ndim == 2 and into.flags.c_contiguous and into.dtype == xd.dtype
            and len(into) >= rows and into.shape[1] >= features):
        raise ValueError(f"x_into: expected a C-contiguous 2-D {xd.dtype} array of at least {rows} rows x "
                         f"{features} columns, got {getattr(into, 'dtype', type(into).__name__)} "
                         f"{getattr(into, 'shape', '')}")
    return into[:rows, :features].reshape(rows, *xd.shape[1:])


def _labels_of(into, rows) -> np.ndarray:
    if not (isinstance(into, np.ndarray) and into.ndim == 1 and into.dtype.kind in "iu" and len(into) >= rows):
        raise ValueError(f"y_into: expected a 1-D integer array of at least {rows} entries")
    return into[:rows]


def _byte_rows(rows: np.ndarray) -> np.ndarray:
    """A C-contiguous array's memory as (its rows, bytes a row) uint8: where the compiled unpack
    writes row i (its first bytes; the rest of a padded row is left alone)."""
    return rows.reshape(len(rows), int(np.prod(rows.shape[1:], dtype=np.int64))).view(np.uint8)


def _read_hdf5(dset, devices, starts, stops, out, dst) -> None:
    """Rows starts[k]:stops[k] of `dset` into dst[out[k]:out[k + 1]], through h5py's reads (HDF5 checks
    each chunk's checksum): a slice per run of consecutive devices, or one union read of all runs.
    The path for files without checksummed chunks (format 1), and the reference for the raw path."""
    # a run of consecutive device indices is one contiguous slice on disk: read it at once
    edges = [0, *(np.flatnonzero(np.diff(devices) != 1) + 1), len(devices)] if len(devices) else []
    runs = list(zip(edges[:-1], edges[1:]))
    if len(runs) > UNION_READ_RUNS and np.all(np.diff(devices) > 0):
        # increasing devices: the file's order is the order asked, so one read of all runs fills dst
        _read_blocks(dset, [(starts[a], stops[b - 1]) for a, b in runs], dst)
        return
    for a, b in runs:
        lo, hi, at = starts[a], stops[b - 1], out[a]
        if hi > lo:
            dset.read_direct(dst, np.s_[lo:hi], np.s_[at:at + hi - lo])


def _read_blocks(dset, blocks, out):
    """Rows lo:hi of `dset` for each (lo, hi) in `blocks` (increasing, disjoint) into `out`, in one read."""
    space, tail = dset.id.get_space(), dset.shape[1:]
    space.select_none()
    for lo, hi in blocks:
        if hi > lo:
            space.select_hyperslab((int(lo), *(0,) * len(tail)), (int(hi - lo), *tail), op=h5py.h5s.SELECT_OR)
    if out.size:
        dset.id.read(h5py.h5s.create_simple(out.shape), space, out)


# -----------------------------------------------------------------------------
# reading checksummed chunks without HDF5's per-read cost
#
# Every h5py read has a fixed cost before it moves a byte, and one read of many row ranges (a
# hyperslab union) costs time that grows with ranges x chunks, so a round of many devices read
# through h5py waits either way (the figures: docs/data-format.md, docs/performance.md). Here each chunk that holds some of
# the rows asked for is fetched once as stored (its bytes at the address HDF5's chunk index gives,
# with one pread; or, without that index, H5Dread_chunk), its Fletcher-32 checksum is checked as
# HDF5's filter checks it (H5Z_filter_fletcher32), a batch of chunks in one compiled loop, and the
# rows are copied out. A chunk this path cannot check exactly as HDF5 would (another filter, a
# filter skipped, an unexpected size, an unallocated chunk, a short read, a checksum that differs)
# is read through HDF5 instead, whose verdict stands: a damaged chunk raises the same OSError.

RAW_BATCH_BYTES = 1 << 20  # raw chunks fetched, checked and unpacked this many bytes at a time
RAW_CHUNK_MAX = 1 << 24  # larger chunks go through HDF5 (the checksum's sums stay within 64 bits)
_kernels = None  # (checksum, checksum and unpack), compiled at the first raw read
_fletcher32_ok_compiled = None
simd = None  # fedsim.simd, imported with numba at the first raw read (_compiled)
# numba's cache keys compiled code on each function's own source file, not on fedsim.simd, whose
# operations the checksum below inlines: as in fedsim.core.kernel, this names the simd source it was
# compiled with (tests/test_simd.py checks it), so that a simd edit changes this file too.
SIMD_SOURCE = "75e04a10570b82bf"
_LITTLE_ENDIAN = sys.byteorder == "little"


def _raw_chunk_layout(dset) -> bool:
    """Whether `dset` is stored as fedsim writes it (format 2): chunks of whole rows whose only filter
    is Fletcher-32, small enough for the compiled check."""
    if dset.chunks is None or tuple(dset.chunks[1:]) != tuple(dset.shape[1:]) or dset.dtype.hasobject:
        return False
    dcpl = dset.id.get_create_plist()
    if dcpl.get_nfilters() != 1 or dcpl.get_filter(0)[0] != h5py.h5z.FILTER_FLETCHER32:
        return False
    return 0 < int(np.prod(dset.chunks, dtype=np.int64)) * dset.dtype.itemsize < RAW_CHUNK_MAX


def _fletcher32_ok(row, nbytes):
    """Whether row[nbytes:nbytes + 4], the stored checksum of the data bytes row[:nbytes], is HDF5's
    Fletcher-32 of them (H5_checksum_fletcher32: big-endian 16-bit words, a trailing odd byte as the
    high byte of one more word, both sums reduced modulo 65535 to 1..65535 unless zero; stored
    little-endian; the byte-swapped value written by HDF5 < 1.6.3 also accepted, as HDF5 does).

    The sum of prefix sums is taken in closed form, sum over words of (n - i) * w_i, in blocks whose
    sums fit 32 bits: on little-endian hosts 256 x LANES words in vector lanes (fedsim.simd; each
    lane's running sums, no multiply), elsewhere 256 words (256 * 256 * 65535 < 2^32)."""
    half = nbytes // 2
    s1 = np.uint64(0)
    s2 = np.uint64(0)
    done = 0
    if _LITTLE_ENDIAN:
        lanes = np.empty(2 * simd.LANES, np.uint32)
        span = 256 * simd.LANES  # words a block: each lane's sums below stay within 32 bits
        for k in range(half // span):
            # lane l sums the words l, l + LANES, ...: a the words, b the running sums of a (so the
            # word at step t counts 256 - t times), then sum_j (span - j) w_j = LANES sum b - sum l a_l
            a = b = simd.splat(np.uint32(0))
            for t in range(256):
                a = simd.iadd(a, simd.load_be16(row, 2 * (span * k + simd.LANES * t)))
                b = simd.iadd(b, a)
            simd.store(lanes, 0, a)
            simd.store(lanes, simd.LANES, b)
            u1 = np.uint64(0)
            u2 = np.uint64(0)
            for lane in range(simd.LANES):
                a_lane, b_lane = np.uint64(lanes[lane]), np.uint64(lanes[simd.LANES + lane])
                u1 += a_lane
                u2 += np.uint64(simd.LANES) * b_lane - np.uint64(lane) * a_lane
            done = span * (k + 1)
            s1 += u1
            s2 += u2 + np.uint64(half - done) * u1
    elif nbytes % 2 == 0:  # rows then start at even addresses: read as 16-bit words
        words = row[:2 * half].view(np.uint16)
        for k in range(half // 256):
            u1 = np.uint32(0)
            u2 = np.uint32(0)
            for j in range(256):
                v = np.uint32(words[256 * k + j])
                w = ((v & np.uint32(0xFF)) << np.uint32(8)) | (v >> np.uint32(8)) if _LITTLE_ENDIAN else v
                u1 += w
                u2 += np.uint32(256 - j) * w
            done = 256 * (k + 1)
            s1 += np.uint64(u1)
            s2 += np.uint64(u2) + np.uint64(half - done) * np.uint64(u1)
    for i in range(done, half):
        w = (np.uint64(row[2 * i]) << np.uint64(8)) | np.uint64(row[2 * i + 1])
        s1 += w
        s2 += np.uint64(half - i) * w
    if nbytes % 2:
        s1 += np.uint64(row[nbytes - 1]) << np.uint64(8)
        s2 += s1
    f1 = np.uint64(0) if s1 == 0 else (s1 - np.uint64(1)) % np.uint64(65535) + np.uint64(1)
    f2 = np.uint64(0) if s2 == 0 else (s2 - np.uint64(1)) % np.uint64(65535) + np.uint64(1)
    want = np.uint32((f2 << np.uint64(16)) | f1)
    swapped = ((want & np.uint32(0x00FF00FF)) << np.uint32(8)) | ((want >> np.uint32(8)) & np.uint32(0x00FF00FF))
    stored = np.uint32(row[nbytes]) | (np.uint32(row[nbytes + 1]) << np.uint32(8)) | \
        (np.uint32(row[nbytes + 2]) << np.uint32(16)) | (np.uint32(row[nbytes + 3]) << np.uint32(24))
    return stored == want or stored == swapped


def _fletcher32_mismatches(chunks, nbytes, bad):
    for c in range(chunks.shape[0]):
        bad[c] = not _fletcher32_ok_compiled(chunks[c], nbytes)


def _check_and_unpack(chunks, count, nbytes, first, usable, slot, src, dst, length, p0, p1, out_rows, row_bytes):
    """Chunks first..first + count - 1 (their stored bytes in chunks[:count]), and the pieces p0..p1 - 1
    of rows they hold (slot[p]: the piece's chunk, non-decreasing): usable[c] stays true where it was
    (fetched whole) and the checksum is right, and then chunk c's pieces are copied at once, while
    its bytes are still in the core's cache; piece p's length[p] rows one by one (row i:
    out_rows[dst[p] + i, :row_bytes] = chunks[slot[p] - first, src[p] + i row_bytes:][:row_bytes]),
    so that the rows may be padded."""
    packed = out_rows.shape[1] == row_bytes  # rows back to back: a piece is one run of bytes
    flat = out_rows.reshape(-1)
    p = p0
    for c in range(count):
        if usable[first + c] and not _fletcher32_ok_compiled(chunks[c], nbytes):
            usable[first + c] = False
        while p < p1 and slot[p] == first + c:
            if usable[first + c]:
                if packed:
                    _copy(flat[dst[p] * row_bytes:(dst[p] + length[p]) * row_bytes], chunks[c, src[p]:])
                else:
                    at = src[p]
                    for r in range(dst[p], dst[p] + length[p]):
                        _copy(out_rows[r, :row_bytes], chunks[c, at:at + row_bytes])
                        at += row_bytes
            p += 1


def _copy(to, of):
    """to[:] = of[:len(to)], as a plain loop over two views: numba's slice assignment is slower."""
    for i in range(len(to)):
        to[i] = of[i]


def _compiled():
    """The loops above, compiled with numba at the first call and cached beside this file (as
    fedsim.core.kernel's); numba is imported here, so that opening a file and writing one need no
    compiler."""
    global _kernels, _fletcher32_ok_compiled, _copy, simd
    if _kernels is None:
        import numba

        from .. import simd
        jit = numba.njit(cache=True, nogil=True)
        _fletcher32_ok_compiled = jit(_fletcher32_ok)  # the global the two below call
        _copy = jit(_copy)  # the global _check_and_unpack calls
        _kernels = jit(_fletcher32_mismatches), jit(_check_and_unpack)
    return _kernels


def fletcher32_mismatches(chunks: np.ndarray, nbytes: int) -> np.ndarray:
    """Which raw chunks (rows of uint8: nbytes of data, then the 4 bytes of their stored checksum)
    fail HDF5's Fletcher-32 check."""
    bad = np.zeros(len(chunks), bool)
    if len(chunks):
        _compiled()[0](np.ascontiguousarray(chunks, np.uint8), int(nbytes), bad)
    return bad


class _ChunkSource:
    """Where a checksummed dataset's chunks lie: the file addresses of those stored whole with their
    checksum (HDF5's chunk index, read once), read with pread on the file HDF5 holds
    open; without that index (another file driver, an older HDF5), H5Dread_chunk per chunk."""

    def __init__(self, dset):
        self.dset, self.rows = dset, dset.chunks[0]
        self.row_bytes = dset.dtype.itemsize * int(np.prod(dset.shape[1:], dtype=np.int64))
        self.nbytes = self.rows * self.row_bytes
        self.fd, self.address = None, None
        try:
            if dset.file.driver == "sec2":
                stored = []
                dset.id.chunk_iter(stored.append)
                info = np.array([(s.chunk_offset[0], s.filter_mask, s.byte_offset, s.size) for s in stored],
                                np.int64).reshape(-1, 4)
                whole = (info[:, 1] == 0) & (info[:, 3] == self.nbytes + 4) & (info[:, 0] % self.rows == 0)
                self.address = np.full(-(-len(dset) // self.rows), -1, np.int64)
                self.address[info[whole, 0] // self.rows] = info[whole, 2]
                self.fd = dset.file.id.get_vfd_handle()
        except (AttributeError, RuntimeError, OSError, ValueError, TypeError):
            self.fd, self.address = None, None
        self._buffer = None

    def buffer(self, count) -> np.ndarray:
        """Room for `count` chunks as stored, kept from one load to the next."""
        if self._buffer is None or len(self._buffer) < count:
            self._buffer = np.empty((count, self.nbytes + 4), np.uint8)
        return self._buffer

    def fetch(self, ids, chunks, usable):
        """Fill `chunks` with the stored bytes of chunks `ids`, len(chunks) at a time, setting
        usable[j] where chunk ids[j] came whole; yield (first, count) after each batch."""
        batch, want = len(chunks), self.nbytes + 4
        if self.fd is not None:
            # chunks stored one after another (as fedsim writes them) come with one pread a batch
            address = self.address[ids]
            cut = np.concatenate([[True], np.diff(address) != want, [True]])
            cut[::batch] = True
            heads, address, h = np.flatnonzero(cut).tolist(), address.tolist(), 0
            for first in range(0, len(ids), batch):
                end = min(first + batch, len(ids))
                while heads[h] < end:
                    a, b = heads[h], heads[h + 1]
                    h += 1
                    if address[a] >= 0:
                        try:
                            got = os.preadv(self.fd, [chunks[a - first:b - first]], address[a])
                        except OSError:  # HDF5 decides
                            continue
                        usable[a:a + min(got // want, b - a)] = True
                yield first, end - first
            return
        zeros = (0,) * (self.dset.ndim - 1)
        for first in range(0, len(ids), batch):
            end = min(first + batch, len(ids))
            for j, c in enumerate(ids[first:end].tolist()):
                try:
                    mask, raw = self.dset.id.read_direct_chunk((c * self.rows, *zeros), out=chunks[j])
                    usable[first + j] = mask == 0 and len(raw) == want
                except (ValueError, RuntimeError, OSError):  # unallocated, oversized: HDF5 decides
                    pass
            yield first, end - first


def _read_raw_chunks(source, devices, starts, stops, out, dst, dst_rows) -> None:
    """Rows starts[k]:stops[k] of the source's dataset into dst[out[k]:out[k + 1]] (any order, repeats
    allowed), fetching each chunk that holds some of them once and checking its checksum here.
    dst_rows: dst's rows as _byte_rows gives them (of the padded array dst is a view of, if it is)."""
    tail = source.dset.shape[1:]
    # the distinct devices in file order (disjoint, increasing ranges), staged in that order: in dst
    # itself when they were asked that way (the usual case: a round's sorted devices), else apart
    if len(devices) < 2 or np.all(np.diff(devices) > 0):
        stage, stage_rows, lo, hi, at, inverse = dst, dst_rows, starts, stops, out[:-1], None
    else:
        _, first, inverse = np.unique(devices, return_index=True, return_inverse=True)
        lo, hi = starts[first], stops[first]
        at = np.concatenate([[0], np.cumsum(hi - lo)])
        stage, at = np.empty((at[-1], *tail), dst.dtype), at[:-1]
        stage_rows = _byte_rows(stage)
    # runs of rows (adjacent devices merged, empty ones dropped), then pieces: runs cut where chunks end
    keep = hi > lo
    lo, hi, at = lo[keep], hi[keep], at[keep]
    if len(lo):
        head = np.flatnonzero(np.concatenate([[True], lo[1:] != hi[:-1]]))
        lo, hi, at = lo[head], hi[np.concatenate([head[1:] - 1, [len(hi) - 1]])], at[head]
        rows = source.rows
        count = (hi - 1) // rows - lo // rows + 1
        run = np.repeat(np.arange(len(lo)), count)
        chunk = lo[run] // rows + np.arange(len(run)) - np.repeat(np.cumsum(count) - count, count)
        piece_lo, piece_hi = np.maximum(lo[run], chunk * rows), np.minimum(hi[run], (chunk + 1) * rows)
        _fill_from_chunks(source, chunk, piece_lo, piece_hi, at[run] + piece_lo - lo[run], stage, stage_rows)
    if inverse is not None:  # row i of dst, of device k, is row stage_at[k] + i - out[k] of the stage
        stage_at = np.concatenate([[0], np.cumsum(stops[first] - starts[first])])[:-1]
        source_rows = np.repeat(stage_at[inverse] - out[:-1], stops - starts) + np.arange(out[-1])
        np.take(stage, source_rows, axis=0, out=dst)


def _fill_from_chunks(source, chunk, piece_lo, piece_hi, piece_at, stage, stage_rows) -> None:
    """stage[piece_at[p]:][:piece_hi[p] - piece_lo[p]] = rows piece_lo[p]:piece_hi[p] of the dataset,
    each piece within chunk[p] (non-decreasing); a batch of chunks at a time: fetched as stored,
    then checked and unpacked in one compiled call. Pieces of chunks this cannot vouch for are read
    through HDF5 at the end: an OSError there if a chunk is damaged."""
    check_and_unpack = _compiled()[1]
    rows, row_bytes, nbytes = source.rows, source.row_bytes, source.nbytes
    new = np.concatenate([[True], chunk[1:] != chunk[:-1]])
    slot, chunk_ids = np.cumsum(new) - 1, chunk[new]  # slot: the piece's chunk among the distinct ones
    src = (piece_lo - chunk * rows) * row_bytes
    length = piece_hi - piece_lo  # rows
    batch = min(max(1, RAW_BATCH_BYTES // (nbytes + 4)), len(chunk_ids))
    chunks = source.buffer(batch)[:batch]
    usable = np.zeros(len(chunk_ids), bool)  # fetched whole, then: and its checksum right
    bounds = np.searchsorted(slot, np.arange(0, len(chunk_ids) + batch, batch)).tolist()
    for b, (first, count) in enumerate(source.fetch(chunk_ids, chunks, usable)):
        check_and_unpack(chunks, count, nbytes, first, usable, slot, src, piece_at, length, bounds[b], bounds[b + 1],
                         stage_rows, row_bytes)
    for p in np.flatnonzero(~usable[slot]).tolist():  # through HDF5's filters
        lo, hi, at = int(piece_lo[p]), int(piece_hi[p]), int(piece_at[p])
        if stage.flags.c_contiguous:
            source.dset.read_direct(stage, np.s_[lo:hi], np.s_[at:at + hi - lo])
        else:  # padded rows: h5py reads into contiguous memory only
            rows = np.empty((hi - lo, *stage.shape[1:]), stage.dtype)
            source.dset.read_direct(rows, np.s_[lo:hi])
            stage[at:at + hi - lo] = rows
