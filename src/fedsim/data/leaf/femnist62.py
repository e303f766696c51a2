"""LEAF's own FEMNIST: all 62 classes (digits, upper and lower case), one device per writer, as most
federated-learning papers use it (not the FedProx paper's 10-letter construction: fedsim.data.leaf.femnist).
The file's kind is femnist (28x28 images as 784 features: the MCLR and the CNN read it).

Two sources, as the FedProx FEMNIST has:

- LEAF's JSON output (build_femnist62_json): one or more LEAF data folders, each holding train/ and
  test/ (LEAF's data/ layout; a sample of the writers, already split). Imported by
  fedsim.data.leaf.leafjson with duplicates="first": a writer several folders hold comes from the first
  folder that has train rows of it, all its rows from there (the folders are independent draws with
  their own train/test splits: merged, an image could be a train row and a test row of one device).
  Writers in sorted id order; writers with test rows only are dropped (or kept: test_only).
- NIST SD19's by_class.zip and by_write.zip (build_femnist62_nist), LEAF's preprocess.sh written anew:
  1. each by_class image under <hex>/hsf_<n>/ (not train_<hex>, as LEAF's get_file_dirs.py) gives
     the MD5 of its PNG bytes -> its class; where two classes hold the same bytes, the first in
     member-name order wins (LEAF: the first listed);
  2. each by_write image (hsf_<n>/<writer>/<form>/*.png) takes the class of the by_class image of
     the same MD5 (LEAF's match_hashes.py); one without (LEAF stops with a KeyError there) is left
     out and counted;
  3. classes: hex '30'-'39' -> 0-9, '41'-'5a' -> 10-35, '61'-'7a' -> 36-61 (LEAF's relabel_class);
  4. LEAF's sampling over the writers in sorted id order, each writer's images in member-name order
     (preprocess.sh -s niid --sf F -k K -t sample --tf T: fedsim.data.leaf.niid), devices in sorted
     writer order, as LEAF's read_data gives them;
  5. only the kept writers' images are decoded (fedsim.data.leaf.femnist.decode_nist_png: LEAF's 28x28
     thumbnail, /255).
  LEAF's group_by_writer.py repeats the first image of every writer after the first (its grouping
  loop starts a new writer's list with the image and appends it again): nearly every writer of the
  shared JSON samples holds one image twice. This build does not repeat it.
"""

import hashlib
import re
import zipfile
from collections import defaultdict
from pathlib import Path

import numpy as np

from .common import named_read_errors, write_partition
from .femnist import decode_nist_png
from .leafjson import import_leaf_json
from .niid import counted_leaf_partition

NUM_CLASSES = 62
# LEAF's small FEMNIST (its README: preprocess.sh -s niid --sf 0.05 -k 0 -t sample), the sampling the
# shared JSON samples were made with; fraction None: every writer (LEAF's full 3,550 writers)
LEAF_SAMPLING = dict(fraction=0.05, min_samples=0, min_samples_rule="more_than", train_fraction=0.9)
CLASS_IMAGE = re.compile(r"(?:^|/)([0-9a-fA-F]{2})/hsf_\d+/[^/]+\.png$")  # by_class/<hex>/hsf_<n>/<image>
WRITER_IMAGE = re.compile(r"(?:^|/)hsf_\d+/([^/]+)/[^/]+/[^/]+\.png$")  # by_write/hsf_<n>/<writer>/<form>/<image>


def leaf_label(hex_code):
    """LEAF's relabel_class: NIST's class (the character's hex code) -> 0-61, or None outside them."""
    code = int(hex_code, 16)
    for first, last, label in ((0x30, 0x39, 0), (0x41, 0x5A, 10), (0x61, 0x7A, 36)):
        if first <= code <= last:
            return label + code - first
    return None


def class_hashes(by_class):
    """{MD5 digest of a PNG: its class} over by_class.zip's hsf images, and how many were read."""
    classes, images = {}, 0
    with named_read_errors(by_class, "zip"):
        with zipfile.ZipFile(by_class) as z:
            for name in sorted(z.namelist()):
                m = CLASS_IMAGE.search(name)
                label = leaf_label(m.group(1)) if m else None
                if label is not None:
                    images += 1
                    classes.setdefault(hashlib.md5(z.read(name)).digest(), label)
    return classes, images


