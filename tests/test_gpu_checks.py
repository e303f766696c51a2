"""benchmarks/gpu_checks.sh in dry mode: each command's steps on the CPU at tiny sizes, so that a typo in
the script fails here and not on a lent GPU machine, whose time is counted."""

import os
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from helpers.leaf_files import make_gutenberg_plays
from helpers.tiny_lstm import write_leaf_like

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_checks.sh"
CURVE = "Shakespeare FedAvg"
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


def named(results: dict[str, str | None], prefix: str) -> str:
    return next(name for name in results if name.startswith(prefix))


def assert_stopped_at_round_2(logs: Path, run: str) -> None:
    """A training step held at round 2 and stopped there, as its time limit stops it on the GPU: its
    metrics come from its checkpoint, which it then removes."""
    rounds = pd.read_csv(logs / f"{run}_metrics.csv")
    assert rounds["round"].tolist() == [0, 1] and rounds["train_loss"].notna().all()
    assert not list(logs.glob(f"{run}.ckpt")) and not list(logs.glob("*.hold"))


@pytest.mark.parametrize("with_text", [True, False])
def test_command_1_runs_every_step_dry(tmp_path, with_text):
    """With a Shakespeare text, LEAF's Shakespeare is built from it and FedAvg trains on it; without, the
    curve step says why it is skipped."""
    text = [make_gutenberg_plays(tmp_path / "plays.txt.gz")] if with_text else []
    logs = tmp_path / "logs"
    status, output = dry_run(1, logs, *text)
    assert status == 0, output
    results = step_results(output)
    assert len(results) == (8 if with_text else 7), output
    curve = named(results, CURVE)
    assert all(result is not None and result.startswith("ok") for name, result in results.items()
               if name != curve or with_text), results
    calibration = pd.read_json(logs / "cost_calibration.json", typ="series")
    assert calibration["device"] == "cpu" and {"shakespeare", "sent140"} <= set(calibration.index)
    assert (logs / "gpu_checks_1.log").read_text().strip().endswith("0 step(s) failed or timed out")
    if with_text:
        assert_stopped_at_round_2(logs, "shakespeare_fedavg")
    else:
        assert results[curve].startswith("skipped: no Shakespeare text given"), results
        assert not (logs / "shakespeare_fedavg_metrics.csv").exists()


@pytest.mark.parametrize("with_data", [True, False])
def test_command_2_runs_every_step_dry(tmp_path, with_data):
    """With a Sent140 file, the end-to-end run trains on it; without one, on a stand-in of the real
    shapes built there, and the step's header and result line say its curve means nothing."""
    data = [write_leaf_like(tmp_path / "sent140.h5", "sent140")] if with_data else []
    logs = tmp_path / "logs"
    status, output = dry_run(2, logs, *data)
    assert status == 0, output
    results = step_results(output)
    assert len(results) == (4 if with_data else 5), output
    assert all(result is not None and result.startswith("ok") for result in results.values()), results
    e2e = named(results, E2E)
    assert ("STAND-IN" in e2e and "its curve is not" in e2e) == (not with_data)
    assert_stopped_at_round_2(logs, "sent140_fedavg")
    if not with_data:
        standin = re.search(r"^Sent140 STAND-IN .*: .*, (\d+) devices", output, re.MULTILINE)
        assert standin and int(standin.group(1)) == 772, output
        assert re.search(rf"^{re.escape(e2e)}: metrics of 1 rounds", output, re.MULTILINE), output


def test_the_sent140_stand_in_has_the_real_builds_shapes(tmp_path, monkeypatch):
    """The stand-in is read as a Sent140 file: the paper's device count and mean size, 25 ids a tweet,
    ids inside the embedding, the unknown word's row last and zero, and the provenance saying stand-in."""
    import h5py
    import numpy as np

    from fedsim.data.format import FederatedDataset
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    from sent140_standin import build_standin

    out = tmp_path / "standin.h5"
    build_standin(out, vocab=500, seed=3)
    with FederatedDataset(out) as ds:
        sizes = ds.train_sizes + ds.test_sizes
        assert (ds.kind, ds.num_devices, tuple(ds.feature_shape), ds.num_classes) == ("sent140", 772, (25,), 2)
        assert sizes.min() > 30 and 45 < sizes.mean() < 60
        assert ds.attrs["provenance"]["stand_in"] is True
        ids = ds.load("train").x
    with h5py.File(out) as f:
        embedding = f["embedding"][:]
    assert embedding.shape == (501, 300) and not embedding[-1].any() and embedding[:-1].std() > 0.1
    assert ids.min() >= 0 and ids.max() == 500 and (ids < 500).any()
