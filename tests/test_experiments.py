"""The runs table and the config checks without Snakemake (fedsim.planning.experiments, fedsim.planning.configcheck):
the default config plans the default run's runs, and a mistake is one ConfigError naming its key."""

import copy
import re
from pathlib import Path

import pandas as pd
import numpy as np
import pytest
import yaml
from snakemake.utils import update_config

from fedsim.planning import experiments, jobs
from fedsim.planning.configcheck import check_config, load_schema
from fedsim.planning.experiments import ConfigError

REPO = Path(__file__).resolve().parents[1]
SCHEMA = load_schema(REPO / "workflow" / "schemas" / "config.schema.yaml")


def default_config():
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    check_config(cfg, SCHEMA, REPO)
    return cfg


def config_with(*names):
    """config/config.yaml with the named config files over it, as `--configfile` lays them."""
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for name in names:
        update_config(cfg, yaml.safe_load((REPO / "config" / name).read_text()))
    return cfg


def stem(cfg, run):
    return experiments.run_path(cfg, run)


def test_the_default_config_plans_the_default_runs():
    """With the mu a default run's tuning chose, the plan is that run's folders
    (tests/reference: written by the workflow before the runs table existed)."""
    cfg = default_config()
    tuned = pd.read_csv(REPO / "tests" / "reference" / "default_chosen_settings.csv").to_dict("records")
    runs = experiments.runs_of(cfg, experiments.plan(cfg, tuned))
    assert {stem(cfg, run) for run in runs} == set((REPO / "tests/reference/default_runs.txt").read_text().split())
    before = experiments.plan(cfg)
    assert set(before[before["value"] == "tuned"]["experiment"]) == {"figure2", "figure3"}


def test_tuning_runs_are_the_grid_runs_of_the_tuned_methods():
    cfg = default_config()
    runs = experiments.tuning_runs(cfg, experiments.plan(cfg))
    assert {run.method for run in runs} == {"feddane", "feddane_authors", "feddane_decayed",
                                            "feddane_pipelined", "feddane_exact_gradient"}
    assert {run.value for run in runs} == {"0", "0.001", "0.01", "0.1", "1"} and not any(r.theory for r in runs)


