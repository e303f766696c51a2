"""FEMNIST as the FedProx paper built it: lower-case a-j, 200 devices, 3 classes each.

Construction (FedProx's data/nist/data/my_sample.py, written anew):
1. per class c (a..j -> 0..9): shuffle the class's images, keep at most 4000;
2. device sizes s_u = lognormal(4, 1) + 5; device u takes k_u = max(2, int(s_u / 3)) images of each of
   the classes u, u+1, u+2 (mod 10) (this class assignment is fixed, not drawn);
3. each device's samples are shuffled; the first int(0.9 n) are train, the rest test.
Each random draw has a stream of its own (STREAMS: a SeedSequence child of the seed keyed by purpose,
and by class for the image shuffles), as the reference draws sizes and images from separate
generators: a bigger or smaller pool changes which images are drawn and nothing else (sizes, classes
and each device's sample order stay). Files built before this (one generator for every draw) differ.
Labels are 0-9; x is the 28x28 grey image in [0, 1] (ink dark, background 1.0, as LEAF's JSON),
flattened row-major to float32 (784,).

Which images a device gets (step 2) comes in two variants, recorded in the file's provenance:
- "faithful": the reference's per-class cursor, which is reset to 0 whenever k more images fit; so
  nearly every device holding class c receives the *same first* k images of c. Where the reference
  would run past the end of a class (its slice comes back short and its labels then misalign; never
  happened with 4000 images per class, can with a small pool) we continue from the class's start
  (cursor modulo the class size) and count it in provenance["wrapped_draws"]; a device asking for more
  images of a class than the pool holds then repeats images.
- "corrected": a cursor that is never reset: devices get disjoint images; a class too small for all
  its devices is an error (this needs ~1,800 images per class at 200 devices: NIST by_class has them,
  the offline JSON pool does not).

A pool too small for the construction repeats images within a device (a draw of k > the class's
images); such repeats are counted (provenance["repeated_samples"]; the CLI warns of them), and a pool
with fewer than MIN_IMAGES_PER_CLASS (100) images in a class is refused unless allow_reuse=True: the
46 a-j images of one small LEAF sample would give 200 devices made mostly of repeats.

Image sources: a pool of LEAF-format JSON files (labels 36-45 are a-j; duplicates across files are
dropped by content) or NIST SD19 by_class.zip (train_<hex> folders, PNG decoded with Pillow and
reduced to 28x28 like the reference's thumbnail with ANTIALIAS).
"""

import hashlib
import io
import re
import zipfile
from pathlib import Path

import numpy as np

from .common import named_read_errors, write_partition
from .leafjson import iter_leaf_files

CLASSES = "abcdefghij"
LEAF_LABELS = range(36, 46)  # LEAF/FEMNIST labels of a-j (0-9 digits, 10-35 upper, 36-61 lower case)
VARIANTS = ("faithful", "corrected")
PAPER = dict(num_devices=200, classes_per_device=3, num_classes=10, max_per_class=4000, train_fraction=0.9)
# spawn keys of the construction's random streams (changing one changes the built files)
STREAMS = dict(sizes=0, device_order=1, class_images=2)
# The floor: fewer images in a class are refused unless allow_reuse. Device u draws k_u images of a
# class (median 19, mean 31, a heavy lognormal tail); with m images per class the expected share of
# samples that repeat an image of their own device is 9 % at m = 100, 2.6 % at 200, 84 % at 5.
MIN_IMAGES_PER_CLASS = 100


# -----------------------------------------------------------------------------
# image pools: pool[c] supports len() and pool[c][index_array] -> float32 (k, 784)

def read_json_pool(paths):
    """{class 0-9: float32 (m, 784)} of the distinct a-j images in LEAF JSON files/folders, and info.

    Identical images (the same LEAF sample shipped in several copies) are kept once; each class is
    ordered by content hash, so the pool does not depend on file order or on which copies exist.
    """
    seen = [dict() for _ in CLASSES]
    files = copies = 0
    for path, data in iter_leaf_files(paths):
        files += 1
        for user in data["users"]:
            ud = data["user_data"][user]
            check_femnist_user(path, user, ud["x"], ud["y"])
            for x, y in zip(ud["x"], ud["y"]):
                if int(y) in LEAF_LABELS:
                    img = np.asarray(x, np.float32)
                    copies += 1
                    seen[int(y) - 36].setdefault(hashlib.sha256(img.tobytes()).hexdigest(), img)
    pool = {c: np.stack([d[h] for h in sorted(d)]) if d else np.zeros((0, 784), np.float32)
            for c, d in enumerate(seen)}
    paths = [paths] if isinstance(paths, (str, Path)) else paths
    return pool, dict(source="LEAF JSON pool", paths=[str(p) for p in paths], files=files, images_read=copies,
                      distinct_per_class=[len(d) for d in seen])


