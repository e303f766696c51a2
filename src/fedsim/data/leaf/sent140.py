"""Sent140 (LEAF): devices are Twitter users of Sentiment140, samples are tweets -> sentiment.

Raw: trainingandtestdata.zip (Stanford), two latin-1 CSVs with 6 quoted columns (polarity 0/2/4, id,
date, query, user, text): training.1600000.processed.noemoticon.csv and testdata.manual.2009.06.14.csv.
LEAF (data/sent140/preprocess, written anew here) concatenates both files, stable-sorts the rows by
user name and groups them; y = 1 if polarity == "4" else 0. Then LEAF's sampling (niid.leaf_partition);
the FedProx paper used -s niid --sf 0.3 -k 30 -t sample --tf 0.8.

Tokens follow LEAF's model (language_utils.split_line / line_to_indices): re.findall(r"[\\w']+|[.,!?;]"),
no lower-casing, the first 25 tokens looked up in GloVe's vocabulary, unknown words and padding map to
the index after the vocabulary (a zero vector, as LEAF's get_embs.py appends). We keep only the GloVe
words that occur in the dataset: `embedding` (V+1, dim) float32 and `vocab` (V words, GloVe order) are
stored as extra datasets in the HDF5 file, x is int32 (n, 25) indices into `embedding`, the last row
being the unknown/padding word.
"""

import csv
import io
import re
import zipfile
from pathlib import Path

import numpy as np

from .common import find_member, named_read_errors, raw_format, read_member, write_partition
from .niid import counted_leaf_partition, kept_line

TRAIN_CSV = "training.1600000.processed.noemoticon.csv"
TEST_CSV = "testdata.manual.2009.06.14.csv"
MAX_WORDS = 25
PAPER = dict(fraction=0.3, min_samples=30, train_fraction=0.8)  # -s niid --sf 0.3 -k 30 -t sample --tf 0.8
_TOKEN = re.compile(r"[\w']+|[.,!?;]")


def read_rows(path, include_test=True):
    """[(user, label, text)] from trainingandtestdata.zip (both CSVs, train first) or one .csv[.gz]."""
    members = [TRAIN_CSV, TEST_CSV] if include_test else [TRAIN_CSV]
    blobs = [read_member(path, m) for m in members] if raw_format(path) == "zip" else [read_member(path)]
    rows = []
    for blob in blobs:
        reader = csv.reader(io.StringIO(blob.decode("latin-1"), newline=""))
        try:
            for r in reader:
                if len(r) != 6:
                    raise ValueError(f"{path}: line {reader.line_num}: expected 6 columns, got {len(r)}: {r[:3]}")
                rows.append((r[4], 1 if r[0] == "4" else 0, r[5]))
        except csv.Error as err:  # e.g. a NUL byte: no ValueError, and it names no file
            raise ValueError(f"{path}: line {reader.line_num}: not a CSV row ({err})") from None
    return rows


def group_by_user(rows):
    """(users in sorted order, [[row index, ...] per user]); rows of a user keep their file order."""
    groups = {}
    for i, (user, _, _) in enumerate(rows):
        groups.setdefault(user, []).append(i)
    users = sorted(groups)
    return users, [groups[u] for u in users]


def split_line(line):
    return _TOKEN.findall(line)


def glove_lines(path, dim=300):
    """Text lines of a GloVe file: glove.6B.zip (member glove.6B.<dim>d.txt), .txt or .txt.gz."""
    kind = raw_format(path)
    if kind == "zip":
        z = zipfile.ZipFile(path)
        names = [n for n in z.namelist() if n.endswith(f"{dim}d.txt")]
        return io.TextIOWrapper(z.open(names[0] if names else find_member(z, None, path)), encoding="utf-8")
    if kind == "gz":
        import gzip
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def read_glove(path, words, dim=300):
    """(vocab, vectors float32): the GloVe words that are in `words`, in GloVe's file order.

    A word listed twice keeps its last vector, as LEAF's {word: index} dict does.
    """
    found, total = {}, 0
    with named_read_errors(path), glove_lines(path, dim) as lines:
        for rank, line in enumerate(lines):
            total += 1
            word, _, rest = line.rstrip("\n").partition(" ")
            if word in words:
                found[word] = (rank, np.array(rest.split(), np.float32))
    vocab = sorted(found, key=lambda w: found[w][0])
    dims = {len(found[w][1]) for w in vocab}
    if len(dims) > 1:
        raise ValueError(f"{path}: GloVe vectors of different lengths {sorted(dims)}")
    width = dims.pop() if dims else dim
    vectors = np.stack([found[w][1] for w in vocab]) if vocab else np.zeros((0, width), np.float32)
    return vocab, vectors, dict(glove_words=total, dim=width)