@pytest.mark.parametrize("edit, path, problem", [
    (lambda c: c["experiments"]["figure2"].update(clients_per_round=[1, 31]), "experiments.figure2.clients_per_round",
     "31 is more than the 30 devices (uniform selection draws without replacement); dataset synthetic_iid"),
    (lambda c: c["experiments"]["theory"].update(mu_grid=[1]), "experiments.theory.mu_grid", "not with `mu`"),
    (lambda c: c["datasets"]["synthetic_iid"].update(rounds=2.0), "datasets.synthetic_iid.rounds",
     "2.0 is not of type 'integer'"),
    # K too large on the one dataset selected: that dataset is the one named
    (lambda c: c.update(only_datasets=["synthetic_1_1"]) or c["experiments"]["figure1"].update(clients_per_round=50),
     "experiments.figure1.clients_per_round", "50 is more than the 30 devices (uniform selection draws without "
                                              "replacement); dataset synthetic_1_1"),
    # a selection without its brackets: the line says how to write it
    (lambda c: c.update(only_experiments="figure1"), "only_experiments",
     "(a list: write only_experiments=[figure1] after --config, or [figure1] in a file)"),
    # a model that does not take its dataset's samples: named at the dataset entry, before any experiment
    (lambda c: c["datasets"]["synthetic_1_1"].update(model="lenet5"), "datasets.synthetic_1_1.model",
     "lenet5 takes image samples; synthetic_1_1's samples are features"),
    (lambda c: c["datasets"]["synthetic_iid"].update(model="char_lstm"), "datasets.synthetic_iid.model",
     "char_lstm takes shakespeare samples; synthetic_iid's samples are features"),
    # a missing initial model: named before any run (an existing run would otherwise keep fedsim's own init)
    (lambda c: c["simulator"].update(init="/nonexistent/init_{seed}.npz"), "simulator.init",
     "/nonexistent/init_0.npz: no such file (seed 0)"),
    # a JSON import's folder that is not there: named at its key, not as Snakemake's missing input
    (lambda c: c["datasets"].update(mine={"kind": "json", "train": "/nonexistent/train", "test": "/nonexistent/test",
                                          "lr": 0.1, "batch_size": 10, "rounds": 3, "fedprox_mu": 0})
     or c["experiments"]["figure1"]["datasets"].append("mine"), "datasets.mine.train",
     "/nonexistent/train: no such file or folder"),
    # a misspelt experiment is a new one without datasets: the line says which one it is near
    (lambda c: c["experiments"].update(figur1={"rounds": 20}), "experiments.figur1.datasets",
     "required key is missing (so are methods, epochs; did you mean experiment figure1? A new one names its "
     "datasets, methods and epochs)"),
    # every missing key of an entry at once
    (lambda c: c["datasets"].update(mine={"kind": "json", "train": "t", "test": "t"}), "datasets.mine.lr",
     "required key is missing (so are batch_size, rounds, fedprox_mu)"),
    # a method by its label: the line names its name
    (lambda c: c["experiments"]["figure1"].update(methods=["fedadam"]), "experiments.figure1.methods[0]",
     "unknown method 'fedadam' (FedAdam is fedopt); choose one of"),
    # a word where a number is due: no hint to write it as a list
    (lambda c: c["experiments"]["figure1"].update(epochs="five"), "experiments.figure1.epochs",
     "'five' is not one positive integer or a non-empty list of them"),
])
def test_a_mistake_is_one_config_error_naming_the_key(edit, path, problem):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    edit(cfg)
    with pytest.raises(ConfigError) as caught:
        check_config(copy.deepcopy(cfg), SCHEMA, REPO)
    assert caught.value.path == path and problem in caught.value.problem, caught.value
    assert "a list: write" not in caught.value.problem or "only_experiments" in path
    assert str(caught.value) == f"Config error at {path}: {caught.value.problem}" and "\n" not in str(caught.value)


def test_the_files_a_selection_leaves_out_need_not_be_there(tmp_path):
    """The file checks follow only_experiments / only_datasets: a JSON import the selection leaves out, and the
    initial models of seeds no selected experiment runs, may be missing; the selected ones may not."""
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["datasets"]["mine"] = {"kind": "json", "train": "/nonexistent/train", "test": "/nonexistent/test",
                               "lr": 0.1, "batch_size": 10, "rounds": 3, "fedprox_mu": 0}
    cfg["experiments"]["figure1"]["datasets"].append("mine")
    np.savez(tmp_path / "init-seed0.npz", w=np.zeros(1))
    cfg["simulator"] = {"init": str(tmp_path / "init-seed{seed}.npz")}
    cfg["experiments"]["mine_only"] = {"datasets": ["synthetic_iid"], "methods": ["fedavg"], "epochs": 1,
                                       "clients_per_round": 2, "seeds": [0]}
    check_config({**copy.deepcopy(cfg), "only_experiments": ["mine_only"]}, SCHEMA, REPO)
    with pytest.raises(ConfigError, match="init-seed1.npz: no such file"):
        check_config({**copy.deepcopy(cfg), "only_experiments": ["figure2"]}, SCHEMA, REPO)
    with pytest.raises(ConfigError, match="/nonexistent/train: no such file or folder"):
        check_config({**copy.deepcopy(cfg), "only_datasets": ["mine"]}, SCHEMA, REPO)


def selected(**only):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg.update(only)
    check_config(cfg, SCHEMA, REPO)
    cfg["experiments"] = experiments.selected_experiments(cfg)
    return cfg


