"""LEAF-format JSON (what LEAF's preprocess.sh writes) -> our HDF5 format.

A LEAF file is {"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}
(plus "hierarchies" for Shakespeare); a split is a folder of such files (.json or .json.gz), e.g.
data/train and data/test. FedProx's released data (its synthetic sets, its FEMNIST) has the same layout.
Devices are in sorted user-id order (`order="sorted"`, what LEAF's and the authors' read_data do, so
device indices, and with them the authors' selection, match theirs), or in the order the train files
list them (`order="file"`; files in natural order: all_data_2 before all_data_10). Users found only in
test (common in LEAF samples) are dropped (`test_only="drop"`, as LEAF's and the authors' read_data,
which build clients from the train users) or kept after the others with no train rows (`"keep"`);
the provenance records how many there were.

Several LEAF samples of one dataset may hold the same user, each with its own draw of the user's
samples and its own train/test split (the three shared FEMNIST samples: 26 writers, 312 of whose
images are train rows in one sample and test rows in another). `duplicates="merge"` concatenates
every file's rows of a user (one sample, or files that split one sample's users, have no repeats);
`"first"` reads train[i] with test[i] as one source and takes each user from the first source that
has train rows of it (else the first with test rows of it), all its rows from there, so no image is
both a train and a test row of one device. The provenance counts the users found in several sources.

Each file is checked as it is read, and what is wrong is one ValueError line naming the file and the
user: a truncated or damaged .gz, invalid JSON, x and y of different lengths, num_samples that
disagree with the data, a sample of the wrong length (784 FEMNIST values, 80 Shakespeare characters),
a label outside the dataset's classes.

x is converted per dataset kind:
- femnist:     784 floats -> float32 (784,), labels as in LEAF (62 classes)
- shakespeare: 80-char string -> uint8 indices into ALPHABET, next char -> its index (80 classes)
- sent140:     [id, date, query, user, text, set] -> 25 GloVe token indices (needs `glove`), 2 classes;
               the trimmed embedding is stored in the file as for build_sent140
- synthetic:   any other list of numbers (FedProx's synthetic sets: 60 floats) -> float32, labels
               (written as integers or integral floats) -> int64, classes = largest label + 1
"""

import json
from pathlib import Path

import numpy as np

from ..format import first_non_finite_row
from .common import natural_key, read_member, write_partition

try:  # faster on LEAF's big float lists; plain json otherwise
    from orjson import loads as _loads
except ImportError:  # pragma: no cover
    _loads = json.loads

ORDERS = ("sorted", "file")
TEST_ONLY = ("drop", "keep")
DUPLICATES = ("merge", "first")


def leaf_files(paths):
    """LEAF JSON files under `paths` (files or folders, searched recursively), in natural order."""
    paths = [paths] if isinstance(paths, (str, Path)) else paths
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted((f for f in p.rglob("*") if f.name.endswith((".json", ".json.gz"))), key=natural_key)
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such LEAF JSON file or folder")
    return out


def iter_leaf_files(paths):
    """(path, parsed JSON) for each LEAF file under `paths`; a damaged or inconsistent file is a
    one-line ValueError naming it (and the user)."""
    for f in leaf_files(paths):
        try:
            data = _loads(read_member(f))
        except ValueError as err:  # JSONDecodeError is one; read_member's own errors name the file
            raise ValueError(str(err) if str(f) in str(err) else f"{f}: not valid JSON ({err})") from None
        if not isinstance(data, dict) or not {"users", "user_data"} <= data.keys():
            raise ValueError(f"{f}: not a LEAF file (a JSON object with users and user_data)")
        check_users(f, data)
        yield f, data


def check_users(path, data):
    """Every listed user has x and y of one length, as many as num_samples says.

    A user whose x is one longer than y would otherwise shift every later pair of that user.
    """
    users, counts = data["users"], data.get("num_samples")
    if counts is not None and len(counts) != len(users):
        raise ValueError(f"{path}: {len(users)} users but {len(counts)} num_samples entries")
    for i, u in enumerate(users):
        ud = data["user_data"].get(u)
        if not isinstance(ud, dict) or not isinstance(ud.get("x"), list) or not isinstance(ud.get("y"), list):
            raise ValueError(f"{path}: user {u}: no x and y lists in user_data")
        nx, ny = len(ud["x"]), len(ud["y"])
        if nx != ny:
            raise ValueError(f"{path}: user {u}: x holds {nx} samples but y holds {ny} labels")
        if counts is not None and counts[i] != ny:
            raise ValueError(f"{path}: user {u}: num_samples says {counts[i]} but the data hold {ny}")


def read_leaf_split(paths):
    """{user: (x list, y list, [files])} over all files of one split, users in first-seen order."""
    users = {}
    for f, data in iter_leaf_files(paths):
        for u in data["users"]:
            ud = data["user_data"][u]
            xs, ys, files = users.setdefault(u, ([], [], []))
            xs.extend(ud["x"])
            ys.extend(ud["y"])
            files.append(str(f))
    return users


