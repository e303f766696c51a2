"""How far a training run is, told while it runs: `fedsim train` passes a Progress as the run's
`on_round` callback.

A run writes a line when it starts (or resumes from a checkpoint), then at most every `every`
seconds and at most once a round: the round and the total, the latest training loss, seconds per
round over the recent rounds, the time left at that pace and, where it resumed, from which round.
A short run (the default experiments: a few seconds) writes only its start line before the CLI's
end line. A loss that leaves the reals is told at once. On a terminal the line updates in place;
into a file or a pipe (a workflow job's log) each is a line of its own, flushed, for `tail -f`.

Where a cost estimate for the run exists (fedsim.planning.cost: the LSTM datasets on a CPU), a line after
the first rounds compares the measured seconds per round with it, so a plan that was wrong shows
early. Nothing here changes what the run computes.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections import deque

from .cost import duration

PROGRESS_SECONDS = 30.0  # the default interval between two lines
PROGRESS_ENV = "FEDSIM_PROGRESS_SECONDS"  # the workflow sets the interval of its jobs here (not a param: no rerun)
RECENT_ROUNDS = 10       # the pace is measured over this many of the latest rounds
COMPARE_AFTER = 3        # rounds trained before the pace is compared with the cost estimate
LIVE_EVERY = 0.5         # seconds between two redraws of a terminal's live line


def progress_seconds() -> float:
    """The interval the environment asks for ($FEDSIM_PROGRESS_SECONDS), else the default."""
    text = os.environ.get(PROGRESS_ENV)
    try:
        return PROGRESS_SECONDS if text is None else max(0.0, float(text))
    except ValueError:
        raise ValueError(f"bad {PROGRESS_ENV}={text!r}: expected seconds, a number >= 0") from None


class Progress:
    """The `on_round` callback of a run of `total` rounds; `label` opens every line ("feddane
    mu=0.01 on synthetic_1_1"); `estimate`: the cost model's seconds per round, where there is one."""

    def __init__(self, label: str, total: int, every: float = 30.0, stream=None, clock=time.monotonic,
                 estimate: float | None = None, live: bool | None = None):
        self.label, self.total, self.every, self.clock, self.estimate = label, total, every, clock, estimate
        self.stream = stream if stream is not None else sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.recent = deque(maxlen=RECENT_ROUNDS + 1)  # (time, round) of the latest metrics rows
        self.start_round = None
        self.resumed = False
        self.last_line = None   # when a line was last written
        self.compared = False
        self.open_line = False  # a live line is on the terminal without its newline

    def resume(self, round_: int) -> None:
        """The run resumed from its checkpoint at round `round_` (said with the first metrics after it)."""
        self.start_round, self.resumed = round_, True

    def __call__(self, row: dict) -> None:
        now, round_ = self.clock(), int(row["round"])
        loss = float(row["train_loss"])
        self.recent.append((now, round_))
        if self.last_line is None:  # the first metrics of this process: the start line
            if self.start_round is None:
                self.start_round, self.resumed = round_, round_ > 0
            start = f"resumed from its checkpoint at round {self.start_round}" if self.resumed else "starting"
            at = f" at round {round_}" if round_ != self.start_round else ""  # metrics every few rounds
            if not math.isfinite(loss) and round_ == 0:  # no training yet: not the method's divergence
                at += " (before any training: the data or the initial model are not finite; the run stops here)"
            self._write(f"{self.label}: {start}, {self.total} rounds, train loss {loss:.4f}{at}", now, final=True)
            return
        if not math.isfinite(loss):
            self._write(f"{self.label}: round {round_}/{self.total}, train loss {loss} (diverged: the run stops "
                        "here)", now, final=True)
            return
        self._compare(now, round_)
        due = now - self.last_line >= (LIVE_EVERY if self.live else self.every)
        if due and round_ < self.total:
            self._write(self.line(round_, loss), now, final=False)

    def pace(self) -> float | None:
        """Seconds per round over the recent rounds (None before two rows)."""
        if len(self.recent) < 2:
            return None
        (t0, r0), (t1, r1) = self.recent[0], self.recent[-1]
        return (t1 - t0) / (r1 - r0) if r1 > r0 else None

    def line(self, round_: int, loss: float) -> str:
        pace = self.pace()
        parts = [f"{self.label}: round {round_}/{self.total}", f"train loss {loss:.4f}"]
        if pace is not None:
            parts += [f"{pace:.3g} s/round", f"{duration(pace * (self.total - round_))} left"]
        if self.resumed:
            parts.append(f"resumed at round {self.start_round}")
        return ", ".join(parts)

    def _compare(self, now: float, round_: int) -> None:
        """Once, after COMPARE_AFTER rounds: the measured pace against the cost model's estimate."""
        if self.compared or self.estimate is None or round_ - self.start_round < COMPARE_AFTER:
            return
        self.compared = True
        pace = self.pace()
        self._write(f"{self.label}: {pace:.3g} s/round measured over rounds {self.start_round}-{round_}, "
                    f"{self.estimate:.3g} s/round estimated by fedsim.planning.cost ({pace / self.estimate:.2f}x); "
                    f"{duration(pace * (self.total - round_))} left at this pace", now, final=True)

    def close(self) -> None:
        """End a live line, so that what follows starts on a line of its own."""
        if self.open_line:
            self.stream.write("\n")
            self.stream.flush()
            self.open_line = False

    def _write(self, text: str, now: float, final: bool) -> None:
        if self.live:
            self.stream.write(("\r\033[K" if self.open_line else "") + text + ("\n" if final else ""))
            self.open_line = not final
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self.last_line = now
