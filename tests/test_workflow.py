"""The Snakemake workflow: lint, the default DAG (dry run), config validation, and a tiny
real run end to end with incremental reruns.

Every Snakemake call runs in a temporary copy of Snakefile, workflow/ and config/ (so the
repository's results/ and .snakemake/ are never touched), with PYTHONPATH pointing at the
repository's src/ so no `pip install -e .` is needed (helpers/workflow.py).
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedsim import methods
from fedsim.core.stopping import HOLD_FILE_ENV
from helpers.workflow import (REPO, copy_workflow, default_config, env, job_counts, report_text, snakemake,
                              write_config)

pytestmark = pytest.mark.workflow


# ---------------------------------------------------------------------------------------
# Lint and the default DAG
# ---------------------------------------------------------------------------------------


def test_lint_is_clean():
    code, out = snakemake(REPO, "--lint")
    assert code == 0, out
    assert "Lints for" not in out


# The default DAG before tuning: Figure 1's 4 datasets x (FedAvg, FedProx, 5 mu of each
# FedDANE: the paper's and the authors' code's); Figure 2's FedAvg and FedProx on 3 datasets
# at K = 1, 5, 30 (K = 10 is Figure 1's); Figure 3's FedAvg and FedProx on 4 datasets at
# K = 30, E = 1; all of it per seed. The FedDANEs' runs of Figures 2 and 3 join once `tune`
# has chosen Figure 1's mu.
SEEDS = 2
# beyond: per dataset and seed SCAFFOLD and three FedDANE variants x 5 mu (the rest shared with Figure 1);
# theory: FedDANE at 3 fixed mu on the 4 datasets, one seed, runs of their own (they log the constants)
THEORY_TRAIN = 4 * 3
STATIC_TRAIN = SEEDS * (4 * 12 + 3 * 3 * 2 + 4 * 2 + 4 * (1 + 3 * 5)) + THEORY_TRAIN
AFTER_TUNING_TRAIN = SEEDS * 2 * (3 * 3 + 4)


@pytest.fixture(scope="module")
def default_dry_run(tmp_path_factory):
    """(workflow copy, output) of one dry run of the default config, shared by the tests that read it."""
    workdir = copy_workflow(tmp_path_factory.mktemp("default") / "wf")
    code, out = snakemake(workdir, "--dry-run", "--printshellcmds", "--cores", "4")
    assert code == 0, out
    return workdir, out


def test_default_dag_dry_run(default_dry_run):
    _, out = default_dry_run
    assert default_config()["seeds"] == list(range(SEEDS))
    assert job_counts(out) == {
        "build_dataset": 4,
        "train": STATIC_TRAIN,
        "tune": 1,
        "summarise": 1,
        "figure": 4,
        "findings": 4,
        "tables": 4,
        "tuning_figure": 1,
        "theory_figure": 1,
        "all": 1,
        "plan": 1,
        "total": STATIC_TRAIN + 22,
    }
    # paths: canonical mu text, one folder per run
    for expected in (
        "results/datasets/synthetic_0.5_0.5.h5",
        "results/runs/synthetic_iid/fedavg/mu0_K10_E20_seed0/metrics.csv",
        "results/runs/synthetic_0_0/fedprox/mu1_K10_E20_seed1/run.json",
        "results/runs/synthetic_1_1/feddane/mu0.001_K10_E20_seed0/run.json",
        "results/runs/synthetic_1_1/feddane_authors/mu0.001_K10_E20_seed0/run.json",
        "results/runs/synthetic_0.5_0.5/fedavg/mu0_K1_E20_seed1/run.json",
        "results/runs/synthetic_1_1/fedprox/mu1_K30_E1_seed0/run.json",
        "results/summary/runs.csv",
        "results/summary/chosen_settings.csv",
        "results/summary/findings_figure2.csv",
        "results/figures/tuning.png",
        "results/runs/synthetic_1_1/feddane/mu100_K10_E20_theory_seed0/run.json",
        "results/figures/theory.png",
    ):
        assert expected in out, expected
    for name in ("figure1", "figure2", "figure3", "beyond"):
        for suffix in ("", "_test_acc"):
            for ext in ("pdf", "png"):
                assert f"results/figures/{name}{suffix}.{ext}" in out
    assert "synthetic_1_1/fedavg/mu0_K1_E20" not in out  # Figure 2 leaves out (1,1)
    # the paper's hyper-parameters reach the package CLI
    assert re.search(
        r"python -m fedsim\.warm train --data results/datasets/synthetic_iid\.h5 --method fedprox"
        r" --rng fedsim"
        r" --mu 1 --clients-per-round 10 --epochs 20 --batch-size 10 --lr 0\.01 --rounds 200"
        r" --seed 0 --selection uniform --second-subset independent",
        out,
    ), out
    assert re.search(r"--data results/datasets/synthetic_0_0\.h5 --method feddane_authors"
                     r" --rng fedsim --mu 0\.01 ", out), out
    # only the theory experiment's runs log the constants, and they are all of its runs
    theory_jobs = re.findall(r"python -m fedsim\.warm train [^\n]* --theory [^\n]*", out)
    assert len(theory_jobs) == THEORY_TRAIN and all("_theory_seed0/run.json" in job for job in theory_jobs)
    assert "_theory_seed1" not in out


def test_the_train_rule_has_one_wildcard_the_runs_folder(default_dry_run):
    """Each training job is found by its run's folder alone (the runs table's record of it gives the rest)."""
    _, out = default_dry_run
    jobs = re.findall(r"^rule train:\n(?:    .*\n)*?    wildcards: (.*)$", out, flags=re.M)
    assert len(jobs) == STATIC_TRAIN and all(re.fullmatch(r"run=[^,= ]+", w) for w in jobs), jobs[:3]


def test_planned_runs_are_the_default_runs_at_their_paths(default_dry_run):
    """planned_runs.csv, written by its rule alone (before any training): the default config's runs
    at the paths the code before the runs table gave them (tests/reference/default_runs.txt: the run
    folders of a default run), the runs known only after tuning at the mu their tuning chose there
    (default_chosen_settings.csv), every run at its dataset's rounds, lr and model."""
    workdir, _ = default_dry_run
    code, out = snakemake(workdir, "results/summary/planned_runs.csv", "--cores", "1")
    assert code == 0 and "1 of 1 steps" in out, out
    plan = pd.read_csv(workdir / "results/summary/planned_runs.csv", dtype=str, keep_default_na=False)
    tuned = pd.read_csv(REPO / "tests/reference/default_chosen_settings.csv")
    chosen = {(row.method, row.dataset): f"{row.chosen:g}" for row in tuned.itertuples()}
    stems = set()
    assert {(row.rounds, row.lr, row.model) for row in plan.itertuples()} == {("200", "0.01", "")}
    for row in plan.itertuples():
        mu = chosen[row.method, row.dataset] if row.mu == "tuned" else row.mu
        theory = "_theory" if row.theory == "True" else ""
        stem = f"{row.dataset}/{row.method}/{row.setting}{mu}_K{row.clients_per_round}_E{row.epochs}{theory}_seed{row.seed}"
        assert row.run in ("", f"results/runs/{stem}"), row
        stems.add(stem)
    assert stems == set((REPO / "tests/reference/default_runs.txt").read_text().split())
    # Figures 2 and 3's FedDANEs (Figure 2's at K = 10 are Figure 1's runs once the mu is known)
    assert (plan["mu"] == "tuned").sum() == SEEDS * 2 * (3 * 4 + 4)
    # every setting that shapes a run's result (fedsim.core.settings) is a column, named as runs.csv names it
    from fedsim.core.settings import setting_columns
    assert set(setting_columns()) <= set(plan) and not {"K", "E"} & set(plan)


