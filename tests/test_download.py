"""fedsim.data.download end to end against a loopback HTTP server this test starts (127.0.0.1, a thread,
shut down after each test): success, checksum mismatch, interrupted transfers, mirror and local copies;
then the served raw files (real layouts, made by helpers/leaf_files.py) through the LEAF builders."""

import hashlib
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from fedsim.data import atomic, download
from fedsim.data.format import FederatedDataset, write_dataset
from fedsim.data.leaf import femnist, sent140, shakespeare

from helpers.http_server import serve, server  # noqa: F401 (the fixture)
from helpers.leaf_files import make_by_class_zip, make_glove_zip, make_gutenberg_zip, make_sent140_zip


@pytest.fixture
def raw(tmp_path):
    """The raw sources in their real layouts, by SOURCES name."""
    d = tmp_path / "made"
    d.mkdir()
    return {"shakespeare": make_gutenberg_zip(d / "1994-01-100.zip"),
            "sent140": make_sent140_zip(d / "trainingandtestdata.zip"),
            "glove": make_glove_zip(d / "glove.6B.zip"),
            "nist_by_class": make_by_class_zip(d / "by_class.zip")}


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def leftovers(folder):
    return sorted(p.name for p in Path(folder).iterdir())


# -----------------------------------------------------------------------------

def test_sources_table_has_the_papers_raw_files():
    urls = {name: s.url() for name, s in download.SOURCES.items()}
    assert urls["shakespeare"] == "http://www.gutenberg.org/files/100/old/1994-01-100.zip"
    assert urls["nist_by_class"] == "https://s3.amazonaws.com/nist-srd/SD19/by_class.zip"
    assert urls["sent140"] == "http://cs.stanford.edu/people/alecmgo/trainingandtestdata.zip"
    assert urls["glove"] == "http://nlp.stanford.edu/data/glove.6B.zip"


@pytest.mark.parametrize("name", ["shakespeare", "sent140", "glove", "nist_by_class"])
def test_fetch_success_verifies_and_renames(server, raw, tmp_path, name):
    base = serve(server, raw[name])
    out = tmp_path / "out"
    got = download.fetch(name, out / raw[name].name, sha256=sha(raw[name]), base_url=base, backoff=0)
    assert got.verified and got.sha256 == sha(raw[name]) and got.origin == f"{base}/{raw[name].name}"
    assert got.path.read_bytes() == raw[name].read_bytes()
    assert leftovers(out) == [raw[name].name]
    # present and verified: kept, no second request
    assert download.fetch(name, out, sha256=sha(raw[name]), base_url=base).path == got.path
    assert server.hits[f"/base/{raw[name].name}"] == 1


def test_fetch_without_checksum_reports_the_digest(server, raw, tmp_path, caplog):
    base = serve(server, raw["glove"])
    got = download.fetch(f"{base}/glove.6B.zip", tmp_path / "g.zip")
    assert not got.verified and got.sha256 == sha(raw["glove"])
    assert got.sha256 in caplog.text and "record it" in caplog.text


def test_checksum_mismatch_names_file_and_both_digests_and_leaves_nothing(server, raw, tmp_path):
    base = serve(server, raw["sent140"])
    out = tmp_path / "out"
    out.mkdir()
    wrong = "0" * 64
    with pytest.raises(download.ChecksumError) as e:
        download.fetch("sent140", out, sha256=wrong, base_url=base, backoff=0)
    msg = str(e.value)
    assert "trainingandtestdata.zip" in msg and wrong in msg and sha(raw["sent140"]) in msg
    assert leftovers(out) == []
    assert server.hits["/base/trainingandtestdata.zip"] == 1  # a changed file is not retried


