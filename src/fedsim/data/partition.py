"""Dirichlet label partitions: a pooled labelled set dealt to N devices, as the papers after FedDANE
draw non-IID image clients (FedDyn, FedExP, NIID-Bench). The partition is numpy only; write_dirichlet
turns a dataset file's rows into a partitioned dataset file.

Two schemes (SCHEMES), both seeded, each random draw from a stream of its own (STREAMS):

- per_class: each class over the devices, as flwr-datasets' DirichletPartitioner (after Yurochkin et
  al. 2019's code). For each class c in label order, proportions p ~ Dir(alpha, ..., alpha) over the
  N devices; with self_balancing, a device already holding more than the mean M / N samples (M: the
  pool) gets none of c (its p set to 0, the others renormalised); c's samples are cut at
  floor(cumsum(p) * n_c). Where the smallest device ends with fewer than min_partition_size samples
  the whole draw is repeated, at most max_retries times; then the partition is refused. Device sizes
  vary, the more the smaller alpha is.
- per_device: each device over the classes (Hsu, Qi and Brown 2019). Device d's class mix
  q_d ~ Dir(alpha * prior), the prior being the pool's class frequencies; every device gets
  floor(M / N) samples (the remainder goes to none). The samples are dealt one at a time, the
  devices' turns in a seeded random order, each turn taking a class drawn from q_d among the
  classes with samples left (q_d renormalised over them) and that class's next sample.

Where this differs from flwr-datasets: a class's samples are shuffled before they are cut (flwr cuts
them in the dataset's order), so a pool ordered by writer does not give a device one writer's images
of a class. And a draw whose devices over the mean take every proportion (possible when alpha is so
small that the others' proportions underflow to 0) keeps the unbalanced proportions rather than
dividing by zero.

Bad settings are one-line ValueErrors before any draw (check_settings): alpha <= 0, an unknown
scheme, more devices than the pool allows (per_class: N > M or N x min_partition_size > M; per_device:
floor(M / N) < min_partition_size).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SCHEMES = ("per_class", "per_device")
# The settings besides alpha, the device count and the pool, at flwr-datasets' defaults where it has
# them, by the names of the config's keys and of `fedsim partition-dirichlet`'s options (both take
# their defaults from here). train_fraction: LEAF's FEMNIST split (-t sample --tf 0.9).
# repeats: a sample (its x) the pool holds more than once is dealt once (drop: its first row kept), or
# every time (keep: an image may then be a training row of one device and a test row of another).
DEFAULTS = {"scheme": "per_class", "min_partition_size": 10, "self_balancing": True, "max_retries": 10,
            "train_fraction": 0.9, "seed": 0, "repeats": "drop"}
REPEATS = ("drop", "keep")
# spawn keys of the random streams (changing one changes the built files)
STREAMS = dict(class_order=0, proportions=1, device_mixes=2, dealing=3, device_order=4, split=5)


@dataclass
class Partition:
    """Which pool samples each device holds, and how the partition was reached."""
    devices: list[np.ndarray]  # pool indices per device, in a seeded random order
    draws: int                 # Dirichlet draws of the whole partition (per_class: 1 + the retries it took)
    unused: int                # pool samples no device holds (per_device: M mod N)
    classes: np.ndarray        # the pool's classes, in label order
    # per_class: (classes, devices), each class's proportions over the devices as cut (balanced);
    # per_device: (devices, classes), each device's class mix q_d as drawn
    proportions: np.ndarray


def stream(seed, purpose):
    """The Generator of one purpose's draws (STREAMS), independent of every other purpose's."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(STREAMS[purpose],)))


