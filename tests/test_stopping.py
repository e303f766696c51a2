"""A signal stops `fedsim train` cleanly: at a round boundary, its checkpoint written there, one
line on stderr, exit status 128 + the signal's number, no traceback and no metrics; the rerun
resumes and ends byte-identical to a run never stopped (fedsim.core.stopping)."""

import os
import re
import signal
import subprocess
import sys

import pandas as pd
import pytest
import torch

from fedsim import cli
from fedsim.core import stopping
from fedsim.core.checkpoint import Checkpoint
from fedsim.core.stopping import HOLD_FILE_ENV, StopSignals, Stopped
from fedsim.core.train import RunConfig, run, write_run

from helpers.workflow import env

ROUNDS = 40
SETTINGS = dict(method="feddane", mu=0.1, clients_per_round=4, epochs=3, batch_size=5, lr=0.05)


@pytest.fixture(scope="session")
def data(tiny_data):
    return tiny_data(12)


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    """metrics.csv of the run never stopped."""
    return metrics_bytes(config(data), tmp_path_factory.mktemp("reference"))


def config(data, **kw):
    return RunConfig(**{**SETTINGS, "data": data, "rounds": ROUNDS, **kw})


def metrics_bytes(cfg, folder, checkpoint=None):
    return metrics_bytes_with(cfg, folder, checkpoint=checkpoint)


def metrics_bytes_with(cfg, folder, **run_args):
    metrics, record = run(cfg, **run_args)
    write_run(metrics, record, folder / "metrics.csv", folder / "run.json")
    return (folder / "metrics.csv").read_bytes()


def train_argv(data, folder, checkpoint=True, **settings):
    argv = ["train", "--data", data, "--rounds", str(ROUNDS), "--metrics", str(folder / "metrics.csv"),
            "--info", str(folder / "run.json")]
    for name, value in {**SETTINGS, **settings}.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    return argv + (["--checkpoint", str(folder / "ckpt.pt")] if checkpoint else [])


def stop_line(folder, name):
    """The line of a run stopped at a round boundary, with its checkpoint written there."""
    return re.compile(rf"fedsim train: stopped at round (\d+) of {ROUNDS} by {name}; checkpoint written to "
                      rf"{re.escape(str(folder / 'ckpt.pt'))}; rerun the same command to resume")


