"""Checksummed downloads of the raw LEAF sources, with retries, a mirror folder and local copies.

    fetch("sent140", "resources/raw/trainingandtestdata.zip", sha256=..., mirror="/data/mirror")

Whatever the origin (a local path, a mirror folder, or the network), the file is streamed to a hidden
temporary name in the destination folder, hashed on the way, and renamed onto the destination only
after the checksum passed: a failed or interrupted fetch leaves nothing behind, and a destination that
exists is a complete, verified file. Where no checksum is known (sha256=None) the digest is logged
and returned, to be recorded (e.g. in the config) for the next run.

Every source here has moved or died at least once, so base URLs are arguments (base_url=), not constants
buried in code; SOURCES only holds the defaults.
"""

import hashlib
import http.client
import logging
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Source:
    base_url: str
    filename: str
    sha256: str | None = None  # None: not known to us; fetch() reports the digest it saw
    note: str = ""

    def url(self, base_url=None):
        return (base_url or self.base_url).rstrip("/") + "/" + self.filename


# Checksums: none of these archives publishes one and we had no copy to hash, so all are None
# (never invented); record the digest that fetch() reports on the first download.
SOURCES = {
    "shakespeare": Source("http://www.gutenberg.org/files/100/old", "1994-01-100.zip",
                          note="Project Gutenberg e-book 100, Jan 1994 edition (LEAF's text; member 100.txt)"),
    "nist_by_class": Source("https://s3.amazonaws.com/nist-srd/SD19", "by_class.zip",
                            note="NIST Special Database 19, images by class"),
    "nist_by_write": Source("https://s3.amazonaws.com/nist-srd/SD19", "by_write.zip",
                            note="NIST Special Database 19, images by writer (LEAF's writer split)"),
    "sent140": Source("http://cs.stanford.edu/people/alecmgo", "trainingandtestdata.zip",
                      note="Sentiment140 (training.1600000.processed.noemoticon.csv + test CSV)"),
    "glove": Source("http://nlp.stanford.edu/data", "glove.6B.zip", note="GloVe 6B, 50/100/200/300-d"),
}


class ChecksumError(Exception):
    """The file's sha256 differs from the expected one."""


class IncompleteDownload(Exception):
    """The connection ended before Content-Length bytes arrived."""


@dataclass
class Fetched:
    path: Path
    sha256: str
    origin: str          # the URL or local file it came from
    verified: bool       # False when no expected checksum was given


def fetch(name_or_url, dest, *, sha256=None, mirror=None, local_path=None, base_url=None, retries=4,
          backoff=2.0, timeout=60, chunk_size=1 << 20):
    """Fetch a source (a SOURCES key or a URL) to the file `dest` (or into `dest` if it is a folder:
    one that exists or a path ending with "/").

    Origin, first match wins: local_path (a copy of the file), mirror (a folder holding the file under
    its source file name), else the network (base_url replaces the source's default). sha256=None
    uses the source's recorded checksum, if any. A destination that already has the expected checksum
    is kept as is. Network errors, 5xx/429 replies and truncated transfers are retried `retries`
    times, after backoff * 2**attempt seconds; a checksum mismatch is not retried (the file changed).
    """
    if name_or_url in SOURCES:
        source = SOURCES[name_or_url]
    elif "://" in str(name_or_url):
        source = Source(*str(name_or_url).rsplit("/", 1))
    else:
        raise ValueError(f"{name_or_url!r}: not a URL nor one of the sources {sorted(SOURCES)}")
    sha256 = (sha256 or source.sha256 or "").lower() or None
    if Path(dest).is_dir() or str(dest).endswith(("/", os.sep)):
        dest = Path(dest) / source.filename
    dest = Path(dest)
    if sha256 and dest.is_file() and _file_sha256(dest) == sha256:
        log.info("%s: present, sha256 verified", dest)
        return Fetched(dest, sha256, str(dest), True)

    if local_path is not None or mirror is not None:
        src = Path(local_path) if local_path is not None else Path(mirror) / source.filename
        if not src.is_file():
            raise FileNotFoundError(f"{src}: not found (local copy of {source.filename}; "
                                    f"{'local_path' if local_path is not None else 'mirror'} given, network not used)")
        return _store(dest, sha256, str(src), lambda f: _copy(src, f, chunk_size))

    url = source.url(base_url)
    for attempt in range(retries + 1):
        try:
            return _store(dest, sha256, url, lambda f: _download(url, f, timeout, chunk_size))
        except (OSError, http.client.HTTPException, IncompleteDownload) as e:
            if not _retryable(e) or attempt == retries:
                raise RuntimeError(f"{dest.name}: download from {url} failed after {attempt + 1} "
                                   f"attempt(s): {e}") from e
            wait = backoff * 2 ** attempt
            log.warning("%s: attempt %d failed (%s); retrying in %.1f s", url, attempt + 1, e, wait)
            time.sleep(wait)


def _store(dest, sha256, origin, write):
    """Run write(file) into a temp file beside dest; hash it; rename onto dest only if it checks out."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        actual = _file_sha256(tmp)
        if sha256 and actual != sha256:
            raise ChecksumError(f"{dest.name}: sha256 mismatch for {origin}: expected {sha256}, got {actual}")
        if not sha256:
            log.warning("%s: no expected sha256 given; got %s (record it)", dest.name, actual)
        os.replace(tmp, dest)
        return Fetched(dest, actual, origin, bool(sha256))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


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


def _file_sha256(path, chunk_size=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            h.update(chunk)
    return h.hexdigest()
