"""The LEAF datasets in the workflow: raw sources fetched by the `download` rule (from a loopback
HTTP server this test starts, or from the shared real files), datasets built, datasets.csv, and
short training runs of FEMNIST, Shakespeare and Sent140 through Snakemake.

Shakespeare's run evaluates a seeded sample of devices (`eval_devices`): the metrics over all of
its devices would take minutes per round on a CPU.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from pathlib import Path

import h5py
import pytest
import yaml

from fedsim.planning import cost
from fedsim.kinds import TOKEN_KINDS
from fedsim.data.leaf.stats import dataset_stats

from helpers.http_server import serve, server  # noqa: F401 (the fixture)
from helpers.leaf_files import make_by_class_zip, make_glove_zip, make_gutenberg_zip, make_sent140_zip
from helpers.workflow import REPO, copy_workflow, default_config, job_counts, snakemake, write_config

pytestmark = pytest.mark.workflow

SHARED = REPO.parent / "shared" / "data" if (REPO.parent / "shared" / "data").is_dir() else None
needs_data = pytest.mark.skipif(
    SHARED is None or not (SHARED / "femnist").is_dir() or not (SHARED / "shakespeare").is_dir(),
    reason="shared LEAF raw data (../shared/data/{femnist,shakespeare}) not present",
)


def short_experiment(datasets, **kw):
    return {"short": {"datasets": datasets, "methods": ["fedavg"], "clients_per_round": 2, "epochs": 1,
                      "rounds": 1, **kw}}


def read_csv(path):
    return list(csv.DictReader(open(path)))


@needs_data
def test_leaf_datasets_from_the_shared_files_build_and_train(tmp_path):
    work = copy_workflow(tmp_path / "wf", with_src=True)
    cfg = default_config()
    cfg["seeds"] = [0]
    cfg["sources"]["shakespeare"]["path"] = str(SHARED / "shakespeare" / "gutenberg-100-1994.txt.gz")
    cfg["datasets"] = {
        "femnist": {"kind": "femnist", "json": str(SHARED / "femnist"), "variant": "faithful",
                    "lr": 0.003, "batch_size": 10, "rounds": 200, "fedprox_mu": 1},
        "shakespeare": {"kind": "shakespeare", "lr": 0.8, "batch_size": 10, "rounds": 40, "fedprox_mu": 0.001,
                        "eval_devices": 2},
        # every LEAF user of the text (no sampling); built, not trained: its users hold up to 67k
        # samples, and one round on two of them can take minutes on a CPU
        "shakespeare_full": {"kind": "shakespeare", "fraction": 0, "lr": 0.8, "batch_size": 10, "rounds": 40,
                             "fedprox_mu": 0.001},
    }
    cfg["experiments"] = short_experiment(["femnist", "shakespeare"])
    write_config(work, cfg)
    code, out = snakemake(work, "--cores", "2", "all", "results/datasets/shakespeare_full.h5", timeout=900)
    assert code == 0, out[-3000:]

    # the local copy went through the download rule: copied, hashed, logged (no checksum to check)
    raw = work / "resources/raw/shakespeare/gutenberg-100-1994.txt.gz"
    assert raw.read_bytes() == (SHARED / "shakespeare" / "gutenberg-100-1994.txt.gz").read_bytes()
    assert hashlib.sha256(raw.read_bytes()).hexdigest() in (work / "logs/download/shakespeare" /
                                                             f"{raw.name}.log").read_text()
    rows = {r["dataset"]: r for r in read_csv(work / "results/summary/datasets.csv")}
    assert set(rows) == {"femnist", "shakespeare"}
    # the FEMNIST sizes have their own stream: 19,572 samples at seed 0 from any pool (the paper: 18,345)
    assert (int(rows["femnist"]["devices"]), int(rows["femnist"]["samples"])) == (200, 19572)
    assert int(rows["femnist"]["paper_samples"]) == 18345
    assert int(rows["shakespeare"]["devices"]) == 250 and rows["shakespeare"]["kind"] == "shakespeare"
    # LEAF publishes 1,129 users and 4,226,158 samples for this text; we find one user more (two
    # roles with 48 samples each: LEAF keeps one) and so 48 samples more
    full = dataset_stats(work / "results/datasets/shakespeare_full.h5")
    assert (full["devices"], full["samples"]) == (1130, 4_226_206)
    runs = {r["dataset"]: r for r in read_csv(work / "results/summary/runs.csv")}
    assert set(runs) == {"femnist", "shakespeare"}
    record = json.loads(next(work.glob("results/runs/shakespeare/fedavg/*/run.json")).read_text())
    assert record["config"]["eval_devices"] == 2 and record["data_access"]["eval_sampled"]
    assert record["result"]["rounds_completed"] == 1
    assert 0 < record["result"]["final_train_loss"] < 10  # a next-char loss: ln(80) = 4.4 at chance

    # a base URL the local copy made unused is not part of the download's params: nothing reruns
    cfg["sources"]["shakespeare"]["base_url"] = "https://example.org/elsewhere"
    write_config(work, cfg)
    code, out = snakemake(work, "--cores", "2", "--dry-run", "all", "results/datasets/shakespeare_full.h5")
    assert code == 0 and "Nothing to be done" in out, out[-2000:]


@needs_data
def test_leafs_own_femnist_from_the_shipped_config_trains(tmp_path):
    """config/leaf-femnist.yaml's dataset: LEAF's writer-partitioned FEMNIST, 62 classes, imported
    from the shared LEAF samples and trained two rounds by FedAvg and FedDANE."""
    entry = yaml.safe_load((REPO / "config" / "leaf-femnist.yaml").read_text())["datasets"]["femnist_leaf"]
    for split in ("train", "test"):  # the shipped paths are relative to the repository
        entry[split] = [str(SHARED / Path(p).relative_to("../shared/data")) for p in entry[split]]
    work = copy_workflow(tmp_path / "wf", with_src=True)
    cfg = default_config()
    cfg["seeds"] = [0]
    cfg["datasets"] = {"femnist_leaf": dict(entry, rounds=2)}
    cfg["experiments"] = {"leaf": {"figure": "figure1", "datasets": ["femnist_leaf"], "methods": ["fedavg", "feddane"],
                                   "clients_per_round": 5, "epochs": 1, "mu_grid": [0.01]}}
    write_config(work, cfg)
    code, out = snakemake(work, "--cores", "2", timeout=900)
    assert code == 0, out[-3000:]
    log = (work / "results/logs/build_dataset/femnist_leaf.log").read_text()
    assert "311 devices" in log and "240 users with test data only: dropped" in log
    runs = read_csv(work / "results/summary/runs.csv")
    assert {(r["method"], r["rounds_completed"]) for r in runs} == {("fedavg", "2"), ("feddane", "2")}
    record = json.loads(next(work.glob("results/runs/femnist_leaf/feddane/*/run.json")).read_text())
    assert record["dataset"]["kind"] == "femnist" and record["dataset"]["devices"] == 311
    with h5py.File(work / "results/datasets/femnist_leaf.h5") as built:
        assert built.attrs["num_classes"] == 62
    assert 0 < float(runs[0]["final_train_loss"]) < 2 * math.log(62)
    assert (work / "results/figures/leaf.png").stat().st_size > 0


@pytest.fixture
def served(server, tmp_path):  # noqa: F811 (the fixture)
    """Small raw files in the real layouts, served from 127.0.0.1 under their real names."""
    made = tmp_path / "made"
    made.mkdir()
    files = {"shakespeare": make_gutenberg_zip(made / "1994-01-100.zip"),
             "sent140": make_sent140_zip(made / "trainingandtestdata.zip"),
             "glove": make_glove_zip(made / "glove.6B.zip"),
             "nist_by_class": make_by_class_zip(made / "by_class.zip")}
    return {name: (serve(server, path, prefix=f"/{name}"), hashlib.sha256(path.read_bytes()).hexdigest())
            for name, path in files.items()}


def served_config(served):
    cfg = default_config()
    cfg["seeds"] = [0]
    for name, (url, sha256) in served.items():
        cfg["sources"][name] = {**cfg["sources"][name], "base_url": url, "sha256": sha256, "md5": None}
    cfg["datasets"] = {
        "shakespeare": {"kind": "shakespeare", "fraction": 0, "lr": 0.8, "batch_size": 10, "rounds": 40,
                        "fedprox_mu": 0.001},
        "sent140": {"kind": "sent140", "fraction": 0, "min_samples": 2, "lr": 0.3, "batch_size": 10,
                    "rounds": 800, "fedprox_mu": 0.01},
        # FedProx's construction from NIST's PNGs (6 per class here: the faithful draws reuse them,
        # which the builder refuses below 100 per class unless allowed)
        "femnist": {"kind": "femnist", "devices": 200, "lr": 0.003, "batch_size": 10, "rounds": 200,
                    "fedprox_mu": 1, "allow_reuse": True},
    }
    # the bottom row of Figure 1, in small: the three methods, FedDANE tuned over two mu
    cfg["experiments"] = short_experiment(["sent140"], rounds=2, figure="figure1",
                                          methods=["fedavg", "fedprox", "feddane"], mu_grid=[0, 0.01])
    cfg["experiments"]["layout"] = {"datasets": ["shakespeare", "femnist"], "methods": ["fedavg"],
                                    "clients_per_round": 1, "epochs": 1, "rounds": 1}
    return cfg


def test_raw_sources_are_downloaded_checked_and_built(server, served, tmp_path):  # noqa: F811
    work = copy_workflow(tmp_path / "wf", with_src=True)
    write_config(work, served_config(served))
    code, out = snakemake(work, "--cores", "2", timeout=600)
    assert code == 0, out[-3000:]
    assert {path: hits for path, hits in server.hits.items()} == {
        "/shakespeare/1994-01-100.zip": 1, "/sent140/trainingandtestdata.zip": 1, "/glove/glove.6B.zip": 1,
        "/nist_by_class/by_class.zip": 1}
    for name, (_, sha256) in served.items():
        log = next((work / "logs/download" / name).glob("*.log")).read_text()
        assert f"sha256 {sha256}" in log and ", verified" in log
    rows = {r["dataset"]: r for r in read_csv(work / "results/summary/datasets.csv")}
    assert int(rows["sent140"]["devices"]) == 2 and int(rows["shakespeare"]["devices"]) == 3
    assert int(rows["femnist"]["devices"]) == 200 and int(rows["femnist"]["paper_devices"]) == 200
    runs = {(r["dataset"], r["method"], float(r["mu"])): r for r in read_csv(work / "results/summary/runs.csv")}
    assert set(runs) == {("sent140", "fedavg", 0), ("sent140", "fedprox", 0.01), ("sent140", "feddane", 0),
                         ("sent140", "feddane", 0.01), ("shakespeare", "fedavg", 0), ("femnist", "fedavg", 0)}
    assert int(runs["sent140", "fedavg", 0]["rounds"]) == 2
    assert (work / "results/figures/short.png").stat().st_size > 10_000

    # present and verified: nothing is fetched again, nothing reruns
    code, out = snakemake(work, "--cores", "2", "--dry-run")
    assert code == 0 and "Nothing to be done" in out, out[-2000:]


def test_a_checksum_mismatch_stops_the_download_and_keeps_nothing(server, served, tmp_path):  # noqa: F811
    work = copy_workflow(tmp_path / "wf", with_src=True)
    cfg = served_config(served)
    wrong = "ab" * 32
    cfg["sources"]["glove"]["sha256"] = wrong
    write_config(work, cfg)
    code, out = snakemake(work, "--cores", "1", "results/datasets/sent140.h5", timeout=600)
    assert code != 0
    log = (work / "logs/download/glove/glove.6B.zip.log").read_text()
    assert f"glove.6B.zip: sha256 mismatch for {served['glove'][0]}/glove.6B.zip: expected {wrong}, " \
           f"got {served['glove'][1]}" in log
    assert not (work / "resources/raw/glove").exists() or not any((work / "resources/raw/glove").iterdir())
    assert not (work / "results/datasets/sent140.h5").exists()


def built_datasets(out) -> set[str]:
    """The datasets a dry run's build_dataset jobs write."""
    return set(re.findall(r"output: results/datasets/([^/\s]+)\.h5", out))


