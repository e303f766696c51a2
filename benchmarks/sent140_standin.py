"""A Sent140 stand-in for timing: a dataset file of the paper's Sent140 shapes, of random values.

    python benchmarks/sent140_standin.py OUT.h5 [--devices 772] [--vocab 400000] [--seed 0]

What a real `fedsim prepare-sent140` build needs (Sentiment140's CSV and GloVe 6B, 862 MB) cannot
reach a lent GPU machine, and a round's time does not depend on the embedding's values or on which
words a tweet holds, only on the shapes. So this writes, in the same format as the real build
(kind sent140, 25 token ids a tweet, the embedding as the file's `embedding` dataset):
  - `--devices` devices (the paper's 772), each with a sample count drawn from a shifted lognormal
    whose mean and standard deviation are the paper's Sent140 table (53 and 32 per device), none under
    LEAF's threshold (more than 30), split 0.8 train / 0.2 test as LEAF's sample split does;
  - tweets of 5 to 25 words, the rest padding (the unknown word's id, as the real build pads);
  - an embedding of `--vocab` random 300-d rows (GloVe 6B has 400,000 words) and the zero row for
    unknown words, random labels in {0, 1}.
A run on it times what a real run does; its curve means nothing. The provenance says so
(`stand_in: true`), and so does the line this prints.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from fedsim.data.leaf.common import write_partition  # noqa: E402
from fedsim.data.leaf.sent140 import MAX_WORDS  # noqa: E402
from fedsim.data.paper_table import PAPER_TABLE  # noqa: E402

MIN_SAMPLES = 31  # LEAF's -k 30 keeps users with more than 30 tweets
DIM = 300
TRAIN_FRACTION = 0.8


def sample_counts(devices: int, rng: np.random.Generator) -> np.ndarray:
    """Per-device tweet counts: MIN_SAMPLES plus a lognormal matching the paper's mean and stdev."""
    table = PAPER_TABLE["sent140"]
    excess, stdev = table["mean"] - MIN_SAMPLES, table["stdev"]
    sigma2 = np.log1p((stdev / excess) ** 2)
    draws = rng.lognormal(np.log(excess) - sigma2 / 2, np.sqrt(sigma2), devices)
    return MIN_SAMPLES + np.rint(draws).astype(np.int64)


def build_standin(out, *, devices: int = PAPER_TABLE["sent140"]["devices"], vocab: int = 400_000, seed: int = 0):
    rng = np.random.default_rng(seed)
    counts = sample_counts(devices, rng)
    unk = vocab  # the real build's unknown-word row: last, all zeros
    rows = []
    for n in counts:
        ids = np.full((n, MAX_WORDS), unk, np.int32)
        lengths = rng.integers(5, MAX_WORDS + 1, n)
        words = rng.integers(0, vocab, (n, MAX_WORDS), dtype=np.int32)
        mask = np.arange(MAX_WORDS) < lengths[:, None]
        ids[mask] = words[mask]
        rows.append((ids, rng.integers(0, 2, n).astype(np.int64)))
    embedding = np.empty((vocab + 1, DIM), np.float32)
    rng.standard_normal(out=embedding[:vocab], dtype=np.float32)
    embedding[:vocab] *= 0.4  # about GloVe 6B 300-d's spread
    embedding[vocab] = 0.0
    parts = []
    for n in counts:
        train = int(np.floor(TRAIN_FRACTION * n))
        parts.append((np.arange(train), np.arange(train, n)))
    provenance = dict(generator="benchmarks/sent140_standin.py", stand_in=True, seed=seed, vocab_size=vocab,
                      unk_index=unk, max_words=MAX_WORDS, dim=DIM, paper_table="sent140",
                      note="random values of the real build's shapes: for timing only, its curves mean nothing")
    write_partition(out, name="sent140", kind="sent140", num_classes=2,
                    clients=[f"standin_{k:04d}" for k in range(devices)], parts=parts, rows_of=rows.__getitem__,
                    feature_shape=(MAX_WORDS,), x_dtype=np.int32, provenance=provenance,
                    extras=dict(embedding=embedding))
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--devices", type=int, default=PAPER_TABLE["sent140"]["devices"])
    parser.add_argument("--vocab", type=int, default=400_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    counts = build_standin(args.out, devices=args.devices, vocab=args.vocab, seed=args.seed)
    print(f"Sent140 STAND-IN (random values of the real shapes: its time is real, its curve is not): {args.out}, "
          f"{len(counts)} devices, {int(counts.sum())} tweets ({counts.mean():.0f} +- {counts.std():.0f} a device, "
          f"{counts.min()}-{counts.max()}), {MAX_WORDS} ids a tweet, embedding {args.vocab + 1} x {DIM}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