def check_femnist_user(path, user, xs, ys):
    """LEAF FEMNIST samples are 784 values with labels 0-61; name the file and user of the first
    that is not (a short image would otherwise end as NumPy's 'inhomogeneous shape')."""
    for i, (x, y) in enumerate(zip(xs, ys)):
        if not isinstance(x, list) or len(x) != 784:
            got = len(x) if isinstance(x, list) else type(x).__name__
            raise ValueError(f"{path}: user {user}: sample {i} has {got} values, expected 784 (a 28x28 image)")
        if not isinstance(y, (int, float)) or not float(y).is_integer() or not 0 <= y <= 61:
            raise ValueError(f"{path}: user {user}: sample {i} has label {y!r}, outside FEMNIST's 0..61")


class NistClass:
    """The train_<hex> PNGs of one class in by_class.zip, decoded on demand (and remembered)."""

    def __init__(self, zf, names):
        self.zf, self.names, self.cache = zf, names, {}

    def __len__(self):
        return len(self.names)

    def __getitem__(self, idx):
        return np.stack([self._image(int(i)) for i in np.atleast_1d(idx)]).reshape(-1, 784)

    def _image(self, i):
        if i not in self.cache:
            with named_read_errors(self.zf.filename, "zip"):
                png = self.zf.read(self.names[i])
            self.cache[i] = decode_nist_png(png)
        return self.cache[i]


def decode_nist_png(png):
    """A NIST PNG as LEAF's and FedProx's scripts read it: grey, thumbnailed to 28x28 with
    ANTIALIAS, scaled to [0, 1]; float32 (784,)."""
    from PIL import Image  # only needed for the raw NIST source

    img = Image.open(io.BytesIO(png)).convert("L")
    # Pillow >= 7 thumbnails via reduce() first; reducing_gap=None is the reference's resize
    img.thumbnail((28, 28), Image.Resampling.LANCZOS, reducing_gap=None)
    return np.asarray(img, np.float32).reshape(-1) / np.float32(255)


def read_nist_pool(zip_path):
    """{class 0-9: NistClass} from NIST SD19 by_class.zip (members .../<hex>/train_<hex>/*.png)."""
    with named_read_errors(zip_path, "zip"):
        zf = zipfile.ZipFile(zip_path)
    names = {c: [] for c in range(len(CLASSES))}
    pattern = re.compile(r"(?:^|/)([0-9a-fA-F]{2})/train_\1/[^/]+\.png$")
    for name in zf.namelist():
        m = pattern.search(name)
        if m and 0x61 <= int(m.group(1), 16) <= 0x6A:  # 'a'..'j'
            names[int(m.group(1), 16) - 0x61].append(name)
    pool = {c: NistClass(zf, sorted(v)) for c, v in names.items()}
    return pool, dict(source="NIST SD19 by_class", paths=[str(zip_path)],
                      images_per_class=[len(p) for p in pool.values()])


# -----------------------------------------------------------------------------
# the construction