def stop_held_train(data, folder, signum, hold_round="", **settings):
    """`fedsim train` in a process of its own, held at its round boundary `hold_round` (empty: its first)
    until `signum` comes: its stop line's round, after the process's own checks."""
    hold = folder / "hold"
    hold.write_text(hold_round)
    command = [sys.executable, "-m", "fedsim", *train_argv(data, folder, **settings)]
    proc = subprocess.Popen(command, env={**env(), HOLD_FILE_ENV: str(hold)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:  # the progress' start line, then the pause's
            if line.startswith("fedsim train: paused at round"):
                break
        assert proc.poll() is None, line
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:  # held, it would wait for ever
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert proc.returncode == 128 + signum, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    stopped = stop_line(folder, signal.Signals(signum).name).fullmatch(err.strip())
    assert stopped, err
    assert not (folder / "metrics.csv").exists() and not (folder / "run.json").exists()
    return int(stopped[1])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_train_at_a_round_boundary_and_the_rerun_resumes_exactly(data, reference, tmp_path, signum,
                                                                              capsys):
    """As `timeout -s TERM` (a walltime, scancel) or Ctrl-C does, once the run has started its rounds.
    A hold file keeps the run at its first round boundary until the signal comes, at any pace."""
    round_ = stop_held_train(data, tmp_path, signum)
    assert round_ == 1  # held there
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert saved["round"] == round_ and len(saved["rows"]) == round_

    assert cli.main(train_argv(data, tmp_path)) == 0  # the same command, rerun (in this process: seconds less)
    assert f"resumed from its checkpoint at round {round_}" in capsys.readouterr().out
    assert (tmp_path / "metrics.csv").read_bytes() == reference
    assert not (tmp_path / "ckpt.pt").exists()


def test_a_run_evaluated_every_few_rounds_resumes_where_it_stopped(data, tmp_path, capsys):
    """With eval_every 5 the checkpoint at round 7 holds the metrics of rounds 0 and 5 alone; the
    rerun resumes there, not from round 0, and ends as the run never stopped."""
    (tmp_path / "reference").mkdir()
    reference = metrics_bytes(config(data, eval_every=5), tmp_path / "reference")
    assert stop_held_train(data, tmp_path, signal.SIGTERM, hold_round="7", eval_every=5) == 7
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert [row["round"] for row in saved["rows"]] == saved["metric_rounds"] == [0, 5]

    assert cli.main(train_argv(data, tmp_path, eval_every=5)) == 0
    assert "resumed from its checkpoint at round 7" in capsys.readouterr().out
    assert (tmp_path / "metrics.csv").read_bytes() == reference
    assert list(pd.read_csv(tmp_path / "metrics.csv")["round"]) == [*range(0, ROUNDS + 1, 5)]


def signal_at(round_, *signals):
    """An on_round callback that sends this process `signals` once round `round_` is evaluated."""
    def on_round(row):
        if row["round"] == round_:
            for signum in signals:
                os.kill(os.getpid(), signum)
    return on_round


def test_sigusr1_stops_at_the_next_boundary_with_a_checkpoint_there(data, reference, tmp_path):
    """A site's warning before the walltime: the round in progress finishes, its state is saved even
    where no periodic checkpoint was due."""
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=1000, seconds=0)
    with StopSignals(graceful=True) as stop, pytest.raises(Stopped) as stopped:
        run(config(data), on_round=signal_at(5, signal.SIGUSR1), checkpoint=checkpoint, stop=stop)
    assert (stopped.value.round, stopped.value.rounds, stopped.value.signum) == (6, ROUNDS, signal.SIGUSR1)
    assert torch.load(checkpoint.path, weights_only=True)["round"] == checkpoint.saved_round == 6
    resumed = Checkpoint(tmp_path / "ckpt.pt")
    assert metrics_bytes(config(data), tmp_path, resumed) == reference and resumed.saved_round == 6


@pytest.mark.parametrize("signals", [(signal.SIGINT, signal.SIGINT), (signal.SIGUSR1, signal.SIGTERM)])
def test_a_second_signal_drops_the_round_and_keeps_the_last_checkpoint(data, reference, tmp_path, signals):
    """Where a round takes longer than the grace time, a second signal (a second Ctrl-C, SIGTERM after
    SIGUSR1) stops at once: the checkpoint saved before stands, whole, and resumes exactly."""
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=2, seconds=0)
    with StopSignals(graceful=True) as stop, pytest.raises(Stopped) as stopped:
        run(config(data), on_round=signal_at(5, *signals), checkpoint=checkpoint, stop=stop)
    assert stopped.value.dropped and stopped.value.round is None and stopped.value.signum == signals[1]
    assert torch.load(checkpoint.path, weights_only=True)["round"] == checkpoint.saved_round == 4
    assert metrics_bytes(config(data), tmp_path, Checkpoint(tmp_path / "ckpt.pt")) == reference


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_a_machines_signal_delivered_twice_is_one_stop(data, reference, tmp_path, signum):
    """GNU timeout sends its SIGTERM to the run and then to the run's process group, and a batch system
    to every process of a job: the same signal again during the round is the same stop, at the boundary
    with the checkpoint there, not a second one dropping the round."""
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=1000, seconds=0)
    with StopSignals(graceful=True) as stop, pytest.raises(Stopped) as stopped:
        run(config(data), on_round=signal_at(5, signum, signum), checkpoint=checkpoint, stop=stop)
    assert (stopped.value.round, stopped.value.dropped, stopped.value.signum) == (6, False, signum)
    assert torch.load(checkpoint.path, weights_only=True)["round"] == 6
    assert metrics_bytes(config(data), tmp_path, Checkpoint(tmp_path / "ckpt.pt")) == reference


