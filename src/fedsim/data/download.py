"""Checksummed downloads of the raw LEAF sources, with retries, a mirror folder and local copies.

    fetch("sent140", "resources/raw/sent140/trainingandtestdata.zip", mirror="/data/mirror")

Whatever the origin (a local path, a mirror folder, or the network), the file is streamed to a hidden
temporary name in the destination folder, hashed on the way, and renamed onto the destination only
after its checksums passed: a failed or interrupted fetch leaves nothing behind, and a destination that
exists is a complete, verified file. Where no checksum is known the digest is logged and returned, to
be recorded (e.g. in the config) for the next run.

Every source here has moved or died at least once (Gutenberg's files/100/old/ answers 404 since about
2020: LEAF issue #67), so base URLs are arguments (base_url=), not constants buried in code; SOURCES
only holds the defaults.
"""

import hashlib
import http.client
import logging
import os
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .atomic import atomic_path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Source:
    base_url: str
    filename: str
    sha256: str | None = None  # None: not known to us
    md5: str | None = None     # where only an MD5 was ever published
    note: str = ""

    def url(self, base_url=None):
        return (base_url or self.base_url).rstrip("/") + "/" + self.filename


# Checksums as published with other people's loaders of the same files (none of these archives
# publishes its own): sha256 where one is known, else md5. Sources: Sentiment140's sha256 is in
# HuggingFace datasets (sentiment140/dataset_infos.json, 81,363,704 bytes); GloVe 6B's in
# JuliaText/Embeddings.jl (src/glove.jl) and others (862,182,613 bytes); the Gutenberg and NIST md5s
# in vaseline555/Federated-Learning-in-PyTorch (src/datasets/leaf/leaf_utils.py) and
# orion-orion/FedCom (custom_ds/). None was computed here: we had no copy of any archive.
SOURCES = {
    "shakespeare": Source("http://www.gutenberg.org/files/100/old", "1994-01-100.zip",
                          md5="b8d60664a90939fa7b5d9f4dd064a1d5",
                          note="Project Gutenberg e-book 100, Jan 1994 edition (LEAF's text; member 100.txt)"),
    "nist_by_class": Source("https://s3.amazonaws.com/nist-srd/SD19", "by_class.zip",
                            md5="79572b1694a8506f2b722c7be54130c4",
                            note="NIST Special Database 19, images by class (1,031,576,378 bytes)"),
    "nist_by_write": Source("https://s3.amazonaws.com/nist-srd/SD19", "by_write.zip",
                            note="NIST Special Database 19, images by writer (LEAF's FEMNIST writers; no checksum "
                                 "recorded: the digests are logged)"),
    "sent140": Source("http://cs.stanford.edu/people/alecmgo", "trainingandtestdata.zip",
                      sha256="004a3772c8a7ff9bbfeb875880f47f0679d93fc63e5cf9cff72d54a8a6162e57",
                      note="Sentiment140 (training.1600000.processed.noemoticon.csv + test CSV)"),
    "glove": Source("http://nlp.stanford.edu/data", "glove.6B.zip",
                    sha256="617afb2fe6cbd085c235baf7a465b96f4112bd7f7ccb2b2cbd649fed9cbcf2fb",
                    note="GloVe 6B, 50/100/200/300-d"),
}


class ChecksumError(ValueError):
    """The file's sha256 or md5 differs from the expected one."""


class DownloadError(OSError):
    """The file could not be fetched (after the retries, where retrying could help)."""


class IncompleteDownload(Exception):
    """The connection ended before Content-Length bytes arrived."""


@dataclass
class Fetched:
    path: Path
    sha256: str
    origin: str          # the URL or local file it came from
    verified: bool       # False when no expected checksum was given
    md5: str = ""


