"""The benchmarks' shared timer: the best of a few repeats (the least disturbed by a noisy machine)."""

import time


def best_of(repeats: int, fn, clock=time.perf_counter) -> float:
    """The shortest of `repeats` calls of fn(), in seconds of `clock`."""
    times = []
    for _ in range(repeats):
        started = clock()
        fn()
        times.append(clock() - started)
    return min(times)