def test_only_some_experiments_and_datasets_run_and_mu_from_follows():
    """Figure 3 on Synthetic (1,1) alone: its FedDANEs take mu from Figure 1, which stays for their
    tuning runs only (no figure, no FedAvg or FedProx, the one dataset)."""
    cfg = selected(only_experiments=["figure3"], only_datasets=["synthetic_1_1"])
    assert set(cfg["experiments"]) == {"figure3", "figure1"} and "figure" not in cfg["experiments"]["figure1"]
    assert cfg["experiments"]["figure1"]["methods"] == ["feddane", "feddane_authors"]
    table = experiments.plan(cfg)
    assert set(table["dataset"]) == {"synthetic_1_1"}
    assert set(table[table["experiment"] == "figure1"]["method"]) == {"feddane", "feddane_authors"}
    assert set(table[(table["experiment"] == "figure3") & (table["value"] == "tuned")]["method"]) == {"feddane",
                                                                                                   "feddane_authors"}


def test_a_dataset_no_selected_experiment_runs_leaves_it_out():
    cfg = selected(only_datasets=["synthetic_1_1"])
    assert "figure2" not in cfg["experiments"]  # Figure 2 has no (1,1) panel
    assert set(experiments.plan(cfg)["dataset"]) == {"synthetic_1_1"}


@pytest.mark.parametrize("only, path, problem", [
    ({"only_experiments": ["figure9"]}, "only_experiments[0]", "unknown name 'figure9'"),
    ({"only_datasets": ["synthetic_1_1", "mnist"]}, "only_datasets[1]", "unknown name 'mnist'"),
    ({"only_experiments": ["figure2"], "only_datasets": ["synthetic_1_1"]}, "only_experiments",
     "selects no experiment with a dataset"),
])
def test_a_selection_of_unknown_names_or_of_nothing_is_one_error(only, path, problem):
    with pytest.raises(ConfigError) as caught:
        selected(**only)
    assert caught.value.path == path and problem in caught.value.problem, caught.value
    assert "a list: write" not in caught.value.problem or "only_experiments" in path


def test_a_subset_of_a_configs_methods_runs_alone_whatever_its_grids():
    """`experiments={successors_cnn: {methods: [fedavg]}}`: the config's grid for Scaffnew, which this
    run leaves out, is left unused rather than refused."""
    cfg = config_with("successors-cnn.yaml")
    update_config(cfg, {"experiments": {"successors_cnn": {"methods": ["fedavg"], "rounds": 3}}})
    check_config(cfg, SCHEMA, REPO)
    plan = experiments.plan(cfg)
    assert set(plan[plan["experiment"] == "successors_cnn"]["method"]) == {"fedavg"}


def test_an_mclr_only_method_on_a_named_model_is_refused_at_the_dataset_entry():
    """DONE and the authors' FedDANE are defined for MCLR: an experiment listing one on a dataset entry
    that names another model is one error naming the entry's model, before any job."""
    cfg = config_with("paper.yaml")
    check_config(copy.deepcopy(cfg), SCHEMA, REPO)
    cfg["datasets"]["femnist"]["model"] = "cnn"
    with pytest.raises(ConfigError) as caught:
        check_config(cfg, SCHEMA, REPO)
    assert caught.value.path == "datasets.femnist.model"
    assert caught.value.problem.startswith("cnn is not an MCLR model, which feddane_authors of experiment figure1 needs")


def test_an_mclr_only_method_left_out_of_an_lstm_dataset_is_named():
    """The paper's Figure 1 lists the authors' FedDANE on every dataset; its LSTM datasets' runs leave
    it out, and the workflow says so in one line an experiment (fedsim.planning.experiments.left_out)."""
    cfg = config_with("paper.yaml")
    check_config(cfg, SCHEMA, REPO)
    plan = experiments.plan(cfg)
    lstm = plan["dataset"].isin(["sent140", "shakespeare"])
    assert "feddane_authors" in set(plan[~lstm]["method"]) and "feddane_authors" not in set(plan[lstm]["method"])
    assert "experiment figure1: feddane_authors is defined for MCLR models only, so it is left out on sent140, " \
           "shakespeare" in experiments.left_out(cfg)
    assert experiments.left_out(default_config()) == []


