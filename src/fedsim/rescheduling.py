"""One pending re-evaluation timer in Snakemake's scheduler, instead of one more per pass.

Snakemake's job scheduler (checked up to 9.27.1) applies its job rate limit (default
`--max-jobs-per-timespan 100/1s`) by starting, at the end of every scheduling pass, a timer that
wakes the scheduler one timespan later. The pass that timer wakes starts another, so every finished
job adds a timer chain that never ends: after n jobs the scheduler wakes about n times a second, and
each pass re-evaluates every ready job (params, resources, input sizes). In the default run (357
jobs, 2 cores) that grew to thousands of passes and a large share of a core (README, Performance;
upstream: snakemake/snakemake pull request 3744).

`install()` replaces that timer with one pending timer at a time: a pass that finds one pending
starts no other. Any pass reschedules while the limit holds jobs back, so what the limiter lets
through, and when, is unchanged; the timer is a daemon thread, so it never delays Snakemake's exit.
Where a Snakemake release has no such method, nothing is changed.
"""

from __future__ import annotations

import threading


def _one_pending_timer(scheduler, delay) -> None:
    if getattr(scheduler, "_fedsim_reevaluation", None) is not None:
        return  # one is pending: the pass it wakes reschedules

    def wake() -> None:
        scheduler._fedsim_reevaluation = None  # before the wake-up, so that the pass it starts reschedules
        scheduler._open_jobs.release()

    timer = threading.Timer(delay, wake)
    timer.daemon = True
    scheduler._fedsim_reevaluation = timer
    timer.start()


def install() -> bool:
    """Patch Snakemake's scheduler (in this process); whether there was something to patch."""
    try:
        from snakemake.scheduling.job_scheduler import JobScheduler
    except ImportError:
        return False
    if not hasattr(JobScheduler, "_schedule_reevalutation"):  # sic: Snakemake's spelling
        return False
    JobScheduler._schedule_reevalutation = _one_pending_timer
    return True
