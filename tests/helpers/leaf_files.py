"""Small raw LEAF inputs written here in their real formats: the Gutenberg e-book, Sentiment140's CSV zip,
GloVe's zip, NIST's by_class.zip of PNGs, and LEAF JSON files. The tests build datasets from them, or
serve them over HTTP (http_server.py)."""

import csv
import gzip
import io
import json
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

from fedsim.data.leaf import sent140

SPEECH = "Now is the winter of our discontent made glorious summer by this sun of York"  # 76 chars


def make_gutenberg_text():
    """A tiny e-book laid out like the 1994 Gutenberg text, exercising each rule of LEAF's parser."""
    lines = [
        "The first line is dropped by LEAF",
        "CONTENTS",
        "THE SONNETS",
        "by William Shakespeare",  # first mark: table of contents / sonnets, skipped
        "  SONNETEER. From fairest creatures we desire increase,",
        "",
        "THE TRAGEDY OF TESTING",
        "",
        "by William Shakespeare",  # second mark: the parse starts 5 lines above it
        "",
        "  ALICE. " + SPEECH,
        "    second line of Alice",
        "",                              # blank lines do not end a speech
        "    third line of Alice",
        "  BOB. " + SPEECH,
        "    Bob again",
        "  Alice. " + SPEECH,            # other casing: the same role
        "  BOB. and a third line for Bob",
        "  CAROL. only",                 # 2 lines: too few, skipped
        "    two lines",
        "Stage direction, not consumed",
        "",
        "THE COMEDY OF ERRORS",
        "",
        "by William Shakespeare",
        "ANTIPHOLUS. " + SPEECH,         # no indentation in this play
        "continuation without indentation",
        "<<editorial notice>>",          # ends the speech
        "not part of any speech",
        "ACT I. SCENE 1.",               # not a role
        "DROMIO. " + SPEECH,
        "one",
        "two",
        "",
        "A PLAY WITH ONE ROLE",
        "",
        "by William Shakespeare",
        "  SOLO. " + SPEECH,
        "    " + SPEECH,
        "    " + SPEECH,
    ]
    return "\n".join(lines) + "\n"


def make_gutenberg_plays(path, roles=40):
    """A gzipped e-book in the 1994 layout with one play of `roles` speaking roles (ROLE A, ROLE B, ...),
    enough users for LEAF's 0.2 sample to keep several."""
    names = [f"ROLE {a}{b}" for a in "ABCDEFGH" for b in "ABCDEFGH"][:roles]
    speeches = [f"  {name}. {SPEECH}\n    {SPEECH}\n    {SPEECH}\n" for name in names]
    text = make_gutenberg_text() + "\nTHE TRAGEDY OF MANY\n\nby William Shakespeare\n\n" + "".join(speeches)
    with gzip.open(path, "wt") as f:
        f.write(text)
    return path


def make_gutenberg_zip(path):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("100.txt", make_gutenberg_text().replace("\n", "\r\n"))  # DOS line ends, as old etexts
    return path


TWEETS = [  # polarity, id, date, query, user, text
    ("0", "1", "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", "zed", "I hate rain, it's sad!"),
    ("4", "2", "Mon Apr 06 22:19:49 PDT 2009", "NO_QUERY", "amy", "good morning world"),
    ("4", "3", "Mon Apr 06 22:19:53 PDT 2009", "NO_QUERY", "zed", "café \"quoted\" , love it"),
    ("0", "4", "Mon Apr 06 22:19:57 PDT 2009", "NO_QUERY", "amy", "Sad day. no rain"),
    ("4", "5", "Mon Apr 06 22:20:00 PDT 2009", "NO_QUERY", "zed", "world of love"),
    ("0", "6", "Mon Apr 06 22:20:03 PDT 2009", "NO_QUERY", "bob", "rain"),
]
TEST_TWEETS = [("2", "7", "Mon May 11 03:17:40 UTC 2009", "kindle2", "amy", "neutral tweet about rain")]
GLOVE_WORDS = ["the", "rain", "sad", "love", "world", "good", "morning", "it's", ",", "!", ".", "of", "day",
               "café"]


def csv_bytes(rows):
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\r\n").writerows(rows)
    return buf.getvalue().encode("latin-1")


def make_sent140_zip(path, rows=TWEETS, test_rows=TEST_TWEETS):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(sent140.TRAIN_CSV, csv_bytes(rows))
        z.writestr(sent140.TEST_CSV, csv_bytes(test_rows))
    return path


def glove_vector(rank, dim):
    return np.arange(dim, dtype=np.float32) / 1000 + rank


def make_glove_zip(path, words=GLOVE_WORDS, dims=(50, 300)):
    """glove.6B.zip layout: one text file per dimension, 'word v1 v2 ...' per line."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for dim in dims:
            lines = [" ".join([w, *(f"{v:.5f}" for v in glove_vector(r, dim))]) for r, w in enumerate(words)]
            z.writestr(f"glove.6B.{dim}d.txt", "\n".join(lines) + "\n")
    return path


def png_bytes(value, size=128):
    """A grey PNG (written by hand: the test data needs no Pillow): a dark square of `value` on white."""
    img = np.full((size, size), 255, np.uint8)
    img[size // 4: 3 * size // 4, size // 4: 3 * size // 4] = value

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\0" + row.tobytes() for row in img)  # filter type 0 per row
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def make_by_class_zip(path, per_class=6):
    """by_class.zip layout: by_class/<hex>/train_<hex>/*.png plus an hsf_0 folder the reference ignores."""
    with zipfile.ZipFile(path, "w") as z:
        for c, letter in enumerate("abcdefghij" + "AB"):
            code = f"{ord(letter):x}"
            for i in range(per_class):
                z.writestr(f"by_class/{code}/train_{code}/train_{code}_{i:05d}.png", png_bytes(10 * c + i))
            z.writestr(f"by_class/{code}/hsf_0/hsf_0_00000.png", png_bytes(250))
    return path


def write_leaf_json(path, users, gz=False):
    """users: {name: (x list, y list)} -> a LEAF JSON file."""
    data = {"users": list(users), "num_samples": [len(y) for _, y in users.values()],
            "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()}}
    raw = json.dumps(data).encode()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(gzip.compress(raw) if gz else raw)
    return path
