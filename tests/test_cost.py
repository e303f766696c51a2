"""The LSTM datasets' cost estimate (fedsim.planning.cost): the model on hand-computable cases, the sizes it
reads, and the lines the workflow prints (tests/test_leaf_workflow.py checks them in a real dry run).
No timing here: benchmarks/lstm_round.py --estimate compares the estimate with a measured round."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedsim.planning import cost, experiments
from fedsim.planning.configcheck import check_config, load_schema
from fedsim.data.format import write_dataset
from fedsim.kinds import KINDS
from fedsim.specs import model_spec

REPO = Path(__file__).resolve().parents[1]
CONSTS = {"step_s": 0.5, "row_s": 0.01, "eval_row_s": 0.001, "grad_row_s": 0.002}


def sizes(train, test):
    return cost.Sizes(np.array(train), np.array(test), "test")


def two_device_file(path):
    """A Shakespeare-kind file of two devices: 2 and 4 train samples, 1 and 2 test samples."""
    x = np.zeros((9, 80), dtype=np.int32)
    write_dataset(path, name="d", kind="shakespeare", num_classes=80, clients=["a", "b"],
                  train_x=x[:6], train_y=np.zeros(6, dtype=np.int64), train_offsets=[0, 2, 6],
                  test_x=x[:3], test_y=np.zeros(3, dtype=np.int64), test_offsets=[0, 1, 3], provenance={})
    return path


def test_one_round_by_hand():
    # K = all 3 devices: the longest has 2 x ceil(25 / 10) = 6 steps, all together 2 x (1 + 2 + 3) = 12
    s = [5, 15, 25]
    assert list(cost.local_steps(s, 2, 10)) == [2, 4, 6]
    assert cost.expected_max(cost.local_steps(s, 2, 10), 3) == 6
    assert cost.round_train_seconds(s, 3, 2, 10, CONSTS) == pytest.approx(0.5 * 6 + 0.01 * 10 * 12)


def test_a_run_by_hand():
    # 2 rounds, K = 3 of 3, E = 2, B = 10; FedDANE's gradients on all 3 (rows 5 + 15 + 25, all < 50)
    run = cost.run_cost(sizes([5, 15, 25], [1, 2, 3]), rounds=2, k=3, epochs=2, batch_size=10, consts=CONSTS,
                        gradients="sampled")
    assert run.train_s == pytest.approx(2 * 4.2)
    assert run.grads_s == pytest.approx(2 * 0.002 * 45)
    # 3 evaluations (rounds 0, 1, 2) of 45 + 6 rows and the 45 gradient rows
    assert run.eval_s == pytest.approx(3 * (0.001 * 51 + 0.002 * 45))
    assert run.total_s == pytest.approx(run.train_s + run.grads_s + run.eval_s)
    # eval_devices: 1 of 3 devices evaluates a third of the rows (in expectation)
    sampled = cost.run_cost(sizes([5, 15, 25], [1, 2, 3]), rounds=2, k=3, epochs=2, batch_size=10, consts=CONSTS,
                            eval_devices=1)
    assert sampled.eval_s == pytest.approx(run.eval_s / 3) and sampled.grads_s == 0


def test_gradient_rows_follow_the_models_rule():
    # n < 50: all n; else 50 x min(n // 50, 4)
    assert list(cost.grad_rows([3, 49, 50, 149, 1000])) == [3, 49, 50, 100, 200]


def test_expected_maximum_of_a_uniform_draw():
    # 2 of {1, 2, 3}: pairs (1,2) (1,3) (2,3), maxima 2, 3, 3
    assert cost.expected_max([3, 1, 2], 2) == pytest.approx(8 / 3)
    assert cost.expected_max([3, 1, 2], 1) == pytest.approx(2)
    # weighted, with replacement: P(max <= v) = cdf(v)^k
    values, weights = np.array([1.0, 2.0]), np.array([1.0, 3.0])
    assert cost.expected_max((values, weights), 2, "weighted") == pytest.approx(1 * 1 / 16 + 2 * 15 / 16)


def test_table_sizes_match_the_papers_mean():
    s = cost.table_sizes("shakespeare", 2000)
    total = s.train + s.test
    assert len(total) == 2000 and abs(total.mean() / 3616 - 1) < 0.05
    assert abs(s.train.sum() / total.sum() - 0.8) < 0.01
    assert "Table 1" in s.source


def test_sizes_come_from_the_built_file(tmp_path):
    path = two_device_file(tmp_path / "d.h5")
    cfg = {"datasets": {"d": {"kind": "shakespeare"}}}
    s = cost.dataset_sizes(cfg, "d", path)
    assert list(s.train) == [2, 4] and list(s.test) == [1, 2] and s.source == str(path)
    assert "Table 1" in cost.dataset_sizes(cfg, "d", tmp_path / "missing.h5").source


def load_config(*files):
    def merge(a, b):
        if isinstance(a, dict) and isinstance(b, dict):
            return {**a, **{k: merge(a.get(k), v) for k, v in b.items()}}
        return b

    cfg = {}
    for name in ("config/config.yaml", *files):
        cfg = merge(cfg, yaml.safe_load((REPO / name).read_text()))
    check_config(cfg, load_schema(REPO / "workflow/schemas/config.schema.yaml"), REPO)
    cfg["experiments"] = experiments.selected_experiments(cfg)
    return cfg


def test_the_default_config_costs_nothing_to_print():
    cfg = load_config()
    assert cost.plan_costs(cfg, experiments.plan(cfg)) == []
    assert cost.report_lines([], "defaults") == []


def test_the_paper_config_prints_a_line_per_lstm_dataset_and_warns_on_a_cpu():
    cfg = load_config("config/paper.yaml")
    costs = cost.plan_costs(cfg, experiments.plan(cfg))
    assert [c.dataset for c in costs] == ["sent140", "shakespeare"]
    shakespeare = costs[1]
    # Figure 1: FedAvg, FedProx, FedDANE at 5 mu; Figure 3: the three at one (tuned) mu; 2 seeds
    assert shakespeare.runs == (2 + 5 + 3) * 2 and set(shakespeare.rounds) == {40}
    lines = cost.report_lines(costs, "defaults", gpu=False)
    assert lines[0].startswith("Cost estimate, sent140: 20 runs of 800 rounds")
    assert any(line.startswith("WARNING: shakespeare: a run would take up to") for line in lines)
    assert all("simulator.device is auto" in line for line in lines if line.startswith("  sent140:"))
    # with a GPU visible, device auto: the CPU figures, no warning
    assert not any(line.startswith("WARNING") for line in cost.report_lines(costs, "defaults", gpu=True))
    # on the CPU, a warning whatever this machine has
    for c in costs:
        c.device = "cpu"
    assert any(line.startswith("WARNING") for line in cost.report_lines(costs, "defaults", gpu=True))


def test_runs_that_may_go_to_a_gpu_are_priced_on_the_reference_gpu_too():
    """device auto with CPU figures: each LSTM dataset's line adds the same plan on GPU_REFERENCE's GPU,
    cheaper than on a CPU core; a run pinned to the CPU gets no GPU figure."""
    cfg = load_config("config/paper.yaml")
    plan = experiments.plan(cfg)
    costs, reference = cost.plan_costs(cfg, plan), cost.plan_costs(cfg, plan, constants=cost.GPU_REFERENCE)
    lines = cost.report_lines(costs, "defaults", gpu=False, reference=reference)
    for c, ref in zip(costs, reference):
        (line,) = [line for line in lines if line.startswith(f"  {c.dataset}: simulator.device is auto")]
        assert f"on one {cost.GPU_REFERENCE_NAME}" in line and f"{ref.total_s / 3600:,.0f} GPU-hours" in line
        assert ref.total_s < c.total_s / 10
    for c in costs:
        c.device = "cpu"
    assert not any(cost.GPU_REFERENCE_NAME in line for line in cost.report_lines(costs, "d", reference=reference))


def test_a_short_shakespeare_run_on_a_cpu_is_no_warning():
    cfg = load_config("config/paper.yaml")
    cfg["datasets"]["shakespeare"]["rounds"] = 2
    cfg["experiments"] = {"one": {"datasets": ["shakespeare"], "methods": ["fedavg"], "clients_per_round": 10,
                                  "epochs": 1, "seeds": [0]}}
    costs = cost.plan_costs(cfg, experiments.plan(cfg))
    (c,) = costs
    assert c.runs == 1 and c.rounds == [2]
    lines = cost.report_lines(costs, "defaults", gpu=False)
    assert not any(line.startswith("WARNING") for line in lines)
    assert math.isclose(c.total_s, c.parts.total_s)


def test_constants_from_a_calibration_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"shakespeare": {"step_s": 1.5}}')
    constants, source = cost.load_constants(path)
    assert constants["shakespeare"]["step_s"] == 1.5
    assert constants["shakespeare"]["row_s"] == cost.DEFAULTS["shakespeare"]["row_s"]
    assert "calibrated" in source
    assert cost.load_constants(tmp_path / "none.json")[0] is cost.DEFAULTS


def test_the_calibrate_command_writes_what_fedsim_calibration_measures(tmp_path, monkeypatch):
    """`fedsim cost --calibrate` measures with fedsim.planning.calibration (torch, the real models: not run
    here), and fedsim.planning.cost reads the file it writes."""
    from fedsim.planning import calibration
    from fedsim import cli

    measured = {kind: {**consts, "step_s": 1.0} for kind, consts in cost.DEFAULTS.items()}
    monkeypatch.setattr(calibration, "calibrate", lambda steps, device: {**measured, "device": device})
    out = tmp_path / "benchmarks" / cost.CALIBRATION_FILE
    assert cli.main(["cost", "--calibrate", "--steps", "1", "--out", str(out)]) == 0
    constants, source = cost.load_constants(out)
    assert constants == measured and source.startswith("calibrated on cpu")


def test_a_gpu_calibration_gives_the_estimate_in_that_gpus_hours():
    """A calibration measured on CUDA: the lines give GPU-hours and no CPU warning (the CPU's figures say
    where a GPU is needed; the GPU's are what it costs there)."""
    cfg = load_config("config/paper.yaml")
    costs = cost.plan_costs(cfg, experiments.plan(cfg))
    cpu = cost.report_lines(costs, "calibrated on cpu (c.json)", gpu=False)
    gpu = cost.report_lines(costs, "calibrated on cuda (NVIDIA H200) (c.json)", gpu=False)
    assert any("core-hours" in line for line in cpu) and any(line.startswith("WARNING") for line in cpu)
    assert any("GPU-hours in all on one GPU per run" in line for line in gpu)
    assert not any(line.startswith("WARNING") or "not calibrated" in line for line in gpu)


def test_durations_read_well():
    assert cost.duration(30) == "30 s" and cost.duration(600) == "10 min"
    assert cost.duration(5 * 3600) == "5.0 h" and cost.duration(3 * 86400) == "3.0 days"


def test_a_runs_own_estimate_per_round_is_the_workflows_for_that_run(tmp_path):
    """What a run's progress line compares its pace with (fedsim.planning.progress): the same model, its own file."""
    from fedsim.core.settings import RunConfig

    path = two_device_file(tmp_path / "d.h5")
    config = RunConfig(data=str(path), method="feddane", clients_per_round=2, epochs=3, batch_size=2, rounds=4)
    constants = {"shakespeare": CONSTS}
    expected = cost.run_cost(cost.file_sizes(path), rounds=4, k=2, epochs=3, batch_size=2, consts=CONSTS,
                             gradients="sampled").total_s / 4
    assert cost.run_round_seconds(config, "shakespeare", constants) == pytest.approx(expected)
    assert cost.run_round_seconds(config, "synthetic", constants) is None  # no model for MCLR
    cuda = RunConfig(data=str(path), method="feddane", device="cuda")
    assert cost.run_round_seconds(cuda, "shakespeare", constants) is None  # nor for a GPU


# ---------------------------------------------------------------------------------------
# A training job's request: minutes, retries, checkpoints (tests/test_slurm.py runs them on SLURM)
# ---------------------------------------------------------------------------------------

def paper_sizes(cfg):
    return lambda dataset: cost.dataset_sizes(cfg, dataset)


def test_a_job_asks_for_its_estimate_with_a_margin_and_a_start_or_the_cap():
    # 1 h estimated: 1.5 h with the margin, and 2 minutes to start
    assert cost.requested_minutes(3600) == 90 + 2
    assert cost.job_minutes(3600, None) == 92 and cost.job_minutes(3600, 60) == 60 and cost.job_minutes(3600, 120) == 92
    assert cost.requested_minutes(1) == 1 + 2  # a second of work still asks a whole minute


def test_an_mclr_run_costs_seconds_per_device_and_epoch():
    cfg = load_config()
    args = dict(method="feddane", k=10, epochs=20, rounds=200, sizes_of=None)
    seconds = cost.train_seconds(cfg, "synthetic_1_1", theory=False, **args)
    assert seconds == pytest.approx(200 * 20 * 10 * KINDS["synthetic"].mclr_device_epoch_s)
    assert cost.train_seconds(cfg, "synthetic_1_1", theory=True, **args) == pytest.approx(3 * seconds)


def test_a_cnn_run_and_the_built_image_kinds_have_estimates():
    """A dataset entry of another model is priced as that model; MCLR on a built kind as FEMNIST. A CNN's
    metrics rows are forward passes by default (no dissimilarities: fedsim.specs), full steps with them."""
    cfg = load_config()
    args = dict(method="fedavg", k=10, epochs=1, rounds=50, theory=False, sizes_of=None)
    cfg["datasets"]["synthetic_1_1"]["model"] = "cnn"
    metrics_rows = 51 * 10 / cost.DEFAULT_TRAIN_FRACTION
    for dissimilarity, per_row in [(None, cost.FORWARD_SHARE), (True, 1.0)]:
        cfg["datasets"]["synthetic_1_1"]["dissimilarity"] = dissimilarity
        assert cost.train_seconds(cfg, "synthetic_1_1", **args) == pytest.approx(
            (50 * 10 + metrics_rows * per_row) * cost.CONV_DEVICE_ROWS * model_spec("cnn").sample_seconds)
    cfg["datasets"]["pool"] = {"kind": "dirichlet"}
    assert cost.train_seconds(cfg, "pool", **args) == pytest.approx(50 * 10 * KINDS["femnist"].mclr_device_epoch_s)


def test_a_cnn_runs_estimate_counts_its_samples_gradients_and_evaluations():
    """Rows a run trains on, the full gradients its method sends, the metrics rows of every
    `eval_every`-th round on `eval_devices` devices: each at the model's seconds per sample."""
    cfg = load_config()
    cfg["datasets"]["synthetic_1_1"].update(model="lenet5", eval_devices=5, eval_every=5, dissimilarity=True)
    sizes = cost.Sizes(np.full(20, 100), np.full(20, 10), "a built file")
    args = dict(k=10, epochs=1, rounds=50, theory=False, sizes_of=lambda dataset: sizes)
    evaluations = 11 * (5 / 20) * 20 * 110  # rounds 0, 5, ..., 50 on a quarter of the rows
    fedavg = cost.train_seconds(cfg, "synthetic_1_1", method="fedavg", **args)
    assert fedavg == pytest.approx((50 * 10 * 100 + evaluations) * model_spec("lenet5").sample_seconds)
    feddane = cost.train_seconds(cfg, "synthetic_1_1", method="feddane", **args)  # + K devices' full gradients
    assert feddane - fedavg == pytest.approx(50 * 10 * 100 * model_spec("lenet5").sample_seconds)


def test_an_lstm_jobs_estimate_is_the_printed_one():
    """The request comes from the estimate the workflow prints (plan_costs), run by run."""
    cfg = load_config("config/paper.yaml")
    plan = experiments.plan(cfg)
    printed = {c.dataset: sorted(c.seconds) for c in cost.plan_costs(cfg, plan)}
    per_job = {}
    for run, device, seconds in cost.plan_seconds(cfg, plan, paper_sizes(cfg)):
        per_job.setdefault(run.dataset, []).append(seconds)
    for dataset in ("sent140", "shakespeare"):
        assert sorted(per_job[dataset]) == pytest.approx(printed[dataset])
    # the paper's Shakespeare run (40 rounds, K 10, E 20) asks for days, not minutes
    longest = cost.requested_minutes(max(per_job["shakespeare"]))
    assert longest > 3 * 24 * 60


def test_retries_take_the_longest_run_through_jobs_of_at_most_the_cap():
    cfg = load_config("config/paper.yaml")
    plan = experiments.plan(cfg)
    assert cost.train_retries(cfg, plan, paper_sizes(cfg)) is None  # no cap: the profile's count
    cfg["simulator"]["max_runtime"] = 240
    retries = cost.train_retries(cfg, plan, paper_sizes(cfg))
    longest = max(seconds for _, _, seconds in cost.plan_seconds(cfg, plan, paper_sizes(cfg)))
    jobs = retries + 1 - cost.SPARE_RETRIES
    # those jobs, each advancing the run by USEFUL_SHARE of 240 minutes, cover its request; one fewer does not
    assert jobs * cost.USEFUL_SHARE * 240 >= cost.requested_minutes(longest) > (jobs - 1) * cost.USEFUL_SHARE * 240
    assert cost.SPARE_RETRIES >= 1
    cfg["simulator"]["max_runtime"] = 10 ** 6  # a cap above every run: one job each, and the spares
    assert cost.train_retries(cfg, plan, paper_sizes(cfg)) == cost.SPARE_RETRIES


def test_a_cpu_round_longer_than_the_cap_stops_planning_in_one_line():
    cfg = load_config("config/paper.yaml")
    plan = experiments.plan(cfg)
    cfg["simulator"]["max_runtime"] = 240
    cost.check_max_runtime(cfg, plan, paper_sizes(cfg))  # device auto: the LSTM runs on a GPU, unmeasured
    cfg["simulator"]["device"] = "cpu"  # a Shakespeare round at E 20 takes hours on a CPU core
    with pytest.raises(experiments.ConfigError) as err:
        cost.check_max_runtime(cfg, plan, paper_sizes(cfg))
    line = str(err.value)
    assert line.startswith("Config error at simulator.max_runtime: 240 min is too short for a round of shakespeare")
    assert "\n" not in line
    cfg["simulator"]["max_runtime"] = None
    cost.check_max_runtime(cfg, plan, paper_sizes(cfg))
    cfg["simulator"]["max_runtime"] = 48 * 60  # a 48-hour partition holds a Shakespeare round
    cost.check_max_runtime(cfg, plan, paper_sizes(cfg))


def test_a_capped_job_checkpoints_before_its_cut():
    from fedsim.core.settings import CHECKPOINT_EVERY, CHECKPOINT_SECONDS

    assert cost.job_checkpoints(None) == (CHECKPOINT_EVERY, CHECKPOINT_SECONDS)  # fedsim's defaults
    # under a cap, at every round boundary past a tenth of the cap (or the default's 30 s)
    assert cost.job_checkpoints(1) == (1, 6) and cost.job_checkpoints(240) == (1, CHECKPOINT_SECONDS)