def test_per_setting_tuning_runs_the_grid_everywhere(tmp_path):
    """tuning.per_setting: every experiment runs FedDANE's whole grid; nothing waits for tuning."""
    workdir = copy_workflow(tmp_path / "wf")
    cfg = default_config()
    cfg["tuning"]["per_setting"] = True
    write_config(workdir, cfg)
    code, out = snakemake(workdir, "--dry-run", "--cores", "1")
    assert code == 0, out
    assert job_counts(out)["train"] == STATIC_TRAIN + SEEDS * 2 * 5 * (3 * 3 + 4)
    assert "mu0.1_K1_E20_seed1" in out and "mu0.001_K30_E1_seed0" in out


def test_rounds_of_an_experiment_get_their_own_runs(tmp_path):
    workdir = copy_workflow(tmp_path / "wf")
    cfg = default_config()
    cfg["experiments"] = {"short": dict(cfg["experiments"]["figure1"], rounds=20, seeds=[3])}
    write_config(workdir, cfg)
    code, out = snakemake(workdir, "--dry-run", "--printshellcmds", "--cores", "1")
    assert code == 0, out
    assert job_counts(out)["train"] == 4 * 12
    assert "results/runs/synthetic_iid/feddane/mu0.1_K10_E20_T20_seed3/run.json" in out
    assert "--rounds 20 --seed 3" in out and "--rounds 200" not in out


def test_nested_numbers_on_the_command_line(tmp_path):
    """`--config` with a nested number: Snakemake hands it over as text ('20'), which was refused with
    "'20' is not of type 'integer'"; it is typed as a config file would type it."""
    workdir = copy_workflow(tmp_path / "wf")
    code, out = snakemake(workdir, "--dry-run", "--printshellcmds", "--cores", "1",
                          "--config", "experiments={figure1: {rounds: 20}}", "seeds=[3]", "tuning={fraction: 0.2}")
    assert code == 0, out
    assert "results/runs/synthetic_iid/fedavg/mu0_K10_E20_T20_seed3/run.json" in out
    assert "--fraction 0.2 --out results/summary/chosen_settings.csv" in out


def test_mu_paths_are_canonical(tmp_path):
    """0.0, 1.0e-3 and 1.0 in the config give the same paths as 0, 0.001 and 1."""
    workdir = copy_workflow(tmp_path / "wf")
    cfg = default_config()
    cfg["tuning"]["mu_grid"] = [0.0, 1.0e-3, 1.0]
    cfg["datasets"]["synthetic_iid"]["fedprox_mu"] = 1.0
    write_config(workdir, cfg)
    code, out = snakemake(workdir, "--dry-run", "--cores", "1")
    assert code == 0, out
    runs = set(re.findall(r"results/runs/synthetic_iid/(\w+)/(mu[^_]+)_K10_E20_seed0/run\.json", out))
    tuned = ("feddane", "feddane_authors", "feddane_decayed", "feddane_pipelined", "feddane_exact_gradient")
    assert runs == {("fedavg", "mu0"), ("fedprox", "mu1"), ("scaffold", "mu0")} | {
        (method, mu) for method in tuned for mu in ("mu0", "mu0.001", "mu1")
    }


def test_shared_runs_are_trained_once(tmp_path):
    """An experiment that repeats another's settings adds no training job."""
    workdir = copy_workflow(tmp_path / "wf")
    cfg = default_config()
    cfg["experiments"]["again"] = dict(cfg["experiments"]["figure1"], datasets=["synthetic_iid"])
    del cfg["experiments"]["again"]["figure"]
    write_config(workdir, cfg)
    code, out = snakemake(workdir, "--dry-run", "--cores", "1")
    assert code == 0, out
    assert job_counts(out)["train"] == STATIC_TRAIN


