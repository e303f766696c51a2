"""What the whole test session shares: numba's compiled kernel, made once before any test (every
workflow copy and job then loads it: helpers/workflow.py copies it with the code), and one tiny
dataset per size, written once and only read by the tests that ask for it (`tiny_data`).
"""

from __future__ import annotations

import os
import signal

import pytest

from tiny import tiny_dataset


def pytest_configure(config):
    """A shell's background job (`python -m pytest &`, a CI script's) starts with Ctrl-C ignored, and
    every process it starts inherits that: the tests that press Ctrl-C on a run (SIGINT) would see
    it ignored. Python's own handler here lets them reach the processes they start."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_sessionstart(session):
    """Once, before any worker starts: compile (or load) the kernels, float32 (the jobs') and
    float64 (the tests'), into numba's cache beside this checkout's src/, so that no worker and no
    Snakemake job of a test compiles them again (the jobs of a copy with code of its own load the
    copied cache: helpers/workflow.copy_workflow). In a worker of several (pytest-xdist), torch
    computes on one thread: three workers' thread pools on two cores would spin against each other."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)
        return
    import numpy as np

    from fedsim.core import kernel, shuffle

    kernel.warm_up((np.float32, np.float64))
    shuffle.warm_up()


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """tiny_data(devices): the path of a tiny synthetic dataset (tiny.tiny_dataset) with that many
    devices, written once a session. Read it, never change it: a test that damages or rewrites a
    dataset writes its own."""
    made = {}

    def path(devices=8):
        if devices not in made:
            made[devices] = tiny_dataset(tmp_path_factory.mktemp(f"tiny{devices}") / "tiny.h5", devices=devices)
        return made[devices]

    return path


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups off the items
def pytest_collection_modifyitems(config, items):
    """Under parallel workers (pytest-xdist, --dist loadgroup), the tests that share a fixture of a
    wider scope than one test, written in a test file (a tiny workflow run, the SLURM cluster), run
    in one worker: the fixture is made once, as without workers. They go first, as they are the
    longest units of work (a long one started last would be the suite's tail); the others go
    wherever a worker is free."""
    grouped = []
    for item in items:
        group = shared_fixture(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            grouped.append(item)
    first = set(grouped)
    items[:] = grouped + [item for item in items if item not in first]


def shared_fixture(item):
    """The first fixture `item` uses whose scope is wider than a function and that a test module (or
    a module beside the tests, as slurm_cluster.py) defines; None where it uses none."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name in info.names_closure:
        for definition in info.name2fixturedefs.get(name, ()):
            module = getattr(definition.func, "__module__", "") or ""
            if definition.scope != "function" and module not in ("conftest", __name__) \
                    and not module.startswith("_pytest"):
                return f"{module}::{name}"
    return None
