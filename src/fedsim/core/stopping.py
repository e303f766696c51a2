"""Stopping a command cleanly on a signal: one line and an exit status of its own, never a traceback.

A batch system ends a job at its walltime with SIGTERM (then SIGKILL after a grace time: SLURM's
KillWait), some sites warn with SIGUSR1 some minutes before, and a user presses Ctrl-C (SIGINT).
While StopSignals is entered, each of them raises Stopped, which the command turns into one line
and the exit status 128 + the signal's number (the shells' convention: 130 for Ctrl-C, 143 for
SIGTERM, 138 for SIGUSR1), apart from 0, 1 and the input errors' 2. A training run asks for
`graceful` handling: the first signal only asks the round loop to stop at its next round boundary,
where it saves a checkpoint (fedsim.core.train); a second one stops it at once, the round in progress
dropped, unless it repeats a machine's first (SIGTERM or SIGUSR1 again): `timeout` and batch systems
send their signal to the process and to its process group, so one stop can arrive twice.

No torch and nothing of fedsim: the warm launcher (fedsim.warm) forwards these signals to its job
before it has imported anything heavy.
"""

from __future__ import annotations

import os
import signal
import threading
import time

# a batch system's walltime or scancel, Ctrl-C, a site's warning before the walltime
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
# Sent by machines, which may deliver one twice (GNU timeout: to its command, then to the command's
# process group): a repeat is the same stop. A second SIGINT is a person's second Ctrl-C: at once.
REPEATED_BY_MACHINES = (signal.SIGTERM, signal.SIGUSR1)
# While the file this variable names exists, a run waits at each round boundary after its first round
# (from the round the file holds, where it holds one).
HOLD_FILE_ENV = "FEDSIM_HOLD_FILE"
HOLD_POLL_SECONDS = 0.05


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


def exit_status(signum: int) -> int:
    """The exit status of a command a signal stopped: 128 + its number, as a shell reports a process
    the signal killed."""
    return 128 + signum


class Stopped(BaseException):
    """A signal stopped the command. A BaseException, as KeyboardInterrupt: no `except Exception`
    on the way (a checkpoint's load, say) may swallow it.

    `round`: the round boundary a run stopped at, of `rounds`; None where it stopped at once (a
    command that is not a run; a run's second signal: the round in progress dropped, `dropped`).
    `kept`: what the command kept, for its line (a run's checkpoint), where it says."""

    def __init__(self, signum: int, round_: int | None = None, rounds: int | None = None, dropped: bool = False):
        super().__init__(signal_name(signum))
        self.signum, self.round, self.rounds, self.dropped = signum, round_, rounds, dropped
        self.kept = None

    def line(self) -> str:
        name = signal_name(self.signum)
        if self.round is not None:
            said = f"stopped at round {self.round} of {self.rounds} by {name}"
        elif self.dropped:
            said = f"stopped by a second signal ({name}), the round in progress dropped"
        else:
            said = f"stopped by {name}"
        return said if self.kept is None else f"{said}; {self.kept}"


class StopSignals:
    """While entered, STOP_SIGNALS stop the command: the first raises Stopped at once, or, `graceful`,
    is only kept in `signal` for the round loop to read at its next boundary; then a second raises
    Stopped at once, unless it repeats the first's SIGTERM or SIGUSR1 (REPEATED_BY_MACHINES) or the
    loop has reached that boundary (`finishing`: saving its state). The handlers before are restored
    on exit. A signal the process was started ignoring stays ignored; outside the main thread, where
    Python installs no handlers, it changes nothing."""

    def __init__(self, graceful: bool = False):
        self.graceful, self.signal, self._before = graceful, None, {}
        # the run has reached its round boundary to stop there: a second signal (a batch system's
        # SIGTERM sent to the job's every process, then forwarded again) changes nothing now
        self.finishing = False

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                if signal.getsignal(signum) is not signal.SIG_IGN:  # a shell's background job ignores Ctrl-C: kept so
                    self._before[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._before.items():
            signal.signal(signum, handler)
        self._before.clear()

    def _handle(self, signum: int, frame) -> None:
        repeated = signum == self.signal and signum in REPEATED_BY_MACHINES
        if self.graceful and (self.signal is None or self.finishing or repeated):
            self.signal = self.signal or signum
            return
        raise Stopped(signum, dropped=self.graceful)


def hold_at_round_boundary(stop: StopSignals | None, round_: int) -> None:
    """At the boundary before round `round_`: wait while the file FEDSIM_HOLD_FILE names exists and
    `round_` has reached the round the file holds (an empty file: any round); a stop signal (graceful
    `stop`) ends the wait. The first wait prints one line, so that whoever paused the run sees where.

    A pause a user can set and lift without losing the process, and what lets a test act on a run that
    is still running whatever the machine's pace: the run cannot end before the test has signalled it
    or removed the file (tests/test_slurm.py, tests/test_stopping.py)."""
    path = os.environ.get(HOLD_FILE_ENV)
    if not path:
        return
    said = False
    while (stop is None or stop.signal is None) and round_ >= _hold_from(path):
        if not said:
            print(f"fedsim train: paused at round {round_} while {path} exists", flush=True)
            said = True
        time.sleep(HOLD_POLL_SECONDS)


def _hold_from(path: str) -> float:
    """The first round the hold file holds at: its number, 0 where it is empty, never where it is gone."""
    try:
        with open(path) as file:
            text = file.read().strip()
    except OSError:  # gone (or never there): no hold
        return float("inf")
    try:
        return int(text) if text else 0
    except ValueError:
        raise ValueError(f"bad {HOLD_FILE_ENV} file {path}: holds {text[:40]!r}, not a round number") from None
