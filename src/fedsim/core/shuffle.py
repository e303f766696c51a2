"""fedsim's mini-batch shuffle: the batch plans of all of a round's devices in one compiled call.

Every number is a pure function of its key: no generator state runs from one device, epoch or
round to the next, so a device's plan does not depend on which other devices train with it, nor
in which order. The stream, named STREAM (a run records it as `shuffle_stream`), in full; all
arithmetic on unsigned 64-bit words, modulo 2^64:

    GAMMA = 0x9E3779B97F4A7C15
    mix(z):  z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31
             (SplitMix64's output function, a bijection of 64-bit words)
    epoch key    k = h_5, where h_0 = GAMMA and h_t = mix(h_{t-1} XOR w_t) for the words
                 (w_1, ..., w_5) = (seed, round, device, SHUFFLE_STREAM, epoch); SHUFFLE_STREAM = 1, device:
                 its index in the dataset, epoch: 0, 1, ... within the round
    draw at c    mix(k + c * GAMMA): SplitMix64's c-th output from state k; distinct counters c give
                 distinct draws
    word i       of positions i = 1, ..., n - 1: the top 32 bits of the draw at c = ceil(i / 2) for odd i,
                 its low 32 bits for even i
    j_i          uniform in [0, i], by Lemire's method with rejection (exact, no bias): m = i + 1,
                 p = word_i * m; while (p mod 2^32) < (2^32 - m) mod m, retry r = 1, 2, ... takes
                 p = (top 32 bits of the draw at c = i * 2^32 + r) * m; then j_i = p >> 32
                 (a retry happens with chance below m / 2^32: none in most runs)
    order        inside-out Fisher-Yates: order[0] = 0; for i = 1, ..., n - 1:
                 order[i] = order[j_i]; order[j_i] = i

Epoch e of a device with n samples visits its rows in the order drawn with epoch key e, in
ceil(n / B) batches of B, the last one holding the remainder and padded. A plan of E epochs is
epochs 0 to E - 1; a plan of a fixed number of steps (Scaffnew) is the first batches of epochs
0, 1, ... (the same numbers). Lemire's method on 32-bit words allows n <= 2^32 samples a device.

Compiled code is cached beside this file, as fedsim.core.kernel's.
"""

from __future__ import annotations

import numba
import numpy as np

STREAM = "splitmix64-lemire-fisher-yates-1"  # what a run records; change it whenever the numbers change
SHUFFLE_STREAM = 1  # the key's stream word: keeps these draws apart from any other keyed by (seed, round, device)

GAMMA = np.uint64(0x9E3779B97F4A7C15)
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)
LOW32 = np.uint64(0xFFFFFFFF)
TWO32 = np.uint64(1 << 32)
# numba turns arithmetic mixing uint64 with int64 into float64: every word below stays uint64
S27, S30, S31, S32 = np.uint64(27), np.uint64(30), np.uint64(31), np.uint64(32)
ONE, TWO = np.uint64(1), np.uint64(2)


@numba.njit(cache=True, nogil=True)
def _mix(z):  # pragma: no cover (compiled)
    z = (z ^ (z >> S30)) * MIX1
    z = (z ^ (z >> S27)) * MIX2
    return z ^ (z >> S31)


@numba.njit(cache=True, nogil=True)
def _epoch_key(seed, round_, device, epoch):  # pragma: no cover (compiled)
    h = _mix(GAMMA ^ seed)
    h = _mix(h ^ round_)
    h = _mix(h ^ device)
    h = _mix(h ^ np.uint64(SHUFFLE_STREAM))
    return _mix(h ^ epoch)


@numba.njit(cache=True, nogil=True)
def _below(word, i, key):  # pragma: no cover (compiled)
    """j_i: a uniform integer in [0, i] from the 32-bit `word`, Lemire's multiply-shift; the rare
    product that would bias it is redrawn at position i's own counters (the docstring's retries)."""
    m = i + ONE
    p = word * m
    if (p & LOW32) < m:  # only then can it be rejected: compute the threshold (a division) only here
        threshold = (TWO32 - m) % m
        retry = np.uint64(0)
        while (p & LOW32) < threshold:
            retry += ONE
            p = (_mix(key + ((i << S32) + retry) * GAMMA) >> S32) * m
    return p >> S32


@numba.njit(cache=True, nogil=True)
def _place(out, i, word, key, offset):  # pragma: no cover (compiled)
    """Inside-out Fisher-Yates' step i: out[i] = out[j_i]; out[j_i] = offset + i. When j_i == i it
    reads the slot it then writes: still a permutation."""
    j = _below(word, i, key)
    out[i] = out[j]
    out[j] = offset + np.int64(i)


@numba.njit(cache=True, nogil=True)
def _shuffle_into(out, at, n, key, offset):  # pragma: no cover (compiled)
    """out[at:at + n] = offset + the order that `key` draws: positions 1, 2 from the draw at c = 1, 3,
    4 from c = 2, ... (unsigned indices: numba then skips its negative-index check, 1.25x here)."""
    view = out[at:at + n]
    view[0] = offset
    size, i, state = np.uint64(n), ONE, key
    while i + ONE < size:
        state += GAMMA  # the draw at c = (i + 1) / 2: a counter, no carried randomness
        draw = _mix(state)
        _place(view, i, draw >> S32, key, offset)
        _place(view, i + ONE, draw & LOW32, key, offset)
        i += TWO
    if i < size:  # n even: the last position takes the top half of one more draw
        _place(view, i, _mix(state + GAMMA) >> S32, key, offset)