def test_paper_configs_plan_the_leaf_jobs(tmp_path):
    work = copy_workflow(tmp_path / "wf", with_src=True)
    code, out = snakemake(work, "-n", "--configfile", "config/paper.yaml")
    assert code == 0, out[-3000:]
    counts = job_counts(out)
    assert counts["download"] == 4  # by_class.zip, trainingandtestdata.zip, glove.6B.zip, 1994-01-100.zip
    assert {"femnist", "sent140", "shakespeare"} <= built_datasets(out)
    assert counts["datasets_table"] == 1
    # Figure 3's LEAF columns: 50 % of FEMNIST's 200, 26 % of Sent140's 772, 70 % of Shakespeare's 250
    for run in ("femnist/fedavg/mu0_K100_E1_seed0", "sent140/fedavg/mu0_K201_E1_seed0",
                "shakespeare/fedprox/mu0.001_K175_E1_seed0"):
        assert run in out, run
    # the LSTM datasets' cost (fedsim.planning.cost), before the job list: a line each, and a WARNING for
    # Shakespeare, whose runs take days on a CPU core (unless a GPU is visible: device auto)
    estimate = out[:out.index("Building DAG of jobs")]
    for dataset in ("sent140", "shakespeare"):
        assert f"Cost estimate, {dataset}: 20 runs of " in estimate, estimate
    assert ("WARNING: shakespeare: a run would take up to" in estimate) != cost.gpu_visible(), estimate
    assert "Cost estimate, femnist" not in estimate
    if SHARED is not None:
        local = work / "config" / "local-data.yaml"
        local.write_text(local.read_text().replace("../shared/data", str(SHARED)))
        code, out = snakemake(work, "-n", "--configfile", "config/paper.yaml", "config/local-data.yaml")
        assert code == 0, out[-3000:]
        counts = job_counts(out)
        assert counts["download"] == 1 and "sent140" not in built_datasets(out)
    code, out = snakemake(work, "-n")
    assert code == 0, out[-3000:]
    assert "download" not in job_counts(out) and "datasets_table" not in job_counts(out)
    assert "Cost estimate" not in out and "core-days" not in out  # the default run's output stays clean


