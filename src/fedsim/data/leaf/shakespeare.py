"""Shakespeare (LEAF): users are (play, speaking role) pairs, samples are 80 characters -> the next one.

Input: Project Gutenberg e-book 100, January 1994 edition (1994-01-100.zip, member 100.txt), the text
LEAF's preprocess_shakespeare.py was written for: its hard-coded line numbers (end of the plays) only
fit that edition. The steps follow LEAF's behaviour, written anew:

1. split_into_plays: skip the table of contents and the sonnets (start 5 lines above the second
   "by William Shakespeare"), stop after line 124195; a play starts at each "by William Shakespeare"
   (its title is the first non-blank line 2-7 lines above); a role's speech starts on a line
   "  NAME. text" and continues on lines indented by 4 spaces. The Comedy of Errors is indented
   differently (no indentation; a line starting with '<' ends a speech; "ACT ..." is not a role).
   Role names are upper-cased; "plays" with fewer than 2 roles are dropped.
2. users: key = play + "_" + role with every run of non-word characters replaced by "_" (keys that
   collide are merged, as LEAF's per-user files are); roles with at most 2 speech lines are skipped.
3. samples: a user's lines joined with spaces (each line ended by "\n", then "\n" -> " " and runs of
   2+ spaces -> 1); sample i is text[i:i+80] -> text[i+80], for every i < len(text) - 80.
4. LEAF sampling (niid.leaf_partition), the paper's subset: -s niid --sf 0.2 -k 0 -t sample --tf 0.8.

On the 1994 text this gives 1,130 users and 4,226,206 samples (LEAF publishes 1,129 and 4,226,158: one
role of 48 samples fewer; LEAF's own scripts, run on this text, also give 1,130 and 4,226,206), and
the paper's sampling always keeps int(0.2 * 4,226,206) = 845,241 samples (seed 0: 250 devices), not the
143 devices / 517,106 samples of the FedProx paper's table.

Characters are stored as indices into ALPHABET, the 80 symbols of LEAF's model (language_utils.py);
x is uint8 (n, 80) (cast to int64/int32 for an embedding lookup), y int64. Characters outside ALPHABET
('|', '_', '*', '<' ... occur in the 1994 text, though never inside a speech) get OOV_INDEX.
"""

import re
from collections import defaultdict

import numpy as np

from .common import raw_format, read_member, sha256_bytes, write_partition
from .niid import counted_leaf_partition

ALPHABET = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
SEQ_LEN = 80
# LEAF's model maps an unknown character with str.find -> -1; as a label, its one-hot then lands on
# the last symbol ('}'), as an input TensorFlow's embedding lookup rejects or zeroes it. We use the
# label behaviour for both, which keeps the indices in range.
OOV_INDEX = len(ALPHABET) - 1
# sha256 of 100.txt of 1994-01-100.zip (the text LEAF's line numbers fit), after newline normalisation
TEXT_SHA256_1994 = "c5601d266987ac885ca96522b1b4e439feb7eca39f0fe1111f7342b63b6468f3"

AUTHOR = "by William Shakespeare"
LAST_LINE = 124195  # last line of the plays in the 1994 text (0-based, first line of the file dropped)
_ROLE = re.compile(r"^  ([a-zA-Z][a-zA-Z ]*)\. (.*)")
_CONT = re.compile(r"^    (.*)")
_ROLE_COE = re.compile(r"^([a-zA-Z][a-zA-Z ]*)\. (.*)")  # The Comedy of Errors lacks the indentation
_CONT_COE = re.compile(r"^(.*)")

PAPER = dict(fraction=0.2, min_samples=0, train_fraction=0.8)  # FedProx: -s niid --sf 0.2 -k 0 -t sample --tf 0.8


def read_text(path):
    """The e-book as str from 100.txt, 1994-01-100.zip or a .txt.gz, newlines normalised to \\n."""
    raw = read_member(path, "100.txt" if raw_format(path) == "zip" else None)
    # LEAF reads the file in text mode: universal newlines
    return raw.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def _title_above(lines, i):
    for k in range(2, 7):
        if lines[i - k].strip():
            return lines[i - k].strip()
    return lines[i - 7].strip()