def fedprox_plan(pool_sizes, *, variant="faithful", num_devices=200, classes_per_device=3, num_classes=10,
                 max_per_class=4000, train_fraction=0.9, seed=0):
    """Which pool images each device gets: ([(classes, picks, perm, n_train)], info).

    picks[j] are indices into pool[classes[j]]; perm orders the device's concatenated samples.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant: expected one of {VARIANTS}, got {variant!r}")
    if len(pool_sizes) != num_classes:
        raise ValueError(f"pool: expected {num_classes} classes, got {len(pool_sizes)}")
    order = [stream(seed, "class_images", c).permutation(int(n))[:max_per_class] for c, n in enumerate(pool_sizes)]
    if min(map(len, order)) == 0:
        raise ValueError(f"pool: every class needs images, got {[len(o) for o in order]} per class")
    sizes = stream(seed, "sizes").lognormal(4.0, 1.0, num_devices) + 5
    per_class = np.maximum(2, (sizes / classes_per_device).astype(np.int64))
    device_order = stream(seed, "device_order")
    device_classes = [[(u + j) % num_classes for j in range(classes_per_device)] for u in range(num_devices)]
    if variant == "corrected":
        _check_disjoint(order, per_class, device_classes)
    cursor, wrapped, repeated, plan = np.zeros(num_classes, np.int64), 0, 0, []
    for u, classes in enumerate(device_classes):
        k, picks = int(per_class[u]), []
        for c in classes:
            size = len(order[c])
            if variant == "faithful" and cursor[c] + k < size:
                cursor[c] = 0  # the reference's reset (its test reads "room left", not "no room")
            wrapped += int(cursor[c] + k > size)  # only where the reference would run short
            repeated += max(0, k - size)  # a draw of more images than the class holds repeats some
            picks.append(order[c][(cursor[c] + np.arange(k)) % size])
            cursor[c] = (cursor[c] + k) % size if variant == "faithful" else cursor[c] + k
        n = k * len(classes)
        plan.append((classes, picks, device_order.permutation(n), int(train_fraction * n)))
    return plan, dict(wrapped_draws=wrapped, repeated_samples=repeated, pool_used_per_class=[len(o) for o in order])


def stream(seed, purpose, *key):
    """The Generator of one purpose's draws (STREAMS), independent of every other purpose's."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(STREAMS[purpose], *key)))


def _check_disjoint(order, per_class, device_classes):
    need = np.zeros(len(order), np.int64)
    for k, classes in zip(per_class, device_classes):
        need[classes] += k
    short = [f"'{CLASSES[c]}' needs {need[c]}, has {len(order[c])}" for c in range(len(order))
             if need[c] > len(order[c])]
    if short:
        raise ValueError("corrected (disjoint) FEMNIST: too few images in the pool: " + "; ".join(short) +
                         ". Use NIST by_class (up to 4000 per class), fewer devices, or variant='faithful'.")


def check_pool_floor(info, samples, pool_info, allow_reuse):
    """Refuse a pool with fewer than MIN_IMAGES_PER_CLASS images in a class unless allow_reuse."""
    per_class = info["pool_used_per_class"]
    if min(per_class) < MIN_IMAGES_PER_CLASS and not allow_reuse:
        where = ", ".join(pool_info.get("paths", [])) or "the image pool"
        raise ValueError(f"{where}: FEMNIST pool too small: {per_class} images per class a-j, fewer than "
                         f"{MIN_IMAGES_PER_CLASS} in a class; {info['repeated_samples']} of {samples} samples would "
                         f"repeat an image of their own device (--allow-reuse or allow_reuse: true builds it anyway)")


def build_femnist(pool, out_path, *, variant="faithful", seed=0, name=None, pool_info=None, allow_reuse=False,
                  **params):
    """Build the FedProx FEMNIST from `pool` (read_json_pool / read_nist_pool) and write it.

    Refuses (ValueError, nothing written) a pool with fewer than MIN_IMAGES_PER_CLASS images in a
    class, unless allow_reuse.
    """
    params = {**PAPER, **params}
    plan, info = fedprox_plan([len(pool[c]) for c in range(params["num_classes"])], variant=variant, seed=seed,
                              **params)
    check_pool_floor(info, sum(len(perm) for _, _, perm, _ in plan), pool_info or {}, allow_reuse)

    def rows_of(u):
        classes, picks, perm, _ = plan[u]
        x = np.concatenate([pool[c][p] for c, p in zip(classes, picks)]).astype(np.float32, copy=False)
        y = np.concatenate([np.full(len(p), c, np.int64) for c, p in zip(classes, picks)])
        return x[perm], y[perm]

    parts = [(np.arange(nt), np.arange(nt, len(perm))) for _, _, perm, nt in plan]
    provenance = dict(generator="fedsim.leaf.femnist", construction="FedProx my_sample.py", variant=variant,
                      disjoint_images=variant == "corrected", seed=seed, classes=CLASSES, streams="per purpose",
                      image="28x28 grey in [0,1], row-major", pool=pool_info or {}, **params, **info,
                      # the paper's Table 1 row describes this construction at the paper's settings
                      # (either variant: they differ in which images, not in how many)
                      paper_table="femnist" if params == PAPER else None)
    write_partition(out_path, name=name or f"femnist_{variant}", kind="femnist", num_classes=params["num_classes"],
                    clients=[f"f_{u:05d}" for u in range(len(plan))], parts=parts, rows_of=rows_of,
                    feature_shape=(784,), x_dtype=np.float32, provenance=provenance)
    return provenance
