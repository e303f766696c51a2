"""MCLR local SGD compiled for one CPU core (numba): the CPU engine for MCLR datasets, the
per-device gradients that FedDANE's correction term and its successors need, and a round's metrics
(losses, accuracies, dissimilarities) in one call.

The batched torch engine spends most of a round in per-op overhead: ~17,000 small torch calls
of tens of microseconds each against ~0.1 us of arithmetic, and most of its sequential steps
have one or two devices left. Here a round is one compiled call: the devices one after another,
each SGD step a few blocks of vector code (fedsim.simd). It runs the same LocalProblem (mu,
correction) on the same batches as every engine (fedsim's shuffle it draws inside the call), so it
agrees with them to rounding (tests/test_engine.py).

One step of device k, batch b (real rows only; padding slots point at the sentinel row):
    g = (1/|b|) sum_i x_i (softmax(x_i W) - onehot(y_i))^T
    W <- W - lr (g + c_k + mu (W - W0))

Written against the core's FMA peak (benchmarks/round_time.py prints the share): the weights
are held transposed (a class a row, features in the vector lanes); the batch's logits are
computed four samples by two classes at a time in registers; the softmax runs with the samples
in the lanes (no horizontal reductions, exp as a vector polynomial); each class's gradient is
summed in eight vector registers and applied at once (no gradient array to zero and re-read).
Why each: scalar loops leave the lanes idle; array views in the inner loops cost reference
counts; a softmax a sample at a time is latency-bound (max, exp, sum, divide in a chain). What
each lever gained: docs/performance.md, "The kernel against the FMA peak".

Compiled code is cached beside this file (numba's `cache=True`; NUMBA_CACHE_DIR moves it), so
only the first job after an install or an edit compiles (a few seconds).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .. import average, simd
from . import shuffle


# numba's cache keys compiled code on the source file of each function alone, not on fedsim.simd
# whose operations are inlined here: an edit there would leave this file's cached machine code in
# use. So this names the simd source it was compiled with (its sha256, first 16 hex digits;
# tests/test_simd.py checks it): updating it with each simd edit changes this file, and numba
# recompiles it.
SIMD_SOURCE = "75e04a10570b82bf"
SHUFFLE_SOURCE = "c1b58ea20053ceaf"  # the same for fedsim.core.shuffle, whose batch orders _local_sgd draws

_JIT = dict(cache=True, nogil=True, fastmath={"reassoc", "contract"}, error_model="numpy")


@numba.njit(inline="always", **_JIT)
def _logits(x, rows, count, v, z, first):  # pragma: no cover (compiled)
    # z[c, i] = x[rows[i]] . v[c] for i < count and rows c >= first of v (an even number of each), in blocks of
    # four samples (then two, then one) against two classes, so that each vector loaded serves
    # several multiply-adds; each block's dot products reduced by shared shuffles and stored four
    # columns at a time (z has columns to spare: a block's columns past `count` get scratch values)
    # (one call site each, as each site costs compile time; inlined by numba: LLVM left _logits and
    # _softmax as calls, each passing some 30 words of array descriptors a step)
    last = count - 1
    for i in range(0, count, 4):  # where fewer are left, the last sample repeated
        if count - i > 2:
            _logits_block4(x, rows[i], rows[min(i + 1, last)], rows[min(i + 2, last)], rows[min(i + 3, last)], v, z, i,
                           first)
        else:
            _logits_block2(x, rows[i], rows[min(i + 1, last)], v, z, i, first)


@numba.njit(**_JIT)
def _logits_block4(x, r0, r1, r2, r3, v, z, i, first):  # pragma: no cover (compiled)
    zero = z.dtype.type(0)
    for c in range(first, v.shape[0], 2):
        a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = simd.splat(zero)
        for d in range(0, x.shape[1], simd.LANES):
            va, vb = simd.load(v, (c, d)), simd.load(v, (c + 1, d))
            x0, x1, x2, x3 = simd.load(x, (r0, d)), simd.load(x, (r1, d)), simd.load(x, (r2, d)), simd.load(x, (r3, d))
            a0, a1, a2, a3 = simd.fma(x0, va, a0), simd.fma(x1, va, a1), simd.fma(x2, va, a2), simd.fma(x3, va, a3)
            b0, b1, b2, b3 = simd.fma(x0, vb, b0), simd.fma(x1, vb, b1), simd.fma(x2, vb, b2), simd.fma(x3, vb, b3)
        simd.store_hsum4(z, (c, i), a0, a1, a2, a3)
        simd.store_hsum4(z, (c + 1, i), b0, b1, b2, b3)


@numba.njit(inline="always", **_JIT)
def _logits_block2(x, r0, r1, v, z, i, first):  # pragma: no cover (compiled)
    zero = z.dtype.type(0)
    for c in range(first, v.shape[0], 2):
        a0 = a1 = b0 = b1 = simd.splat(zero)
        for d in range(0, x.shape[1], simd.LANES):
            va, vb, x0, x1 = simd.load(v, (c, d)), simd.load(v, (c + 1, d)), simd.load(x, (r0, d)), simd.load(x, (r1, d))
            a0, a1, b0, b1 = simd.fma(x0, va, a0), simd.fma(x1, va, a1), simd.fma(x0, vb, b0), simd.fma(x1, vb, b1)
        simd.store_hsum4(z, (c, i), a0, a1, b0, b0)  # columns i + 2, i + 3: scratch
        simd.store_hsum4(z, (c + 1, i), b0, b1, a0, a0)


@numba.njit(**_JIT)
def _class_lanes(x, start, count, w, lanes, z):  # pragma: no cover (compiled)
    # z[c, i] = x[start + i, :F] . w[:, c] for i < count and c < lanes (a multiple of LANES, <= w.shape[1]), F =
    # w.shape[0]: eight samples by LANES classes at a time with the classes in the lanes (each feature
    # broadcast, no horizontal sums: 1.3x _logits' blocks over a device's rows), each block transposed
    # into z's columns (past `count`, scratch: the last row repeated)
    zero, last = z.dtype.type(0), start + count - 1
    for i in range(0, count, 8):
        r0, r1, r2, r3 = start + i, min(start + i + 1, last), min(start + i + 2, last), min(start + i + 3, last)
        r4, r5, r6, r7 = min(start + i + 4, last), min(start + i + 5, last), min(start + i + 6, last), \
            min(start + i + 7, last)
        for k in range(0, lanes, simd.LANES):
            a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = simd.splat(zero)
            for d in range(np.uint64(w.shape[0])):  # unsigned, as in _weighted_rows
                wd = simd.load(w, (d, k))
                a0, a1 = simd.fma(simd.splat(x[r0, d]), wd, a0), simd.fma(simd.splat(x[r1, d]), wd, a1)
                a2, a3 = simd.fma(simd.splat(x[r2, d]), wd, a2), simd.fma(simd.splat(x[r3, d]), wd, a3)
                a4, a5 = simd.fma(simd.splat(x[r4, d]), wd, a4), simd.fma(simd.splat(x[r5, d]), wd, a5)
                a6, a7 = simd.fma(simd.splat(x[r6, d]), wd, a6), simd.fma(simd.splat(x[r7, d]), wd, a7)
            simd.store_transposed(z, (k, i), a0, a1, a2, a3, a4, a5, a6, a7)


@numba.njit(**_JIT)
def _exp_shifted(z, s, classes, top):  # pragma: no cover (compiled)
    # samples s .. s + LANES: z[c] <- exp(z[c] - top) for c < classes; returns their sum (NaN stays
    # NaN, so a diverging run's probabilities, and then its weights, become NaN)
    total = simd.splat(z.dtype.type(0))
    for c in range(classes):
        e = simd.exp(simd.sub(simd.load(z, (c, s)), top))
        simd.store(z, (c, s), e)
        total = simd.add(total, e)
    return total


@numba.njit(**_JIT)
def _scale(z, s, classes, factor):  # pragma: no cover (compiled)
    for c in range(classes):
        simd.store(z, (c, s), simd.mul(simd.load(z, (c, s)), factor))


@numba.njit(inline="always", **_JIT)
def _softmax(z, count, classes):  # pragma: no cover (compiled)
    # columns i < count of z (a sample each, LANES at a time): softmax over the rows c < classes
    one = simd.splat(z.dtype.type(1))
    for s in range(0, count, simd.LANES):
        top = simd.load(z, (0, s))
        for c in range(1, classes):
            top = simd.max(top, simd.load(z, (c, s)))
        _scale(z, s, classes, simd.div(one, _exp_shifted(z, s, classes, top)))


@numba.njit(**_JIT)
def _weighted_rows(x, rows, count, p, c, d):  # pragma: no cover (compiled)
    # sum_i p[c, i] x[rows[i], d:d + TILE], in eight vector registers
    L, zero = simd.LANES, p.dtype.type(0)
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = simd.splat(zero)
    for i in range(np.uint64(count)):  # unsigned: numba then skips its negative-index checks (1.03x)
        r, pc = rows[i], simd.splat(p[c, i])
        a0, a1 = simd.fma(pc, simd.load(x, (r, d)), a0), simd.fma(pc, simd.load(x, (r, d + L)), a1)
        a2, a3 = simd.fma(pc, simd.load(x, (r, d + 2 * L)), a2), simd.fma(pc, simd.load(x, (r, d + 3 * L)), a3)
        a4, a5 = simd.fma(pc, simd.load(x, (r, d + 4 * L)), a4), simd.fma(pc, simd.load(x, (r, d + 5 * L)), a5)
        a6, a7 = simd.fma(pc, simd.load(x, (r, d + 6 * L)), a6), simd.fma(pc, simd.load(x, (r, d + 7 * L)), a7)
    return a0, a1, a2, a3, a4, a5, a6, a7


@numba.njit(**_JIT)
def _add_weighted_rows(x, rows, low, high, p, c, d, sums, j):  # pragma: no cover (compiled)
    # sums[j, c + k, d:d + HALF_TILE] += sum_i p[c + k, i] x[rows[i], d:d + HALF_TILE], i = low .. high, k = 0, 1
    # (from zeros where low = 0): two classes share each row's loads, and rows low .. high stay in L1 for
    # every class (per element the same sums in the same order as _weighted_rows over all rows at once)
    L = simd.LANES
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = simd.splat(p.dtype.type(0))
    if low > 0:
        a0, a1, a2, a3 = simd.load(sums, (j, c, d)), simd.load(sums, (j, c, d + L)), \
            simd.load(sums, (j, c, d + 2 * L)), simd.load(sums, (j, c, d + 3 * L))
        b0, b1, b2, b3 = simd.load(sums, (j, c + 1, d)), simd.load(sums, (j, c + 1, d + L)), \
            simd.load(sums, (j, c + 1, d + 2 * L)), simd.load(sums, (j, c + 1, d + 3 * L))
    for i in range(np.uint64(low), np.uint64(high)):
        r, pc, qc = rows[i], simd.splat(p[c, i]), simd.splat(p[c + 1, i])
        x0, x1 = simd.load(x, (r, d)), simd.load(x, (r, d + L))
        x2, x3 = simd.load(x, (r, d + 2 * L)), simd.load(x, (r, d + 3 * L))
        a0, a1, a2, a3 = simd.fma(pc, x0, a0), simd.fma(pc, x1, a1), simd.fma(pc, x2, a2), simd.fma(pc, x3, a3)
        b0, b1, b2, b3 = simd.fma(qc, x0, b0), simd.fma(qc, x1, b1), simd.fma(qc, x2, b2), simd.fma(qc, x3, b3)
    simd.store(sums, (j, c, d), a0)
    simd.store(sums, (j, c, d + L), a1)
    simd.store(sums, (j, c, d + 2 * L), a2)
    simd.store(sums, (j, c, d + 3 * L), a3)
    simd.store(sums, (j, c + 1, d), b0)
    simd.store(sums, (j, c + 1, d + L), b1)
    simd.store(sums, (j, c + 1, d + 2 * L), b2)
    simd.store(sums, (j, c + 1, d + 3 * L), b3)


@numba.njit(**_JIT)
def _add_weighted_rows5(x, rows, low, high, p, c, d, sums, j):  # pragma: no cover (compiled)
    # _add_weighted_rows for five classes c .. c + 4 and QUARTER_TILE features: ten accumulators, so
    # that each waits longer than an FMA's latency for its next (1.15x over two classes' eight)
    L = simd.LANES
    a0 = a1 = b0 = b1 = e0 = e1 = f0 = f1 = h0 = h1 = simd.splat(p.dtype.type(0))
    if low > 0:
        a0, a1, b0, b1 = simd.load(sums, (j, c, d)), simd.load(sums, (j, c, d + L)), \
            simd.load(sums, (j, c + 1, d)), simd.load(sums, (j, c + 1, d + L))
        e0, e1, f0, f1 = simd.load(sums, (j, c + 2, d)), simd.load(sums, (j, c + 2, d + L)), \
            simd.load(sums, (j, c + 3, d)), simd.load(sums, (j, c + 3, d + L))
        h0, h1 = simd.load(sums, (j, c + 4, d)), simd.load(sums, (j, c + 4, d + L))
    for i in range(np.uint64(low), np.uint64(high)):
        r = rows[i]
        x0, x1 = simd.load(x, (r, d)), simd.load(x, (r, d + L))
        pa, pb, pe = simd.splat(p[c, i]), simd.splat(p[c + 1, i]), simd.splat(p[c + 2, i])
        pf, ph = simd.splat(p[c + 3, i]), simd.splat(p[c + 4, i])
        a0, a1, b0, b1 = simd.fma(pa, x0, a0), simd.fma(pa, x1, a1), simd.fma(pb, x0, b0), simd.fma(pb, x1, b1)
        e0, e1, f0, f1 = simd.fma(pe, x0, e0), simd.fma(pe, x1, e1), simd.fma(pf, x0, f0), simd.fma(pf, x1, f1)
        h0, h1 = simd.fma(ph, x0, h0), simd.fma(ph, x1, h1)
    simd.store(sums, (j, c, d), a0)
    simd.store(sums, (j, c, d + L), a1)
    simd.store(sums, (j, c + 1, d), b0)
    simd.store(sums, (j, c + 1, d + L), b1)
    simd.store(sums, (j, c + 2, d), e0)
    simd.store(sums, (j, c + 2, d + L), e1)
    simd.store(sums, (j, c + 3, d), f0)
    simd.store(sums, (j, c + 3, d + L), f1)
    simd.store(sums, (j, c + 4, d), h0)
    simd.store(sums, (j, c + 4, d + L), h1)


@numba.njit(**_JIT)
def _add_device_grads(x, rows, count, p, sums, j):  # pragma: no cover (compiled)
    # sums[j] <- sum_i p[:, i] x[rows[i]]^T over i < count (zeros where count = 0), GRADIENT_ROWS rows at a
    # time (they stay in L1 for every class): classes five at a time, the rest (an even number) in pairs
    fives = p.shape[0] // 5
    if (p.shape[0] - 5 * fives) % 2:  # p has an even number of rows
        fives -= 1
    for low in range(0, max(count, 1), GRADIENT_ROWS):
        high = min(low + GRADIENT_ROWS, count)
        for c in range(0, 5 * fives, 5):
            for d in range(0, x.shape[1], QUARTER_TILE):
                _add_weighted_rows5(x, rows, low, high, p, c, d, sums, j)
        for c in range(5 * fives, p.shape[0], 2):
            for d in range(0, x.shape[1], HALF_TILE):
                _add_weighted_rows(x, rows, low, high, p, c, d, sums, j)


@numba.njit(**_JIT)
def _step_plain(v, c, d, g, lr, scale):  # pragma: no cover (compiled)
    # v[c, d:d + LANES] <- v - lr (g scale): _step_vector's bits when its pull is 0, without its loads
    simd.store(v, (c, d), simd.sub(simd.load(v, (c, d)), simd.mul(lr, simd.mul(g, scale))))


@numba.njit(**_JIT)
def _step_vector(v, v0, correction, k, c, d, g, lr, scale, mu):  # pragma: no cover (compiled)
    # v[c, d:d + LANES] <- v - lr (g scale + correction[k, c] + mu (v - v0))
    w = simd.load(v, (c, d))
    pull = simd.add(simd.load(correction, (k, c, d)), simd.mul(mu, simd.sub(w, simd.load(v0, (c, d)))))
    simd.store(v, (c, d), simd.sub(w, simd.mul(lr, simd.fma(g, scale, pull))))


@numba.njit(**_JIT)
def _columns(v, samples):  # pragma: no cover (compiled)
    # a (rows of v, samples rounded up to LANES, plus 4 for _logits' last block) scratch of zeros:
    # one column a sample
    return np.zeros((v.shape[0], -(-max(samples, 1) // simd.LANES) * simd.LANES + 4), dtype=v.dtype)


@numba.njit(**_JIT)
def _local_sgd(x, y, rows, first, steps, v0, correction, lr, mu, zero, anchor, out, classes,  # pragma: no cover
               starts, sizes, ids, seed, round_):
    # Weights transposed, V = W^T (classes, features), rows padded to an even count and features to
    # a multiple of TILE with zeros. A step: the batch's logits, a column a sample (_logits), their
    # softmax LANES samples at a time (_softmax), minus the one-hot label (or, with an `anchor`, minus
    # the softmax at the anchor: Mime's SVRG-style step, the one-hot terms cancel); then for each
    # class and TILE features the gradient in registers (_weighted_rows) and the update
    # (_step_vector). Summation orders are fixed (the same on a given machine, not torch's); NaN
    # and inf keep their meaning, so a diverging run shows as one.
    # A device's batches: rows[first[k] + step], or, where `ids` are given, drawn here as fedsim.core.shuffle
    # draws them (device k: rows starts[k] .. starts[k] + sizes[k], key (seed, round_, ids[k], epoch)), each
    # epoch's order into a scratch that stays in L1 (no plan array written, then read back).
    batch, sentinel, width = rows.shape[1], x.shape[0] - 1, x.shape[1]
    keyed = ids.shape[0] > 0
    longest = 1
    for k in range(sizes.shape[0]):
        longest = max(longest, sizes[k])
    order = np.empty(longest if keyed else 0, dtype=np.int64)
    z = _columns(v0, batch)
    q = _columns(anchor, batch)
    picked = np.empty(batch, dtype=np.int64)
    lr_, mu_ = simd.splat(lr), simd.splat(mu)
    plain = correction.shape[0] == 0 and mu == 0
    for k in range(first.shape[0]):
        v = out[k]
        for c in range(v0.shape[0]):  # a loop: numba's slice assignment costs seconds of compile
            for d in range(0, width, simd.LANES):
                simd.store(v, (c, d), simd.load(v0, (c, d)))
        n = sizes[k] if keyed else 0
        per_epoch = max(-(-n // batch), 1)  # n = 0: every step (fixed ones: Scaffnew's) is padding
        for step in range(steps[k]):
            count = 0
            if keyed:
                at = step % per_epoch * batch
                if at == 0 and n > 0:
                    epoch = np.uint64(step // per_epoch)
                    shuffle._shuffle_into(order, 0, n, shuffle._epoch_key(seed, round_, ids[k], epoch), starts[k])
                for i in range(min(batch, n - at)):
                    picked[count] = order[at + i]
                    count += 1
            else:
                base = first[k] + step
                for b in range(np.uint64(batch)):  # unsigned, as in _weighted_rows
                    if rows[base, b] != sentinel:  # padding slots contribute nothing
                        picked[count] = rows[base, b]
                        count += 1
            _logits(x, picked, count, v, z, 0)
            _softmax(z, count, classes)
            if anchor.shape[0]:
                _logits(x, picked, count, anchor, q, 0)
                _softmax(q, count, classes)
                for c in range(classes):
                    for i in range(count):
                        z[c, i] -= q[c, i]
            else:
                for i in range(np.uint64(count)):
                    z[y[picked[i]], i] -= 1
            scale = simd.splat(simd.like(1 / max(count, 1), zero))
            for c in range(classes):
                for d in range(0, width, TILE):
                    g = _weighted_rows(x, picked, count, z, c, d)
                    if plain:  # no correction, mu = 0
                        for at in range(8):  # unrolled by the compiler: g stays in registers
                            _step_plain(v, c, d + at * simd.LANES, g[at], lr_, scale)
                    else:
                        for at in range(8):
                            _step_vector(v, v0, correction, k, c, d + at * simd.LANES, g[at], lr_, scale, mu_)


@numba.njit(**_JIT)
def _device_stats(x, y, starts, stops, v, w, lanes, classes, loss, correct, grads):  # pragma: no cover (compiled)
    # Device j owns rows starts[j]:stops[j]: its summed cross-entropy (accumulated in float64), its
    # count of correct argmaxes (the first largest logit or first NaN, as torch's argmax) and, when
    # `grads` has a row per device, its summed gradient sum_i (softmax(x_i V^T) - onehot(y_i)) x_i,
    # as V is laid out. All of a device's logits first (a column a sample): the first `lanes` classes
    # by _class_lanes from w (the weights as features by classes; a multiple of LANES, 0 gives _logits'
    # bits for all), the rest by _logits; then LANES samples at a time their argmax, log-sum-exp and softmax,
    # then its gradient.
    zero, L = v.dtype.type(0), simd.LANES
    with_grads = grads.shape[0] > 0
    longest = 1
    for j in range(starts.shape[0]):
        longest = max(longest, stops[j] - starts[j])
    z = _columns(v, longest)
    rows = np.empty(z.shape[1], dtype=np.int64)
    top, norm, best = np.empty(L, dtype=v.dtype), np.empty(L, dtype=v.dtype), np.empty(L, dtype=v.dtype)
    one = simd.splat(simd.like(1, zero))
    for j in range(starts.shape[0]):
        count = stops[j] - starts[j]
        for i in range(count):
            rows[i] = starts[j] + i
        _class_lanes(x, starts[j], count, w, lanes, z)
        _logits(x, rows, count, v, z, lanes)
        total, hits, hit_lanes, product = 0.0, 0, simd.splat(zero), 1.0
        for s in range(0, count, L):
            high, index = simd.load(z, (0, s)), simd.splat(zero)
            for c in range(1, classes):
                high, index = simd.argmax_step(high, index, simd.load(z, (c, s)), c)
            if s + L <= count:  # LANES samples: their labels' logits and their hits by lane selects
                labels, picked = simd.load_as(y, starts[j] + s, zero), simd.splat(zero)
                for c in range(classes):
                    picked = simd.where_equal(labels, simd.splat(simd.like(c, zero)), simd.load(z, (c, s)), picked)
                hit_lanes = simd.add(hit_lanes, simd.where_equal(index, labels, one, simd.splat(zero)))
                simd.store(top, 0, simd.sub(high, picked))
                for i in range(L):
                    total += top[i]  # minus the label's logit; log-sum-exp below
            else:
                simd.store(best, 0, index)
                simd.store(top, 0, high)
                for i in range(s, count):
                    label = y[rows[i]]
                    total += top[i - s] - z[label, i]
                    hits += best[i - s] == label
            sums = _exp_shifted(z, s, classes, high)
            simd.store(norm, 0, sums)
            for i in range(s, min(s + L, count)):
                product *= norm[i - s]
            if s % LOG_SAMPLES == LOG_SAMPLES - L:
                total, product = total + math.log(product), 1.0
            if with_grads:
                _scale(z, s, classes, simd.div(one, sums))
        simd.store(best, 0, hit_lanes)
        for i in range(L):
            hits += int(best[i])
        loss[j], correct[j] = total + math.log(product), hits
        if with_grads:
            for i in range(np.uint64(count)):
                z[y[rows[i]], i] -= 1
            _add_device_grads(x, rows, count, z, grads, j)


@numba.njit(**_JIT)
def _evaluation(x, y, offsets, test_x, test_y, test_offsets, w, out):  # pragma: no cover (compiled)
    # out <- fedsim.core.metrics' six numbers at weights w (features, classes): both splits' per-device stats
    # (_device_stats), summed over devices and divided by the rows held; then the dissimilarities of
    # the devices' gradients. V, as _transposed makes it, built here: one numpy call fewer after the round.
    features, classes = w.shape
    v = np.zeros((classes + classes % 2, x.shape[1]), dtype=w.dtype)
    for c in range(classes):
        for f in range(features):
            v[c, f] = w[f, c]
    lanes = classes // simd.LANES * simd.LANES
    devices = offsets.shape[0] - 1
    loss, correct = np.empty(devices), np.empty(devices, dtype=np.int64)
    sums = np.empty((devices, v.shape[0], x.shape[1]), dtype=v.dtype)
    _device_stats(x, y, offsets[:-1], offsets[1:], v, w, lanes, classes, loss, correct, sums)
    test_devices = test_offsets.shape[0] - 1
    test_loss, test_correct = np.empty(test_devices), np.empty(test_devices, dtype=np.int64)
    _device_stats(test_x, test_y, test_offsets[:-1], test_offsets[1:], v, w, lanes, classes, test_loss,
                  test_correct, np.empty((0, v.shape[0], x.shape[1]), dtype=v.dtype))
    rows, test_rows = max(y.shape[0] - 1, 1), max(test_y.shape[0] - 1, 1)  # the padding row left out
    out[0], out[1] = loss.sum() / rows, correct.sum() / rows
    out[2], out[3] = test_loss.sum() / test_rows, test_correct.sum() / test_rows
    out[4], out[5] = _dissimilarities(offsets, sums)


@numba.njit(**_JIT)
def _dissimilarities(offsets, sums):  # pragma: no cover (compiled)
    # fedsim.core.metrics' two dissimilarities of the devices' mean gradients m_j = sums[j] / n_j, in float64,
    # with weights p_j = n_j / n: the plain mean of ||m_j - sum_k p_k m_k||^2, and sum_j p_j ||m_j||^2 /
    # ||sum_k p_k m_k||^2 (NaN where the latter's denominator is not > 0). Over whole padded rows: the
    # padding's sums are zeros (zero weights, zero feature columns), so they add nothing, and the loops
    # are whole vectors (4x the per-element loops over the real entries).
    devices = offsets.shape[0] - 1
    flat = sums.reshape(devices, sums.shape[1] * sums.shape[2])
    total = offsets[devices] - offsets[0]  # 0: no rows at all, and the shares NaN (0 / 0) as numpy's were
    mean = np.zeros(flat.shape[1])
    for j in range(devices):
        count = offsets[j + 1] - offsets[j]
        share, per = simd.splat(count / total), simd.splat(1.0 / max(count, 1))
        for k in range(0, flat.shape[1], simd.LANES):
            simd.store(mean, k, simd.fma(share, simd.mul(simd.load_float64(flat, (j, k)), per), simd.load(mean, k)))
    zero = simd.splat(0.0)
    mean_sq, spread, weighted = zero, zero, zero
    for k in range(0, flat.shape[1], simd.LANES):
        m = simd.load(mean, k)
        mean_sq = simd.fma(m, m, mean_sq)
    for j in range(devices):
        count = offsets[j + 1] - offsets[j]
        share, per = simd.splat(count / total), simd.splat(1.0 / max(count, 1))
        gap, square = zero, zero
        for k in range(0, flat.shape[1], simd.LANES):
            g = simd.mul(simd.load_float64(flat, (j, k)), per)
            d = simd.sub(g, simd.load(mean, k))
            gap, square = simd.fma(d, d, gap), simd.fma(g, g, square)
        spread, weighted = simd.add(spread, gap), simd.fma(share, square, weighted)
    partial = np.empty((3, simd.LANES))  # the three sums' lanes, added up below
    simd.store(partial, (0, 0), mean_sq)
    simd.store(partial, (1, 0), spread)
    simd.store(partial, (2, 0), weighted)
    mean_sq_, spread_, weighted_ = partial[0].sum(), partial[1].sum(), partial[2].sum()
    return spread_ / devices if devices > 0 else np.nan, weighted_ / mean_sq_ if mean_sq_ > 0 else np.nan


def evaluation(x: np.ndarray, y: np.ndarray, offsets: np.ndarray, test_x: np.ndarray, test_y: np.ndarray,
               test_offsets: np.ndarray, w: np.ndarray) -> list[float]:
    """fedsim.core.metrics.COLUMNS at weights w (features + 1, classes), in that order, in one call: the
    devices owning rows offsets[j]:offsets[j + 1] of x (as `padded` gives it, its last row the
    sentinel), and of test_x. (One call, not numpy over summed_grads: after a round of local SGD, with the
    caches full of its data, some forty small numpy calls took most of the metrics' time.)"""
    if test_x.shape[1] != x.shape[1]:  # the compiled call reads both with the same padded weights
        raise ValueError(f"the splits' padded widths differ: {x.shape[1]} and {test_x.shape[1]}")
    if w.shape[0] > x.shape[1]:  # the compiled call writes W^T into rows of that width, unchecked
        raise ValueError(f"weights with {w.shape[0]} rows, for x's rows {x.shape[1]} wide")
    out = np.empty(6)
    _evaluation(x, y, offsets, test_x, test_y, test_offsets, np.ascontiguousarray(w), out)
    return out.tolist()


def _transposed(w: np.ndarray, width: int, rows: int | None = None) -> np.ndarray:
    """w (features, classes) as the kernel holds weights: V = W^T, zero-padded to an even number
    of rows (or `rows`) and `width` columns."""
    features, classes = w.shape[-2:]
    v = np.zeros((*w.shape[:-2], classes + classes % 2 if rows is None else rows, width), dtype=w.dtype)
    v[..., :classes, :features] = np.swapaxes(w, -1, -2)
    return v


def summed_grads(x: np.ndarray, y: np.ndarray, starts: np.ndarray, stops: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per device (rows starts[j]:stops[j] of x, as `padded` gives it) at weights w (features + 1,
    classes): the summed loss gradient (devices, features + 1, classes), in w's dtype."""
    features, classes = w.shape
    v = _transposed(w, x.shape[1])
    devices = len(starts)
    grads = np.empty((devices, *v.shape), dtype=w.dtype)
    lanes = 0  # no lane classes: every class by _logits, the bits FedDANE's runs rest on
    _device_stats(x, y, np.asarray(starts, np.int64), np.asarray(stops, np.int64), v, np.ascontiguousarray(w), lanes,
                  classes, np.empty(devices), np.empty(devices, dtype=np.int64), grads)
    return grads[:, :classes, :features].transpose(0, 2, 1)


def warm_up(dtypes=(np.float32,)) -> None:
    """Compile (or load from the cache) the versions for `dtypes` now: a process that forks jobs
    (fedsim.warm) then hands them compiled code. Another dtype (a run's `dtype: float64`) compiles
    at its first call: after an install, the jobs that need no kernel (datasets) wait for this.
    The tests' session compiles float64 too, once, before its workers start (tests/conftest.py)."""
    for dtype in dtypes:
        x = padded(np.zeros((3, 2), dtype))
        local_sgd(x, np.zeros(3, np.int64), np.array([[0, 2]]), np.array([0]), np.array([1]), np.zeros((2, 2), dtype),
                  None, 0.1, 0.0)
        summed_grads(x, np.zeros(3, np.int64), np.array([0]), np.array([2]), np.zeros((2, 2), dtype))
        average.weighted_sum(np.ones(2, dtype), np.ones((2, 2), dtype))
        offsets = np.array([0, 2])
        evaluation(x, np.zeros(3, np.int64), offsets, x, np.zeros(3, np.int64), offsets, np.zeros((2, 2), dtype))


TILE = 8 * simd.LANES  # features a class's gradient keeps in registers: eight vectors
HALF_TILE = TILE // 2  # features of two classes' gradients kept in registers (_add_weighted_rows)
QUARTER_TILE = TILE // 4  # features of five classes' gradients kept in registers (_add_weighted_rows5)
LOG_SAMPLES = 32  # the metrics' log-sum-exp: one log of the product of this many normalisers, each in [1, classes]
# (a float64 holds classes ** 32 for classes up to 4e9); a log per 8 samples was a sixth of the stats' time
GRADIENT_ROWS = 64  # a device's rows summed a chunk at a time: the chunk stays in L1 (the gradient part 1.2-1.3x)
LANES = TILE  # feature columns padded to a multiple of this: whole tiles, no remainder loops


def padded_width(columns: int) -> int:
    """The columns of a row in the kernel's layout: `columns`, then zeros up to a multiple of LANES."""
    return -(-columns // LANES) * LANES


def padded(x: np.ndarray) -> np.ndarray:
    """x with zero columns appended up to padded_width (what local_sgd wants as x)."""
    out = np.zeros((x.shape[0], padded_width(x.shape[1])), dtype=x.dtype)
    out[:, :x.shape[1]] = x
    return out


def local_sgd(x: np.ndarray, y: np.ndarray, rows: np.ndarray, first: np.ndarray, steps: np.ndarray,
              w0: np.ndarray, correction: np.ndarray | None, lr: float, mu: float,
              anchor: np.ndarray | None = None) -> np.ndarray:
    """Local models (devices, features + 1, classes) of the devices whose steps are rows[first[k]:
    first[k] + steps[k]] (rows of x, as `padded` gives it; its last row is the zero sentinel); with an
    `anchor` model, each step's batch gradient minus the same batch's gradient there."""
    none = np.zeros(0, np.int64)
    return _run(x, y, rows, first, steps, w0, correction, lr, mu, anchor, none, none, none.astype(np.uint64), 0, 0)


def local_sgd_shuffled(x: np.ndarray, y: np.ndarray, starts: np.ndarray, sizes: np.ndarray, ids: np.ndarray,
                       steps: np.ndarray, batch_size: int, seed: int, round_: int, w0: np.ndarray,
                       correction: np.ndarray | None, lr: float, mu: float,
                       anchor: np.ndarray | None = None) -> np.ndarray:
    """local_sgd over the batches fedsim.core.shuffle.stacked_plans would give (the same bits), drawn inside
    the call: device k owns rows starts[k]:starts[k] + sizes[k] of x and is device ids[k] of the
    dataset (its key), and takes steps[k] steps of batch_size rows (E epochs, or a fixed count)."""
    rows = np.zeros((0, batch_size), np.int64)
    return _run(x, y, rows, np.zeros(len(ids), np.int64), steps, w0, correction, lr, mu, anchor,
                np.asarray(starts, np.int64), np.asarray(sizes, np.int64), np.asarray(ids, np.uint64), seed, round_)


def _run(x, y, rows, first, steps, w0, correction, lr, mu, anchor, starts, sizes, ids, seed, round_):
    dtype, (features, classes) = w0.dtype.type, w0.shape
    v0 = _transposed(w0, x.shape[1])  # zero weights on the padding rows and columns
    out = np.empty((len(first), *v0.shape), dtype=w0.dtype)
    pad = np.zeros((0 if mu == 0 else len(first), *v0.shape), w0.dtype) if correction is None else \
        _transposed(correction, x.shape[1])  # none: no loads (with mu = 0) or zeros
    at = np.zeros((0, x.shape[1]), dtype=w0.dtype) if anchor is None else _transposed(anchor, x.shape[1])
    _local_sgd(x, y, rows, first.astype(np.int64), steps.astype(np.int64), v0, pad, dtype(lr), dtype(mu),
               dtype(0), at, out, classes, starts, sizes, ids, np.uint64(seed), np.uint64(round_))
    return out[:, :classes, :features].transpose(0, 2, 1)
