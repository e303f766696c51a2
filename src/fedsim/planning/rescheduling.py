"""Snakemake's scheduler wakes itself for the job rate limit only while the limit holds jobs back.

Snakemake's job scheduler (checked up to 9.27.1) applies its job rate limit (default
`--max-jobs-per-timespan 100/1s`) by starting, at the end of every scheduling pass, a timer that
wakes the scheduler one timespan later, whether or not the limit held anything back. The pass that
timer wakes starts another, so every finished job adds a timer chain that lasts as long as jobs
are ready: after n jobs the scheduler wakes about n times a second, and each pass re-evaluates
every ready job (params, resources, input sizes). In the default run (357 jobs, 2 cores) that was
most of Snakemake's own CPU (docs/performance.md; upstream: snakemake/snakemake pull request 3744).

`install()` skips that timer when the limiter still has free slots at the end of the pass: then
nothing waits on the limit, and what does wait (cores, resources) is woken by the next finished
job, as before. While the limit is reached, and while Snakemake waits for queue input (the other
caller), the timer starts exactly as in Snakemake. Where a Snakemake release lacks what this reads,
the original method runs unchanged.
"""

from __future__ import annotations

_original = None


def _wake_only_when_held(scheduler, delay) -> None:
    try:
        limiter = scheduler.job_rate_limiter
        held = (limiter is None or limiter.get_free_jobs() == 0
                or scheduler.workflow.dag.has_unfinished_queue_input_jobs())
    except AttributeError:  # another Snakemake: do what it does
        held = True
    if held:
        _original(scheduler, delay)


def install(enabled: bool = True) -> bool:
    """Patch Snakemake's scheduler (in this process); whether it is patched. enabled=False leaves
    it as Snakemake ships it."""
    global _original
    if not enabled:
        return False
    try:
        from snakemake.scheduling.job_scheduler import JobScheduler
    except ImportError:
        return False
    method = getattr(JobScheduler, "_schedule_reevalutation", None)  # sic: Snakemake's spelling
    if method is None:
        return False
    if method is not _wake_only_when_held:
        _original = method
        JobScheduler._schedule_reevalutation = _wake_only_when_held
    return True