def test_a_run_folder_names_its_model_where_it_is_not_the_kinds_default():
    """The CNN comparison with LeNet-5 and with LEAF's CNN plans disjoint runs; naming the kind's own
    model (MCLR on FEMNIST) is the default run, in the default run's folders."""
    cfg = config_with("successors-cnn.yaml")
    plans = {}
    for model in ("lenet5", "cnn"):
        for entry in cfg["datasets"].values():
            if entry.get("model"):
                entry["model"] = model
        checked = copy.deepcopy(cfg)
        check_config(checked, SCHEMA, REPO)
        plans[model] = {stem(checked, run) for run in experiments.runs_of(checked, experiments.plan(checked))
                        if checked["datasets"][run.dataset].get("model")}
    assert plans["lenet5"] and not plans["lenet5"] & plans["cnn"]
    for model, stems in plans.items():  # the model, then the client lr where the tuning's differs from 0.03
        assert all(re.search(rf"_E1_{model}(_lr[0-9.]+)?_seed", s) for s in stems), model
    default = config_with("paper.yaml")
    named = copy.deepcopy(default)
    named["datasets"]["femnist"]["model"] = "mclr"
    check_config(default, SCHEMA, REPO)
    check_config(named, SCHEMA, REPO)
    assert experiments.plan(named).equals(experiments.plan(default))


def test_an_experiments_own_grid_replaces_the_method_files_for_that_experiment_only():
    """config/successors-cnn.yaml's `grids`: Scaffnew over its p values there; FedDyn over its file's grid."""
    cfg = yaml.safe_load((REPO / "config" / "successors.yaml").read_text())
    base = default_config()
    cfg = {**base, **cfg, "experiments": {**base["experiments"], **cfg["experiments"]}}
    cfg["experiments"]["successors"]["grids"] = {"scaffnew": [0.05, 0.1, 0.2]}
    check_config(cfg, SCHEMA, REPO)
    runs = experiments.tuning_runs(cfg, experiments.plan(cfg))
    values = {method: {run.value for run in runs if run.method == method} for method in ("scaffnew", "feddyn")}
    assert values == {"scaffnew": {"0.05", "0.1", "0.2"}, "feddyn": {"0.001", "0.01", "0.1", "1"}}


def lr_tuned_config(**figure1):
    """The default config with figure1 tuning every method's client lr (Synthetic's lr is 0.01), and beyond,
    which tunes FedDANE in figure1's setting, over the same lrs."""
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for name in ("figure1", "beyond"):
        cfg["experiments"][name].update(lr_grid=[0.003, 0.01, 0.03], **figure1)
    check_config(cfg, SCHEMA, REPO)
    return cfg


def test_an_lr_grid_tunes_every_methods_lr_jointly_with_its_setting():
    """Each method runs at every lr of the grid (FedDANE at every (mu, lr) pair); a run at the dataset's own
    lr keeps its folder, one at another lr has '_lr<lr>' in its name; FedAvg and FedProx become tuned."""
    cfg = lr_tuned_config(lr_grids={"fedprox": [0.01, 0.1]})
    plan = experiments.plan(cfg)
    mine = plan[(plan["experiment"] == "figure1") & (plan["dataset"] == "synthetic_1_1") & (plan["seed"] == "0")]
    pairs = {m: set(zip(mine[mine["method"] == m]["value"], mine[mine["method"] == m]["lr"])) for m in ("fedavg", "fedprox")}
    assert pairs == {"fedavg": {("0", "0.003"), ("0", "0.01"), ("0", "0.03")},
                     "fedprox": {("1", "0.01"), ("1", "0.1")}}  # FedProx's own lr grid; its mu the dataset's
    assert len(mine[mine["method"] == "feddane"]) == 5 * 3
    assert experiments.tuned_methods(cfg)[:3] == ["fedavg", "fedprox", "feddane"]
    tuning = experiments.tuning_runs(cfg, plan)
    assert {r.lr for r in tuning if r.method == "fedavg"} == {"0.003", "0.01", "0.03"}
    paths = {stem(cfg, r) for r in tuning}
    assert {"synthetic_1_1/fedavg/mu0_K10_E20_lr0.03_seed0", "synthetic_1_1/fedavg/mu0_K10_E20_seed0"} <= paths