def test_recorded_checksums_apply_when_none_is_given(server, raw, tmp_path):
    """Made-up files under the real names fail the checksums recorded for the real archives."""
    recorded = download.SOURCES["sent140"].sha256
    with pytest.raises(download.ChecksumError, match=f"sha256 mismatch .* expected {recorded}, got {sha(raw['sent140'])}"):
        download.fetch("sent140", f"{tmp_path}/out/", base_url=serve(server, raw["sent140"]), backoff=0)
    md5 = download.SOURCES["shakespeare"].md5
    with pytest.raises(download.ChecksumError, match=f"1994-01-100.zip: md5 mismatch .* expected {md5}"):
        download.fetch("shakespeare", f"{tmp_path}/out/", mirror=raw["shakespeare"].parent)
    assert leftovers(tmp_path / "out") == []
    right_md5 = hashlib.md5(raw["shakespeare"].read_bytes()).hexdigest()
    got = download.fetch("shakespeare", f"{tmp_path}/out/", md5=right_md5, mirror=raw["shakespeare"].parent)
    assert got.verified and got.md5 == right_md5 and leftovers(tmp_path / "out") == ["1994-01-100.zip"]


def test_interrupted_transfer_is_retried_then_succeeds(server, raw, tmp_path):
    base = serve(server, raw["shakespeare"])
    server.truncate["/base/1994-01-100.zip"] = 2  # two replies close after half the bytes
    out = tmp_path / "out"
    got = download.fetch("shakespeare", out / "1994-01-100.zip", sha256=sha(raw["shakespeare"]), base_url=base,
                         retries=3, backoff=0.01)
    assert server.hits["/base/1994-01-100.zip"] == 3
    assert got.path.read_bytes() == raw["shakespeare"].read_bytes() and leftovers(out) == [got.path.name]


def test_interrupted_transfer_fails_cleanly_after_the_retries(server, raw, tmp_path):
    base = serve(server, raw["shakespeare"])
    server.truncate["/base/1994-01-100.zip"] = 99
    out = tmp_path / "out"
    with pytest.raises(download.DownloadError, match=r"1994-01-100.zip: download from .* failed after 3 attempt\(s\)"):
        download.fetch("shakespeare", out / "1994-01-100.zip", base_url=base, retries=2, backoff=0.01)
    assert server.hits["/base/1994-01-100.zip"] == 3 and leftovers(out) == []


def test_missing_file_is_not_retried(server, tmp_path):
    with pytest.raises(download.DownloadError, match="404"):
        download.fetch("glove", tmp_path, base_url=server.url + "/nowhere", retries=3, backoff=0.01)
    assert server.hits == {"/nowhere/glove.6B.zip": 1} and leftovers(tmp_path) == []


def test_mirror_and_local_path_are_used_without_network(server, raw, tmp_path):
    mirror = raw["sent140"].parent
    dead = server.url + "/must-not-be-used"
    got = download.fetch("sent140", tmp_path / "a", sha256=sha(raw["sent140"]), mirror=mirror, base_url=dead)
    assert got.verified and got.origin == str(raw["sent140"]) and got.path.read_bytes() == raw["sent140"].read_bytes()
    got = download.fetch("glove", tmp_path / "b" / "g.zip", local_path=raw["glove"], base_url=dead, verify=False)
    assert not got.verified and got.path.read_bytes() == raw["glove"].read_bytes()
    with pytest.raises(download.ChecksumError):
        download.fetch("shakespeare", f"{tmp_path}/c/", sha256="1" * 64, mirror=mirror, base_url=dead)
    with pytest.raises(FileNotFoundError, match="by_class.zip"):  # a mirror without the file
        download.fetch("nist_by_class", f"{tmp_path}/d/", mirror=tmp_path / "b", base_url=dead)
    assert leftovers(tmp_path / "c") == [] and not (tmp_path / "d").exists()
    assert server.hits == {}


