"""Synthetic(alpha, beta) federated data of the FedProx paper (Li et al., 2020, Sec. 5.1).

Same distribution as the reference generator (litian96/FedProx, data/synthetic_*/generate_*.py), drawn
from one np.random.default_rng(seed) in this fixed order, so the data is a pure function of
(alpha, beta, iid, num_devices, num_features, num_classes, train_fraction, seed):

1. n (N,)         n_k = int(lognormal(mean=4, sigma=2)) + 50, all devices at once
2. iid:           W (d, C), b (C,) ~ N(0, 1), shared by all devices
   non-iid:       u (N,) ~ N(0, alpha); B (N,) ~ N(0, beta)          (alpha, beta are std devs)
3. per device k:  non-iid: v_k (d,) ~ N(B_k, 1); W_k (d, C) ~ N(u_k, 1); b_k (C,) ~ N(u_k, 1)
                  iid: v_k = 0, W_k = W, b_k = b
                  z (n_k, d) ~ N(0, 1); x = float32(v_k + sqrt(Sigma_jj) z), Sigma_jj = (j+1)^-1.2
                  y = argmax(x W_k + b_k)   (argmax of the softmax = argmax of the logits)
                  a permutation of the n_k rows; the first int(train_fraction n_k) are train, the rest test

Note: alpha never changes the data. u_k shifts all entries of W_k and b_k alike, adding u_k (sum_j x_j + 1)
to every logit of device k, which argmax ignores; device label rules differ only through the N(0, 1) part
of W_k, b_k. The reference generator has the same property; here, with the same seed, even the arrays match.

Scale: devices are generated one at a time and streamed to the file in blocks of about `block_rows`
rows (write_synthetic), so memory is bounded by the block and the largest device, not by N; for
N = 10^6 only the per-device metadata (sizes, offsets, ids) is held whole. generate_synthetic()
returns everything in memory and is meant for small N.
"""

import math

import numpy as np

from .keys import TRAIN_FRACTION, allows, expected

GENERATOR_VERSION = 1  # bump when the draw order changes: same seed, different data
# The generator's settings besides alpha, beta and iid, at the FedProx paper's values, by the names
# of the workflow config's `synthetic` keys and of `fedsim generate-synthetic`'s options: their
# defaults there are these (the config schema's are filled in by fedsim.planning.configcheck.load_schema).
DEFAULTS = {"devices": 30, "features": 60, "classes": 10, "train_fraction": 0.9, "seed": 0}

# The reference's device sizes: n_k = int(lognormal(SIZE_LOG_MEAN, SIZE_LOG_SIGMA)) + SIZE_FLOOR, and
# their mean, e^(mu + sigma^2 / 2) + floor (about 453; int() takes off less than 1), which the
# config check sizes a dataset by before it is built
SIZE_LOG_MEAN, SIZE_LOG_SIGMA, SIZE_FLOOR = 4.0, 2.0, 50
MEAN_SAMPLES = math.exp(SIZE_LOG_MEAN + SIZE_LOG_SIGMA ** 2 / 2) + SIZE_FLOOR


def device_sizes(rng: np.random.Generator, num_devices: int) -> np.ndarray:
    """The devices' sample counts, drawn from `rng` (its first draws of a dataset)."""
    return rng.lognormal(SIZE_LOG_MEAN, SIZE_LOG_SIGMA, num_devices).astype(np.int64) + SIZE_FLOOR


