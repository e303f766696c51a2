"""Raw LEAF inputs that are wrong: each is one line on stderr naming the file (and the user), exit
status 2 and no output file. Then what the builders say about what they kept: the FEMNIST pool's
reuse warning and Sent140's kept line under LEAF's two minimum-samples rules.

Every input is written here, small, in the real formats (helpers/leaf_files.py).
"""

import gzip

import numpy as np
import pytest

from fedsim import cli
from fedsim.data.format import FederatedDataset

from helpers.leaf_files import TWEETS, csv_bytes, make_glove_zip, write_leaf_json


def image(value, length=784):
    return [value] * length


def run_cli(argv, capsys):
    """(exit status, stdout lines, stderr lines) of one fedsim command."""
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.splitlines()


def assert_refused(argv, out, capsys, *named):
    """Exit 2, exactly one stderr line naming everything in `named`, and nothing written."""
    code, _, err = run_cli(argv, capsys)
    assert code == 2, err
    assert len(err) == 1, err
    assert err[0].startswith(f"fedsim {argv[0]}: error: "), err[0]
    for text in named:
        assert str(text) in err[0], (text, err[0])
    assert not out.exists()
    assert not list(out.parent.glob(f".{out.name}.*")), "a temporary output was left behind"
    return err[0]


def import_argv(train, test, out, *extra):
    return ["import-json", "--train", train, "--test", test, "--name", "f", "--out", out, *extra]


def leaf_pair(tmp_path, train_users, test_users=None):
    """A train and a test LEAF file; the test file defaults to one good user."""
    train = write_leaf_json(tmp_path / "train" / "all_data_0_train.json", train_users)
    test = write_leaf_json(tmp_path / "test" / "all_data_0_test.json",
                           test_users or {"w1": ([image(0.5)], [3])})
    return train, test


