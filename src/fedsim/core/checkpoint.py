"""A run's checkpoint: where and how often it saves its state, and the settings a saved state
belongs to (fedsim.core.settings.fingerprint), so that a killed run continues bit-identical.

The round loop (fedsim.core.train) decides what the state is; this module only writes, reads and
checks it.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from . import shuffle
from ..data.atomic import atomic_path
from .settings import CHECKPOINT_EVERY, CHECKPOINT_SECONDS, RunConfig, fingerprint
from .sources import run_code_digest


@dataclass
class Checkpoint:
    """Where and how often a run saves its state, to continue after a kill.

    fedsim's randomness is a function of (seed, round, device), never of a generator's
    state, so the global model, the metrics so far and the run's `state` (the method's own,
    as SCAFFOLD's control variates; the authors' shuffle: each device's epoch count; with
    `theory`, the power iteration's start) are the whole state: a resumed run ends
    bit-identical to one never interrupted. The file is written atomically; one that cannot
    be read, or belongs to other settings, another mini-batch stream (fedsim.core.shuffle) or
    other code (a method, model or simulator file edited since: fedsim.core.sources), is
    ignored with a warning.
    """

    path: Path
    every: int = CHECKPOINT_EVERY
    seconds: float = CHECKPOINT_SECONDS  # at least this long since the last save (or since this was made)
    _last: float = dataclasses.field(default_factory=lambda: time.monotonic(), init=False, repr=False, compare=False)
    # the round of the state in the file, as this process last wrote or read it (None: none yet)
    saved_round: int | None = dataclasses.field(default=None, init=False, compare=False)

    def due(self, round_: int, start: int) -> bool:
        """Whether to save before round `round_` of a run that started (or resumed) at `start`."""
        return round_ > start and round_ % self.every == 0 and time.monotonic() - self._last >= self.seconds

    def save(self, config: RunConfig, round_: int, params: torch.Tensor, rows: list[dict],
             state: dict[str, torch.Tensor]) -> None:
        saved = {"settings": _fingerprint(config), "shuffle_stream": shuffle.stream_of(config.rng),
                 "code": run_code_digest(config.method), "round": round_,
                 "metric_rounds": [row["round"] for row in rows],
                 "params": params.cpu(), "rows": rows, "state": {k: v.cpu() for k, v in state.items()}}
        with atomic_path(self.path) as tmp:
            torch.save(saved, tmp)
        self._last, self.saved_round = time.monotonic(), round_

    def load(self, config: RunConfig, params: torch.Tensor, state: dict[str, torch.Tensor]):
        """(round, params, rows, state) saved for these settings, or None to start from round 0;
        `state` is the run's initial state (names and shapes the saved one must have)."""
        if not self.path.exists():
            return None
        try:
            saved = torch.load(self.path, weights_only=True)
            round_, values, rows, extra = saved["round"], saved["params"], saved["rows"], saved["state"]
            if saved["settings"] != _fingerprint(config):
                raise ValueError("it was saved by a run with other settings")
            if saved.get("shuffle_stream") != shuffle.stream_of(config.rng):  # none: before streams were named
                raise ValueError("it was saved by a run with another mini-batch stream")
            if saved.get("code") != run_code_digest(config.method):  # a fix must not resume the bug's rounds
                raise ValueError("it was saved by other code (the method's, a model's or the simulator's files "
                                 "have changed since)")
            # which rounds carry metrics, as saved (a file from before it said so: its rows' rounds)
            metric_rounds = saved.get("metric_rounds", [row["round"] for row in rows])
            if values.shape != params.shape or not 0 < round_ <= config.rounds \
                    or [row["round"] for row in rows] != metric_rounds \
                    or metric_rounds != [t for t in range(round_) if config.evaluates(t)] \
                    or {k: v.shape for k, v in extra.items()} != {k: v.shape for k, v in state.items()}:
                raise ValueError("its contents are inconsistent")
        except Exception as err:  # a torn or foreign file must never stop or bend the run
            warnings.warn(f"ignoring checkpoint {self.path}: {err}; starting from round 0", stacklevel=2)
            return None
        self.saved_round = round_
        return round_, values.to(params), rows, extra

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _fingerprint(config: RunConfig) -> str:
    """The settings a checkpoint must share with the run resuming it (fedsim.core.settings: not the
    EXECUTION fields, which leave every bit as it is)."""
    return fingerprint(config)