def fetch(name_or_url, dest, *, sha256=None, md5=None, verify=True, mirror=None, local_path=None, base_url=None,
          retries=4, backoff=2.0, timeout=60, chunk_size=1 << 20):
    """Fetch a source (a SOURCES key or a URL) to the file `dest` (or into `dest` if it is a folder:
    one that exists or a path ending with "/").

    Origin, first match wins: local_path (a copy of the file), mirror (a folder holding the file under
    its source file name), else the network (base_url replaces the source's default). The file is
    checked against sha256 and/or md5 where given, else against the source's recorded checksums;
    verify=False checks nothing (the digests are still returned). A destination that already has the expected checksum
    is kept as is. Network errors, 5xx/429 replies and truncated transfers are retried `retries`
    times, after backoff * 2**attempt seconds; a checksum mismatch is not retried (the file changed).
    """
    if name_or_url in SOURCES:
        source = SOURCES[name_or_url]
    elif "://" in str(name_or_url):
        source = Source(*str(name_or_url).rsplit("/", 1))
    else:
        raise ValueError(f"{name_or_url!r}: not a URL nor one of the sources {sorted(SOURCES)}")
    if not verify:
        expected = {}
    elif sha256 or md5:
        expected = {"sha256": sha256, "md5": md5}
    else:
        expected = {"sha256": source.sha256, "md5": source.md5}
    expected = {algo: digest.lower() for algo, digest in expected.items() if digest}
    if Path(dest).is_dir() or str(dest).endswith(("/", os.sep)):
        dest = Path(dest) / source.filename
    dest = Path(dest)
    if expected and dest.is_file():
        digests = _file_digests(dest)
        if all(digests[algo] == digest for algo, digest in expected.items()):
            log.info("%s: present, %s verified", dest, "+".join(expected))
            return Fetched(dest, digests["sha256"], str(dest), True, digests["md5"])

    if local_path is not None or mirror is not None:
        src = Path(local_path) if local_path is not None else Path(mirror) / source.filename
        if not src.is_file():
            raise FileNotFoundError(f"{src}: not found (local copy of {source.filename}; "
                                    f"{'local_path' if local_path is not None else 'mirror'} given, network not used)")
        return _store(dest, expected, str(src), lambda f: _copy(src, f, chunk_size))

    url = source.url(base_url)
    for attempt in range(retries + 1):
        try:
            return _store(dest, expected, url, lambda f: _download(url, f, timeout, chunk_size))
        except (OSError, http.client.HTTPException, IncompleteDownload) as e:
            if not _retryable(e) or attempt == retries:
                raise DownloadError(f"{dest.name}: download from {url} failed after {attempt + 1} "
                                   f"attempt(s): {e}") from e
            wait = backoff * 2 ** attempt
            log.warning("%s: attempt %d failed (%s); retrying in %.1f s", url, attempt + 1, e, wait)
            time.sleep(wait)


def _store(dest, expected, origin, write):
    """Run write(file) into a temp file beside dest (fedsim.data.atomic: the mode any output gets); hash it;
    rename it onto dest only if it checks out (else it is removed)."""
    with atomic_path(dest) as tmp:
        with open(tmp, "wb") as f:
            write(f)
        actual = _file_digests(tmp)
        for algo, digest in expected.items():
            if actual[algo] != digest:
                raise ChecksumError(f"{dest.name}: {algo} mismatch for {origin}: expected {digest}, "
                                    f"got {actual[algo]}")
        if not expected:
            log.warning("%s: no expected checksum given; got sha256 %s (record it)", dest.name, actual["sha256"])
    return Fetched(dest, actual["sha256"], origin, bool(expected), actual["md5"])


def _download(url, f, timeout, chunk_size):
    request = urllib.request.Request(url, headers={"User-Agent": "fedsim-download"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        expected = response.headers.get("Content-Length")
        got = 0
        while chunk := response.read(chunk_size):
            f.write(chunk)
            got += len(chunk)
    # http.client returns short reads silently when the peer closes early: count the bytes ourselves
    if expected is not None and got != int(expected):
        raise IncompleteDownload(f"got {got} of {expected} bytes")


def _copy(src, f, chunk_size):
    with open(src, "rb") as s:
        shutil.copyfileobj(s, f, chunk_size)


def _retryable(e):
    if isinstance(e, urllib.error.HTTPError):
        return e.code >= 500 or e.code in (408, 429)  # 404 and friends will not get better
    return True


def _file_digests(path, chunk_size=1 << 20):
    """{"sha256": ..., "md5": ...} of a file, in one pass."""
    hashes = {"sha256": hashlib.sha256(), "md5": hashlib.md5(usedforsecurity=False)}
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            for h in hashes.values():
                h.update(chunk)
    return {algo: h.hexdigest() for algo, h in hashes.items()}