def test_a_second_signal_at_the_boundary_lets_the_checkpoint_be_written(data, reference, tmp_path, monkeypatch):
    """A batch system's SIGTERM reaches every process of the job, and a wrapper sends its own on: the
    second may come while the run saves its state at the boundary the first stopped it at. That save is
    all a second signal could drop, so it goes on, and the rerun resumes from it."""
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=1000, seconds=0)
    save = checkpoint.save

    def save_after_another_signal(*args):
        os.kill(os.getpid(), signal.SIGTERM)
        save(*args)

    monkeypatch.setattr(checkpoint, "save", save_after_another_signal)
    with StopSignals(graceful=True) as stop, pytest.raises(Stopped) as stopped:
        run(config(data), on_round=signal_at(5, signal.SIGTERM), checkpoint=checkpoint, stop=stop)
    assert (stopped.value.round, stopped.value.dropped) == (6, False)
    assert torch.load(checkpoint.path, weights_only=True)["round"] == 6
    assert metrics_bytes(config(data), tmp_path, Checkpoint(tmp_path / "ckpt.pt")) == reference


def test_a_run_waits_at_its_round_boundary_while_the_hold_file_exists(data, reference, tmp_path, monkeypatch):
    """FEDSIM_HOLD_FILE: after its first round the run polls the file and goes on once it is gone, the
    same run as one never held. Its waits are counted, not timed: the third removes the file."""
    hold = tmp_path / "hold"
    hold.touch()
    monkeypatch.setenv(HOLD_FILE_ENV, str(hold))
    evaluated, waits = [], []

    def wait(seconds):
        waits.append(len(evaluated))  # rounds evaluated when the run waits
        if len(waits) == 3:
            hold.unlink()

    monkeypatch.setattr(stopping.time, "sleep", wait)
    assert metrics_bytes_with(config(data), tmp_path, on_round=lambda row: evaluated.append(row["round"])) == reference
    assert waits == [1, 1, 1]  # at round 1's boundary, round 0 evaluated, until the file went
    assert evaluated == list(range(ROUNDS + 1))


def test_the_line_says_what_was_kept(data, tmp_path, monkeypatch, capsys):
    """In the CLI's words: nothing without --checkpoint; the older checkpoint after a second signal."""
    monkeypatch.setattr(cli, "_progress", lambda config, every: ProgressStub(signal_at(3, signal.SIGTERM)))
    assert cli.main(train_argv(data, tmp_path, checkpoint=False)) == 128 + signal.SIGTERM
    assert capsys.readouterr().err == (f"fedsim train: stopped at round 4 of {ROUNDS} by SIGTERM; nothing was kept "
                                       "(no --checkpoint file): a rerun starts over\n")
    assert not (tmp_path / "metrics.csv").exists()

    argv = train_argv(data, tmp_path) + ["--checkpoint-every", "2", "--checkpoint-seconds", "0"]
    monkeypatch.setattr(cli, "_progress", lambda config, every: ProgressStub(signal_at(3, signal.SIGUSR1, signal.SIGTERM)))
    assert cli.main(argv) == 128 + signal.SIGTERM
    assert capsys.readouterr().err == ("fedsim train: stopped by a second signal (SIGTERM), the round in progress "
                                       f"dropped; the checkpoint of round 2 in {tmp_path / 'ckpt.pt'} is kept; rerun "
                                       "the same command to resume from it\n")


class ProgressStub:
    def __init__(self, on_round):
        self.on_round = on_round

    def __call__(self, row):
        self.on_round(row)

    def resume(self, round_):
        pass

    def close(self):
        pass


def test_other_commands_stop_with_one_line(tmp_path, monkeypatch, capsys):
    import fedsim.outputs.summary

    monkeypatch.setattr(fedsim.outputs.summary, "summarise", lambda *args: os.kill(os.getpid(), signal.SIGINT))
    assert cli.main(["summarise", "--out", str(tmp_path / "runs.csv"), "run.json"]) == 128 + signal.SIGINT
    assert capsys.readouterr().err == "fedsim summarise: stopped by SIGINT\n"


def test_a_signal_the_process_ignores_stays_ignored():
    """A shell starts its background jobs with Ctrl-C ignored: the terminal's Ctrl-C is not for them."""
    before = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    try:
        with StopSignals(graceful=True) as stop:
            os.kill(os.getpid(), signal.SIGUSR1)
            assert stop.signal is None
        assert signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGUSR1, before)