def truncated_gzip(path, payload):
    path.parent.mkdir(parents=True, exist_ok=True)
    whole = gzip.compress(payload)
    path.write_bytes(whole[: len(whole) // 2])
    return path


# -----------------------------------------------------------------------------
# section 4 of issue 17: one line per bad input

def test_truncated_json_gz_is_named(tmp_path, capsys):
    good = write_leaf_json(tmp_path / "test" / "t.json", {"w1": ([image(0.5)], [3])})
    payload = write_leaf_json(tmp_path / "whole.json", {"w1": ([image(0.25)] * 40, [1] * 40)}).read_bytes()
    bad = truncated_gzip(tmp_path / "train" / "all_data_0_train.json.gz", payload)
    out = tmp_path / "out" / "f.h5"
    line = assert_refused(import_argv(bad, good, out), out, capsys, bad, "truncated or damaged gzip")
    assert "Compressed file ended" in line
    # the FEMNIST pool reads the same files
    out = tmp_path / "out" / "pool.h5"
    assert_refused(["prepare-femnist", "--json", bad, "--out", out], out, capsys, bad, "truncated or damaged gzip")


def test_truncated_csv_gz_is_named(tmp_path, capsys):
    bad = truncated_gzip(tmp_path / "training.csv.gz", csv_bytes(TWEETS * 200))
    glove = make_glove_zip(tmp_path / "glove.6B.zip", dims=(300,))
    out = tmp_path / "out" / "s.h5"
    assert_refused(["prepare-sent140", "--raw", bad, "--glove", glove, "--out", out], out, capsys,
                   bad, "truncated or damaged gzip")


def test_x_longer_than_y_is_named_with_its_user(tmp_path, capsys):
    """Accepted before: the import then shifted every later (x, y) pair of that user by one."""
    train, test = leaf_pair(tmp_path, {"w1": ([image(0.1)] * 3, [1, 2, 3]),
                                       "w2": ([image(0.2)] * 4, [4, 5, 6])})
    out = tmp_path / "out" / "f.h5"
    line = assert_refused(import_argv(train, test, out), out, capsys, train, "user w2")
    assert "x holds 4 samples but y holds 3 labels" in line


def test_num_samples_disagreeing_with_the_data_is_named(tmp_path, capsys):
    train, test = leaf_pair(tmp_path, {"w1": ([image(0.1)] * 3, [1, 2, 3])})
    text = train.read_text().replace('"num_samples": [3]', '"num_samples": [5]')
    assert '"num_samples": [5]' in text
    train.write_text(text)
    out = tmp_path / "out" / "f.h5"
    line = assert_refused(import_argv(train, test, out), out, capsys, train, "user w1")
    assert "num_samples says 5 but the data hold 3" in line


def test_a_value_float32_cannot_hold_is_named_with_its_user(tmp_path, capsys):
    """1e39 overflows float32 to inf: imported, a run on it read as the method diverging at round 0."""
    train, test = leaf_pair(tmp_path, {"u1": ([[0.5, 1.0]] * 3, [0, 1, 0]), "u2": ([[0.5, 1.0], [2.0, 1e39]], [1, 0])},
                            {"u1": ([[0.5, 1.0]], [1])})
    out = tmp_path / "out" / "f.h5"
    line = assert_refused(import_argv(train, test, out), out, capsys, train, "user u2")
    assert line.endswith("user u2: sample 1 holds inf (as float32): every value must be finite"), line

@pytest.mark.parametrize("users, bad_user, import_problem, pool_problem", [
    ({"w1": ([image(0.1)] * 2, [1, 2]), "w7": ([image(0.2)] * 2, [3, 99])}, "user w7",
     "sample 1 has label 99, outside 0..61", "label 99, outside FEMNIST's 0..61"),
    ({"w1": ([image(0.1), image(0.1, 783)], [1, 2])}, "user w1",
     "sample 1 has 783 values, expected 784", "sample 1 has 783 values, expected 784"),
], ids=["label_99", "image_of_783_values"])
def test_a_bad_femnist_sample_is_named_by_both_readers(tmp_path, capsys, users, bad_user, import_problem,
                                                       pool_problem):
    train, test = leaf_pair(tmp_path, users)
    out = tmp_path / "out" / "f.h5"
    line = assert_refused(import_argv(train, test, out, "--kind", "femnist"), out, capsys, train, bad_user)
    assert import_problem in line
    out = tmp_path / "out" / "pool.h5"
    line = assert_refused(["prepare-femnist", "--json", train, "--out", out], out, capsys, train, bad_user)
    assert pool_problem in line


def tiny_pool(tmp_path, images=46):
    """One LEAF file holding `images` distinct a-j images (labels 36-45), like one small sample."""
    xs, ys = [image(i / 1000) for i in range(images)], [36 + i % 10 for i in range(images)]
    return write_leaf_json(tmp_path / "pool" / "all_data_0_train.json", {"w1": (xs, ys)})


def test_a_pool_too_small_for_the_construction_is_refused(tmp_path, capsys):
    """46 a-j images (4-5 per class) would make 200 devices mostly of repeats: below the floor of 100
    images per class it is refused with the repeat count."""
    pool = tiny_pool(tmp_path)
    out = tmp_path / "out" / "femnist.h5"
    line = assert_refused(["prepare-femnist", "--json", pool, "--out", out], out, capsys, pool,
                          "FEMNIST pool too small", "fewer than 100 in a class", "--allow-reuse")
    repeated = int(line.split("; ")[1].split(" of ")[0])
    assert repeated > 10000  # of ~19,600 samples


def test_allow_reuse_builds_a_small_pool_and_warns_with_the_count(tmp_path, capsys):
    pool = tiny_pool(tmp_path)
    out = tmp_path / "out" / "femnist.h5"
    code, _, err = run_cli(["prepare-femnist", "--json", pool, "--allow-reuse", "--out", out], capsys)
    assert code == 0, err
    (warning,) = err
    assert warning.startswith("WARNING: femnist: ") and "samples repeat an image of their own device" in warning
    with FederatedDataset(out) as ds:
        prov = ds.attrs["provenance"]
        assert ds.num_devices == 200 and f"{prov['repeated_samples']} samples repeat" in warning
        assert prov["repeated_samples"] > 10000


# -----------------------------------------------------------------------------
# section 3: the pool decides which images, nothing else

def test_a_larger_pool_changes_no_device_size_class_or_sample_order():
    from fedsim.data.leaf.femnist import fedprox_plan

    small, info_small = fedprox_plan([187, 250, 300, 420, 500, 280, 270, 400, 240, 190], seed=0)
    large, info_large = fedprox_plan([800, 251, 300, 2000, 900, 280, 999, 400, 240, 4000], seed=0)
    assert len(small) == len(large) == 200
    for (cls_s, picks_s, perm_s, nt_s), (cls_l, picks_l, perm_l, nt_l) in zip(small, large):
        assert cls_s == cls_l and nt_s == nt_l and np.array_equal(perm_s, perm_l)
        assert [len(p) for p in picks_s] == [len(p) for p in picks_l]
    # ... while the images drawn do change, and only in the classes whose pool changed
    changed = {c for (cls, ps, _, _), (_, pl, _, _) in zip(small, large) for c, a, b in zip(cls, ps, pl)
               if not np.array_equal(a, b)}
    assert changed == {0, 1, 3, 4, 6, 9}
    assert info_small["repeated_samples"] >= info_large["repeated_samples"]


# -----------------------------------------------------------------------------
# section 5: Sent140 says what it kept, under either LEAF rule

def sent140_csv(tmp_path):
    """Users with 3 (amy), 2 (bob) and 1 (cy) tweets."""
    rows = [("4", str(i), "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", user, "good rain world")
            for i, user in enumerate(["amy", "amy", "amy", "bob", "bob", "cy"])]
    path = tmp_path / "training.csv.gz"
    path.write_bytes(gzip.compress(csv_bytes(rows)))
    return path


@pytest.mark.parametrize("rule, kept_users, kept_samples", [("more_than", 1, 3), ("at_least", 2, 5)])
def test_the_min_samples_rule_decides_who_is_kept(tmp_path, capsys, rule, kept_users, kept_samples):
    raw, glove = sent140_csv(tmp_path), make_glove_zip(tmp_path / "glove.6B.zip", dims=(300,))
    out = tmp_path / "s.h5"
    code, lines, err = run_cli(["prepare-sent140", "--raw", raw, "--glove", glove, "--fraction", "0",
                                "--min-samples", "2", "--min-samples-rule", rule, "--out", out], capsys)
    assert code == 0, err
    kept = [line for line in lines if "kept" in line]
    assert kept == [f"sent140: kept {kept_users} of 3 users and {kept_samples} of 6 samples; dropped "
                    f"{3 - kept_users} users with {'2 or fewer' if rule == 'more_than' else 'fewer than 2'} "
                    f"samples (LEAF's -k 2, rule {rule}), 0 users with under 2 samples (no train/test split)"]
    with FederatedDataset(out) as ds:
        assert ds.num_devices == kept_users and int((ds.train_sizes + ds.test_sizes).sum()) == kept_samples
        assert ds.attrs["provenance"]["paper_table"] is None  # not the paper's sampling