@pytest.mark.parametrize("umask", [0o022, 0o002], ids=oct)
def test_a_fetched_file_has_the_mode_of_every_output_and_a_failed_one_leaves_nothing(server, raw, tmp_path, umask):
    """raw_dir may be shared between users: a fetched file, downloaded or copied, gets the mode every output
    of fedsim gets (0666 less the umask: fedsim.data.atomic), not a temporary file's private 0600. One whose
    checksum fails leaves neither the file nor its temporary file behind."""
    base = serve(server, raw["sent140"])
    before = os.umask(umask)
    try:
        fetched = [download.fetch("sent140", f"{tmp_path}/net/", sha256=sha(raw["sent140"]), base_url=base).path,
                   download.fetch("glove", f"{tmp_path}/copy/", local_path=raw["glove"], verify=False).path]
        atomic.write_text(tmp_path / "outputs" / "table.csv", "a\n1\n")
        write_dataset(tmp_path / "outputs" / "d.h5", name="d", kind="synthetic", num_classes=2, clients=["0"],
                      train_x=np.zeros((2, 3), np.float32), train_y=[0, 1], train_offsets=[0, 2],
                      test_x=np.zeros((1, 3), np.float32), test_y=[1], test_offsets=[0, 1], provenance={})
        for folder, origin in (("bad_net", dict(base_url=base)), ("bad_copy", dict(local_path=raw["sent140"]))):
            (tmp_path / folder).mkdir()
            with pytest.raises(download.ChecksumError):
                download.fetch("sent140", tmp_path / folder, sha256="0" * 64, backoff=0, **origin)
    finally:
        os.umask(before)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode)
             for path in (*fetched, tmp_path / "outputs" / "table.csv", tmp_path / "outputs" / "d.h5")}
    assert modes == dict.fromkeys(modes, 0o666 & ~umask)
    assert leftovers(tmp_path / "bad_net") == leftovers(tmp_path / "bad_copy") == []  # hidden files too
    assert leftovers(tmp_path / "net") == ["trainingandtestdata.zip"] and leftovers(tmp_path / "copy") == ["glove.6B.zip"]


# -----------------------------------------------------------------------------
# served raw files -> datasets

def test_served_raw_files_build_the_datasets(server, raw, tmp_path):
    got = {name: download.fetch(name, f"{tmp_path}/raw/", sha256=sha(path), base_url=serve(server, path))
           for name, path in raw.items()}

    shakespeare.build_shakespeare(got["shakespeare"].path, tmp_path / "shakespeare.h5", fraction=None)
    with FederatedDataset(tmp_path / "shakespeare.h5") as ds:
        assert ds.clients == ["THE_COMEDY_OF_ERRORS_DROMIO", "THE_TRAGEDY_OF_TESTING_ALICE",
                              "THE_TRAGEDY_OF_TESTING_BOB"]

    prov = sent140.build_sent140(got["sent140"].path, got["glove"].path, tmp_path / "sent140.h5", fraction=None,
                                 min_samples=2)
    with FederatedDataset(tmp_path / "sent140.h5") as ds:
        assert ds.clients == ["amy", "zed"] and prov["dim"] == 300

    pytest.importorskip("PIL", reason="decoding NIST's PNGs needs Pillow")
    pool, info = femnist.read_nist_pool(got["nist_by_class"].path)
    assert info["images_per_class"] == [6] * 10  # train_<hex> of a-j only; upper case and hsf_0 ignored
    prov = femnist.build_femnist(pool, tmp_path / "femnist.h5", variant="faithful", num_devices=4, seed=0,
                                 pool_info=info, allow_reuse=True)  # 6 images per class: below the floor
    with FederatedDataset(tmp_path / "femnist.h5") as ds:
        x = ds.load("train").x
        y = ds.load("train").y
    assert x.shape[1] == 784 and x.dtype == np.float32 and x.max() == 1.0  # white background, 28x28 thumbnail
    # each image's dark square encodes its class (value 10 c + i): labels and pixels must agree
    assert np.all(np.abs(x.min(axis=1) * 255 - 10 * y) < 10)
