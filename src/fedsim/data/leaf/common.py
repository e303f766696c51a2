"""Helpers shared by the LEAF dataset builders: raw-file reading and writing partitions to HDF5."""

import contextlib
import gzip
import hashlib
import re
import zipfile
import zlib
from pathlib import Path

import h5py
import numpy as np

from ..atomic import atomic_path
from ..format import write_dataset_stream


def raw_format(path):
    """"zip", "gz" or "plain", from the file's first bytes: a local copy may have any name."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"PK\x03\x04":
        return "zip"
    return "gz" if head[:2] == b"\x1f\x8b" else "plain"


def read_member(path, member=None):
    """Bytes of a raw file: plain, gzip, or one member of a zip (by name or the only/first match).

    `member` may be a full member name or a basename (zips from different mirrors nest differently).
    """
    path = Path(path)
    kind = raw_format(path)
    with named_read_errors(path, kind):
        if kind == "zip":
            with zipfile.ZipFile(path) as z:
                return z.read(find_member(z, member, path))
        if kind == "gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()


# What a truncated or damaged archive raises: gzip ends early (EOFError) or finds bad data
# (zlib.error, BadGzipFile), zip finds a bad directory or CRC (BadZipFile). None of them names the
# file, and EOFError and zlib.error are no OSError, so the CLI's one-line handler would miss them.
DAMAGED = (EOFError, zlib.error, gzip.BadGzipFile, zipfile.BadZipFile)


@contextlib.contextmanager
def named_read_errors(path, kind=None):
    """Turn a damaged archive's exception into one ValueError line naming the file."""
    try:
        yield
    except DAMAGED as err:
        what = {"gz": "gzip", "zip": "zip"}.get(kind or raw_format(path), "compressed")
        raise ValueError(f"{path}: truncated or damaged {what} file ({err})") from None


def find_member(z, member, path="zip"):
    names = [n for n in z.namelist() if not n.endswith("/")]
    if member is None:
        if len(names) != 1:
            raise ValueError(f"{path}: expected one file in the zip, found {len(names)}; name the member")
        return names[0]
    hits = [n for n in names if n == member or n.rsplit("/", 1)[-1] == member]
    if not hits:
        raise FileNotFoundError(f"{path}: no member {member!r} (has {names[:5]}{'...' if len(names) > 5 else ''})")
    return hits[0]


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def natural_key(path):
    """all_data_2 before all_data_10: LEAF numbers its shards without zero padding."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def gather_blocks(parts, rows_of, block_rows=1 << 18):
    """Blocks for write_dataset_stream from [(train_idx, test_idx)] and rows_of(k) -> (x, y) of device k.

    Devices are grouped until a block holds about `block_rows` rows, so only one block sits in memory.
    """
    buf, rows = [], 0
    for k, (tr, te) in enumerate(parts):
        x, y = rows_of(k)
        buf.append((x[tr], y[tr], x[te], y[te]))
        rows += len(tr) + len(te)
        if rows >= block_rows:
            yield tuple(np.concatenate(p) for p in zip(*buf))
            buf, rows = [], 0
    if buf:
        yield tuple(np.concatenate(p) for p in zip(*buf))


def write_partition(path, *, name, kind, num_classes, clients, parts, rows_of, feature_shape, x_dtype,
                    provenance, extras=None, block_rows=1 << 18):
    """Write devices (clients[k] owns rows_of(k) rows parts[k] = (train_idx, test_idx)) to `path`.

    `extras` ({name: array}) are stored as additional root datasets (e.g. Sent140's embedding). data.py
    writes its own atomic temp file; we point it at a temp path of ours, add the extras to that file,
    and rename only then, so readers never see a dataset file without its extras.
    """
    sizes = np.array([(len(tr), len(te)) for tr, te in parts], dtype=np.int64).reshape(-1, 2)
    offsets = [np.concatenate([[0], np.cumsum(sizes[:, i])]) for i in (0, 1)]
    with atomic_path(path) as tmp:
        write_dataset_stream(tmp, name=name, kind=kind, num_classes=num_classes, clients=clients,
                             train_offsets=offsets[0], test_offsets=offsets[1], feature_shape=feature_shape,
                             x_dtype=x_dtype, provenance=provenance,
                             blocks=gather_blocks(parts, rows_of, block_rows))
        if extras:
            with h5py.File(tmp, "r+") as f:
                for key, value in extras.items():
                    value = np.asarray(value)
                    dtype = h5py.string_dtype() if value.dtype.kind in "OUS" else value.dtype
                    f.create_dataset(key, data=value, dtype=dtype, track_times=False)
