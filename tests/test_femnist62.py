"""LEAF's own FEMNIST, 62 classes by writer (fedsim.data.leaf.femnist62): from LEAF data folders made here
(a writer two folders hold comes from one of them), from NIST's by_class.zip and by_write.zip in
their real layout (small zips made here), and from the shared LEAF samples where present."""

import zipfile
from pathlib import Path

import numpy as np
import pytest

from fedsim.data.format import FederatedDataset
from fedsim.data.leaf import femnist62

from helpers.leaf_files import png_bytes, write_leaf_json
from tiny import read_dataset

SHARED_FEMNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "femnist"


def image(value):
    return [value / 255] * 784


def leaf_folder(root, train, test):
    """A LEAF data folder: train/ and test/ JSON of {user: [(pixel value, label)]}."""
    for split, users in (("train", train), ("test", test)):
        write_leaf_json(root / split / f"all_data_0_{split}_9.json",
                        {u: ([image(v) for v, _ in rows], [c for _, c in rows]) for u, rows in users.items()})
    return root


def test_json_folders_give_62_classes_by_writer_each_writer_from_one_folder(tmp_path):
    a = leaf_folder(tmp_path / "a", train={"f0002_01": [(1, 61), (2, 0)], "f0001_01": [(3, 35)]},
                    test={"f0002_01": [(4, 61)], "f0001_01": [(5, 35)], "f0009_01": [(6, 7)]})
    # b draws f0002_01 again with another split (its image 4 a train row here), and holds f0003_01
    b = leaf_folder(tmp_path / "b", train={"f0002_01": [(4, 61), (1, 61)], "f0003_01": [(7, 10)]},
                    test={"f0002_01": [(2, 0)], "f0003_01": [(8, 10)]})
    prov = femnist62.build_femnist62_json([a, b], tmp_path / "f.h5")
    with FederatedDataset(tmp_path / "f.h5") as ds:
        assert (ds.kind, ds.num_classes, ds.clients) == ("femnist", 62, ["f0001_01", "f0002_01", "f0003_01"])
    train, test = read_dataset(tmp_path / "f.h5", "train"), read_dataset(tmp_path / "f.h5", "test")
    pixels = lambda d: list(np.round(d.x[:, 0] * 255).astype(int))  # noqa: E731
    assert pixels(train) == [3, 1, 2, 7] and list(train.y) == [35, 61, 0, 10]  # f0002_01 from a only
    assert pixels(test) == [5, 4, 8] and list(test.offsets) == [0, 1, 2, 3]
    assert (prov["duplicates"], prov["users_in_several_sources"], prov["test_only_devices"]) == ("first", 1, 1)


def test_a_writer_is_taken_from_the_first_folder_with_its_train_rows(tmp_path):
    a = leaf_folder(tmp_path / "a", train={"f0001_01": [(1, 1)]}, test={"f0001_01": [(2, 1)], "f0005_01": [(3, 5)]})
    b = leaf_folder(tmp_path / "b", train={"f0005_01": [(4, 5), (5, 5)]}, test={"f0005_01": [(6, 5)]})
    femnist62.build_femnist62_json([a, b], tmp_path / "f.h5")
    train, test = read_dataset(tmp_path / "f.h5", "train"), read_dataset(tmp_path / "f.h5", "test")
    assert list(np.round(train.x[:, 0] * 255)) == [1, 4, 5] and list(np.round(test.x[:, 0] * 255)) == [2, 6]


def test_a_folder_without_train_and_test_is_named(tmp_path):
    (tmp_path / "a" / "train").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"a: not a LEAF data folder \(it needs train/ and test/ folders\)$"):
        femnist62.build_femnist62_json([tmp_path / "a"], tmp_path / "f.h5")


def test_leaf_labels_are_relabel_class():
    assert [femnist62.leaf_label(h) for h in ("30", "39", "41", "5a", "61", "7a", "2b")] == [0, 9, 10, 35, 36, 61, None]


WRITERS = {  # writer -> [(NIST class hex, pixel value)]: digits, upper and lower case
    "f0000_14": [("30", 1), ("4a", 2), ("7a", 3)],
    "f0001_27": [("39", 4), ("61", 5), ("61", 6), ("5a", 7)],
    "f0002_30": [("41", 8), ("62", 9)],
}