def read_sources(train, test, duplicates="merge"):
    """The train and test splits ({user: (x list, y list, [files])}) of LEAF files, and how many users
    several sources hold (0 when merging: one source); duplicates as in the module docstring."""
    if duplicates not in DUPLICATES:
        raise ValueError(f"duplicates: expected one of {DUPLICATES}, got {duplicates!r}")
    if duplicates == "merge":
        return read_leaf_split(train), read_leaf_split(test), 0
    train, test = ([paths] if isinstance(paths, (str, Path)) else list(paths) for paths in (train, test))
    if len(train) != len(test):
        raise ValueError(f"duplicates: first pairs train and test paths as sources, got {len(train)} train and "
                         f"{len(test)} test paths")
    sources = [(read_leaf_split(tr), read_leaf_split(te)) for tr, te in zip(train, test)]
    holders = {}  # user -> the sources that hold it, in order
    for i, source in enumerate(sources):
        for user in dict.fromkeys([*source[0], *source[1]]):
            holders.setdefault(user, []).append(i)
    splits = ({}, {})
    for split in (0, 1):  # users in first-seen order over the chosen sources, as read_leaf_split's
        for i, source in enumerate(sources):
            for user, rows in source[split].items():
                chosen = next((j for j in holders[user] if user in sources[j][0]), holders[user][0])
                if chosen == i:
                    splits[split][user] = rows
    return (*splits, sum(len(h) > 1 for h in holders.values()))


def guess_kind(x):
    if isinstance(x, str):
        return "shakespeare"
    if isinstance(x, list) and len(x) == 784 and not isinstance(x[0], str):
        return "femnist"
    if isinstance(x, list) and len(x) >= 5 and isinstance(x[4], str):
        return "sent140"
    if isinstance(x, list) and x and all(isinstance(v, (int, float)) for v in x):
        return "synthetic"
    raise ValueError(f"cannot tell the LEAF dataset from a sample x of type {type(x).__name__}")


def _femnist_arrays(xs, ys):
    check_sample_lengths(xs, 784, "values", " (a 28x28 image)")
    return np.asarray(xs, np.float32).reshape(-1, 784), _integer_labels(ys)


def _synthetic_arrays(xs, ys):
    if len(xs) and isinstance(xs[0], list):
        check_sample_lengths(xs, len(xs[0]), "features", " (as its first sample)")
    x = np.asarray(xs, np.float32).reshape(len(ys), -1) if len(ys) else np.zeros((0, 0), np.float32)
    return x, _integer_labels(ys)


def _shakespeare_arrays(xs, ys):
    from .shakespeare import SEQ_LEN, encode
    check_sample_lengths(xs, SEQ_LEN, "characters")
    check_sample_lengths(ys, 1, "characters", " (the next one)")
    return encode("".join(xs)).reshape(-1, SEQ_LEN), encode("".join(ys)).astype(np.int64)


def check_sample_lengths(xs, length, unit, note=""):
    """Every sample holds `length` items; else name the first that does not (NumPy would only say
    'inhomogeneous shape')."""
    for i, x in enumerate(xs):
        if not isinstance(x, (list, str)) or len(x) != length:
            got = len(x) if isinstance(x, (list, str)) else type(x).__name__
            raise ValueError(f"sample {i} has {got} {unit}, expected {length}{note}")


def _convert_user(arrays, classes, user, xs, ys, files):
    """One user's rows of one split as arrays (x, int64 y) by `arrays` (a sample format's), labels held
    to 0..classes-1 (None: not checked); a bad sample or label is a one-line ValueError naming the
    user's files and the user."""
    try:
        x, y = arrays(xs, ys)
        bad = first_non_finite_row(x)  # a NaN, or a number float32 cannot hold: a run would read it as divergence
        if bad is not None:
            raise ValueError(f"sample {bad} holds {x[bad][~np.isfinite(x[bad])][0]} (as float32): every value "
                             "must be finite")
        if classes is not None and len(y) and (y.min() < 0 or y.max() >= classes):
            i = np.flatnonzero((y < 0) | (y >= classes))[0]
            raise ValueError(f"sample {i} has label {y[i]}, outside 0..{classes - 1}")
    except ValueError as err:
        raise ValueError(f"{', '.join(files)}: user {user}: {err}") from None
    return x, y


def _integer_labels(ys):
    odd = next((v for v in ys if not isinstance(v, (int, float))), None)
    if odd is not None:
        raise ValueError(f"labels must be numbers, got {odd!r}")
    y = np.asarray(ys, np.float64)
    bad = y[(y != np.round(y)) | (y < 0)]
    if len(bad):
        raise ValueError(f"labels must be non-negative integers, got {bad[0]:g}")
    return y.astype(np.int64)


