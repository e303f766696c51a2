"""The LEAF datasets in the workflow: FEMNIST and Shakespeare built from the shared raw files,
datasets.csv, a short FEMNIST training run, and the plan of config/paper.yaml.

Shakespeare is built but not trained here: one CharLSTM round on CPU takes minutes (the
metrics are evaluated on every device), far beyond a test's budget.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from test_workflow import REPO, copy_workflow, default_config, job_counts, snakemake, write_config

pytestmark = pytest.mark.workflow

SHARED = next((p for p in (REPO.parent / "shared" / "data", Path("/work/shared/data")) if p.is_dir()), None)
needs_data = pytest.mark.skipif(
    SHARED is None or not (SHARED / "femnist").is_dir() or not (SHARED / "shakespeare").is_dir(),
    reason="shared LEAF raw data (../shared/data/{femnist,shakespeare}) not present",
)


@needs_data
def test_leaf_datasets_built_and_femnist_trained(tmp_path):
    work = copy_workflow(tmp_path / "wf", with_src=True)
    cfg = default_config()
    cfg["seeds"] = [0]
    cfg["datasets"] = {
        "femnist": {"kind": "femnist", "json": str(SHARED / "femnist"), "variant": "faithful",
                    "lr": 0.003, "batch_size": 10, "rounds": 200, "fedprox_mu": 1},
        "shakespeare": {"kind": "shakespeare",
                        "raw": str(SHARED / "shakespeare" / "gutenberg-100-1994.txt.gz"),
                        "lr": 0.8, "batch_size": 10, "rounds": 40, "fedprox_mu": 0.001},
    }
    cfg["experiments"] = {
        "short": {"datasets": ["femnist"], "methods": ["fedavg"], "clients_per_round": 3,
                  "epochs": 1, "rounds": 2},
    }
    write_config(work, cfg)
    code, out = snakemake(work, "--cores", "2", timeout=300)
    assert code == 0, out[-3000:]
    rows = {r["dataset"]: r for r in csv.DictReader(open(work / "results/summary/datasets.csv"))}
    assert set(rows) == {"femnist", "shakespeare"}
    assert int(rows["femnist"]["devices"]) == 200
    assert int(rows["shakespeare"]["devices"]) > 0 and rows["shakespeare"]["kind"] == "shakespeare"
    metrics = list(work.glob("results/runs/femnist/fedavg/*/metrics.csv"))
    assert len(metrics) == 1
    runs = list(csv.DictReader(open(work / "results/summary/runs.csv")))
    assert len(runs) == 1 and runs[0]["dataset"] == "femnist"


@needs_data
def test_paper_config_plans_leaf_jobs(tmp_path):
    work = copy_workflow(tmp_path / "wf", with_src=True)
    paper = work / "config" / "paper.yaml"  # its paths are relative to the repository
    paper.write_text(paper.read_text().replace("../shared/data", str(SHARED)))
    code, out = snakemake(work, "-n", "--configfile", "config/paper.yaml")
    assert code == 0, out[-3000:]
    counts = job_counts(out)
    assert counts["prepare_femnist"] == 1 and counts["prepare_shakespeare"] == 1
    assert counts["datasets_table"] == 1
    code, out = snakemake(work, "-n")
    assert code == 0, out[-3000:]
    assert "prepare_femnist" not in job_counts(out) and "datasets_table" not in job_counts(out)