def embed_and_tokenize(texts, glove, *, dim=300, max_words=MAX_WORDS):
    """Token ids for groups of texts, over the GloVe words that occur in them.

    texts: list of lists of str. Returns (ids: list of int32 (n_g, max_words) arrays, extras, info).
    """
    if glove is None:
        raise ValueError("Sent140 needs GloVe vectors: pass glove= (glove.6B.zip or a glove .txt)")
    tokens = [[split_line(t)[:max_words] for t in group] for group in texts]
    vocab, vectors, info = read_glove(glove, {w for g in tokens for t in g for w in t}, dim)
    word2id, unk = {w: i for i, w in enumerate(vocab)}, len(vocab)
    ids = []
    for group in tokens:
        a = np.full((len(group), max_words), unk, np.int32)
        for r, toks in enumerate(group):
            a[r, :len(toks)] = [word2id.get(w, unk) for w in toks]
        ids.append(a)
    embedding = np.concatenate([vectors, np.zeros((1, vectors.shape[1]), np.float32)])
    found = sum(int(np.count_nonzero(a != unk)) for a in ids)
    total = sum(len(t) for g in tokens for t in g)
    info.update(glove=Path(str(glove)).name, vocab_size=len(vocab), unk_index=unk, max_words=max_words,
                tokens=total, tokens_in_glove=found)
    return ids, dict(embedding=embedding, vocab=np.array(vocab, dtype=object)), info


def build_sent140(raw_path, glove, out_path, *, fraction=PAPER["fraction"], min_samples=PAPER["min_samples"],
                  train_fraction=PAPER["train_fraction"], seed=0, include_test_csv=True, dim=300,
                  max_words=MAX_WORDS, name="sent140", min_samples_rule="more_than"):
    """Group Sentiment140 by user, sample as LEAF, tokenise over GloVe and write; returns provenance.

    min_samples_rule: "more_than" (LEAF before Dec 2019, the paper's) or "at_least" (LEAF since).
    """
    rows = read_rows(raw_path, include_test_csv)
    users, groups = group_by_user(rows)
    sampling = dict(niid_fraction=fraction, min_samples=min_samples, min_samples_rule=min_samples_rule,
                    split="sample", train_fraction=train_fraction)
    parts, counts = counted_leaf_partition([len(g) for g in groups], fraction=fraction, min_samples=min_samples,
                                           train_fraction=train_fraction, seed=seed, min_samples_rule=min_samples_rule)
    if not parts:
        raise ValueError(f"{raw_path}: no user left after sampling ({kept_line(name, counts, sampling)})")
    # a device's rows: its sampled tweets, train positions first, then test
    picked = [[groups[p.user][i] for i in np.concatenate([p.train, p.test])] for p in parts]
    ids, extras, info = embed_and_tokenize([[rows[i][2] for i in g] for g in picked], glove, dim=dim,
                                           max_words=max_words)
    labels = [np.array([rows[i][1] for i in g], np.int64) for g in picked]
    is_paper = (fraction, min_samples, train_fraction, min_samples_rule) == (*PAPER.values(), "more_than")
    provenance = dict(generator="fedsim.leaf.sent140", source=Path(str(raw_path)).name, rows=len(rows),
                      leaf_users=len(users), include_test_csv=include_test_csv, seed=seed,
                      sampling=sampling, counts=counts, paper_table="sent140" if is_paper else None, **info)
    write_partition(out_path, name=name, kind="sent140", num_classes=2, clients=[users[p.user] for p in parts],
                    parts=[(np.arange(len(p.train)), np.arange(len(p.train), len(p.train) + len(p.test)))
                           for p in parts],
                    rows_of=lambda k: (ids[k], labels[k]), feature_shape=(max_words,), x_dtype=np.int32,
                    provenance=provenance, extras=extras)
    return provenance