def nist_zips(root):
    """by_class.zip (hsf_0 folders LEAF reads, train_<hex> copies it does not) and by_write.zip
    (hsf_0/<writer>/<form>/) of the WRITERS' images, plus one writer image with no class."""
    by_class, by_write = root / "by_class.zip", root / "by_write.zip"
    with zipfile.ZipFile(by_class, "w") as z:
        for writer, images in WRITERS.items():
            for i, (code, value) in enumerate(images):
                z.writestr(f"by_class/{code}/hsf_0/hsf_0_{writer}_{i}.png", png_bytes(value))
                z.writestr(f"by_class/{code}/train_{code}/train_{code}_{value:05d}.png", png_bytes(value))
        z.writestr("by_class/4b/train_4b/train_4b_00000.png", png_bytes(250))  # not hsf: no class
    with zipfile.ZipFile(by_write, "w") as z:
        for writer, images in WRITERS.items():
            for i, (_, value) in enumerate(images):
                z.writestr(f"by_write/hsf_0/{writer}/c{writer[1:]}/c{writer[1:]}_{i:05d}.png", png_bytes(value))
        z.writestr("by_write/hsf_0/f0002_30/d0002_30/d0002_30_00000.png", png_bytes(250))
    return by_class, by_write


def test_nist_zips_give_leafs_writers_and_classes(tmp_path):
    pytest.importorskip("PIL", reason="decoding NIST's PNGs needs Pillow")
    by_class, by_write = nist_zips(tmp_path)
    prov = femnist62.build_femnist62_nist(by_class, by_write, tmp_path / "f.h5", fraction=None, train_fraction=0.5)
    with FederatedDataset(tmp_path / "f.h5") as ds:
        assert (ds.kind, ds.num_classes, ds.clients) == ("femnist", 62, list(WRITERS))
        sizes = ds.train_sizes + ds.test_sizes
    assert list(sizes) == [3, 4, 2]
    assert (prov["class_images"], prov["writer_images"], prov["unmatched_images"]) == (9, 9, 1)
    rows = [read_dataset(tmp_path / "f.h5", s) for s in ("train", "test")]
    labels = {(round(float(x[406]) * 255), int(y)) for r in rows for x, y in zip(r.x, r.y)}  # the centre pixel
    expected = {(value, femnist62.leaf_label(code)) for images in WRITERS.values() for code, value in images}
    assert labels == expected


def test_nist_build_is_leafs_sampling_and_a_pure_function_of_its_seed(tmp_path):
    pytest.importorskip("PIL", reason="decoding NIST's PNGs needs Pillow")
    by_class, by_write = nist_zips(tmp_path)
    files = [tmp_path / f"{k}.h5" for k in range(3)]
    for path, seed in zip(files, (0, 0, 1)):
        prov = femnist62.build_femnist62_nist(by_class, by_write, path, fraction=0.5, seed=seed)
    assert files[0].read_bytes() == files[1].read_bytes()
    assert prov["counts"]["sampled_samples"] == int(0.5 * 9)
    assert prov["sampling"] == dict(niid_fraction=0.5, min_samples=0, min_samples_rule="more_than", split="sample",
                                    train_fraction=0.9)


def test_zips_that_match_nothing_are_refused_in_one_line(tmp_path):
    by_class, by_write = nist_zips(tmp_path)
    with zipfile.ZipFile(by_class, "w") as z:
        z.writestr("by_class/30/hsf_0/x.png", png_bytes(99))
    with pytest.raises(ValueError, match="no writer's image matches an hsf image"):
        femnist62.build_femnist62_nist(by_class, by_write, tmp_path / "f.h5")
    assert not (tmp_path / "f.h5").exists()


@pytest.fixture(scope="module")
def shared_femnist62(tmp_path_factory):
    if not SHARED_FEMNIST.exists():
        pytest.skip(f"{SHARED_FEMNIST} absent: the real offline data folder ../shared/data is only in this workplace")
    out = tmp_path_factory.mktemp("femnist62") / "femnist62.h5"
    folders = [SHARED_FEMNIST / s for s in ("leaf-torch", "arakotom-flic", "6787-project")]
    return out, femnist62.build_femnist62_json(folders, out)


def test_shared_samples_hold_311_writers_and_every_class(shared_femnist62):
    out, prov = shared_femnist62
    with FederatedDataset(out) as ds:
        assert (ds.kind, ds.num_classes, ds.num_devices) == ("femnist", 62, 311)
        assert (int(ds.train_sizes.sum()), int(ds.test_sizes.sum())) == (42_399, 4_868)
        labels = np.concatenate([ds.load(s).y for s in ("train", "test")])
    assert (np.bincount(labels, minlength=62) > 0).all()
    assert (prov["users_in_several_sources"], prov["test_only_devices"]) == (26, 240)
