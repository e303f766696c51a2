"""benchmarks/gpu_checks.sh in dry mode: each command's steps on the CPU at tiny sizes, so that a typo in
the script fails here and not on a lent GPU machine, whose time is counted."""

import os
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from helpers.tiny_lstm import write_leaf_like

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_checks.sh"
E2E = "Sent140 FedAvg end to end"


def dry_run(command: int, log_dir: Path, *args) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # its pytest: a session of its own
    done = subprocess.run(["bash", str(SCRIPT), str(command), str(log_dir), *map(str, args)], check=False,
                          env={**env, "GPU_CHECKS_DRY": "1"}, capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout + done.stderr


def step_results(output: str) -> dict[str, str | None]:
    """Each step's name (its header: `== NAME (at most N s, hh:mm:ss)`) -> its result line's text, or None."""
    names = re.findall(r"^== (.+) \(at most \d+ s, [\d:]+\)$", output, re.MULTILINE)
    found = {name: re.search(rf"^== {re.escape(name)}: (.+)$", output, re.MULTILINE) for name in names}
    return {name: m.group(1) if m else None for name, m in found.items()}


def test_command_1_runs_every_step_dry(tmp_path):
    status, output = dry_run(1, tmp_path)
    assert status == 0, output
    results = step_results(output)
    assert len(results) == 6, output
    assert all(result is not None and result.startswith("ok") for result in results.values()), results
    calibration = pd.read_json(tmp_path / "cost_calibration.json", typ="series")
    assert calibration["device"] == "cpu" and {"shakespeare", "sent140"} <= set(calibration.index)
    assert (tmp_path / "gpu_checks_1.log").read_text().strip().endswith("0 step(s) failed or timed out")


@pytest.mark.parametrize("with_data", [True, False])
def test_command_2_runs_every_step_dry(tmp_path, with_data):
    """With a Sent140 file, the end-to-end run is stopped at a round boundary, as its time limit stops it
    on the GPU, and its metrics come from its checkpoint; without one, that step says why it is skipped."""
    data = [write_leaf_like(tmp_path / "sent140.h5", "sent140")] if with_data else []
    logs = tmp_path / "logs"
    status, output = dry_run(2, logs, *data)
    assert status == 0, output
    results = step_results(output)
    assert len(results) == 4 and all(result is not None for result in results.values()), results
    e2e = next(name for name in results if name.startswith(E2E))
    assert all(result.startswith("ok") for name, result in results.items() if name != e2e), results
    metrics = logs / "sent140_fedavg_metrics.csv"
    if with_data:
        assert results[e2e].startswith("ok"), output
        rounds = pd.read_csv(metrics)
        assert rounds["round"].tolist() == [0, 1] and rounds["train_loss"].notna().all()  # held at round 2, stopped
        assert not list(logs.glob("sent140_fedavg.ckpt")) and not list(logs.glob("*.hold"))
    else:
        assert results[e2e].startswith("skipped: no Sent140 dataset file given"), results
        assert not metrics.exists()
