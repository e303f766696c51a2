"""Snakemake's scheduler wakes itself for the job rate limit only while the limit holds jobs back
(fedsim.planning.rescheduling)."""

import subprocess
import sys
from types import SimpleNamespace

import pytest

from fedsim.planning import rescheduling

from helpers.workflow import env


@pytest.fixture
def patched(monkeypatch):
    """install() on the real JobScheduler, its original method recorded instead of run; undone after."""
    from snakemake.scheduling.job_scheduler import JobScheduler

    calls = []
    monkeypatch.setattr(JobScheduler, "_schedule_reevalutation", lambda self, delay: calls.append(delay))
    assert rescheduling.install()  # if a Snakemake release renames the method, this says so
    return JobScheduler, calls


def test_this_snakemake_still_has_what_the_patch_reads():
    """Fails the day a Snakemake release changes what fedsim.planning.rescheduling patches or reads (the patch
    would then quietly do nothing, or the wrong thing): re-read Snakemake's scheduler, and keep the
    patch only if it still pays (docs/performance.md), else remove it."""
    import inspect

    import snakemake
    import snakemake.api  # noqa: F401  (imports snakemake.dag as Snakemake itself does: no circle)
    from snakemake.dag import DAG
    from snakemake.scheduling.job_scheduler import JobScheduler

    changed = f"Snakemake {snakemake.__version__} changed what fedsim.planning.rescheduling patches: "
    timer = inspect.getsource(JobScheduler._schedule_reevalutation)
    assert "threading.Timer" in timer and "_open_jobs.release" in timer, changed + "the timer method\n" + timer
    scheduler = inspect.getsource(JobScheduler)
    for expected in ("self._schedule_reevalutation(self.job_rate_limiter.timespan)",
                     "self.job_rate_limiter.get_free_jobs()", "self.workflow.dag"):
        assert expected in scheduler, changed + f"no {expected!r} in JobScheduler"
    assert callable(getattr(DAG, "has_unfinished_queue_input_jobs", None)), changed + "DAG.has_unfinished_queue_input_jobs"


def fake_scheduler(free_slots, queue_input=False):
    limiter = None if free_slots is None else SimpleNamespace(get_free_jobs=lambda: free_slots)
    dag = SimpleNamespace(has_unfinished_queue_input_jobs=lambda: queue_input)
    return SimpleNamespace(job_rate_limiter=limiter, workflow=SimpleNamespace(dag=dag))


@pytest.mark.parametrize("free_slots, queue_input, wakes", [
    (5, False, False),   # nothing waits on the limit: no timer (a finishing job wakes the scheduler)
    (0, False, True),    # the limit holds jobs back: Snakemake's timer
    (5, True, True),     # waiting for queue input: Snakemake's timer
    (None, True, True),  # no limiter, queue input
])
def test_a_timer_only_while_something_waits_on_it(patched, free_slots, queue_input, wakes):
    scheduler_class, calls = patched
    scheduler_class._schedule_reevalutation(fake_scheduler(free_slots, queue_input), 1)
    assert calls == ([1] if wakes else [])


def test_another_snakemake_gets_its_own_behaviour(patched):
    scheduler_class, calls = patched
    scheduler_class._schedule_reevalutation(SimpleNamespace(), 1)  # nothing this module reads
    assert calls == [1]


SNAKEFILE = """
from fedsim.planning import rescheduling
rescheduling.install()
rule all:
    input: expand("out/{i}.txt", i=range(12))
rule one:
    output: "out/{i}.txt"
    shell: "echo {wildcards.i} > {output}"
"""


@pytest.mark.workflow
def test_the_job_rate_limit_still_holds(tmp_path):
    """12 jobs at 3 per second start in four batches at least a second apart."""
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    subprocess.run([sys.executable, "-m", "snakemake", "--cores", "4", "--max-jobs-per-timespan", "3/1s", "-q"],
                   cwd=tmp_path, env=env(), check=True, capture_output=True, timeout=120)
    written = sorted(path.stat().st_mtime for path in (tmp_path / "out").iterdir())
    # the last batch starts 3 s after the first; its jobs' start-up may be a second quicker than the first's
    assert len(written) == 12 and written[-1] - written[0] >= 2
