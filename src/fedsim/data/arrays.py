"""A user's own data: an .npz of arrays imported as a dataset file (a config entry of kind `arrays`).

The .npz holds
    x       n samples: n x d features, or n x C x H x W images (any numeric dtype, stored as float32)
    y       n integer labels, 0 .. classes - 1 (classes: given, else the largest label + 1)
    device  optional: n integer device ids (a federated dataset, one device per id, in id order)
    test    optional: n booleans, the test rows (else each device's rows are split by LEAF's rule,
            `train_fraction`, seeded)

Without device ids the file is a pool: all its rows as one device, for a `kind: dirichlet` entry to
deal among devices by label. Its samples, features or images, decide the models it can train
(fedsim.specs.FILE_KINDS). `describe()` reads only the arrays' headers, so the config check knows the
samples and whether there are device ids before anything is built. The import refuses a non-finite
value in x (NaN, inf: a run on it would read as the method diverging at round 0) and a label outside
0 .. classes - 1, naming the file, the array and the first bad row, before it writes anything. numpy only.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from ..specs import FEATURES, IMAGE

KEYS = ("x", "y", "device", "test")
# Without `test`, each device's rows are split by LEAF's rule (-t sample --tf 0.9) with this seed: the
# defaults of import_arrays, of the `arrays` kind's keys (the config's) and so of `fedsim import-arrays`
# (fedsim.cli), and of fedsim.import_arrays (fedsim.api)
DEFAULTS = {"train_fraction": 0.9, "seed": 0}
POOL = "one: a pool for kind dirichlet"  # provenance["devices"] of a file imported without device ids


def pool_refusal(path, provenance: dict) -> str | None:
    """The one line that refuses to train on the dataset file `path` (its provenance as given) where
    it is a pool (an .npz imported without device ids: all its rows one device), naming the partition
    to make of it; None where it is not a pool. The workflow refuses such an entry at its config check
    (fedsim.planning.configcheck); `fedsim train` and fedsim.run refuse its file here."""
    if provenance.get("generator") != "fedsim.arrays" or provenance.get("devices") != POOL:
        return None
    return (f"{path} is a pool (an .npz imported without `device` ids: all its rows one device); deal it to "
            f"devices first, `fedsim partition-dirichlet --pool {path} --devices N --alpha A --out partition.h5` "
            "(from Python: fedsim.partition_dirichlet), and train on that")


def _headers(path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """{name: (shape, dtype)} of the .npz's arrays, from their .npy headers alone."""
    found = {}
    with zipfile.ZipFile(path) as archive:
        for member in archive.namelist():
            if not member.endswith(".npy"):
                continue
            with archive.open(member) as f:
                version = np.lib.format.read_magic(f)
                read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                               (2, 0): np.lib.format.read_array_header_2_0}.get(version)
                if read_header is None:
                    raise ValueError(f"{member}: .npy format version {version}, not 1.0 or 2.0")
                shape, _, dtype = read_header(f)
            found[member[:-len(".npy")]] = (tuple(shape), np.dtype(dtype))
    return found


def describe(path) -> dict:
    """What an .npz holds, checked: {"samples": FEATURES or IMAGE, "shape": one sample's, "rows": n,
    "devices": whether it has device ids, "test": whether it marks test rows}. ValueError in one
    line naming the file and the array at the first problem."""
    path = Path(path)
    try:
        arrays = _headers(path)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (zipfile.BadZipFile, ValueError, OSError) as err:
        raise ValueError(f"{path}: not an .npz of arrays ({err})") from None
    for key in ("x", "y"):
        if key not in arrays:
            raise ValueError(f"{path}: no `{key}` array (x: n x d features or n x C x H x W images; y: n integer "
                             "labels)")
    shape, x_dtype = arrays["x"]
    if len(shape) not in (2, 4) or 0 in shape:
        raise ValueError(f"{path}: `x` has shape {shape}: expected n x d features or n x C x H x W images")
    if x_dtype.kind not in "biuf":
        raise ValueError(f"{path}: `x` holds {x_dtype}, not numbers")
    n = shape[0]
    checks = {"y": ("iu", "integer labels"), "device": ("iu", "integer device ids"), "test": ("b", "booleans")}
    for key, (kinds, what) in checks.items():
        if key not in arrays:
            continue
        key_shape, dtype = arrays[key]
        if key_shape != (n,):
            raise ValueError(f"{path}: `{key}` has shape {key_shape}: expected ({n},), one per row of `x`")
        if dtype.kind not in kinds:
            raise ValueError(f"{path}: `{key}` holds {dtype}: expected {what}")
    unknown = sorted(set(arrays) - set(KEYS))
    if unknown:
        raise ValueError(f"{path}: unknown array `{unknown[0]}` (an .npz here holds {', '.join(KEYS)})")
    return {"samples": FEATURES if len(shape) == 2 else IMAGE, "shape": shape[1:], "rows": n,
            "devices": "device" in arrays, "test": "test" in arrays}


def import_arrays(npz, out_path, *, name, train_fraction=DEFAULTS["train_fraction"], seed=DEFAULTS["seed"],
                  classes=None) -> dict:
    """Write the .npz `npz` as a dataset file; returns its provenance. `classes`: the label count (default:
    the largest label + 1)."""
    from .format import first_non_finite_row, non_finite_text
    from .leaf.common import write_partition
    from .partition import split_devices

    about = describe(npz)
    with np.load(npz) as f:
        x, y = f["x"].astype(np.float32, copy=False), f["y"].astype(np.int64)
        device = f["device"] if about["devices"] else np.zeros(len(y), np.int64)
        test = f["test"] if about["test"] else None
    bad = first_non_finite_row(x)
    if bad is not None:
        raise ValueError(f"{npz}: `x` {non_finite_text(x, bad)}: every value must be finite")
    outside = (y < 0) | (y >= classes) if classes is not None else y < 0
    if outside.any():
        bad = int(np.argmax(outside))
        raise ValueError(f"{npz}: `y` row {bad} holds the label {int(y[bad])}: labels are 0 .. classes - 1"
                         + (f" (classes {classes})" if classes is not None else ""))
    ids, device_of = np.unique(device, return_inverse=True)
    members = [np.flatnonzero(device_of == k) for k in range(len(ids))]
    if test is not None:
        parts = [(m[~test[m]], m[test[m]]) for m in members]
    else:
        parts = [(m[train], m[held]) for m, (train, held) in
                 zip(members, split_devices([len(m) for m in members], train_fraction, seed))]
    provenance = dict(generator="fedsim.arrays", source=str(npz), rows=int(len(y)),
                      devices="the file's ids" if about["devices"] else POOL,
                      test_rows="the file's `test`" if test is not None else
                      f"each device's split by LEAF's rule (train_fraction {train_fraction}, seed {seed})")
    kind = "features" if about["samples"] == FEATURES else "images"
    write_partition(out_path, name=name, kind=kind, num_classes=classes or int(y.max(initial=0)) + 1,
                    clients=[str(i) for i in ids] if about["devices"] else ["pool"], parts=parts,
                    rows_of=lambda k: (x, y), feature_shape=x.shape[1:], x_dtype=np.float32, provenance=provenance)
    return provenance