def split_into_plays(text):
    """[(title, {ROLE: [speech lines]})] for every play with at least 2 roles."""
    lines = text.splitlines(keepends=True)[1:]
    marks = [i for i, line in enumerate(lines) if AUTHOR in line]
    start = marks[1] - 5 if len(marks) > 1 else 0
    lines = lines[start:]  # title lookups below index this slice, as LEAF's do
    plays, roles, role, coe = [], None, None, False
    for i, line in enumerate(lines[:LAST_LINE - start + 1]):
        if AUTHOR in line:
            title = _title_above(lines, i)
            roles, role, coe = defaultdict(list), None, title == "THE COMEDY OF ERRORS"
            plays.append((title, roles))
            continue
        if roles is None:
            continue
        m = (_ROLE_COE if coe else _ROLE).match(line)
        if m:
            name = m.group(1).upper()  # the text spells some roles in several casings
            role = None if coe and name.startswith("ACT ") else name
            if role:
                roles[role].append(m.group(2))
        elif role and (m := (_CONT_COE if coe else _CONT).match(line)):
            if coe and m.group(1).startswith("<"):
                role = None  # an editorial <<...>> notice ends the speech
            else:
                roles[role].append(m.group(1))
    return [(title, roles) for title, roles in plays if len(roles) > 1]


def user_key(play, role):
    return re.sub(r"\W+", "_", f"{play}_{role}".replace(" ", "_"))


def user_passages(plays):
    """{user key: passage} in sorted key order; roles with <= 2 speech lines are left out."""
    lines = defaultdict(list)
    for title, roles in plays:
        for role, speech in roles.items():
            if len(speech) > 2:  # LEAF wanted >= 1 train and >= 1 test line per role
                lines[user_key(title, role)].extend(speech)
    passages = {}
    for key in sorted(lines):
        text = "".join(s + "\n" for s in lines[key]).replace("\n", " ")
        passages[key] = re.sub(r" {2,}", " ", text)
    return passages


def encode(text):
    """Indices into ALPHABET (uint8); characters outside it -> OOV_INDEX."""
    table = np.full(256, OOV_INDEX, np.uint8)
    for i, c in enumerate(ALPHABET):
        table[ord(c)] = i
    codes = np.frombuffer(text.encode("latin-1", errors="replace"), np.uint8)
    return table[codes]


def count_oov(text):
    """How many characters of `text` lie outside ALPHABET (and are encoded as OOV_INDEX)."""
    return len(text) - sum(text.count(c) for c in ALPHABET)


def shakespeare_users(text, passages=None):
    """(user keys, encoded passages, sample counts) for every user with at least one sample."""
    passages = passages or user_passages(split_into_plays(text))
    users = [u for u, p in passages.items() if len(p) > SEQ_LEN]
    codes = [encode(passages[u]) for u in users]
    return users, codes, np.array([len(c) - SEQ_LEN for c in codes], np.int64)


def windows(codes):
    """All (x, y) samples of one user: x (n, 80) views into `codes`, y (n,) int64."""
    x = np.lib.stride_tricks.sliding_window_view(codes, SEQ_LEN)[:-1]
    return x, codes[SEQ_LEN:].astype(np.int64)


def build_shakespeare(raw_path, out_path, *, fraction=PAPER["fraction"], min_samples=PAPER["min_samples"],
                      train_fraction=PAPER["train_fraction"], seed=0, name="shakespeare", min_samples_rule="more_than"):
    """Parse the e-book, apply LEAF's sampling and write the dataset; returns its provenance.

    fraction=None keeps every user (LEAF's full dataset, then split by sample). min_samples_rule as
    Sent140's (LEAF's remove_users.py serves both); at the paper's -k 0 both rules keep the same users.
    """
    text = read_text(raw_path)
    passages = user_passages(split_into_plays(text))
    users, codes, sizes = shakespeare_users(text, passages)
    parts, counts = counted_leaf_partition(sizes, fraction=fraction, min_samples=min_samples,
                                           train_fraction=train_fraction, seed=seed, min_samples_rule=min_samples_rule)
    is_paper = (fraction, min_samples, train_fraction, min_samples_rule) == (*PAPER.values(), "more_than")
    sha = sha256_bytes(text.encode("utf-8"))
    provenance = dict(
        generator="fedsim.leaf.shakespeare", source="Project Gutenberg e-book 100 (1994-01-100.zip)",
        text_sha256=sha, text_is_1994_edition=sha == TEXT_SHA256_1994, alphabet=ALPHABET, oov_index=OOV_INDEX,
        oov_chars=sum(count_oov(passages[u]) for u in users),
        seq_len=SEQ_LEN, leaf_users=len(users), leaf_samples=int(sizes.sum()),
        sampling=dict(niid_fraction=fraction, min_samples=min_samples, min_samples_rule=min_samples_rule,
                      split="sample", train_fraction=train_fraction), seed=seed, counts=counts,
        paper_table="shakespeare" if is_paper else None)
    write_partition(out_path, name=name, kind="shakespeare", num_classes=len(ALPHABET),
                    clients=[users[p.user] for p in parts], parts=[(p.train, p.test) for p in parts],
                    rows_of=lambda k: windows(codes[parts[k].user]), feature_shape=(SEQ_LEN,),
                    x_dtype=np.uint8, provenance=provenance)
    return provenance