def test_an_experiment_taking_its_values_from_an_lr_tuning_runs_the_chosen_pair():
    """figure2 and figure3 (mu_from: figure1) wait for figure1's tuning, then run each method at the (mu, lr)
    it chose there: FedAvg too, whose lr is now chosen."""
    cfg = lr_tuned_config()
    before = experiments.plan(cfg)
    waiting = before[(before["experiment"] == "figure3") & (before["value"] == "tuned")]
    assert set(waiting["method"]) == {"fedavg", "fedprox", "feddane", "feddane_authors"}
    assert experiments.after_tuning(cfg)
    tuned = [{"method": m, "dataset": d, "clients_per_round": 10, "epochs": 20, "rounds": 200, "chosen": mu, "lr": lr}
             for d in cfg["experiments"]["figure1"]["datasets"]
             for m, mu, lr in (("fedavg", 0, 0.03), ("fedprox", 1, 0.01), ("feddane", 0.1, 0.003),
                               ("feddane_authors", 1, 0.01))]
    after = experiments.plan(cfg, tuned)
    figure3 = after[(after["experiment"] == "figure3") & (after["dataset"] == "synthetic_1_1")]
    assert dict(zip(figure3["method"], zip(figure3["value"], figure3["lr"]))) == {
        "fedavg": ("0", "0.03"), "fedprox": ("1", "0.01"), "feddane": ("0.1", "0.003"), "feddane_authors": ("1", "0.01")}
    shown = experiments.experiment_runs(cfg, "figure1", tuned, chosen_only=True)
    assert {(r.method, r.value, r.lr) for r in shown if r.dataset == "synthetic_1_1" and r.seed == "0"} == {
        ("fedavg", "0", "0.03"), ("fedprox", "1", "0.01"), ("feddane", "0.1", "0.003"), ("feddane_authors", "1", "0.01")}


@pytest.mark.parametrize("edit, path, problem", [
    (lambda c: c["experiments"]["theory"].update(lr_grid=[0.1]), "experiments.theory.lr_grid", "not with `mu`"),
    (lambda c: c["experiments"]["figure2"].update(lr_grid=[0.1]), "experiments.figure2.lr_grid",
     "not with `mu_from` (the lr is tuned in experiment figure1)"),
    (lambda c: c["experiments"]["figure1"].update(lr_grid=[0]), "experiments.figure1.lr_grid[0]",
     "less than or equal to the minimum of 0"),
    # two experiments tuning FedDANE in one setting over different lrs: one choice could not serve both
    (lambda c: c["experiments"].update(again=dict(c["experiments"]["figure1"], lr_grid=[0.1, 1])) or
     c["experiments"]["again"].pop("figure"), "experiments.again.lr_grid",
     "tunes feddane on synthetic_iid over other values than experiment figure1 does in the same setting"),
])
def test_an_lr_grid_mistake_is_one_config_error(edit, path, problem):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    edit(cfg)
    with pytest.raises(ConfigError) as caught:
        check_config(cfg, SCHEMA, REPO)
    assert caught.value.path == path and problem in caught.value.problem, caught.value
    assert "a list: write" not in caught.value.problem or "only_experiments" in path, caught.value


