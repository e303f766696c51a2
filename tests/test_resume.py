"""A run killed at any moment continues from its checkpoint and ends bit-identical."""

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fedsim.core.checkpoint import Checkpoint
from fedsim.core.sources import run_code_digest
from fedsim.core.stopping import HOLD_FILE_ENV
from fedsim.core.train import RunConfig, run, write_run


SRC = Path(__file__).resolve().parents[1] / "src"
ROUNDS = 40
KILLED_ROUNDS = 100
HANG_GUARD = 600  # seconds: a ceiling for what is waited for, not a pace


@pytest.fixture
def data(tiny_data):
    return tiny_data(12)


def config(data, **kw):
    return RunConfig(**{**dict(data=data, method="feddane", mu=0.1, clients_per_round=4, epochs=3,
                               batch_size=5, lr=0.05, rounds=ROUNDS), **kw})


def metrics_bytes(cfg, folder, checkpoint=None):
    metrics, record = run(cfg, checkpoint=checkpoint)
    write_run(metrics, record, folder / "metrics.csv", folder / "run.json")
    return (folder / "metrics.csv").read_bytes(), record


TRAIN_SCRIPT = """
import sys
from pathlib import Path
from fedsim.core.checkpoint import Checkpoint
from fedsim.core.train import RunConfig, run, write_run
data, folder = sys.argv[1], Path(sys.argv[2])
cfg = RunConfig(data=data, method="{method}", mu={mu}, clients_per_round=4, epochs=3, batch_size=5, lr=0.05,
                rounds={rounds}, eval_every={eval_every})
checkpoint = Checkpoint(folder / "ckpt.pt", every=2, seconds=0)
metrics, record = run(cfg, checkpoint=checkpoint)
write_run(metrics, record, folder / "metrics.csv", folder / "run.json")
checkpoint.remove()
print(record["result"]["resumed_from_round"])
"""


def start_training(data, folder, method="feddane", eval_every=1, hold=None):
    """The run of TRAIN_SCRIPT in a process of its own; with `hold`, it waits at its round boundaries
    from the round that file holds on, while the file exists (fedsim.core.stopping)."""
    env = {**os.environ, "PYTHONPATH": str(SRC), **({HOLD_FILE_ENV: str(hold)} if hold is not None else {})}
    script = TRAIN_SCRIPT.format(rounds=KILLED_ROUNDS, method=method, mu=MU[method], eval_every=eval_every)
    return subprocess.Popen([sys.executable, "-c", script, data, str(folder)], env=env,
                            stdout=subprocess.PIPE, text=True)


def saved_round(path):
    """The round of the state in the checkpoint file at `path` (written atomically: whole or absent),
    None while there is none."""
    try:
        return torch.load(path, weights_only=True)["round"]
    except FileNotFoundError:
        return None


# FedDANE, and methods with state (SCAFFOLD's control variates, pipelined FedDANE's stale gradient)
MU = {"feddane": 0.1, "scaffold": 0.0, "feddane_pipelined": 0.1}


