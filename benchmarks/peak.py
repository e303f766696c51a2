"""This core's floating-point peak, measured: a compiled probe of independent FMA chains, and a
single-threaded sgemm to check it against (used by round_time.py).

The probe (`fma_peak`) is one numba-compiled loop of CHAINS independent accumulators, each a SIMD
register of the widest vector the host has (256 bits with AVX2, 512 with AVX-512), updated as
a <- a * x + y (one fused multiply-add, 2 flops a lane) `reps` times. The chains are written as
vector fused multiply-adds in LLVM IR (llvm.fma on <lanes x float>) rather than left to the
auto-vectoriser: numba compiles without SLP vectorisation, and whether LLVM's loop vectoriser
keeps a scalar formulation's accumulators in vector registers depends on their count (tried
with numba 0.68 on this Zen 3 core, `acc[j] = acc[j] * x + y` over a fixed range of j: 64 to 96
float32 accumulators ran near peak, 32 float32 or 32 float64 came out scalar, 25-50x slower, and
64 float64 or 128 float32 spilled registers, 3-5x slower). CHAINS = 12 is more than the
FMA latency times the FMA units (4 cycles x 2 units on a Zen 3 or Skylake core), and leaves
registers for x and y, so the loop is bound by FMA throughput only. `fma_asm_check` reads the
compiled assembly back: the vector FMA instructions and the registers they use.

The check (`sgemm_rate`): numpy's float32 matmul of two n x n matrices (2 n^3 flops), with the
BLAS limited to one thread (threadpoolctl where installed, else the OpenBLAS loaded in the
process, through its set_num_threads entry point); it reports the threads it ran on. A tuned
sgemm reaches 80-95% of a core's FMA peak, so the probe is plausible when sgemm / probe is
a little below 1.

Both are the best of several repeats (a burst of load elsewhere only slows some of them). The
timed calls take about 0.25 s in all; compiling the probe, before them, one to two seconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import time

import numba
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

CHAINS = 12


def vector_bits() -> int:
    """Width of the host's widest floating-point SIMD registers."""
    features = llvm.get_host_cpu_features()
    if features.get("avx512f"):
        return 512
    return 256 if features.get("avx") else 128


@intrinsic
def _fma_chains(typingctx, x, y, reps):
    """sum over CHAINS vectors a_c (lanes of x's type) after reps times a_c <- fma(a_c, x, y)."""
    if not (isinstance(x, types.Float) and x == y and isinstance(reps, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        xv, yv, n = args
        lanes = vector_bits() // x.bitwidth
        vec = ir.VectorType(xv.type, lanes)
        index = ir.VectorType(ir.IntType(32), lanes)
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec] * 3),
                                             f"llvm.fma.v{lanes}f{x.bitwidth}")

        def splat(value):
            one = builder.insert_element(ir.Constant(vec, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
            return builder.shuffle_vector(one, ir.Constant(vec, ir.Undefined), ir.Constant(index, [0] * lanes))

        xs, ys = splat(xv), splat(yv)
        # distinct starting values: identical chains could be merged into one by the optimiser
        accs = [cgutils.alloca_once_value(builder, builder.fadd(xs, ir.Constant(vec, [float(c)] * lanes)))
                for c in range(CHAINS)]
        with cgutils.for_range(builder, n):
            for acc in accs:
                builder.store(builder.call(fma, [builder.load(acc), xs, ys]), acc)
        total = builder.load(accs[0])
        for acc in accs[1:]:
            total = builder.fadd(total, builder.load(acc))
        out = builder.extract_element(total, ir.Constant(ir.IntType(32), 0))
        for lane in range(1, lanes):
            out = builder.fadd(out, builder.extract_element(total, ir.Constant(ir.IntType(32), lane)))
        return out

    return x(x, y, reps), codegen


@numba.njit(nogil=True)
def fma_probe(x, y, reps):  # pragma: no cover (compiled)
    return _fma_chains(x, y, reps)


PROBE_TRIES = 200


def fma_peak(dtype=np.float32, flops: float = 2e7, repeats: int = PROBE_TRIES) -> float:
    """Best flops per second of the probe in `dtype`, each call about `flops` flops (0.2 ms at 100
    Gflop/s: PROBE_TRIES of them take some 40 ms, so that a few-millisecond burst of load elsewhere
    on a shared host cannot spoil them all)."""
    dtype = np.dtype(dtype).type
    per_rep = 2 * CHAINS * vector_bits() // (8 * np.dtype(dtype).itemsize)
    reps = max(1, int(flops // per_rep))
    x, y = dtype(0.999), dtype(0.001)  # a_c -> 1: no overflow, no subnormals
    fma_probe(x, y, 1)  # compile
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fma_probe(x, y, reps)
        best = min(best, time.perf_counter() - start)
    return per_rep * reps / best


def fma_asm_check(dtype=np.float32) -> str:
    """The probe's vector FMA instructions in its compiled assembly, e.g. '12 vfmadd on ymm'."""
    dtype = np.dtype(dtype).type
    fma_probe(dtype(0), dtype(0), 1)
    signature = [s for s in fma_probe.signatures if s[0] == numba.from_dtype(np.dtype(dtype))][0]
    asm = fma_probe.inspect_asm(signature)
    found = re.findall(r"\bvfn?m(?:add|sub)\w*\s+[^\n]*?%([xyz]mm)\d+", asm)
    if not found:
        return "no vfmadd instruction: NOT vectorised"
    kinds = sorted(set(found), key=found.index)
    return ", ".join(f"{found.count(k)} vfmadd on {k}" for k in kinds)


def _openblas_libraries():
    """ctypes handles of the OpenBLAS libraries loaded in this process (numpy's among them)."""
    paths = set()
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "openblas" in path.lower() and ".so" in path:
                paths.add(path)
    handles = []
    for path in sorted(paths):
        lib = ctypes.CDLL(path)
        for prefix, suffix in (("scipy_openblas", "64_"), ("scipy_openblas", ""), ("openblas", "64_"),
                               ("openblas", "")):
            setter, getter = (getattr(lib, f"{prefix}_{name}_num_threads{suffix}", None) for name in ("set", "get"))
            if setter is not None and getter is not None:
                getter.restype = ctypes.c_int
                handles.append((setter, getter))
                break
    return handles


@contextlib.contextmanager
def blas_threads(threads: int):
    """Limit numpy's BLAS to `threads` inside the block; yields the threads it then has (None: unknown)."""
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        handles = _openblas_libraries()
        before = [getter() for _, getter in handles]
        for setter, _ in handles:
            setter(threads)
        try:
            yield max((getter() for _, getter in handles), default=None)
        finally:
            for (setter, _), count in zip(handles, before):
                setter(count)
        return
    with threadpool_limits(threads, user_api="blas"):
        yield max((pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"), default=None)


def sgemm_rate(n: int = 512, repeats: int = 10, threads: int = 1) -> tuple[float, int | None]:
    """(best flops per second of numpy's float32 n x n matmul, the BLAS threads it ran on)."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty_like(a)
    with blas_threads(threads) as used:
        np.matmul(a, b, out=out)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            np.matmul(a, b, out=out)
            best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best, used


if __name__ == "__main__":
    for dtype in (np.float32, np.float64):
        print(f"FMA probe {np.dtype(dtype).name}: {fma_peak(dtype) / 1e9:6.1f} Gflop/s ({fma_asm_check(dtype)})")
    rate, used = sgemm_rate()
    print(f"numpy sgemm: {rate / 1e9:6.1f} Gflop/s on {used} BLAS thread(s)")
