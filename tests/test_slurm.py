"""The workflow on a real (one-node, loopback) SLURM cluster through profiles/slurm.

Skips with the reason where SLURM, munge or the Snakemake SLURM plugin is absent; CI
installs them (.ci/run).
"""

from __future__ import annotations

import re
from pathlib import Path
import shutil
import subprocess
import sys

import pytest

from helpers.workflow import REPO, copy_workflow, default_config, env, job_counts, snakemake, write_config
from slurm_cluster import slurm_cluster  # noqa: F401  (the fixture)

pytestmark = pytest.mark.workflow

DATASETS = ["synthetic_iid", "synthetic_1_1"]


def small_config():
    cfg = default_config()
    cfg["synthetic"]["devices"] = 8
    cfg["datasets"] = {name: dict(cfg["datasets"][name], rounds=3) for name in DATASETS}
    cfg["tuning"]["mu_grid"] = [0, 1]
    cfg["experiments"] = {"figure1": {"figure": "figure1", "datasets": DATASETS, "methods": ["fedavg", "feddane"],
                                      "clients_per_round": 3, "epochs": 1, "seeds": [0]}}
    return cfg


def workflow_copy(path):
    workdir = copy_workflow(path, with_src=True)
    shutil.copytree(REPO / "profiles", workdir / "profiles", dirs_exist_ok=True)
    write_config(workdir, small_config())
    return workdir


def snakemake_on_cluster(workdir, cluster_env, *args):
    proc = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=workdir,
                          env={**cluster_env, "PYTHONPATH": env()["PYTHONPATH"]},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    return proc.returncode, proc.stdout


def test_profile_runs_every_job_under_slurm_with_local_results(slurm_cluster, tmp_path):
    cluster = workflow_copy(tmp_path / "cluster")
    code, out = snakemake_on_cluster(cluster, slurm_cluster, "--profile", "profiles/slurm", "--slurm-no-account",
                                     "--slurm-keep-successful-logs", "--slurm-init-seconds-before-status-checks", "5",
                                     "--seconds-between-status-checks", "3")
    assert code == 0, out

    # every rule job went through sbatch; its SLURM job id names its SLURM log
    submitted = re.findall(r"submitted with SLURM jobid (\d+) \(log: (\S+?)\)", out)
    trained = list((cluster / "results" / "runs").rglob("run.json"))
    assert len(trained) == 2 * (1 + 2)
    counts = job_counts(out)
    assert counts["train"] == len(trained)
    assert len(submitted) == counts["total"] - counts["all"] - counts["plan"], out  # all but the local rules
    for job_id, log in submitted:
        assert log.endswith(f"/{job_id}.log") and Path(log).is_file(), log

    local = workflow_copy(tmp_path / "local")
    code, out = snakemake(local, "--cores", "2")
    assert code == 0, out
    for info in trained:
        rel = info.parent.relative_to(cluster)
        assert (cluster / rel / "metrics.csv").read_bytes() == (local / rel / "metrics.csv").read_bytes(), rel
    assert (cluster / "results/summary/tuned_mu.csv").read_bytes() == (local / "results/summary/tuned_mu.csv").read_bytes()