def test_only_the_femnist_panels_of_the_paper(tmp_path):
    """The README's way to run part of the paper: a target first (--configfile takes several
    values), then the selection. FEMNIST at Figure 1's K = 10 and Figure 3's K = 100 only."""
    work = copy_workflow(tmp_path / "wf", with_src=True)
    selection = ("--configfile", "config/paper.yaml", "--config", "only_experiments=[figure1,figure3]",
                 "only_datasets=[femnist]")
    folder = "results/only-figure1+figure3-in-femnist"  # the selection's tables and figures
    code, out = snakemake(work, "results/only-figure1+figure3-in-femnist/figures/figure3.pdf", "-n", *selection)
    assert code == 0, out[-3000:]
    plan_code, plan_out = snakemake(work, f"{folder}/summary/planned_runs.csv", "--cores", "1", *selection)
    assert plan_code == 0, plan_out[-3000:]
    plan = read_csv(work / folder / "summary/planned_runs.csv")
    assert {(r["experiment"], r["dataset"], r["clients_per_round"]) for r in plan} == {("figure1", "femnist", "10"),
                                                                     ("figure3", "femnist", "100")}
    counts = job_counts(out)
    assert counts["download"] == 1 and not {"sent140", "shakespeare"} & built_datasets(out)


def test_paper_lstm_jobs_ask_for_their_cost_estimate_or_max_runtime(tmp_path):
    """Each LSTM training job's `runtime` is its run's printed cost estimate (fedsim.planning.cost) with the
    margin, or max_runtime where that is lower: days for Shakespeare on a CPU, not minutes."""
    from fedsim.planning import experiments
    from fedsim.planning.configcheck import check_config, load_schema

    work = copy_workflow(tmp_path / "wf", with_src=True)
    cap = 100 * 60
    code, out = snakemake(work, "-n", "--verbose", "--configfile", "config/paper.yaml",
                          "--config", f"simulator={{max_runtime: {cap}}}")
    assert code == 0, out[-3000:]
    def merge(a, b):  # as Snakemake layers config files: maps merge, the rest replaces
        if isinstance(a, dict) and isinstance(b, dict):
            return {**a, **{k: merge(a.get(k), v) for k, v in b.items()}}
        return b

    cfg = merge(*(yaml.safe_load((work / "config" / name).read_text()) for name in ("config.yaml", "paper.yaml")))
    check_config(cfg, load_schema(work / "workflow/schemas/config.schema.yaml"), work)
    cfg["experiments"] = experiments.selected_experiments(cfg)
    runs = experiments.runs_by_path(cfg, experiments.plan(cfg))  # the train rule's one wildcard: the run's folder
    jobs = re.findall(r"rule train:\n(?:    .*\n)*?    wildcards: run=(.*)\n    resources: (.*)\n", out)
    asked = {}
    for path, resources in jobs:
        run = runs[path]
        if cfg["datasets"][run.dataset]["kind"] in TOKEN_KINDS:
            asked[run.dataset, run.method, int(run.K), int(run.E)] = int(re.search(r"runtime=(\d+)", resources)[1])
    assert {dataset for dataset, *_ in asked} == {"sent140", "shakespeare"}
    for (dataset, method, k, e), minutes in asked.items():
        seconds = cost.train_seconds(cfg, dataset, method=method, k=k, epochs=e,
                                     rounds=cfg["datasets"][dataset]["rounds"], theory=False,
                                     sizes_of=lambda name: cost.dataset_sizes(cfg, name))
        assert minutes == min(math.ceil(cost.MARGIN * seconds / 60) + cost.START_MINUTES, cap), (dataset, method, k, e)
    assert asked["shakespeare", "fedavg", 10, 20] == cap  # days on a CPU: the cap
    assert 7 * 60 > asked["sent140", "fedavg", 10, 20] > 60  # hours, under the cap
    # the estimate is the printed one: the longest Shakespeare run, in days
    printed = {c.dataset: c for c in cost.plan_costs(cfg, experiments.plan(cfg))}
    assert f"longest {cost.duration(printed['shakespeare'].longest_s)}" in out