# and a run whose metrics are computed every 5 rounds: its checkpoints hold fewer rows than rounds
@pytest.mark.parametrize("method, eval_every", [*((method, 1) for method in MU), ("feddane", 5)])
def test_sigkill_then_rerun_matches_an_uninterrupted_run(data, tmp_path, method, eval_every):
    """The kill comes as soon as the run is seen to have saved its state of a random round of its
    first half: wherever it then is (training, evaluating, writing its next checkpoint). Driven by the
    run's own progress, not by time: a hold file from a later round on keeps it from ending before
    the kill, at any pace."""
    reference, _ = metrics_bytes(config(data, rounds=KILLED_ROUNDS, method=method, mu=MU[method],
                                          eval_every=eval_every), tmp_path)

    seed = int(os.environ.get("KILL_DELAY_SEED", random.randrange(2**32)))
    print(f"KILL_DELAY_SEED={seed}")  # a failure names the checkpoint it killed after: rerun with it set
    # TRAIN_SCRIPT saves every 2 rounds: its saves of rounds 2, 4, ..., KILLED_ROUNDS / 2 (the first half)
    kill_after = 2 * random.Random(seed).randint(1, KILLED_ROUNDS // 4)
    folder = tmp_path / "killed"
    folder.mkdir()
    hold, hold_round = tmp_path / "hold", KILLED_ROUNDS // 2 + 2  # it waits from there on: it cannot end first
    hold.write_text(str(hold_round))
    proc = start_training(data, folder, method, eval_every, hold=hold)
    try:
        deadline = time.monotonic() + HANG_GUARD
        seen, checkpoint, polls = None, folder / "ckpt.pt", 0
        while True:  # each save replaces the file: read its round when it changes, and now and then anyway
            try:  # (two saves within one mtime tick may reuse the inode: the same stamp)
                info = checkpoint.stat()
                stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
            except FileNotFoundError:
                stamp = None
            polls += 1
            if stamp is not None and (stamp != seen or polls % 50 == 0):
                seen = stamp
                round_ = saved_round(checkpoint)
                if round_ is not None and round_ >= kill_after:
                    break
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, f"no checkpoint of round {kill_after} after {HANG_GUARD} s"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:  # held, it would wait for ever
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL  # killed, not ended by itself
    assert not (folder / "run.json").exists()
    killed_at = saved_round(folder / "ckpt.pt")
    print(f"killed with its checkpoint of round {killed_at}, once it had saved round {kill_after}")
    # killed after its save of round `kill_after`, at the latest at its hold (which comes before that round's save)
    assert kill_after <= killed_at < hold_round

    proc = start_training(data, folder, method, eval_every)
    resumed = proc.communicate(timeout=HANG_GUARD)[0].strip()
    assert proc.returncode == 0
    assert resumed != "None" and int(resumed) >= kill_after  # it did continue, not start over
    assert (folder / "metrics.csv").read_bytes() == reference
    assert not (folder / "ckpt.pt").exists()


@pytest.mark.parametrize("damage", ["torn", "garbage"])
def test_corrupt_checkpoint_starts_over_with_a_warning(data, tmp_path, damage):
    reference, _ = metrics_bytes(config(data), tmp_path)
    checkpoint = Checkpoint(tmp_path / "ckpt.pt")
    early, _ = run(config(data, rounds=9))
    params = torch.zeros(11, 4)  # the tiny dataset's MCLR: 10 features + bias, 4 classes
    checkpoint.save(config(data), 10, params, early.to_dict("records"), {})
    assert checkpoint.load(config(data), params, {})[0] == 10  # intact, it would be resumed from
    blob = checkpoint.path.read_bytes()
    checkpoint.path.write_bytes(blob[: len(blob) // 2] if damage == "torn" else b"\x00garbage" * 100)

    with pytest.warns(UserWarning, match="ignoring checkpoint"):
        resumed, record = metrics_bytes(config(data), tmp_path / "x", checkpoint)
    assert resumed == reference and record["result"]["resumed_from_round"] is None


def test_checkpoint_of_other_settings_is_ignored(data, tmp_path):
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=5, seconds=0)
    run(config(data, rounds=12, mu=1.0), checkpoint=checkpoint)  # leaves its round-10 state behind
    assert checkpoint.path.exists()
    reference, _ = metrics_bytes(config(data), tmp_path)
    with pytest.warns(UserWarning, match="other settings"):
        resumed, _ = metrics_bytes(config(data), tmp_path / "x", checkpoint)
    assert resumed == reference


@pytest.mark.parametrize("stream", [None, "numpy-pcg64"])  # None: saved before checkpoints named theirs
def test_checkpoint_of_another_shuffle_stream_is_ignored(data, tmp_path, stream):
    """A state saved under other mini-batch draws would continue with different ones: start over."""
    checkpoint = Checkpoint(tmp_path / "ckpt.pt")
    params = torch.zeros(11, 4)
    checkpoint.save(config(data), 10, params, run(config(data, rounds=9))[0].to_dict("records"), {})
    saved = torch.load(checkpoint.path, weights_only=True)
    assert saved["shuffle_stream"] == record_stream(data, tmp_path)
    del saved["shuffle_stream"]
    if stream is not None:
        saved["shuffle_stream"] = stream
    torch.save(saved, checkpoint.path)
    with pytest.warns(UserWarning, match="another mini-batch stream"):
        assert checkpoint.load(config(data), params, {}) is None


@pytest.mark.parametrize("code", [None, "0" * 64])  # None: saved before checkpoints held their code's digest
def test_checkpoint_of_other_code_is_ignored(data, tmp_path, code):
    """A state another version of the method, model or round loop saved would continue under this one's: a
    fix would resume the bug's rounds. Start over."""
    checkpoint = Checkpoint(tmp_path / "ckpt.pt")
    params = torch.zeros(11, 4)
    checkpoint.save(config(data), 10, params, run(config(data, rounds=9))[0].to_dict("records"), {})
    saved = torch.load(checkpoint.path, weights_only=True)
    assert saved["code"] == run_code_digest(config(data).method)
    saved.pop("code")
    torch.save(saved if code is None else {**saved, "code": code}, checkpoint.path)
    with pytest.warns(UserWarning, match="saved by other code"):
        assert checkpoint.load(config(data), params, {}) is None


def record_stream(data, folder):
    """The stream a run of these settings records (run.json's shuffle_stream)."""
    return metrics_bytes(config(data, rounds=1), folder / "stream")[1]["shuffle_stream"]


def test_the_fingerprint_holds_every_setting_but_how_the_data_is_read(data):
    """A checkpoint resumes a run with the same result and numerics settings; threads and load
    change no bit (fedsim.core.settings: EXECUTION). The text is the one checkpoints have held since
    before the settings were declared in one place, so those checkpoints still resume."""
    from fedsim.core.checkpoint import _fingerprint

    cfg = config(data)
    assert json.loads(_fingerprint(cfg)).keys() == {f.name for f in dataclasses.fields(RunConfig)} - {
        "threads", "load", "model", "eval_every", "dissimilarity", "keep_subnormals"}
    assert "model" in json.loads(_fingerprint(dataclasses.replace(cfg, model="mclr")))
    assert "eval_every" in json.loads(_fingerprint(dataclasses.replace(cfg, eval_every=2)))
    assert "dissimilarity" in json.loads(_fingerprint(dataclasses.replace(cfg, dissimilarity=False)))
    assert "keep_subnormals" in json.loads(_fingerprint(dataclasses.replace(cfg, keep_subnormals=True)))
    assert _fingerprint(cfg) == _fingerprint(dataclasses.replace(cfg, threads=2, load="stream"))
    assert _fingerprint(cfg) != _fingerprint(dataclasses.replace(cfg, dtype="float64"))
    assert _fingerprint(RunConfig(data="d.h5", method="feddane_authors")) == (
        '{"batch_size": 10, "clients_per_round": 10, "data": "d.h5", "device": "cpu", "dtype": "float32", '
        '"engine": "auto", "epochs": 20, "eval_devices": null, "init": null, "lr": 0.01, "method": "feddane", '
        '"mu": 0.0, "options": {"correction": "authors"}, "rng": "fedsim", "rounds": 200, '
        '"second_subset": "independent", "seed": 0, "selection": "uniform", "theory": false}')


def test_authors_shuffle_state_survives_a_resume(data, tmp_path):
    """rng=authors: each device's count of local epochs is run state (its batches compound over
    them); a run resumed from a checkpoint ends bit-identical to one never interrupted."""
    authors = dict(rng="authors", second_subset="same", options={"correction": "authors"}, epochs=2)
    reference, _ = metrics_bytes(config(data, **authors), tmp_path)
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=7, seconds=0)
    run(config(data, **authors, rounds=ROUNDS - 1), checkpoint=checkpoint)  # leaves round 35 behind
    saved = torch.load(checkpoint.path, weights_only=True)
    assert saved["round"] == 35 and int(saved["state"]["epochs_done"].sum()) == 35 * 4 * 2
    # ...not the same settings (rounds differ): make it look like this run's own checkpoint
    from fedsim.core.checkpoint import _fingerprint
    saved["settings"] = _fingerprint(config(data, **authors))
    torch.save(saved, checkpoint.path)
    resumed, record = metrics_bytes(config(data, **authors), tmp_path / "x", checkpoint)
    assert record["result"]["resumed_from_round"] == 35 and resumed == reference
    # the state matters: resumed with every count at zero, the run ends elsewhere
    saved["state"]["epochs_done"].zero_()
    torch.save(saved, checkpoint.path)
    assert metrics_bytes(config(data, **authors), tmp_path / "y", checkpoint)[0] != reference


@pytest.mark.parametrize("method, mu", [("scaffold", 0.0), ("feddane_pipelined", 0.1)])
def test_method_state_survives_a_resume_and_matters(data, tmp_path, method, mu):
    """A method's state is checkpointed with the model: resumed, the run ends bit-identical; resumed
    with the state zeroed, it ends elsewhere (so the state is really what carries it)."""
    cfg = config(data, method=method, mu=mu)
    reference, _ = metrics_bytes(cfg, tmp_path)
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=7, seconds=0)
    run(config(data, method=method, mu=mu, rounds=ROUNDS - 1), checkpoint=checkpoint)  # leaves round 35 behind
    saved = torch.load(checkpoint.path, weights_only=True)
    assert saved["round"] == 35 and set(saved["state"]) - {"counts"} and \
        all(k.startswith("method.") for k in saved["state"] if k != "counts")  # counts: the costs so far
    from fedsim.core.checkpoint import _fingerprint
    saved["settings"] = _fingerprint(cfg)
    torch.save(saved, checkpoint.path)
    resumed, record = metrics_bytes(cfg, tmp_path / "x", checkpoint)
    assert record["result"]["resumed_from_round"] == 35 and resumed == reference
    for name, value in saved["state"].items():
        if name != "counts":
            value.zero_()
    torch.save(saved, checkpoint.path)
    assert metrics_bytes(cfg, tmp_path / "y", checkpoint)[0] != reference


