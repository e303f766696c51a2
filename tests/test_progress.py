"""A run says how far it is: progress lines at an interval, the time left, a resume, a divergence,
and a pace compared with the cost model's estimate; the run computes the same with or without them."""

import io

import pytest

from fedsim.cli import main
from fedsim.planning.progress import Progress
from fedsim.core.records import write_run
from fedsim.core.train import RunConfig, run



class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def rows(losses, start=0):
    return [{"round": start + t, "train_loss": loss} for t, loss in enumerate(losses)]


def drive(progress, clock, losses, seconds_per_round, start=0):
    for row in rows(losses, start):
        progress(row)
        clock.now += seconds_per_round
    return progress.stream.getvalue().splitlines()


def test_a_line_at_start_then_every_interval_with_pace_and_time_left():
    clock, out = FakeClock(), io.StringIO()
    progress = Progress("fedavg mu=0 on s", total=100, every=30, stream=out, clock=clock, live=False)
    lines = drive(progress, clock, [2.0] * 100, seconds_per_round=4.0)  # rounds 0..99 of 100
    assert lines[0] == "fedavg mu=0 on s: starting, 100 rounds, train loss 2.0000"
    # 4 s a round: a line every 8 rounds (32 s >= 30 s), never two in one round
    assert [line.split(",")[0] for line in lines[1:4]] == [f"fedavg mu=0 on s: round {r}/100" for r in (8, 16, 24)]
    assert lines[1] == "fedavg mu=0 on s: round 8/100, train loss 2.0000, 4 s/round, 6 min left"
    assert len(lines) == 1 + 99 // 8


def test_a_short_run_writes_only_its_start_line():
    clock, out = FakeClock(), io.StringIO()
    progress = Progress("x", total=200, every=30, stream=out, clock=clock, live=False)
    assert len(drive(progress, clock, [1.0] * 201, seconds_per_round=0.01)) == 1


def test_a_resumed_run_says_from_which_round():
    clock, out = FakeClock(), io.StringIO()
    progress = Progress("x", total=50, every=0, stream=out, clock=clock, live=False)
    lines = drive(progress, clock, [1.0, 0.9, 0.8], seconds_per_round=2.0, start=35)
    assert lines[0] == "x: resumed from its checkpoint at round 35, 50 rounds, train loss 1.0000"
    assert lines[1] == "x: round 36/50, train loss 0.9000, 2 s/round, 28 s left, resumed at round 35"


def test_a_run_resumed_between_its_evaluations_names_both_rounds():
    """eval_every 5, resumed at round 7: the first metrics after the resume are round 10's."""
    clock, out = FakeClock(), io.StringIO()
    progress = Progress("x", total=50, every=0, stream=out, clock=clock, live=False)
    progress.resume(7)
    progress({"round": 10, "train_loss": 1.0})
    clock.now += 10
    progress({"round": 15, "train_loss": 0.9})
    assert out.getvalue().splitlines() == [
        "x: resumed from its checkpoint at round 7, 50 rounds, train loss 1.0000 at round 10",
        "x: round 15/50, train loss 0.9000, 2 s/round, 1 min left, resumed at round 7"]


@pytest.mark.parametrize("loss", [float("nan"), float("inf")])
def test_a_diverging_loss_is_told_at_once(loss):
    clock, out = FakeClock(), io.StringIO()
    progress = Progress("x", total=50, every=1000, stream=out, clock=clock, live=False)
    lines = drive(progress, clock, [1.0, 5.0, loss], seconds_per_round=1.0)
    assert len(lines) == 2 and lines[1] == f"x: round 2/50, train loss {loss} (diverged: the run stops here)"


def test_a_non_finite_initial_loss_is_the_datas_not_a_divergence():
    clock, out = FakeClock(), io.StringIO()
    progress = Progress("x", total=50, every=1000, stream=out, clock=clock, live=False)
    progress({"round": 0, "train_loss": float("nan")})
    assert out.getvalue().splitlines() == [
        "x: starting, 50 rounds, train loss nan (before any training: the data or the initial model are not finite; "
        "the run stops here)"]

def test_the_pace_is_compared_with_the_cost_estimate_once():
    clock, out = FakeClock(), io.StringIO()
    progress = Progress("x", total=1000, every=1e9, stream=out, clock=clock, estimate=5.0, live=False)
    lines = drive(progress, clock, [1.0] * 10, seconds_per_round=10.0)
    assert lines[1:] == ["x: 10 s/round measured over rounds 0-3, 5 s/round estimated by fedsim.planning.cost (2.00x); "
                         "2.8 h left at this pace"]


def test_a_terminal_gets_one_updating_line():
    clock, out = FakeClock(), io.StringIO()
    progress = Progress("x", total=10, every=30, stream=out, clock=clock, live=True)
    drive(progress, clock, [1.0] * 5, seconds_per_round=1.0)
    progress.close()
    text = out.getvalue()
    assert text.startswith("x: starting, 10 rounds, train loss 1.0000\n")
    assert text.count("\n") == 2 and text.count("\r\033[K") == 3  # rounds 1-4 on one line, then its end
    assert "round 4/10" in text.splitlines()[-1]


@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


def test_the_run_is_the_same_with_and_without_progress_lines(data, tmp_path):
    config = RunConfig(data=data, method="feddane", mu=0.1, clients_per_round=3, epochs=2, batch_size=5, rounds=6)
    out = io.StringIO()
    quiet = run(config)
    told = run(config, on_round=Progress("x", config.rounds, every=0, stream=out, live=False))
    assert len(out.getvalue().splitlines()) == 1 + 5  # the start line, then one per round but the last
    for name, (metrics, record) in {"quiet": quiet, "told": told}.items():
        write_run(metrics, record, tmp_path / name / "metrics.csv", tmp_path / name / "run.json")
    assert (tmp_path / "quiet" / "metrics.csv").read_bytes() == (tmp_path / "told" / "metrics.csv").read_bytes()
    timing = ("wall_seconds", "local_sgd_seconds", "evaluation_seconds")
    assert {k: v for k, v in quiet[1]["result"].items() if k not in timing} == \
        {k: v for k, v in told[1]["result"].items() if k not in timing}


def test_fedsim_train_writes_its_progress_to_a_log(data, tmp_path, capsys):
    code = main(["train", "--data", data, "--method", "fedavg", "--clients-per-round", "3", "--epochs", "1",
                 "--rounds", "3", "--progress-seconds", "0", "--metrics", str(tmp_path / "m.csv"),
                 "--info", str(tmp_path / "r.json")])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("fedavg mu=0 on tiny: starting, 3 rounds, train loss ")
    assert [line.split(",")[0] for line in lines[1:3]] == ["fedavg mu=0 on tiny: round 1/3", "fedavg mu=0 on tiny: round 2/3"]
    assert lines[3].startswith("fedavg mu=0 on tiny: done, final train loss")