def check_settings(samples, devices, alpha, *, scheme, min_partition_size, max_retries=0):
    """Refuse, in one line naming the setting, what no draw can satisfy."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme: expected one of {', '.join(SCHEMES)}, got {scheme!r}")
    if not (np.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha: must be a number above 0, got {alpha!r}")
    if devices < 1:
        raise ValueError(f"devices: must be at least 1, got {devices}")
    if min_partition_size < 1 or max_retries < 0:
        raise ValueError(f"min_partition_size must be at least 1 and max_retries at least 0, got "
                         f"{min_partition_size} and {max_retries}")
    if devices > samples:
        raise ValueError(f"devices: {devices} devices, but the pool holds only {samples} samples")
    if scheme == "per_device" and samples // devices < min_partition_size:
        raise ValueError(f"devices: {devices} equal devices of a {samples}-sample pool hold {samples // devices} "
                         f"samples each, fewer than min_partition_size {min_partition_size}")
    if devices * min_partition_size > samples:
        raise ValueError(f"devices: {devices} devices of at least min_partition_size {min_partition_size} samples "
                         f"need {devices * min_partition_size}, but the pool holds only {samples}")


def dirichlet_partition(labels, devices, alpha, *, scheme=DEFAULTS["scheme"],
                        min_partition_size=DEFAULTS["min_partition_size"], self_balancing=DEFAULTS["self_balancing"],
                        max_retries=DEFAULTS["max_retries"], seed=DEFAULTS["seed"]) -> Partition:
    """Deal the samples whose classes are `labels` (1-D integers) to `devices` devices (module docstring).

    self_balancing and max_retries concern per_class only.
    """
    labels = np.asarray(labels)
    check_settings(len(labels), devices, alpha, scheme=scheme, min_partition_size=min_partition_size,
                   max_retries=max_retries)
    classes = np.unique(labels)
    order = stream(seed, "class_order")
    members = [order.permutation(np.flatnonzero(labels == c)) for c in classes]
    if scheme == "per_class":
        parts, proportions, draws = _per_class(members, devices, alpha, min_partition_size, self_balancing,
                                               max_retries, seed)
    else:
        (parts, proportions), draws = _per_device(members, devices, alpha, seed), 1
    shuffle = stream(seed, "device_order")
    parts = [shuffle.permutation(p) for p in parts]
    return Partition(parts, draws, len(labels) - sum(map(len, parts)), classes, proportions)


def _per_class(members, devices, alpha, min_size, self_balancing, max_retries, seed):
    """per_class: ([pool indices per device], the proportions cut, draws taken); a ValueError after
    max_retries + 1 draws that all left some device under min_size."""
    draw = stream(seed, "proportions")
    mean = sum(map(len, members)) / devices
    for attempt in range(max_retries + 1):
        parts, held = [[] for _ in range(devices)], np.zeros(devices, np.int64)
        proportions = np.empty((len(members), devices))
        for c, samples in enumerate(members):
            p = draw.dirichlet(np.full(devices, float(alpha)))
            if self_balancing:
                p = _balanced(p, held > mean)
            proportions[c] = p
            cuts = (np.cumsum(p) * len(samples)).astype(np.int64)[:-1]
            for device, chunk in enumerate(np.split(samples, cuts)):
                parts[device].append(chunk)
                held[device] += len(chunk)
        if held.min() >= min_size:
            return [np.concatenate(p) for p in parts], proportions, attempt + 1
    raise ValueError(f"min_partition_size: after {max_retries + 1} draws (max_retries {max_retries}) the smallest "
                     f"of {devices} devices still held {held.min()} samples, fewer than {min_size}: raise alpha, or "
                     "lower devices or min_partition_size")


def _balanced(p, full):
    """p without the devices that already hold more than the mean, renormalised; p itself where
    nothing would be left (the others' proportions underflowed to 0)."""
    kept = np.where(full, 0.0, p)
    total = kept.sum()
    return kept / total if total > 0 else p


def _per_device(members, devices, alpha, seed):
    """per_device: ([pool indices per device], floor(M / N) each, dealt one sample at a time; the
    devices' class mixes as drawn)."""
    left = np.array([len(m) for m in members])
    size = int(left.sum()) // devices
    mixes = stream(seed, "device_mixes").dirichlet(alpha * left / left.sum(), size=devices)
    weights = mixes.copy()
    deal = stream(seed, "dealing")
    turns = deal.permutation(np.repeat(np.arange(devices), size))
    spins = deal.random(len(turns))
    cum = np.cumsum(weights, axis=1)
    taken = np.zeros(len(members), np.int64)
    parts, filled = np.empty((devices, size), np.int64), np.zeros(devices, np.int64)
    for device, spin in zip(turns, spins):
        c = _class_of(weights[device], cum[device], left, spin)
        parts[device, filled[device]] = members[c][taken[c]]
        filled[device] += 1
        taken[c] += 1
        left[c] -= 1
        if left[c] == 0:  # no device can draw it any more
            weights[:, c] = 0.0
            cum = np.cumsum(weights, axis=1)
    return list(parts), mixes


def _class_of(weights, cum, left, spin):
    """The class a turn takes: drawn by `weights` (their cumulative sums `cum`) among the classes with
    samples left; where the device's mix puts nothing on those, by the samples left of each."""
    if cum[-1] <= 0:
        weights, cum = left.astype(np.float64), np.cumsum(left, dtype=np.float64)
    c = int(np.searchsorted(cum, spin * cum[-1], side="right"))
    return c if c < len(cum) else int(np.flatnonzero(weights)[-1])  # spin * total rounded up to total


def split_devices(sizes, train_fraction, seed):
    """[(train positions, test positions)] of each device's samples by LEAF's per-user rule
    (leaf.niid.split_by_sample), seeded; a device of one sample keeps it for training."""
    from .leaf.niid import split_by_sample

    rng = stream(seed, "split")
    return [split_by_sample(n, train_fraction, rng) or (np.arange(n), np.arange(0)) for n in sizes]


def first_rows(x: np.ndarray) -> np.ndarray:
    """The rows of x, in order, that no earlier row equals bit for bit."""
    flat = np.ascontiguousarray(x.reshape(len(x), -1))
    _, first = np.unique(flat.view(np.dtype((np.void, flat.dtype.itemsize * flat.shape[1]))), return_index=True)
    return np.sort(first)


def write_dirichlet(pool_path, out_path, *, devices, alpha, name=None, scheme=DEFAULTS["scheme"],
                    min_partition_size=DEFAULTS["min_partition_size"], self_balancing=DEFAULTS["self_balancing"],
                    max_retries=DEFAULTS["max_retries"], train_fraction=DEFAULTS["train_fraction"],
                    seed=DEFAULTS["seed"], repeats=DEFAULTS["repeats"]) -> dict:
    """Partition every train and test row of the dataset file `pool_path` among `devices` devices,
    split each device's samples train / test (split_devices), and write the result; returns its
    provenance. The file's kind and classes are the pool's; a sample the pool repeats is dealt once
    unless `repeats` is "keep"."""
    if repeats not in REPEATS:
        raise ValueError(f"repeats: expected one of {', '.join(REPEATS)}, got {repeats!r}")
    from .format import FederatedDataset, first_non_finite_row  # here: the config check reads DEFAULTS without h5py
    from .leaf.common import write_partition

    with FederatedDataset(pool_path) as pool:
        if "embedding" in pool.extras:  # its token ids index its own rows of an embedding (Sent140's GloVe)
            raise ValueError(f"{pool_path}: a {pool.kind} dataset's token ids need its embedding; partition an "
                             "image or feature dataset")
        check_settings(int(pool.train_sizes.sum() + pool.test_sizes.sum()), devices, alpha, scheme=scheme,
                       min_partition_size=min_partition_size, max_retries=max_retries)  # before reading rows
        x, y = (np.concatenate(a) for a in zip(*((d.x, d.y) for d in map(pool.load, ("train", "test")))))
        rows = len(y)
        bad = first_non_finite_row(x)  # a file written before the importers refused them
        if bad is not None:
            raise ValueError(f"{pool_path}: the pool's row {bad} (train and test rows in turn) holds "
                             f"{x[bad][~np.isfinite(x[bad])][0]}: every value must be finite")
        if repeats == "drop":
            x, y = (a[first_rows(x)] for a in (x, y))
            check_settings(len(y), devices, alpha, scheme=scheme, min_partition_size=min_partition_size,
                           max_retries=max_retries)
        about = dict(path=str(pool_path), name=pool.name, kind=pool.kind, samples=rows, repeats=repeats,
                     repeated_rows_dropped=rows - len(y),
                     train_samples=int(pool.train_sizes.sum()), test_samples=int(pool.test_sizes.sum()),
                     provenance=pool.attrs["provenance"])
        kind, classes = pool.kind, int(pool.num_classes)
    part = dirichlet_partition(y, devices, alpha, scheme=scheme, min_partition_size=min_partition_size,
                               self_balancing=self_balancing, max_retries=max_retries, seed=seed)
    splits = split_devices([len(p) for p in part.devices], train_fraction, seed)
    provenance = dict(generator="fedsim.partition", scheme=scheme, alpha=alpha, devices=devices, seed=seed,
                      min_partition_size=min_partition_size, max_retries=max_retries, draws=part.draws,
                      self_balancing=self_balancing if scheme == "per_class" else None,
                      train_fraction=train_fraction, unused_samples=part.unused, streams="per purpose",
                      test_rows="the pool's train and test rows together, each device's split by LEAF's rule",
                      pool=about)
    write_partition(out_path, name=name or f"dirichlet_{scheme}", kind=kind, num_classes=classes,
                    clients=[f"d_{k:05d}" for k in range(devices)], parts=splits,
                    rows_of=lambda k: (x[part.devices[k]], y[part.devices[k]]), feature_shape=x.shape[1:],
                    x_dtype=x.dtype, provenance=provenance)
    return provenance