def test_a_run_logging_the_theory_resumes_bit_identical(data, tmp_path):
    """--theory keeps the power iteration's warm start as run state: checkpointed with the rest."""
    cfg = config(data, theory=True)
    reference, _ = metrics_bytes(cfg, tmp_path)
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=7, seconds=0)
    run(config(data, theory=True, rounds=ROUNDS - 1), checkpoint=checkpoint)
    saved = torch.load(checkpoint.path, weights_only=True)
    assert saved["state"]["theory_vector"].any()
    from fedsim.core.checkpoint import _fingerprint
    saved["settings"] = _fingerprint(cfg)
    torch.save(saved, checkpoint.path)
    resumed, record = metrics_bytes(cfg, tmp_path / "x", checkpoint)
    assert record["result"]["resumed_from_round"] == 35 and resumed == reference


def test_a_checkpoint_waits_for_both_its_rounds_and_its_seconds(data, tmp_path, monkeypatch):
    """Saves at the rounds `every` names once `seconds` have passed since the last save; a run
    shorter than `seconds` writes none (a save costs a few ms per round of a 2-second run)."""
    import fedsim.core.checkpoint

    now, saved = [0.0], []
    monkeypatch.setattr(fedsim.core.checkpoint.time, "monotonic", lambda: now[0])
    real_save = Checkpoint.save
    monkeypatch.setattr(Checkpoint, "save", lambda self, cfg, round_, *rest: (saved.append(round_),
                                                                              real_save(self, cfg, round_, *rest)))

    def tick(row):  # 4 s per round
        now[0] += 4.0

    run(config(data, rounds=12), on_round=tick, checkpoint=Checkpoint(tmp_path / "a.pt", every=2, seconds=10))
    assert saved == [4, 8, 12]  # 16 s in at round 4; round 6 is 8 s after that save, round 8 16 s; ...
    saved.clear()
    run(config(data, rounds=12), on_round=tick, checkpoint=Checkpoint(tmp_path / "b.pt", every=2, seconds=3600))
    assert saved == []