# ---------------------------------------------------------------------------------------
# Config validation: one line naming the key, nothing runs. The malformed configs are in
# test_config_fuzz.py; a results_dir that cannot be written is at the end of this file.
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# A tiny real run, end to end, then what a change reruns
# ---------------------------------------------------------------------------------------


def assert_cli_importable():
    """The jobs call fedsim's CLI from src/: an import error there is a failure, named, not a skip."""
    proc = subprocess.run([sys.executable, "-c", "import fedsim.cli"], env=env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, f"the package CLI (fedsim.cli) is not importable from src/: {proc.stdout}"


TINY_DATASETS = ["synthetic_iid", "synthetic_1_1"]
TINY_METHODS = ["fedavg", "fedprox", "feddane", "feddane_authors"]
TINY_GRID = [0, 1]
TINY_SEEDS = [0, 1]  # Figure 1's; the others use the top-level seeds: [0]
# Figure 1: every (method, mu) x 2 seeds; Figure 2 adds K = 1 (K = 3 is Figure 1's, seed 0);
# Figure 3 adds K = 8 (all devices), E = 2. Figures 2 and 3 run each FedDANE at Figure 1's mu.
# The theory experiment: one FedDANE run at a fixed mu with the constants logged.
TINY_RUNS = len(TINY_DATASETS) * ((2 + 2 * len(TINY_GRID)) * len(TINY_SEEDS) + 4 + 4) + 1
FIGURES = ["figure1", "figure2", "figure3"]


def tiny_config():
    cfg = default_config()
    cfg["synthetic"]["devices"] = 8
    cfg["datasets"] = {name: dict(cfg["datasets"][name], rounds=5) for name in TINY_DATASETS}
    cfg["tuning"]["mu_grid"] = TINY_GRID
    cfg["seeds"] = [0]
    common = {"datasets": TINY_DATASETS, "methods": TINY_METHODS, "epochs": 1}
    cfg["experiments"] = {
        "figure1": {"figure": "figure1", **common, "clients_per_round": 3, "seeds": TINY_SEEDS},
        "figure2": {"figure": "figure2", **common, "clients_per_round": [1, 3], "mu_from": "figure1"},
        "figure3": {"figure": "figure3", **common, "clients_fraction": {"default": 1.0}, "epochs": 2,
                    "mu_from": "figure1"},
        "theory": {"figure": "theory", "theory": True, "datasets": TINY_DATASETS[:1], "methods": ["feddane"],
                   "mu": [10], "clients_per_round": 3, "epochs": 1},
    }
    return cfg


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    assert_cli_importable()
    workdir = copy_workflow(tmp_path_factory.mktemp("tiny") / "wf", with_src=True)
    write_config(workdir, tiny_config())
    code, out = snakemake(workdir, "--cores", "2")
    assert code == 0, out
    return workdir


def read_csv(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_tiny_real_run(tiny_run):
    results = tiny_run / "results"
    for name in TINY_DATASETS:
        assert (results / "datasets" / f"{name}.h5").is_file()
    rows = read_csv(results / "summary" / "runs.csv")
    assert len(rows) == TINY_RUNS  # every seed, every experiment, shared runs once
    assert not list(results.glob("checkpoints/**/*.pt"))  # completed runs leave no checkpoint
    for column in ("dataset", "method", "mu", "clients_per_round", "epochs", "seed", "final_train_loss"):
        assert column in rows[0], column
    runs_of = {(r["dataset"], r["method"], r["options"]) for r in rows}
    exact, authors = '{"correction": "exact"}', '{"correction": "authors"}'
    assert runs_of == {(d, *m) for d in TINY_DATASETS for m in
                       [("fedavg", "{}"), ("fedprox", "{}"), ("feddane", exact), ("feddane_authors", authors)]}
    assert {(r["clients_per_round"], r["epochs"]) for r in rows} == {("3", "1"), ("1", "1"), ("8", "2")}
    assert {r["seed"] for r in rows if r["clients_per_round"] == "3"} == {"0", "1"}
    # Figures 2 and 3 run each FedDANE at its mu tuned for the dataset in Figure 1, only
    tuned = read_csv(results / "summary" / "chosen_settings.csv")
    assert len(tuned) == 2 * len(TINY_DATASETS)
    chosen = {(row["dataset"], row["method"]): float(row["chosen"]) for row in tuned}
    for row in rows:
        if row["method"].startswith("feddane") and row["clients_per_round"] != "3":
            assert float(row["mu"]) == chosen[row["dataset"], row["method"]], row
    # the theory experiment's run logs the constants, under a path of its own
    [theory] = [r for r in rows if r["theory"] == "True"]
    assert (theory["dataset"], theory["method"], theory["mu"]) == ("synthetic_iid", "feddane", "10.0")
    theory_metrics = read_csv(results / "runs" / "synthetic_iid" / "feddane" / "mu10_K3_E1_theory_seed0" / "metrics.csv")
    assert all(key in theory_metrics[0] for key in ("hessian_max", "inexactness", "grad_norm_sq", "rho"))
    for name in FIGURES + [f"{f}_test_acc" for f in FIGURES] + ["tuning", "theory"]:
        for ext in ("png", "pdf"):
            assert (results / "figures" / f"{name}.{ext}").stat().st_size > 0, name
    for name in TINY_DATASETS:
        run = results / "runs" / name / "feddane" / "mu1_K3_E1_seed1"
        assert (run / "metrics.csv").is_file() and (run / "run.json").is_file()
        authors = json.loads((results / "runs" / name / "feddane_authors" / "mu1_K3_E1_seed1" / "run.json").read_text())
        assert authors["config"]["options"] == {"correction": "authors"} and authors["config"]["method"] == "feddane"
    # each figure in numbers: a row per panel and curve, FedDANE at the figure's (tuned) mu only
    findings = read_csv(results / "summary" / "findings_figure2.csv")
    assert len(findings) == len(TINY_DATASETS) * 2 * len(TINY_METHODS)  # K = 1 and 3
    assert {r["rank"] for r in findings} <= {"1", "2", "3", "4"} and {r["seeds"] for r in findings} == {"1"}
    for row in findings:
        assert row["label"] == methods.LABELS[row["method"]]  # the figure's name for the curve
        if row["method"].startswith("feddane"):
            assert row["setting"] == "mu" and float(row["value"]) == chosen[row["dataset"], row["method"]], row
            assert row["grid_edge"] in ("lowest", "highest", "inside"), row  # Figure 1's grid, where mu came from
        else:
            assert row["grid_edge"] == "", row
    # ... and as the docs' tables, naming the config they came from
    tables = (results / "summary" / "tables_figure2.md").read_text()
    assert tables.startswith("Rendered by `python -m fedsim tables` from `results/summary/findings_figure2.csv` "
                             "(commit unknown (not a git checkout); config: config/config.yaml).")
    assert tables.count("| 1 | ") == len(TINY_DATASETS) * 2  # a table per panel, ranked
    assert (results / "logs" / "train" / "synthetic_iid" / "fedavg" / "mu0_K8_E2_seed0.log").is_file()
    assert (results / "benchmarks" / "train" / "synthetic_iid" / "fedavg" / "mu0_K1_E1_seed0.tsv").is_file()
    # up to date afterwards
    code, out = snakemake(tiny_run, "--dry-run", "--cores", "1")
    assert code == 0 and "Nothing to be done" in out, out
    # the report collects every figure and the two tables
    code, out = snakemake(tiny_run, "--report", "report.html")
    assert code == 0, out
    assert (tiny_run / "report.html").stat().st_size > 0
    for name in [f"{f}.png" for f in FIGURES] + [f"{f}_test_acc.png" for f in FIGURES]:
        assert f"Adding {name}" in out, out
    for name in ("tuning.png", "theory.png", "runs.csv", "chosen_settings.csv", "findings_figure1.csv"):
        assert f"Adding {name}" in out, out
    # ... with the paper's finding beside the paper's figures (tests/test_report_captions.py: not beside others)
    _, caption = report_text(tiny_run / "report.html")
    figure1 = caption["results/figures/figure1.png"]
    assert "Paper's finding (Figure 1)" in figure1 and "results/summary/findings_figure1.csv" in figure1, figure1


def test_a_selection_keeps_its_tables_beside_its_figures(tiny_run):
    """A subset run (`only_experiments`, `only_datasets`) writes its tables and figures to a folder of
    its own: it used to overwrite runs.csv and chosen_settings.csv, so a report of the whole run put the
    subset's tables beside the whole run's figures. A report made with the subset's --config holds
    the subset's; one without, the whole run's, untouched."""
    results = tiny_run / "results"
    whole = {name: (results / name).read_bytes() for name in
             ("summary/runs.csv", "summary/chosen_settings.csv", "figures/figure1.png", "summary/findings_figure1.csv")}
    selection = ("--config", "only_experiments=[figure1]", "only_datasets=[synthetic_iid]")
    code, out = snakemake(tiny_run, "--cores", "2", *selection)
    assert code == 0, out
    assert "train" not in job_counts(out), out  # the runs are shared
    assert {name: (results / name).read_bytes() for name in whole} == whole
    subset = results / "only-figure1-in-synthetic_iid"
    rows = read_csv(subset / "summary" / "runs.csv")
    assert rows and {r["dataset"] for r in rows} == {"synthetic_iid"}
    assert {r["dataset"] for r in read_csv(subset / "summary" / "chosen_settings.csv")} == {"synthetic_iid"}
    assert {r["dataset"] for r in read_csv(subset / "summary" / "findings_figure1.csv")} == {"synthetic_iid"}
    code, out = snakemake(tiny_run, "--report", "subset.html", *selection)
    assert code == 0, out
    assert "Adding figure1.png" in out and "Adding figure2.png" not in out and "Adding runs.csv" in out, out
    _, caption = report_text(tiny_run / "subset.html")
    assert "results/only-figure1-in-synthetic_iid/summary/findings_figure1.csv" in \
        caption["results/only-figure1-in-synthetic_iid/figures/figure1.png"]
    code, out = snakemake(tiny_run, "--report", "whole.html")
    assert code == 0 and "Adding figure2.png" in out, out
    # the same selection of another config (more seeds; a dataset's other rounds): its runs are not
    # those its folder's figures show, so no report, and one line saying what to run
    for change, problem in [("experiments={figure1: {seeds: [0, 1, 2]}}", "_seed2/run.json and 5 more of its 18 runs"),
                            ("datasets={synthetic_iid: {rounds: 4}}", "was trained for 5 rounds, not this config's 4")]:
        code, out = snakemake(tiny_run, "--report", "other.html", *selection, change)
        (line,) = [line for line in out.splitlines() if "Nothing to report yet" in line]
        assert code != 0 and problem in line and line.endswith("first, then the report"), out
        assert not (tiny_run / "other.html").exists()


def test_changing_the_grid_reruns_only_new_runs(tiny_run, tmp_path):
    cfg = tiny_config()
    cfg["tuning"]["mu_grid"] = [0, 0.5, 1]
    other = tmp_path / "config.yaml"
    other.write_text(yaml.safe_dump(cfg))
    code, out = snakemake(tiny_run, "--dry-run", "--cores", "1", "--configfile", str(other))
    assert code == 0, out
    counts = job_counts(out)
    # each FedDANE at mu = 0.5 in Figure 1 (Figures 2 and 3 follow if tuning then picks 0.5)
    assert counts["train"] == len(TINY_DATASETS) * 2 * len(TINY_SEEDS)
    assert "build_dataset" not in counts
    assert "mu0.5_K3_E1_seed1" in out


def test_changing_a_method_setting_reruns_its_runs(tiny_run, tmp_path):
    cfg = tiny_config()
    cfg["datasets"]["synthetic_1_1"]["lr"] = 0.02
    other = tmp_path / "config.yaml"
    other.write_text(yaml.safe_dump(cfg))
    code, out = snakemake(tiny_run, "--dry-run", "--cores", "1", "--configfile", str(other))
    assert code == 0, out
    # every run of that dataset known before tuning (FedDANE's of Figures 2 and 3 follow it)
    assert job_counts(out)["train"] == (2 + 2 * len(TINY_GRID)) * len(TINY_SEEDS) + 2 + 2
    assert "build_dataset" not in job_counts(out)


def test_code_changes_rerun_what_they_touch(tiny_run):
    code_dir = tiny_run / "src" / "fedsim"
    # a new mtime without a new content reruns nothing (the fingerprints hash the content)
    for path in code_dir.rglob("*.py"):
        path.touch()
    code, out = snakemake(tiny_run, "--dry-run", "--cores", "1")
    assert code == 0 and "Nothing to be done" in out, out
    # nor do fingerprints rewritten with the same content (results/code/ deleted): newer than the
    # outputs, but Snakemake compares them with the checksums it recorded
    shutil.rmtree(tiny_run / "results" / "code")
    code, out = snakemake(tiny_run, "--dry-run", "--cores", "1")
    assert code == 0 and "Nothing to be done" in out, out
    # editing FedDANE's file reruns the FedDANE runs only (and what depends on them)
    feddane = code_dir / "methods" / "feddane.py"
    original = feddane.read_text()
    try:
        feddane.write_text(original + "\n# edited by the workflow test\n")
        code, out = snakemake(tiny_run, "--dry-run", "--cores", "1")
        assert code == 0, out
        counts = job_counts(out)
        # both FedDANEs' tuning runs and the theory run; Figures 2 and 3's FedDANE runs follow once
        # tuning has rerun
        assert counts["train"] == len(TINY_DATASETS) * 2 * len(TINY_GRID) * len(TINY_SEEDS) + 1
        assert "build_dataset" not in counts
        assert "/fedavg/" not in "".join(re.findall(r"output: (\S+)", out))
    finally:
        feddane.write_text(original)


def test_what_a_job_depends_on_follows_the_imports(tiny_run):
    """A new module reruns nothing until a method imports it; then it reruns that method's runs
    (the code inputs are derived from the imports, not from a list kept by hand)."""
    extra = tiny_run / "src" / "fedsim" / "extra.py"
    feddane = tiny_run / "src" / "fedsim" / "methods" / "feddane.py"
    original = feddane.read_text()
    try:
        extra.write_text("SCALE = 1\n")
        code, out = snakemake(tiny_run, "--dry-run", "--cores", "1")
        assert code == 0 and "Nothing to be done" in out, out
        feddane.write_text(original.replace("import numpy as np\n", "import numpy as np\n\nfrom .. import extra\n", 1))
        assert feddane.read_text() != original
        code, out = snakemake(tiny_run, "--dry-run", "--cores", "1")
        assert code == 0, out
        # FedDANE's code fingerprint now lists the module, and the runs rerun because it changed
        fingerprints = tiny_run / "results" / "code"
        assert "src/fedsim/extra.py" in (fingerprints / "core.train+methods.feddane.txt").read_text()
        assert "src/fedsim/extra.py" not in (fingerprints / "core.train+methods.fedavg.txt").read_text()
        assert "results/code/core.train+methods.feddane.txt" in out
        assert "/fedavg/" not in "".join(re.findall(r"output: (\S+)", out))
    finally:
        feddane.write_text(original)
        extra.unlink()


def edited(path, run):
    """Run `run()` with `path` edited (a trailing comment), then restore it."""
    original = path.read_text()
    try:
        path.write_text(original + "\n# edited by the workflow test\n")
        return run()
    finally:
        path.write_text(original)


def test_figure_code_edit_redraws_only_figures_for_real(tiny_run):
    figures = tiny_run / "src" / "fedsim" / "outputs" / "figures.py"
    code, out = edited(figures, lambda: snakemake(tiny_run, "--cores", "2"))
    assert code == 0, out
    ran = set(job_counts(out)) - {"all", "total"}
    assert ran == {"figure", "tuning_figure", "theory_figure"}, out
    # with the edit undone the figures are out of date again, and only they
    code, out = snakemake(tiny_run, "--cores", "2")
    assert code == 0 and set(job_counts(out)) - {"all", "total"} == {"figure", "tuning_figure", "theory_figure"}, out


def test_shared_engine_edit_reruns_every_training_run(tiny_run):
    engine = tiny_run / "src" / "fedsim" / "core" / "engine.py"
    code, out = edited(engine, lambda: snakemake(tiny_run, "--dry-run", "--cores", "1"))
    assert code == 0, out
    counts = job_counts(out)
    # every run known before tuning (FedDANE's of Figures 2 and 3 follow once tuning reran), the theory run
    assert counts["train"] == len(TINY_DATASETS) * ((2 + 2 * len(TINY_GRID)) * len(TINY_SEEDS) + 2 + 2) + 1, out
    assert "build_dataset" not in counts


def test_a_model_edit_reruns_the_runs_of_that_model_only(tiny_run):
    """The registry finds a model's module at run time, so no import names it: each run depends on its
    own model's file. The tiny run trains MCLR: an edit of LeNet-5's file reruns nothing, of MCLR's every
    training run."""
    models = tiny_run / "src" / "fedsim" / "models"
    code, out = edited(models / "lenet5.py", lambda: snakemake(tiny_run, "--dry-run", "--cores", "1"))
    assert code == 0 and "Nothing to be done" in out, out
    code, out = edited(models / "mclr.py", lambda: snakemake(tiny_run, "--dry-run", "--cores", "1"))
    assert code == 0, out
    counts = job_counts(out)
    assert counts["train"] == len(TINY_DATASETS) * ((2 + 2 * len(TINY_GRID)) * len(TINY_SEEDS) + 2 + 2) + 1, out
    assert "build_dataset" not in counts and "results/code/models.mclr.txt" in out


# ---------------------------------------------------------------------------------------
# The authors' protocol (config/authors.yaml) on their own files
# ---------------------------------------------------------------------------------------

FIDELITY = REPO.parent / "shared" / "fidelity"
AUTHORS_ROUNDS = 20


def test_authors_config_replays_their_runs(tmp_path):
    """config/authors.yaml with their Synthetic IID files and seed-0 model: the workflow imports
    the JSON, trains with their draws and their FedDANE, and its curves are theirs (first rounds;
    tests/test_fidelity.py gives the tolerances)."""
    if not (FIDELITY / "authors-runs-synthetic-iid.csv").is_file():
        pytest.skip(f"{FIDELITY} absent: the authors' golden case lives in this workplace's shared folder")
    assert_cli_importable()
    workdir = copy_workflow(tmp_path / "wf", with_src=True)
    for split in ("train", "test"):
        folder = workdir / "resources" / "authors" / "synthetic_iid" / split
        folder.mkdir(parents=True)
        shutil.copy(FIDELITY / f"synthetic_iid-{split}.json.gz", folder)
    shutil.copy(FIDELITY / "authors-init-seed0.npz", workdir / "resources" / "authors" / "init-seed0.npz")
    one_panel = {"datasets": ["synthetic_iid"], "rounds": AUTHORS_ROUNDS, "mu_grid": [0.01, 1]}
    few = {"datasets": ["synthetic_iid"], "methods": ["fedavg", "feddane_authors"]}
    overlay = {"experiments": {"figure1": {**one_panel, "methods": ["fedavg", "fedprox", "feddane_authors"]},
                               "figure2": {**few, "clients_per_round": 10, "rounds": AUTHORS_ROUNDS},
                               "figure3": {**few, "rounds": 2},
                               "beyond": {"datasets": ["synthetic_iid"], "methods": ["fedavg", "scaffold"],
                                          "rounds": 2},
                               "theory": {"datasets": ["synthetic_iid"], "rounds": 2, "mu": [10]}}}
    (workdir / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    code, out = snakemake(workdir, "--cores", "2", "--configfile", "config/authors.yaml", "overlay.yaml")
    assert code == 0, out
    import pandas as pd
    gold = pd.read_csv(FIDELITY / "authors-runs-synthetic-iid.csv")
    runs = workdir / "results" / "authors" / "runs" / "synthetic_iid"
    for folder, method, mu, tolerance in [("fedavg", "fedavg", 0, 1e-5), ("fedprox", "fedprox", 1, 1e-5),
                                          ("feddane_authors", "feddane", 0.01, 1e-3),
                                          ("feddane_authors", "feddane", 1, 1e-3)]:
        ours = pd.read_csv(runs / folder / f"mu{mu:g}_K10_E20_T{AUTHORS_ROUNDS}_seed0" / "metrics.csv")
        theirs = gold[(gold["method"] == method) & (gold["mu"] == mu)].set_index("round").loc[:AUTHORS_ROUNDS]
        gap = (ours.set_index("round")["train_loss"] - theirs["train_loss"]).abs() / theirs["train_loss"]
        assert len(gap.dropna()) == AUTHORS_ROUNDS + 1 and gap.max() < tolerance, (folder, mu, gap.max())
    record = json.loads((runs / "feddane_authors" / f"mu1_K10_E20_T{AUTHORS_ROUNDS}_seed0" / "run.json").read_text())
    assert record["config"]["rng"] == "authors" and record["config"]["second_subset"] == "same"
    assert record["init"]["file"].endswith("init-seed0.npz")
    assert (workdir / "results" / "authors" / "figures" / "figure1.png").stat().st_size > 0


# ---------------------------------------------------------------------------------------
# FedDANE among its successors: every method and variant of the registry through Snakemake
# ---------------------------------------------------------------------------------------


def test_every_method_runs_through_snakemake_in_the_successors_experiment(tmp_path):
    """config/successors.yaml's experiment on a tiny dataset, 2 rounds, with every method and variant:
    full-participation methods at K = all devices, each tuned method over a grid of its own setting
    (two values of its file's grid, through the experiment's `grids`: that the file's grid is the
    default is tests/test_experiments.py's), the setting in the run's folder, chosen_settings.csv, findings
    and runs.csv with the costs."""
    from fedsim.planning.experiments import fmt
    from fedsim.methods import ENTRIES, REGISTRY

    workdir = copy_workflow(tmp_path / "wf", with_src=True)
    cfg = default_config()
    with open(REPO / "config" / "successors.yaml") as handle:
        successors = yaml.safe_load(handle)
    assert set(successors["experiments"]["successors"]["methods"]) <= set(ENTRIES)
    cfg["synthetic"]["devices"] = 8
    cfg["datasets"] = {"synthetic_1_1": dict(cfg["datasets"]["synthetic_1_1"], rounds=2)}
    cfg["tuning"]["mu_grid"] = [0, 1]
    cfg["seeds"] = [0]
    grids = {name: list(entry.method.options[entry.method.tuned].grid[:2])
             for name, entry in ENTRIES.items() if entry.method.tuned}
    cfg["experiments"] = {"successors": {**successors["experiments"]["successors"], "datasets": ["synthetic_1_1"],
                                         "methods": list(ENTRIES), "clients_per_round": 3, "epochs": 1,
                                         "grids": grids}}
    write_config(workdir, cfg)
    code, out = snakemake(workdir, "--cores", "2")
    assert code == 0, out
    results = workdir / "results"
    rows = read_csv(results / "summary" / "runs.csv")
    assert {r["method"] for r in rows} == set(ENTRIES)
    for row in rows:
        method = ENTRIES[row["method"]].method
        assert row["clients_per_round"] == ("8" if method.full_participation else "3"), row
        assert int(row["vectors_up"]) > 0 and int(row["gradient_evaluations"]) > 0, row
    tuned = read_csv(results / "summary" / "chosen_settings.csv")
    settings = {r["method"]: r["setting"] for r in tuned}
    for name, entry in ENTRIES.items():
        if entry.method.tuned:
            assert settings[name] == entry.method.tuned
            grid = grids[name]
            folders = {p.name.split("_K")[0] for p in (results / "runs" / "synthetic_1_1" / name).iterdir()}
            assert folders == {f"{entry.method.tuned}{fmt(value)}" for value in grid}, name
    findings = read_csv(results / "summary" / "findings_successors.csv")
    assert {r["method"] for r in findings} == set(ENTRIES) and len(findings) == len(ENTRIES)
    assert {r["clients_per_round"] for r in findings} == {"3", "8"}
    for ext in ("png", "pdf"):
        assert (results / "figures" / f"successors.{ext}").stat().st_size > 0
    assert len(REGISTRY) >= 14


def test_an_experiment_without_a_tuned_method_runs_to_its_figures(tmp_path):
    """Nothing to tune: no `tune` job (it used to fail with "--methods: expected at least one
    argument" after every run had trained), figures and findings without chosen_settings.csv."""
    workdir = copy_workflow(tmp_path / "wf", with_src=True)
    cfg = tiny_config()
    cfg["datasets"] = {"synthetic_iid": dict(cfg["datasets"]["synthetic_iid"], rounds=2)}
    cfg["experiments"] = {
        "figure1": {"figure": "figure1", "datasets": ["synthetic_iid"], "methods": ["fedavg", "scaffold"],
                    "clients_per_round": 3, "epochs": 1},
        "figure2": {"figure": "figure2", "datasets": ["synthetic_iid"], "methods": ["fedavg"],
                    "clients_per_round": [1, 3], "epochs": 1, "mu_from": "figure1"},
    }
    write_config(workdir, cfg)
    code, out = snakemake(workdir, "--cores", "2")
    assert code == 0, out
    results = workdir / "results"
    assert not (results / "summary" / "chosen_settings.csv").exists()
    for name in ("figure1", "figure2"):
        assert (results / "figures" / f"{name}.png").stat().st_size > 0
        assert (results / "summary" / f"findings_{name}.csv").is_file()
    assert len(read_csv(results / "summary" / "runs.csv")) == 3


def test_an_lr_grid_tunes_each_method_and_the_next_experiment_runs_its_choice(tmp_path):
    """figure1 tunes FedAvg's client lr, and FedDANE's jointly with its mu; figure2 (mu_from: figure1)
    then runs each at the pair chosen. A run's folder names an lr other than its dataset's, and it trains
    at that lr; the tables and the figures say which lr each method ran at."""
    workdir = copy_workflow(tmp_path / "wf", with_src=True)
    cfg = tiny_config()
    cfg["datasets"] = {"synthetic_iid": dict(cfg["datasets"]["synthetic_iid"], rounds=2)}  # lr 0.01
    common = {"datasets": ["synthetic_iid"], "methods": ["fedavg", "feddane"], "epochs": 1}
    cfg["experiments"] = {
        "figure1": {"figure": "figure1", **common, "clients_per_round": 3, "lr_grid": [0.01, 0.1]},
        "figure2": {"figure": "figure2", **common, "clients_per_round": [1], "mu_from": "figure1"},
    }
    write_config(workdir, cfg)
    code, out = snakemake(workdir, "--cores", "2")
    assert code == 0, out
    results = workdir / "results"
    runs = {Path(row["run"]).parent.relative_to("results/runs").as_posix(): row
            for row in read_csv(results / "summary" / "runs.csv")}
    assert float(runs["synthetic_iid/fedavg/mu0_K3_E1_lr0.1_seed0"]["lr"]) == 0.1
    assert float(runs["synthetic_iid/fedavg/mu0_K3_E1_seed0"]["lr"]) == 0.01
    assert len([r for r in runs if "feddane" in r and "_K3_" in r]) == len(TINY_GRID) * 2
    tuned = {row["method"]: row for row in read_csv(results / "summary" / "chosen_settings.csv")}
    assert set(tuned) == {"fedavg", "feddane"} and tuned["fedavg"]["lr_candidates"] == "0.01;0.1"
    for method, row in tuned.items():  # figure2 ran the pair figure1 chose
        lr = "" if float(row["lr"]) == 0.01 else f"_lr{float(row['lr']):g}"
        assert f"synthetic_iid/{method}/mu{float(row['chosen']):g}_K1_E1{lr}_seed0" in runs
    findings = {row["method"]: row for row in read_csv(results / "summary" / "findings_figure1.csv")}
    assert findings["fedavg"]["tuned"] == f"lr {float(tuned['fedavg']['lr']):g}"
    assert findings["feddane"]["tuned"].startswith("mu ") and ", lr " in findings["feddane"]["tuned"]
    assert findings["fedavg"]["lr_edge"] in ("lowest", "highest")  # a grid of two: always at an edge
    assert (results / "figures" / "tuning.png").stat().st_size > 0


def test_a_workflow_runs_its_own_checkouts_code(tmp_path):
    """Two checkouts: the one pip installed (PYTHONPATH here: this repository's src/) and a copy with a
    method of its own. The copy's workflow and its jobs know that method: they run the copy's code."""
    workdir = copy_workflow(tmp_path / "wf", with_src=True)
    (workdir / "src" / "fedsim" / "methods" / "local_only.py").write_text(
        '"""FedAvg under another name: a method only this checkout has."""\n\n'
        "from . import Method, fedavg\n\n"
        'METHOD = Method(name="local_only", label="Only here", local_problem=fedavg.local_problem)\n')
    cfg = tiny_config()
    cfg["datasets"] = {"synthetic_iid": dict(cfg["datasets"]["synthetic_iid"], rounds=2)}
    cfg["experiments"] = {"figure1": {"figure": "figure1", "datasets": ["synthetic_iid"],
                                      "methods": ["fedavg", "local_only"], "clients_per_round": 3, "epochs": 1}}
    write_config(workdir, cfg)
    code, out = snakemake(workdir, "--cores", "2")
    assert code == 0, out
    assert {r["method"] for r in read_csv(workdir / "results" / "summary" / "runs.csv")} == {"fedavg", "local_only"}


def test_ctrl_c_leaves_one_line_in_the_job_log_and_the_rerun_resumes(tmp_path):
    """Ctrl-C signals Snakemake's process group, the warm launchers of its jobs among them: a running
    training job stops at a round boundary with its checkpoint, its log holds the one line (the
    default profile's show-failed-logs prints it) and no traceback; the rerun continues from there."""
    workdir = copy_workflow(tmp_path / "wf", with_src=True)
    shutil.copytree(REPO / "profiles", workdir / "profiles")  # the default profile, as from the repository's root
    cfg = default_config()
    cfg["synthetic"]["devices"] = 8
    cfg["datasets"] = {"synthetic_iid": dict(cfg["datasets"]["synthetic_iid"], rounds=20)}
    cfg["seeds"] = [0]
    cfg["experiments"] = {"figure1": {"figure": "figure1", "datasets": ["synthetic_iid"], "methods": ["feddane"],
                                      "mu": [1], "clients_per_round": 3, "epochs": 1}}
    write_config(workdir, cfg)
    log = workdir / "results" / "logs" / "train" / "synthetic_iid" / "feddane" / "mu1_K3_E1_seed0.log"
    with open(tmp_path / "snakemake.txt", "w") as out:
        hold = tmp_path / "hold"  # the run waits at its first round boundary for the Ctrl-C, at any pace
        hold.touch()
        proc = subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "1"], cwd=workdir,
                                env={**env(), HOLD_FILE_ENV: str(hold)}, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 600
            while not (log.exists() and "starting" in log.read_text()):  # round 0 evaluated
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "snakemake.txt").read_text()
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C
            proc.wait(timeout=300)
        finally:  # held, its job would wait for ever
            hold.unlink()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    out = (tmp_path / "snakemake.txt").read_text()
    # the progress' start line, the hold's line where the run reached its hold before the Ctrl-C, the stop's line
    lines = [line for line in log.read_text().splitlines() if not line.startswith("fedsim train: paused at round 1")]
    assert proc.returncode != 0 and "Traceback" not in out and "KeyboardInterrupt" not in out, out
    stopped = re.fullmatch(r"fedsim train: stopped at round (\d+) of 20 by SIGINT; checkpoint written to "
                           r"results/checkpoints/synthetic_iid/feddane/mu1_K3_E1_seed0\.pt; rerun the same command "
                           "to resume", lines[-1])
    assert stopped and len(lines) == 2, lines
    assert lines[-1] in out  # shown on the terminal

    code, out = snakemake(workdir, "--cores", "1")
    assert code == 0, out
    assert f"resumed from its checkpoint at round {stopped[1]}" in log.read_text()
    assert not (workdir / "results" / "checkpoints").exists()  # no empty folders left behind


def test_a_results_dir_that_cannot_be_written_is_one_line(tmp_path):
    """Not a traceback from the first writes (the code fingerprints and planned_runs.csv, while Snakemake
    parses): the key and the folder."""
    workdir = copy_workflow(tmp_path / "wf", with_src=True)
    (workdir / "occupied").write_text("a file where the results folder would go\n")
    cfg = default_config()
    cfg["results_dir"] = "occupied/results"
    write_config(workdir, cfg)
    code, out = snakemake(workdir, "-n", "--cores", "1")
    errors = [line for line in out.splitlines() if "Config error" in line]
    assert code != 0 and len(errors) == 1, out
    assert errors[0].startswith("Config error at results_dir: cannot write below 'occupied/results'"), errors[0]
    assert "Traceback" not in out


def test_a_report_before_any_run_says_what_to_run_first(tmp_path):
    """Not Snakemake's "File ... marked for report but does not exist": one line naming the command
    that makes the outputs, with this call's config arguments (a selection reports its own outputs)."""
    workdir = copy_workflow(tmp_path / "wf")
    write_config(workdir, tiny_config())
    code, out = snakemake(workdir, "--report", "report.html")
    lines = [line for line in out.splitlines() if "Nothing to report yet" in line]
    assert code != 0 and len(lines) == 1, out
    assert lines[0].startswith("Nothing to report yet: results/summary/planned_runs.csv and "), lines[0]
    assert lines[0].endswith("run `snakemake` first, then the report"), lines[0]
    assert "marked for report" not in out and "Traceback" not in out
    assert not (workdir / "report.html").exists()
    code, out = snakemake(workdir, "--report", "--config", "only_experiments=[figure1]")
    (line,) = [line for line in out.splitlines() if "Nothing to report yet" in line]
    assert line.startswith("Nothing to report yet: results/only-figure1/summary/planned_runs.csv"), line
    assert "run `snakemake --config 'only_experiments=[figure1]'` first" in line
    assert not (workdir / "results").exists()  # nothing left of the parse: no empty results/code/
