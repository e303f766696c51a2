"""What a run's bits depend on beyond its config, data and seed (fedsim.core.machine): subnormal floats
flushed in every computing thread, and the run's record of its libraries, CPU and kernel target."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numba
import numpy as np
import pytest
import torch

from fedsim import api
from fedsim.core.machine import TINY, environment, flushing, subnormals, thread_setup

SRC = Path(__file__).resolve().parents[1] / "src"
FIELDS = {"python", "numba", "llvmlite", "numpy", "torch", "cpu", "machine", "kernel_target", "simd_lanes",
          "subnormals", "byteorder"}

pytestmark = pytest.mark.skipif(not torch.set_flush_denormal(False), reason="this CPU has no subnormal switch")


@numba.njit(cache=False)
def _scaled(x, s):
    return x * s


def test_flushing_reaches_torch_numpy_and_numba_in_the_thread_and_is_restored():
    """The switch is the thread's: torch's ops, numpy's and numba-compiled code (the MCLR kernel's kind)
    all flush inside the block, all keep subnormals again after it."""
    before = flushing()
    with subnormals(True):
        assert flushing()
        assert np.float32(TINY) / np.float32(1000) == 0
        assert _scaled(np.float32(TINY), np.float32(1e-3)) == 0
    assert flushing() == before
    with subnormals(False):
        assert not flushing() and _scaled(np.float32(TINY), np.float32(1e-3)) > 0


def test_a_thread_a_run_starts_sets_the_runs_handling():
    """Flushing is per thread: a thread that already runs (a pool's, made before the run) keeps its own
    handling whatever the calling thread sets; a thread the run starts sets the run's (the read ahead's
    initializer)."""
    with subnormals(False):
        plain, setup = ThreadPoolExecutor(1), ThreadPoolExecutor(1, initializer=thread_setup(True))
        plain.submit(int).result(), setup.submit(int).result()  # their threads start here, keeping subnormals
    with plain, setup, subnormals(True):
        assert not plain.submit(flushing).result()
        assert setup.submit(flushing).result()


def test_a_run_records_its_environment_and_whether_it_flushed(tiny_data):
    """run.json's `environment` names the libraries, the CPU and the kernel's target; keeping
    subnormals is visible there, and the caller's thread is left as it was."""
    before = flushing()
    records = {keep: api.run(tiny_data(), "fedavg", rounds=2, clients_per_round=2,
                                      keep_subnormals=keep)[1] for keep in (False, True)}
    assert flushing() == before
    for keep, record in records.items():
        env = record["environment"]
        assert set(env) == FIELDS and env["subnormals"] == ("kept" if keep else "flushed")
        assert env["numba"] == numba.__version__ and env["torch"] == torch.__version__
        assert env["kernel_target"]["cpu_name"] and env["cpu"]
    assert records[False]["environment"] == environment(flushed=True)


def test_flushing_subnormals_leaves_a_near_diverging_feddane_run_bit_identical(tmp_path):
    """FedDANE at mu = 0.001 on Synthetic (1,1) nearly diverges (train loss 9-28), where softmax
    products fall below the smallest normal float: flushed or kept, the same metrics bytes."""
    data = api.generate_synthetic(tmp_path / "s11.h5", alpha=1, beta=1)
    runs = {keep: api.run(data, "feddane", mu=0.001, rounds=120, keep_subnormals=keep)[0] for keep in (False, True)}
    assert runs[False]["train_loss"].max() > 9
    assert runs[False].to_csv() == runs[True].to_csv()


def test_the_kernels_instruction_set_changes_bits_and_the_record_says_which(tiny_data, tmp_path):
    """The same run compiled for a generic x86-64 target (no fused multiply-add) gives other metrics
    than for this host's, and the records name the two targets: why run.json holds kernel_target."""
    import llvmlite.binding as llvm

    if not llvm.get_host_cpu_features().get("fma"):
        pytest.skip("this host has no FMA: its kernel already computes as a generic target's")
    script = ("import json, sys; from fedsim import api; m, r = api.run(sys.argv[1], 'fedavg', rounds=3, clients_per_round=4); "
              "print(json.dumps([m.to_csv(), r['environment']['kernel_target']]))")
    runs = {}
    for target in ("", "generic"):
        env = {**os.environ, "PYTHONPATH": str(SRC), "NUMBA_CPU_NAME": target, "NUMBA_CACHE_DIR": str(tmp_path / "c")}
        if not target:
            env.pop("NUMBA_CPU_NAME")
            env.pop("NUMBA_CACHE_DIR")
        out = subprocess.run([sys.executable, "-c", script, str(tiny_data())], env=env, check=True,
                             capture_output=True, text=True).stdout
        runs[target] = json.loads(out.splitlines()[-1])
    assert runs["generic"][1] == {"cpu_name": "generic", "vector_bits": None}
    assert runs[""][1]["cpu_name"] != "generic"
    assert runs["generic"][0] != runs[""][0]
