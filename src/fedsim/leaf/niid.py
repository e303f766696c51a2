"""LEAF's sampling utilities (data/utils: sample.py --niid, remove_users.py, split_data.py --by_sample).

Each step works on per-user sample counts and returns index arrays, so the datasets' own rows are
touched only once, when the kept rows are gathered. All randomness comes from one numpy Generator,
drawn in LEAF's order: user shuffle, then one train/test draw per kept user.

LEAF's own scripts use Python's `random` (sample.py unseeded); the *distribution* of what they do is
reproduced, not their exact draws.
"""

from dataclasses import dataclass

import numpy as np


@dataclass
class UserPart:
    """One kept user: positions into the user's original samples, in output order."""
    user: int            # index into the input user list
    train: np.ndarray    # int64 sample positions
    test: np.ndarray


def sample_niid(sizes, fraction, rng):
    """LEAF sample.py --niid: shuffle the users, take whole users until int(fraction * total) samples.

    The user that would overshoot is cut to the first `missing` of its samples, in random order
    (LEAF: random.sample(range(missing), missing)). Returns [(user, positions)] in the shuffled order.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction: expected a value in (0, 1], got {fraction}")
    target = int(fraction * int(sizes.sum()))
    picked, total = [], 0
    for u in rng.permutation(len(sizes)):
        if total >= target:
            break
        n = int(sizes[u])
        if total + n > target:
            n = target - total
            picked.append((int(u), rng.permutation(n)))
        else:
            picked.append((int(u), np.arange(n)))
        total += n
    return picked


def remove_users(picked, min_samples):
    """LEAF remove_users.py -k: keeps users with strictly MORE than min_samples samples."""
    return [(u, pos) for u, pos in picked if len(pos) > min_samples]


def split_by_sample(n, train_fraction, rng):
    """LEAF split_data.py --by_sample for one user of n samples: (train, test) positions, or None.

    Users with fewer than 2 samples are dropped; otherwise max(1, int(frac * n)) random samples go to
    train (exactly 1 when n == 2) and the rest to test, both kept in their original order.
    """
    if n < 2:
        return None
    n_train = 1 if n == 2 else max(1, int(train_fraction * n))
    mask = np.zeros(n, bool)
    mask[rng.choice(n, n_train, replace=False)] = True
    return np.flatnonzero(mask), np.flatnonzero(~mask)


def leaf_partition(sizes, *, fraction=None, min_samples=None, train_fraction=0.9, seed=0):
    """The whole `preprocess.sh -s niid --sf F -k K -t sample --tf T` chain on user sizes.

    fraction=None skips sampling (all users, in input order); min_samples=None skips the -k filter.
    Returns [UserPart] in LEAF's output order.
    """
    rng = np.random.default_rng(seed)
    sizes = np.asarray(sizes, dtype=np.int64)
    if fraction is None:
        picked = [(u, np.arange(n)) for u, n in enumerate(sizes)]
    else:
        picked = sample_niid(sizes, fraction, rng)
    if min_samples is not None:
        picked = remove_users(picked, min_samples)
    parts = []
    for u, pos in picked:
        split = split_by_sample(len(pos), train_fraction, rng)
        if split is not None:
            parts.append(UserPart(u, pos[split[0]], pos[split[1]]))
    return parts
