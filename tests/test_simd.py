"""fedsim.simd: the vector operations the compiled kernel is written in, against numpy."""

import numba
import numpy as np
import pytest

from fedsim import simd

L = simd.LANES


@numba.njit
def _exp_all(a, out):
    for i in range(0, a.shape[0], L):
        simd.store(out, i, simd.exp(simd.load(a, i)))


@numba.njit
def _reductions(a):
    # a (4, L): hsum of each row, hsum4 of the rows, hmax of row 0
    v0, v1, v2, v3 = simd.load(a, (0, 0)), simd.load(a, (1, 0)), simd.load(a, (2, 0)), simd.load(a, (3, 0))
    return (simd.hsum(v0), simd.hsum(v1), simd.hsum(v2), simd.hsum(v3)), simd.hsum4(v0, v1, v2, v3), simd.hmax(v0)


@numba.njit
def _argmax_rows(z, out):
    # out[i] = index of z[:, i]'s first largest or first NaN, LANES columns at a time
    zero = z.dtype.type(0)
    for s in range(0, z.shape[1], L):
        best, index = simd.load(z, (0, s)), simd.splat(zero)
        for c in range(1, z.shape[0]):
            best, index = simd.argmax_step(best, index, simd.load(z, (c, s)), c)
        simd.store(out, s, index)


@numba.njit
def _first(a, n, fill, out):
    simd.store(out, 0, simd.first(simd.load(a, 0), n, fill))


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
    sums, sums4, largest = _reductions(a)
    np.testing.assert_allclose(sums, a.astype(np.float64).sum(1), rtol=1e-6)
    assert sums4 == sums  # the same tree, shared
    assert largest == a[0].max()


def test_argmax_takes_the_first_largest_or_the_first_nan_as_torch():
    import torch

    z = np.random.default_rng(1).integers(0, 3, (5, 4 * L)).astype(np.float32)  # ties on purpose
    z[2, 3] = z[4, 3] = np.nan
    z[0, 9] = np.nan
    out = np.empty(z.shape[1], dtype=np.float32)
    _argmax_rows(z, out)
    np.testing.assert_array_equal(out, torch.from_numpy(z).argmax(0).numpy())


def test_first_keeps_the_leading_lanes():
    a, out = np.arange(L, dtype=np.float64), np.empty(L)
    _first(a, 3, -1.0, out)
    np.testing.assert_array_equal(out, [0, 1, 2] + [-1] * (L - 3))