def _sent140_label(v):
    # LEAF writes 0/1; FedProx's released files keep the raw polarity as a string ("0"/"4")
    return (1 if v == "4" else 0) if isinstance(v, str) else int(v)


# Each LEAF sample format read into rows: (blocks, default classes, a sample's shape, x's dtype, extra
# arrays of the file, provenance), from the users' (user, xs, ys, files) blocks
def _read_femnist(blocks_in, num_classes, **_):
    return [_convert_user(_femnist_arrays, num_classes or 62, *b) for b in blocks_in], 62, (784,), np.float32, None, {}


def _read_shakespeare(blocks_in, num_classes, **_):
    from .shakespeare import ALPHABET, SEQ_LEN
    blocks = [_convert_user(_shakespeare_arrays, num_classes, *b) for b in blocks_in]
    return blocks, len(ALPHABET), (SEQ_LEN,), np.uint8, None, {}


def _read_synthetic(blocks_in, num_classes, **_):
    blocks = [_convert_user(_synthetic_arrays, num_classes, *b) for b in blocks_in]
    widths = {b[0].shape[1] for b in blocks if len(b[0])}
    if len(widths) != 1:
        raise ValueError(f"samples have different numbers of features: {sorted(widths)}")
    labels = [b[1].max() for b in blocks if len(b[1])]
    shape = (widths.pop(),)
    return [(b[0].reshape(-1, *shape), b[1]) for b in blocks], int(max(labels)) + 1, shape, np.float32, None, {}


def _read_sent140(blocks_in, num_classes, *, glove, glove_dim, max_words):
    from .sent140 import embed_and_tokenize
    ids, extras, info = embed_and_tokenize([[r[4] for r in b[1]] for b in blocks_in], glove, dim=glove_dim,
                                           max_words=max_words)
    blocks = [(a, np.array([_sent140_label(v) for v in b[2]], np.int64)) for a, b in zip(ids, blocks_in)]
    return blocks, 2, (max_words,), np.int32, extras, info


FORMATS = {"femnist": _read_femnist, "shakespeare": _read_shakespeare, "sent140": _read_sent140,
           "synthetic": _read_synthetic}


def import_leaf_json(train, test, out_path, *, kind=None, name=None, num_classes=None, glove=None,
                     glove_dim=300, max_words=25, order="sorted", test_only="drop", duplicates="merge"):
    """Convert LEAF train/test JSON (files or folders) into one dataset file; returns its provenance.

    num_classes defaults to LEAF's (femnist 62, shakespeare 80, sent140 2; synthetic: the largest
    label + 1); e.g. FedProx's own FEMNIST files (labels 0-9) want num_classes=10.
    """
    if order not in ORDERS:
        raise ValueError(f"order: expected one of {ORDERS}, got {order!r}")
    if test_only not in TEST_ONLY:
        raise ValueError(f"test_only: expected one of {TEST_ONLY}, got {test_only!r}")
    *splits, repeated = read_sources(train, test, duplicates)
    in_train = sorted(splits[0]) if order == "sorted" else list(splits[0])
    only_test = [u for u in splits[1] if u not in splits[0]]
    users = in_train + (only_test if test_only == "keep" else [])
    if not users:
        raise ValueError(f"no users in {train} / {test}")
    kind = kind or guess_kind(next(xs[0] for s in splits for xs, _, _ in s.values() if xs))
    if kind not in FORMATS:
        raise ValueError(f"kind: expected one of {tuple(FORMATS)}, got {kind!r}")
    # per user, train rows then test rows
    blocks_in = [(u, *s.get(u, ([], [], []))) for u in users for s in splits]
    ys = [b[2] for b in blocks_in]
    provenance = dict(generator="fedsim.leaf.leafjson", source="LEAF JSON", train=str(train), test=str(test),
                      user_order=order, test_only_devices=len(only_test), test_only=test_only)
    if duplicates != "merge":  # files of the merge rule keep their provenance (and bytes)
        provenance.update(duplicates=duplicates, users_in_several_sources=repeated)
    blocks, default_classes, shape, dtype, extras, info = FORMATS[kind](
        blocks_in, num_classes, glove=glove, glove_dim=glove_dim, max_words=max_words)
    provenance.update(info)
    rows = [tuple(np.concatenate(p) for p in zip(blocks[2 * k], blocks[2 * k + 1])) for k in range(len(users))]
    parts = [(np.arange(len(ys[2 * k])), np.arange(len(ys[2 * k]), len(rows[k][1]))) for k in range(len(users))]
    write_partition(out_path, name=name or f"{kind}_leaf", kind=kind, num_classes=num_classes or default_classes,
                    clients=users, parts=parts, rows_of=lambda k: rows[k], feature_shape=shape, x_dtype=dtype,
                    provenance=provenance, extras=extras)
    return provenance