def test_the_cnn_comparison_tunes_every_methods_lr_then_reruns_the_choice_on_three_seeds():
    """config/successors-cnn.yaml: on seed 0, every method over at least three client lrs (jointly with
    its own setting); then each at its chosen pair on seeds 0, 1 and 2, known once the tuning has run."""
    cfg = config_with("successors-cnn.yaml")
    check_config(cfg, SCHEMA, REPO)
    cfg["experiments"] = experiments.selected_experiments(cfg)
    plan = experiments.plan(cfg)
    tuning = plan[plan["experiment"] == "successors_cnn_tuning"]
    per_method = tuning.groupby(["dataset", "method"])["lr"].nunique()
    assert len(per_method) == 2 * 14 and per_method.min() >= 3
    assert set(tuning["seed"]) == {"0"}
    chosen = plan[plan["experiment"] == "successors_cnn"]
    assert set(chosen["value"]) == {"tuned"} and set(chosen["seed"]) == {"0", "1", "2"}
    assert len(chosen) == 2 * 14 * 3


def test_a_run_record_round_trips_to_its_folder():
    """Each run of a plan is one record (experiments.RunSpec) with every field its train job reads; its folder
    (run_path, the only writer) finds it again among the plan's runs, and names it alone: two records, two
    folders. The folder is the one the paths had before the record (tests/reference/default_runs.txt)."""
    cfg = default_config()
    tuned = pd.read_csv(REPO / "tests" / "reference" / "default_chosen_settings.csv").to_dict("records")
    runs = experiments.runs_of(cfg, experiments.plan(cfg, tuned))
    by_path = experiments.runs_by_path(cfg, experiments.plan(cfg, tuned))
    assert len(by_path) == len(runs) == len(set(runs))
    assert all(by_path[experiments.run_path(cfg, run)] == run for run in runs)
    run = by_path["synthetic_1_1/feddane/mu1_K10_E20_seed0"]
    assert run == experiments.RunSpec(dataset="synthetic_1_1", method="feddane", setting="mu", value="1", lr="0.01",
                                      K="10", E="20", rounds=200, model=None, theory=False, seed="0")
    theory = next(r for r in runs if r.theory)
    assert experiments.run_path(cfg, theory).endswith("_theory_seed0")
    other = experiments.RunSpec(**{**vars(run), "rounds": 20, "lr": "0.03", "model": "mymodel"})
    assert experiments.run_path(cfg, other) == "synthetic_1_1/feddane/mu1_K10_E20_T20_mymodel_lr0.03_seed0"


def test_a_run_is_listed_in_the_order_of_its_fields():
    """runs_of lists runs as the namedtuple of folder names before the record did (the tables' inputs keep their
    order): by dataset, method, value, K, E, then rounds, model and lr as the folder spells them, theory, seed."""
    cfg = lr_tuned_config()
    runs = experiments.runs_of(cfg, experiments.plan(cfg))
    folders = [experiments.run_parts(cfg, run) for run in runs]
    assert folders == sorted(folders, key=lambda parts: parts[:2] + parts[3:])
    mine = [experiments.run_path(cfg, r) for r in runs if r.dataset == "synthetic_1_1" and r.method == "fedavg"
            and r.seed == "0" and r.K == "10"]
    assert mine == ["synthetic_1_1/fedavg/mu0_K10_E20_seed0", "synthetic_1_1/fedavg/mu0_K10_E20_lr0.003_seed0",
                    "synthetic_1_1/fedavg/mu0_K10_E20_lr0.03_seed0"]


def test_a_dataset_of_another_model_leaves_the_others_runs_on_their_default():
    """One entry naming a model beside entries that do not: pandas holds the plan's model column as strings
    with NaN for the others, which must stay runs of their default model (no '_nan' folder, no --model nan)."""
    cfg = config_with()
    cfg["datasets"]["synthetic_1_1"]["model"] = "cnn"  # (the config check would refuse it; the plan does not care)
    cfg.setdefault("method_options", {})  # (the config check's default)
    runs = experiments.runs_of(cfg, experiments.plan(cfg))
    assert {run.model for run in runs} == {None, "cnn"}
    assert all((run.model == "cnn") == (run.dataset == "synthetic_1_1") for run in runs)
    assert not [run for run in runs if "nan" in experiments.run_path(cfg, run)]
    csv = jobs.planned_runs_csv(cfg, experiments.plan(cfg), lambda run: experiments.run_path(cfg, run))
    assert "nan" not in csv.lower()
