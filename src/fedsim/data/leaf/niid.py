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


# LEAF's remove_users.py -k kept users with strictly more than k samples until its December 2019
# change, and k or more since. fedsim follows the older rule by default: the FedProx/FedDANE papers
# (2018-2019) built their data before the change.
MIN_SAMPLES_RULES = ("more_than", "at_least")


def remove_users(picked, min_samples, rule="more_than"):
    """LEAF remove_users.py -k: keeps users with more than (rule "more_than", LEAF before Dec 2019)
    or at least (rule "at_least", LEAF since) min_samples samples."""
    if rule not in MIN_SAMPLES_RULES:
        raise ValueError(f"min_samples_rule: expected one of {MIN_SAMPLES_RULES}, got {rule!r}")
    least = min_samples + 1 if rule == "more_than" else min_samples
    return [(u, pos) for u, pos in picked if len(pos) >= least]


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


def leaf_partition(sizes, **settings):
    """The whole `preprocess.sh -s niid --sf F -k K -t sample --tf T` chain on user sizes.

    Settings as counted_leaf_partition. Returns [UserPart] in LEAF's output order.
    """
    return counted_leaf_partition(sizes, **settings)[0]


def counted_leaf_partition(sizes, *, fraction=None, min_samples=None, train_fraction=0.9, seed=0,
                           min_samples_rule="more_than"):
    """leaf_partition and how many users and samples each step left: ([UserPart], counts).

    fraction=None skips sampling (all users, in input order); min_samples=None skips the -k filter.
    """
    rng = np.random.default_rng(seed)
    sizes = np.asarray(sizes, dtype=np.int64)
    if fraction is None:
        picked = [(u, np.arange(n)) for u, n in enumerate(sizes)]
    else:
        picked = sample_niid(sizes, fraction, rng)
    counts = dict(users=len(sizes), samples=int(sizes.sum()), sampled_users=len(picked),
                  sampled_samples=sum(len(pos) for _, pos in picked))
    if min_samples is not None:
        picked = remove_users(picked, min_samples, min_samples_rule)
    counts.update(enough_users=len(picked), enough_samples=sum(len(pos) for _, pos in picked))
    parts = []
    for u, pos in picked:
        split = split_by_sample(len(pos), train_fraction, rng)
        if split is not None:
            parts.append(UserPart(u, pos[split[0]], pos[split[1]]))
    counts.update(kept_users=len(parts), kept_samples=sum(len(p.train) + len(p.test) for p in parts))
    return parts, counts


def kept_line(name, counts, sampling):
    """One line: what LEAF's sampling kept of the raw users and samples, and why the rest went."""
    c, k = counts, sampling.get("min_samples")
    why = [f"{c['users'] - c['sampled_users']} users outside the {sampling['niid_fraction']:g} sample"
           if sampling.get("niid_fraction") is not None else None,
           f"{c['sampled_users'] - c['enough_users']} users with "
           f"{f'{k} or fewer' if sampling['min_samples_rule'] == 'more_than' else f'fewer than {k}'} samples "
           f"(LEAF's -k {k}, rule {sampling['min_samples_rule']})" if k is not None else None,
           f"{c['enough_users'] - c['kept_users']} users with under 2 samples (no train/test split)"]
    return (f"{name}: kept {c['kept_users']} of {c['users']} users and {c['kept_samples']} of {c['samples']} "
            f"samples; dropped " + ", ".join(w for w in why if w))
