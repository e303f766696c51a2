"""fedsim's mini-batch stream (fedsim.core.shuffle): its definition, its shuffles, and the plans the
engines read from it."""

import hashlib
import itertools
from math import ceil
from pathlib import Path

import numpy as np
import pytest

from fedsim.core import kernel, shuffle
from fedsim.core.engine import SGDSettings, _stacked_plans, batch_plan
from fedsim.core.train import RunConfig, run

from tiny import SIZES, tiny_clients, tiny_dataset

WORD = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


# --- the module docstring's definition, in plain Python integers ----------------------------------

def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & WORD
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & WORD
    return z ^ (z >> 31)


def epoch_key(seed, round_, device, epoch):
    h = GAMMA
    for word in (seed, round_, device, shuffle.SHUFFLE_STREAM, epoch):
        h = mix(h ^ word)
    return h


def draw(key, counter):
    return mix((key + counter * GAMMA) & WORD)


def below(word, i, key):
    """j_i from position i's 32-bit word: Lemire's method, retries at counters i 2^32 + r."""
    m, retry = i + 1, 0
    p = word * m
    while p % (1 << 32) < ((1 << 32) - m) % m:
        retry += 1
        p = (draw(key, (i << 32) + retry) >> 32) * m
    return p >> 32


def epoch_order(key, n):
    order = [0] * n
    for i in range(1, n):
        u = draw(key, (i + 1) // 2)
        j = below(u >> 32 if i % 2 else u % (1 << 32), i, key)
        order[i] = order[j]
        order[j] = i
    return order


def reference_plan(size, epochs, batch_size, seed, round_, device):
    per_epoch = ceil(size / batch_size)
    plan = np.full((epochs, per_epoch * batch_size), -1, dtype=np.int64)
    for epoch in range(epochs):
        plan[epoch, :size] = epoch_order(epoch_key(seed, round_, device, epoch), size)
    return plan.reshape(-1, batch_size)


@pytest.mark.parametrize("shape", [(1, 1, 4), (9, 3, 4), (10, 20, 10), (95, 7, 10), (1234, 2, 50)])
def test_plans_are_the_documented_stream(shape):
    """The stream every run's results depend on, pinned against its definition written out apart."""
    size, epochs, batch_size = shape
    settings = SGDSettings(lr=0.1, epochs=epochs, batch_size=batch_size, seed=3)
    np.testing.assert_array_equal(batch_plan(size, settings, round_=5, device=2),
                                  reference_plan(size, epochs, batch_size, 3, 5, 2))


def test_a_rejected_word_is_redrawn_as_documented():
    """m = 3 (position 2): word 0 is the one rejected value; the retries come from the position's own
    counters, so the result differs from the rejected multiply-shift's 0 as the definition says."""
    key = epoch_key(3, 5, 2, 0)
    for word in (0, 1, (1 << 32) - 1, 1 << 31):
        assert shuffle._below(np.uint64(word), np.uint64(2), np.uint64(key)) == below(word, 2, key)
    assert below(0, 2, key) == (draw(key, (2 << 32) + 1) >> 32) * 3 >> 32


# --- shuffles ----------------------------------------------------------------------------------

def stacked(devices, settings, round_=4, fixed_steps=None, sizes=SIZES):
    """{device: its plan as _stacked_plans writes it, rows numbered from the device's first row}."""
    _, clients = tiny_clients(sizes)
    rows, first, steps, order = _stacked_plans(clients, devices, settings, round_, fixed_steps)
    plans = {}
    for j, f, s in zip(order, first, steps):
        device = int(np.asarray(devices)[j])
        block = rows[f:f + s]
        plans[device] = np.where(block == clients.sentinel, -1, block - clients.offsets[device])
    return plans


def test_every_epoch_is_a_permutation_of_the_devices_rows():
    settings = SGDSettings(lr=0.1, epochs=4, batch_size=4, seed=9)
    for device, plan in stacked(np.arange(len(SIZES)), settings).items():
        n = SIZES[device]
        epochs = plan.reshape(4, -1)
        for epoch in epochs:
            assert sorted(epoch[:n]) == list(range(n)) and (epoch[n:] == -1).all()


def test_a_devices_plan_is_a_function_of_seed_round_and_device_only():
    """The same device alone, among others or in another order: the same plan (no carried state)."""
    settings = SGDSettings(lr=0.1, epochs=3, batch_size=4, seed=9)
    alone = {d: stacked([d], settings)[d] for d in range(len(SIZES))}
    for devices in ([0, 1, 2, 3, 4, 5], [5, 3, 1], [4, 0, 2]):
        for device, plan in stacked(devices, settings).items():
            np.testing.assert_array_equal(plan, alone[device])
            np.testing.assert_array_equal(plan, batch_plan(SIZES[device], settings, 4, device))


def test_seeds_rounds_devices_and_epochs_draw_different_orders():
    def plan(seed=0, round_=0, device=0):
        return batch_plan(40, SGDSettings(lr=0.1, epochs=3, batch_size=10, seed=seed), round_, device)

    base = plan()
    epochs = base.reshape(3, -1)
    assert not np.array_equal(epochs[0], epochs[1]) and not np.array_equal(epochs[1], epochs[2])
    for other in (plan(seed=1), plan(round_=1), plan(device=1), plan(seed=2**63 + 5)):  # any 64-bit word
        assert not np.array_equal(other, base)


def test_orders_are_uniform_over_permutations():
    """Chi-square over all 120 orders of 5 rows, 24,000 devices' first epochs (200 each expected),
    and over the (epoch 0, epoch 1) pairs of first rows (25 cells): below the 1e-4 tail's critical
    values (185.1 at 119 degrees of freedom, 58.6 at 24). Deterministic: fixed keys. A Fisher-Yates
    drawing j from [0, n) instead of [0, i] gives 1,236 over the 120 orders (checked)."""
    n, devices = 5, 24_000
    settings = SGDSettings(lr=0.1, epochs=2, batch_size=n, seed=1)
    _, clients = tiny_clients([n] * devices, features=1)
    rows, first, _, order = _stacked_plans(clients, np.arange(devices), settings, 7)
    local = rows.reshape(devices, 2, n) - clients.offsets[order][:, None, None]  # (device, epoch, position)
    index = {p: i for i, p in enumerate(itertools.permutations(range(n)))}
    counts = np.bincount([index[tuple(p)] for p in local[:, 0]], minlength=120)
    expected = devices / 120
    assert ((counts - expected) ** 2 / expected).sum() < 185.1
    pairs = np.bincount(local[:, 0, 0] * n + local[:, 1, 0], minlength=n * n)
    expected = devices / (n * n)
    assert ((pairs - expected) ** 2 / expected).sum() < 58.6


@pytest.mark.parametrize("fixed_steps", [1, 2, 7, 11, 40])
def test_batch_plan_is_what_the_stacked_plans_hold(fixed_steps):
    """Both plans, and with a fixed step count the first batches of the same epochs (Scaffnew)."""
    settings = SGDSettings(lr=0.1, epochs=3, batch_size=4, seed=2)
    devices = [5, 0, 3, 4, 1]
    for device, plan in stacked(devices, settings, round_=6).items():
        np.testing.assert_array_equal(plan, batch_plan(SIZES[device], settings, 6, device))
    for device, plan in stacked(devices, settings, round_=6, fixed_steps=fixed_steps).items():
        cut = batch_plan(SIZES[device], settings, 6, device, steps=fixed_steps)
        np.testing.assert_array_equal(plan, cut)
        epochs = ceil(fixed_steps / ceil(SIZES[device] / 4))
        whole = batch_plan(SIZES[device], SGDSettings(lr=0.1, epochs=epochs, batch_size=4, seed=2), 6, device)
        np.testing.assert_array_equal(cut, whole[:fixed_steps])


def test_a_run_records_its_stream(tmp_path):
    data = tiny_dataset(tmp_path / "tiny.h5", devices=4)
    common = dict(data=data, method="fedavg", clients_per_round=2, epochs=1, batch_size=5, rounds=1)
    assert run(RunConfig(**common))[1]["shuffle_stream"] == shuffle.STREAM
    authors = RunConfig(**common, rng="authors", second_subset="same")
    assert run(authors)[1]["shuffle_stream"] == "authors"


def test_plan_lengths_are_fedsim_steps():
    """The compiled call counts E x ceil(n / B) steps itself (no numpy around it): fedsim.core.steps' count."""
    from fedsim.core.steps import local_steps

    sizes = np.array([0, 1, 9, 10, 11, 95, 1000])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    devices = np.arange(len(sizes))
    for epochs, batch_size in [(1, 1), (3, 10), (20, 7)]:
        _, _, steps, order = shuffle.stacked_plans(offsets, devices, devices, epochs, None, batch_size, 0, 0, -1)
        np.testing.assert_array_equal(steps[np.argsort(order)], local_steps(sizes, epochs, batch_size))


def test_kernel_names_the_shuffle_source_it_draws_with():
    """The kernel draws fedsim's batches inside its compiled call (kernel.local_sgd_shuffled), and
    numba's cache keys that machine code on kernel.py alone: an edit to shuffle.py must update
    kernel.SHUFFLE_SOURCE, so that the kernel recompiles."""
    digest = hashlib.sha256(Path(shuffle.__file__).read_bytes()).hexdigest()[:16]
    assert kernel.SHUFFLE_SOURCE == digest, f"kernel.SHUFFLE_SOURCE: set it to {digest!r} (shuffle changed)"