@numba.njit(cache=True, nogil=True)
def _fill(out, start, stop, value):  # pragma: no cover (compiled)
    # a loop: numba's slice assignment costs seconds of compile
    for i in range(start, stop):
        out[i] = value


@numba.njit(cache=True, nogil=True)
def _device_plan(flat, start, slots, n, batch_size, offset, sentinel, seed, round_, device,  # pragma: no cover
                 scratch):
    """One device's plan into flat[start:start + slots]: whole epochs, the last one cut short by a
    fixed step count (shuffled in `scratch`, then its first slots copied)."""
    epoch_slots = -(-n // batch_size) * batch_size
    epoch, at, end = 0, start, start + slots
    if n == 0:  # no samples: every slot is padding
        _fill(flat, start, end, sentinel)
        return
    while at < end:
        key = _epoch_key(seed, round_, device, np.uint64(epoch))
        if at + n <= end:
            _shuffle_into(flat, at, n, key, offset)
        else:
            _shuffle_into(scratch, 0, n, key, offset)
            for i in range(end - at):
                flat[at + i] = scratch[i]
        _fill(flat, at + n, min(at + epoch_slots, end), sentinel)  # the remainder batch's padding
        epoch, at = epoch + 1, at + epoch_slots


@numba.njit(cache=True, nogil=True)
def _longest_first(steps):  # pragma: no cover (compiled)
    """Indices of `steps`, largest first, ties in index order: a stable bottom-up merge sort (numpy's
    argsort costs seconds of compile)."""
    n = steps.shape[0]
    order, other = np.empty(n, np.int64), np.empty(n, np.int64)
    for i in range(n):
        order[i] = i
    width = 1
    while width < n:
        for low in range(0, n, 2 * width):
            mid, high = min(low + width, n), min(low + 2 * width, n)
            i, j = low, mid
            for k in range(low, high):  # the right run's element only where strictly larger: stable
                if j < high and (i >= mid or steps[order[j]] > steps[order[i]]):
                    other[k] = order[j]
                    j += 1
                else:
                    other[k] = order[i]
                    i += 1
        order, other = other, order
        width *= 2
    return order


@numba.njit(cache=True, nogil=True)
def _stacked(offsets, positions, devices, epochs, fixed_steps, batch_size, seed, round_, sentinel):  # pragma: no cover
    count = positions.shape[0]
    sizes, steps = np.empty(count, np.int64), np.empty(count, np.int64)
    longest = 1
    for j in range(count):
        sizes[j] = offsets[positions[j] + 1] - offsets[positions[j]]
        if sizes[j] > 1 << 32:
            raise ValueError("a device of more than 2^32 samples: the shuffle's words are 32 bits")
        # E epochs of ceil(n / B) batches (fedsim.core.steps.local_steps; tests/test_shuffle.py), or fixed
        steps[j] = epochs * ((sizes[j] + batch_size - 1) // batch_size) if fixed_steps < 0 else fixed_steps
        longest = max(longest, sizes[j])
    order = _longest_first(steps)  # longest first; ties keep the callers' order
    first, ordered, total = np.empty(count, np.int64), np.empty(count, np.int64), 0
    for slot in range(count):
        first[slot], ordered[slot] = total, steps[order[slot]]
        total += ordered[slot]
    flat = np.empty(total * batch_size, dtype=np.int64)
    scratch = np.empty(longest, dtype=np.int64)
    for slot in range(count):
        j = order[slot]
        _device_plan(flat, first[slot] * batch_size, steps[j] * batch_size, sizes[j], batch_size,
                     offsets[positions[j]], sentinel, seed, round_, np.uint64(devices[j]), scratch)
    return flat, first, ordered, order


def stacked_plans(offsets: np.ndarray, positions: np.ndarray, devices: np.ndarray, epochs: int,
                  fixed_steps: int | None, batch_size: int, seed: int, round_: int, sentinel: int):
    """Devices' batch plans stacked longest first: (rows, first, steps, order), rows (total steps,
    batch_size) with device order[s]'s steps[s] steps at rows first[s]:first[s] + steps[s].

    Device j owns rows offsets[positions[j]]:offsets[positions[j] + 1] (int64 arrays), devices[j]
    is its index in the dataset (its key); E epochs each, or `fixed_steps` steps; padding slots
    hold `sentinel`. One compiled call (a round's plans cost tens of microseconds: no numpy
    calls around it).
    """
    steps = -1 if fixed_steps is None else fixed_steps  # -1: E epochs
    flat, first, steps, order = _stacked(offsets, positions, devices, np.int64(epochs), np.int64(steps),
                                         np.int64(batch_size), np.uint64(seed), np.uint64(round_), np.int64(sentinel))
    return flat.reshape(-1, batch_size), first, steps, order


def stream_of(rng: str) -> str:
    """The mini-batch stream of a run with setting `rng`: this module's, or the authors' (fedsim.core.authors)."""
    return "authors" if rng == "authors" else STREAM


def warm_up() -> None:
    """Compile (or load from the cache) now: a process that forks jobs (fedsim.warm) then hands
    them compiled code."""
    words = np.array([0, 3], dtype=np.int64)
    stacked_plans(words, words[:1], words[:1], 1, None, 2, 0, 0, -1)
