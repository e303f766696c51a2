"""What a run's bits depend on besides its config, data and seed: the machine and the libraries.

- Subnormal floats. A run flushes them to zero in every thread that computes (`subnormals`), as
  TensorFlow, the authors' framework, does in its CPU threads. FedDANE's near-diverging runs fill
  with them (softmax probabilities below 1.2e-38 and the products made of them), and Intel cores
  handle them about a hundred times slower than normal numbers. The setting is per thread (x86's
  MXCSR: flush-to-zero and denormals-are-zero; a new thread starts with its creator's, a running one
  keeps its own), so each thread a run starts sets it too;
  `keep_subnormals` keeps IEEE arithmetic. Where the CPU has no such switch (not x86), nothing is
  flushed and the record says so.
- The environment (`environment`): the versions of the libraries that compute (numba compiles the
  MCLR kernel for this CPU's instruction set; torch and numpy do the rest), the CPU and the kernel's
  target, and whether subnormals were flushed. docs/outputs.md says which of these change bits.
"""

from __future__ import annotations

import platform
import sys
from contextlib import contextmanager
from functools import cache
from importlib import metadata
from pathlib import Path

import torch

TINY = 1e-38  # a normal float32; a thousandth of it is subnormal


def flushing() -> bool:
    """Whether this thread flushes subnormal floats to zero now (one tiny product, read back)."""
    return (torch.tensor([TINY], dtype=torch.float32) / 1000.0).item() == 0.0


@contextmanager
def subnormals(flush: bool):
    """This thread's subnormal handling inside the block (flushed or kept), restored after it."""
    before = flushing()
    torch.set_flush_denormal(flush)
    try:
        yield
    finally:
        torch.set_flush_denormal(before)


def thread_setup(flush: bool):
    """An initializer for a thread a run starts: the run's subnormal handling in that thread too."""
    def setup():
        torch.set_flush_denormal(flush)
    return setup


@cache
def cpu_model() -> str:
    """The CPU's model name as the OS reports it (Linux: /proc/cpuinfo), else platform's answer."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@cache
def kernel_target() -> dict:
    """The instruction set numba compiles the kernel for (this host's, as LLVM names it) and its widest
    vector registers in bits."""
    import llvmlite.binding as llvm
    import numba

    if numba.config.CPU_NAME:  # NUMBA_CPU_NAME: compiled for that target, whose features numba was told
        return {"cpu_name": numba.config.CPU_NAME, "vector_bits": None}
    features = llvm.get_host_cpu_features()
    widest = 512 if features.get("avx512f") else 256 if features.get("avx") else 128
    return {"cpu_name": llvm.get_host_cpu_name(), "vector_bits": widest}


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def environment(flushed: bool) -> dict:
    """The record of what made a run's bits, besides its config, data and seed."""
    from ..simd import LANES

    return {
        "python": platform.python_version(),
        **{package: _version(package) for package in ("numba", "llvmlite", "numpy", "torch")},
        "cpu": cpu_model(),
        "machine": platform.machine(),
        "kernel_target": kernel_target(),
        "simd_lanes": LANES,
        "subnormals": "flushed" if flushed else "kept",
        "byteorder": sys.byteorder,
    }
