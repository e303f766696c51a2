"""fedsim.simd: the vector operations the compiled kernel is written in, against numpy."""

import hashlib
from pathlib import Path

import numba
import numpy as np
import pytest

from fedsim.data import format as data
from fedsim.core import kernel
from fedsim import simd

L = simd.LANES


@numba.njit
def _exp_all(a, out):
    for i in range(0, a.shape[0], L):
        simd.store(out, i, simd.exp(simd.load(a, i)))


@numba.njit
def _sums_and_max(a, sums):
    # a (4, L): the rows' lane sums into sums[:4] (sums has room for them), the lanes' max of rows 0, 1
    v0, v1, v2, v3 = simd.load(a, (0, 0)), simd.load(a, (1, 0)), simd.load(a, (2, 0)), simd.load(a, (3, 0))
    simd.store_hsum4(sums, 0, v0, v1, v2, v3)
    out = np.empty(L, a.dtype)
    simd.store(out, 0, simd.max(v0, v1))
    return out


@numba.njit
def _argmax_rows(z, out):
    # out[i] = index of z[:, i]'s first largest or first NaN, LANES columns at a time
    zero = z.dtype.type(0)
    for s in range(0, z.shape[1], L):
        best, index = simd.load(z, (0, s)), simd.splat(zero)
        for c in range(1, z.shape[0]):
            best, index = simd.argmax_step(best, index, simd.load(z, (c, s)), c)
        simd.store(out, s, index)


@pytest.mark.parametrize("dtype, tolerance", [(np.float32, 2e-7), (np.float64, 1e-15)])
def test_exp_is_accurate_and_lets_nan_through(dtype, tolerance):
    a = np.concatenate([np.linspace(-87, 88, 8 * 4096), [np.nan, 0, -0.5, 1, -np.inf, np.inf, -200, 3]]).astype(dtype)
    out = np.empty_like(a)
    _exp_all(a, out)
    expected = np.exp(a.astype(np.float64))
    finite = np.isfinite(expected) & (expected > 1e-37)
    assert np.max(np.abs(out[finite] / expected[finite] - 1)) < tolerance
    assert np.isnan(out[np.isnan(a)]).all()
    assert (out[a == -200] < 1e-37).all() and (out[a == -np.inf] < 1e-37).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sums_and_largest_of_lanes(dtype):
    a = np.random.default_rng(0).standard_normal((4, L)).astype(dtype)
    sums = np.full(L, -1, dtype)
    largest = _sums_and_max(a, sums)
    np.testing.assert_allclose(sums[:4], a.astype(np.float64).sum(1), rtol=1e-6)
    assert (sums[4:] == -1).all()  # one store of four lanes
    np.testing.assert_array_equal(largest, np.maximum(a[0], a[1]))


def test_argmax_takes_the_first_largest_or_the_first_nan_as_torch():
    import torch

    z = np.random.default_rng(1).integers(0, 3, (5, 4 * L)).astype(np.float32)  # ties on purpose
    z[2, 3] = z[4, 3] = np.nan
    z[0, 9] = np.nan
    out = np.empty(z.shape[1], dtype=np.float32)
    _argmax_rows(z, out)
    np.testing.assert_array_equal(out, torch.from_numpy(z).argmax(0).numpy())


@numba.njit
def _be_words_plus(a, at, b):
    # the big-endian words at bytes a[at:], plus b's lanes (uint32, wrapping)
    out = np.empty(L, np.uint32)
    simd.store(out, 0, simd.iadd(simd.load_be16(a, at), simd.load(b, 0)))
    return out


def test_big_endian_words_and_integer_lanes():
    a = np.random.default_rng(2).integers(0, 256, 2 * L + 3, dtype=np.uint8)
    b = np.full(L, 2 ** 32 - 1, np.uint32)
    words = a[3:3 + 2 * L].view(">u2").astype(np.uint64)  # an odd, unaligned start
    np.testing.assert_array_equal(_be_words_plus(a, 3, b), (words + 2 ** 32 - 1) % 2 ** 32)


@numba.njit
def _transposed_block(a, out, row, column):
    # out[row + c, column + i] = a[i, c] for i, c < 8, from eight row vectors of a
    simd.store_transposed(out, (row, column), simd.load(a, (0, 0)), simd.load(a, (1, 0)), simd.load(a, (2, 0)),
                          simd.load(a, (3, 0)), simd.load(a, (4, 0)), simd.load(a, (5, 0)), simd.load(a, (6, 0)),
                          simd.load(a, (7, 0)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transposed_store_writes_the_block_and_nothing_else(dtype):
    a = np.random.default_rng(3).standard_normal((8, 8)).astype(dtype)
    out = np.full((11, 13), -1, dtype)
    _transposed_block(a, out, 2, 3)
    expected = np.full((11, 13), -1, dtype)
    expected[2:10, 3:11] = a.T
    np.testing.assert_array_equal(out, expected)


@numba.njit
def _labels_logit_and_hits(labels, at, z, index):
    # lanes at..at + L: z[labels[i], i] picked by lane selects, and whether index[i] == labels[i]
    zero = z.dtype.type(0)
    wanted, picked = simd.load_as(labels, at, zero), simd.splat(zero)
    for c in range(z.shape[0]):
        picked = simd.where_equal(wanted, simd.splat(simd.like(c, zero)), simd.load(z, (c, 0)), picked)
    out = np.empty((2, L), z.dtype)
    simd.store(out, (0, 0), picked)
    simd.store(out, (1, 0), simd.where_equal(simd.load(index, 0), wanted, simd.splat(z.dtype.type(1)), simd.splat(zero)))
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_integer_lanes_as_floats_pick_a_row_per_lane(dtype):
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 5, L + 3)  # int64, read from an unaligned start
    z = rng.standard_normal((5, L)).astype(dtype)
    index = rng.integers(0, 5, L).astype(dtype)
    picked, hits = _labels_logit_and_hits(labels, 3, z, index)
    np.testing.assert_array_equal(picked, z[labels[3:], np.arange(L)])
    np.testing.assert_array_equal(hits, (index == labels[3:]).astype(dtype))


@numba.njit
def _widened(a, at):
    out = np.empty(L)
    simd.store(out, 0, simd.load_float64(a, at))
    return out


def test_float32_lanes_widen_to_float64_exactly():
    a = np.random.default_rng(5).standard_normal(L + 1).astype(np.float32)
    np.testing.assert_array_equal(_widened(a, 1), a[1:].astype(np.float64))
    np.testing.assert_array_equal(_widened(a.astype(np.float64), 1), a[1:].astype(np.float64))


def test_compiled_modules_name_the_simd_source_they_inline():
    """numba's cache would keep their machine code after a simd edit (it keys on each function's
    own file): each names the simd source it was compiled with, and an edit there must update it."""
    digest = hashlib.sha256(Path(simd.__file__).read_bytes()).hexdigest()[:16]
    for module in (kernel, data):
        assert module.SIMD_SOURCE == digest, f"{module.__name__}.SIMD_SOURCE: set it to {digest!r} (simd changed)"
