"""Snakemake's scheduler keeps one pending re-evaluation timer (fedsim.rescheduling)."""

import subprocess
import sys
import threading
import time
from types import SimpleNamespace

from fedsim import rescheduling


def test_the_installed_snakemake_has_the_timer_it_replaces():
    """If a Snakemake release renames it, install() changes nothing: this says so."""
    assert rescheduling.install()


def test_passes_share_one_pending_timer_and_the_pass_it_wakes_starts_the_next():
    scheduler = SimpleNamespace(_open_jobs=threading.Semaphore(0))
    before = threading.active_count()
    for _ in range(50):  # fifty scheduling passes within one timespan
        rescheduling._one_pending_timer(scheduler, 0.2)
    assert threading.active_count() == before + 1 and scheduler._fedsim_reevaluation.daemon
    assert scheduler._open_jobs.acquire(timeout=5)  # it woke the scheduler once...
    assert not scheduler._open_jobs.acquire(timeout=0.5)  # ...and only once
    rescheduling._one_pending_timer(scheduler, 0.05)  # the woken pass schedules the next one
    assert scheduler._open_jobs.acquire(timeout=5)


SNAKEFILE = """
from fedsim import rescheduling
rescheduling.install()
rule all:
    input: expand("out/{i}.txt", i=range(12))
rule one:
    output: "out/{i}.txt"
    shell: "echo {wildcards.i} > {output}"
"""


def test_the_job_rate_limit_still_holds(tmp_path):
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "snakemake", "--cores", "4", "--max-jobs-per-timespan", "4/1s", "-q"],
                   cwd=tmp_path, check=True, capture_output=True, timeout=120)
    assert len(list((tmp_path / "out").iterdir())) == 12
    assert time.monotonic() - started >= 2  # 12 jobs at 4 per second: at least two waits for the limit
