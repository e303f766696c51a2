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
blocks, so large files stay cheap); a bad file fails with one line naming it.
"""

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from . import __version__

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)  # 1: no checksums
SPLITS = ("train", "test")
CHUNK_BYTES = 1 << 16  # checksummed chunks: small, as a device's rows are read alone
LABEL_BLOCK = 1 << 22  # labels checked this many at a time
UNION_READ_RUNS = 32  # above this many runs of devices, read their union at once (h5py: ~0.2 ms per read)


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

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # as every other output of the package
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with h5py.File(tmp, "x") as f:
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
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # a no-op after os.replace; otherwise drops the half-written file


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
        try:
            version = self._f.attrs.get("format_version")
            if version not in READABLE_VERSIONS:
                raise ValueError(f"{self.path}: unsupported format_version {version!r} (fedsim reads "
                                 f"{', '.join(map(str, READABLE_VERSIONS))})")
            self.attrs = {k: v.item() if isinstance(v, np.generic) else v for k, v in self._f.attrs.items()}
            self.attrs["provenance"] = json.loads(self.attrs.get("provenance", "{}"))
            self.name, self.kind, self.num_classes = self.attrs["name"], self.attrs["kind"], self.attrs["num_classes"]
            self.clients = self._f["clients"].asstr()[:].tolist()
            self._offsets = {s: self._f[f"{s}/offsets"][:] for s in SPLITS}
            self.feature_shape = self._f["train/x"].shape[1:]
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
        devices = len(self.clients)
        if not (isinstance(self.num_classes, (int, np.integer)) and self.num_classes >= 1):
            raise ValueError(f"{self.path}: num_classes is {self.num_classes!r}, expected an integer >= 1")
        for split in SPLITS:
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
            for start in range(0, len(y), LABEL_BLOCK):
                block = y[start:start + LABEL_BLOCK]
                if block.min() < 0 or block.max() >= self.num_classes:
                    bad = int(block[(block < 0) | (block >= self.num_classes)][0])
                    raise ValueError(f"{self.path}: {split}/y holds label {bad}, outside [0, {self.num_classes})")

    def load(self, split, devices=None):
        """Rows of `devices` (default: all) from `split`, reading nothing of the other devices."""
        if split not in SPLITS:
            raise ValueError(f"split: expected one of {SPLITS}, got {split!r}")
        devices = np.arange(self.num_devices) if devices is None else np.atleast_1d(np.asarray(devices))
        if devices.size == 0:
            devices = devices.astype(np.int64)
        if devices.ndim != 1 or devices.dtype.kind not in "iu":
            raise ValueError(f"devices: expected a 1-D list of integer indices, got {devices.dtype} {devices.shape}")
        bad = devices[(devices < 0) | (devices >= self.num_devices)]
        if len(bad):
            raise ValueError(f"devices: index {bad[0]} out of range [0, {self.num_devices}) in {self.path}")
        devices = devices.astype(np.int64)
        offsets = self._offsets[split]
        starts, stops = offsets[devices], offsets[devices + 1]
        out = np.concatenate([[0], np.cumsum(stops - starts)])
        xd, yd = self._f[f"{split}/x"], self._f[f"{split}/y"]
        x, y = np.empty((out[-1], *xd.shape[1:]), xd.dtype), np.empty(out[-1], yd.dtype)
        try:
            self._read(xd, yd, devices, starts, stops, out, x, y)
        except OSError as err:  # HDF5's checksum (or another filter) failed on a block of the file
            raise ValueError(f"{self.path}: {split} data cannot be read back intact ({err}); "
                             "the file is damaged: rebuild it") from None
        return DeviceData(x=x, y=y, offsets=out, devices=devices)

    @staticmethod
    def _read(xd, yd, devices, starts, stops, out, x, y) -> None:
        # a run of consecutive device indices is one contiguous slice on disk: read it at once
        edges = [0, *(np.flatnonzero(np.diff(devices) != 1) + 1), len(devices)] if len(devices) else []
        runs = list(zip(edges[:-1], edges[1:]))
        if len(runs) > UNION_READ_RUNS and np.all(np.diff(devices) > 0):
            # increasing devices: the file's order is the order asked, so one read of all runs fills x, y
            blocks = [(starts[a], stops[b - 1]) for a, b in runs]
            _read_blocks(xd, blocks, x)
            _read_blocks(yd, blocks, y)
            runs = []
        for a, b in runs:
            lo, hi, at = starts[a], stops[b - 1], out[a]
            if hi > lo:
                xd.read_direct(x, np.s_[lo:hi], np.s_[at:at + hi - lo])
                yd.read_direct(y, np.s_[lo:hi], np.s_[at:at + hi - lo])

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _read_blocks(dset, blocks, out):
    """Rows lo:hi of `dset` for each (lo, hi) in `blocks` (increasing, disjoint) into `out`, in one read."""
    space, tail = dset.id.get_space(), dset.shape[1:]
    space.select_none()
    for lo, hi in blocks:
        if hi > lo:
            space.select_hyperslab((int(lo), *(0,) * len(tail)), (int(hi - lo), *tail), op=h5py.h5s.SELECT_OR)
    if out.size:
        dset.id.read(h5py.h5s.create_simple(out.shape), space, out)