def writer_images(by_write, classes):
    """{writer: [(member name, class)]} in sorted order from by_write.zip, labelled through `classes`
    (class_hashes), and how many images had no class."""
    writers, unmatched = defaultdict(list), 0
    with named_read_errors(by_write, "zip"):
        with zipfile.ZipFile(by_write) as z:
            for name in sorted(z.namelist()):
                m = WRITER_IMAGE.search(name)
                if m is None:
                    continue
                label = classes.get(hashlib.md5(z.read(name)).digest())
                if label is None:
                    unmatched += 1
                else:
                    writers[m.group(1)].append((name, label))
    return dict(sorted(writers.items())), unmatched


def build_femnist62_nist(by_class, by_write, out_path, *, name="femnist62", seed=0, fraction=LEAF_SAMPLING["fraction"],
                         min_samples=LEAF_SAMPLING["min_samples"], min_samples_rule=LEAF_SAMPLING["min_samples_rule"],
                         train_fraction=LEAF_SAMPLING["train_fraction"]):
    """LEAF's FEMNIST from NIST's two zips (module docstring); returns the file's provenance."""
    classes, class_images = class_hashes(by_class)
    writers, unmatched = writer_images(by_write, classes)
    if not writers:
        raise ValueError(f"{by_write}: no writer's image matches an hsf image of {by_class} (NIST SD19's "
                         "by_write.zip and by_class.zip?)")
    names, images = list(writers), list(writers.values())
    parts, counts = counted_leaf_partition([len(i) for i in images], fraction=fraction, min_samples=min_samples,
                                           train_fraction=train_fraction, seed=seed, min_samples_rule=min_samples_rule)
    parts.sort(key=lambda p: p.user)  # LEAF's read_data: writers in sorted id order
    zf = zipfile.ZipFile(by_write)

    def rows_of(k):
        picked = images[parts[k].user]
        with named_read_errors(by_write, "zip"):
            x = np.stack([decode_nist_png(zf.read(member)) for member, _ in picked])
        return x, np.array([label for _, label in picked], np.int64)

    provenance = dict(generator="fedsim.leaf.femnist62", source="NIST SD19 by_class + by_write (LEAF's preprocess)",
                      paths=[str(by_class), str(by_write)], class_images=class_images, writers=len(names),
                      writer_images=sum(map(len, images)), unmatched_images=unmatched,
                      image="28x28 grey in [0,1], row-major", leaf_first_image_repeat=False,
                      sampling=dict(niid_fraction=fraction, min_samples=min_samples, min_samples_rule=min_samples_rule,
                                    split="sample", train_fraction=train_fraction), seed=seed, counts=counts)
    with zf:
        write_partition(out_path, name=name, kind="femnist", num_classes=NUM_CLASSES,
                        clients=[names[p.user] for p in parts], parts=[(p.train, p.test) for p in parts],
                        rows_of=rows_of, feature_shape=(784,), x_dtype=np.float32, provenance=provenance)
    return provenance


def source_folders(folders):
    """The train/ and test/ folders of LEAF data folders, each a source of its own."""
    folders = [folders] if isinstance(folders, (str, Path)) else list(folders)
    for folder in map(Path, folders):
        if not (folder / "train").is_dir() or not (folder / "test").is_dir():
            raise ValueError(f"{folder}: not a LEAF data folder (it needs train/ and test/ folders)")
    return [str(Path(f) / "train") for f in folders], [str(Path(f) / "test") for f in folders]


def build_femnist62_json(folders, out_path, *, name="femnist62", test_only="drop"):
    """LEAF's FEMNIST from LEAF data folders (module docstring); returns the file's provenance."""
    train, test = source_folders(folders)
    return import_leaf_json(train, test, out_path, kind="femnist", name=name, num_classes=NUM_CLASSES,
                            order="sorted", test_only=test_only, duplicates="first")