def synthetic_stream(*, alpha, beta, iid, num_devices=DEFAULTS["devices"], num_features=DEFAULTS["features"],
                     num_classes=DEFAULTS["classes"], seed=DEFAULTS["seed"], train_fraction=DEFAULTS["train_fraction"],
                     block_rows=1 << 20):
    """(header, blocks): header holds write_dataset_stream's metadata, blocks yields the rows."""
    if alpha < 0 or beta < 0 or (iid and (alpha or beta)):
        raise ValueError(f"alpha, beta: expected >= 0 (and 0 when iid), got {alpha}, {beta}")
    if min(num_devices, num_features, num_classes) < 1:
        raise ValueError("num_devices/num_features/num_classes must be >= 1")
    if not allows(TRAIN_FRACTION, train_fraction):
        raise ValueError(f"train_fraction: expected {expected(TRAIN_FRACTION)}, got {train_fraction}")
    d, C = num_features, num_classes
    rng = np.random.default_rng(seed)
    sizes = device_sizes(rng, num_devices)
    n_train = (train_fraction * sizes).astype(np.int64)  # == int(0.9 * n_k), truncation
    if iid:
        prior = rng.normal(0.0, 1.0, (d, C)), rng.normal(0.0, 1.0, C)
    else:
        prior = rng.normal(0.0, alpha, num_devices), rng.normal(0.0, beta, num_devices)
    header = dict(
        num_classes=C, feature_shape=(d,), x_dtype=np.float32,
        clients=[f"f_{k:05d}" for k in range(num_devices)],  # ids as in the reference files
        train_offsets=np.concatenate([[0], np.cumsum(n_train)]),
        test_offsets=np.concatenate([[0], np.cumsum(sizes - n_train)]),
        provenance=dict(generator="fedsim.synthetic", generator_version=GENERATOR_VERSION, alpha=alpha,
                        beta=beta, iid=bool(iid), num_devices=num_devices, num_features=d, num_classes=C,
                        seed=seed, train_fraction=train_fraction),
    )
    return header, _blocks(_devices(rng, sizes, iid, prior, d, C), n_train, block_rows)


def _devices(rng, sizes, iid, prior, d, C):
    """Yields each device's (x, y), shuffled, in device order."""
    scale = np.arange(1, d + 1) ** -0.6  # sqrt of Sigma_jj = (j+1)^-1.2
    for k, n in enumerate(sizes):
        if iid:
            v, (W, b) = 0.0, prior
        else:
            u, B = prior[0][k], prior[1][k]
            v, W, b = rng.normal(B, 1.0, d), rng.normal(u, 1.0, (d, C)), rng.normal(u, 1.0, C)
        x = (v + scale * rng.standard_normal((n, d))).astype(np.float32)
        y = np.argmax(x @ W + b, axis=1)  # labels from the stored float32 x, so they match the file exactly
        # rows are i.i.d., so the shuffle only mirrors the reference in picking which rows go to test
        perm = rng.permutation(n)
        yield x[perm], y[perm]


def _blocks(devices, n_train, block_rows):
    """Groups consecutive devices into (train_x, train_y, test_x, test_y) blocks of >= block_rows rows."""
    parts, rows = [], 0
    for (x, y), t in zip(devices, n_train):
        parts.append((x[:t], y[:t], x[t:], y[t:]))
        rows += len(x)
        if rows >= block_rows:
            yield tuple(np.concatenate(p) for p in zip(*parts))
            parts, rows = [], 0
    if parts:
        yield tuple(np.concatenate(p) for p in zip(*parts))


def generate_synthetic(*, alpha, beta, iid, num_devices=DEFAULTS["devices"], num_features=DEFAULTS["features"],
                       num_classes=DEFAULTS["classes"], seed=DEFAULTS["seed"],
                       train_fraction=DEFAULTS["train_fraction"]):
    """The whole dataset in memory: a dict of write_dataset's array arguments plus provenance."""
    header, blocks = synthetic_stream(alpha=alpha, beta=beta, iid=iid, num_devices=num_devices,
                                      num_features=num_features, num_classes=num_classes, seed=seed,
                                      train_fraction=train_fraction)
    train_x, train_y, test_x, test_y = (np.concatenate(p) for p in zip(*blocks))
    return dict(clients=header["clients"], train_x=train_x, train_y=train_y, train_offsets=header["train_offsets"],
                test_x=test_x, test_y=test_y, test_offsets=header["test_offsets"], provenance=header["provenance"])


def write_synthetic(path, *, name, chunk_rows=None, block_rows=1 << 20, **kwargs):
    """Generate Synthetic(alpha, beta) (kwargs as generate_synthetic) and stream it to `path`."""
    from .format import write_dataset_stream  # here: the config check reads DEFAULTS without h5py

    header, blocks = synthetic_stream(block_rows=block_rows, **kwargs)
    write_dataset_stream(path, name=name, kind="synthetic", blocks=blocks, chunk_rows=chunk_rows, **header)
