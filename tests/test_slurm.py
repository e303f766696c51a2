"""The workflow on a real (one-node, loopback) SLURM cluster through profiles/slurm: every job
through sbatch with the results of a local run, and a long training run under `max_runtime`
that SLURM cuts, that is cancelled, and that still ends with a local run's metrics.

Skips with the reason where SLURM, munge or the Snakemake SLURM plugin is absent; CI
installs them (.ci/run).
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
import shutil
import subprocess
import sys
import time

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


# ---------------------------------------------------------------------------------------
# A run longer than its jobs: cut at the time limit, cancelled, retried, resumed
# ---------------------------------------------------------------------------------------

CAP = 1  # minutes: simulator.max_runtime at SLURM's shortest time limit
LONG_RUN = "synthetic_1_1/feddane/mu0.01_K10_E20_seed0"
CHECKPOINT = f"results/checkpoints/{LONG_RUN}.pt"
TRAIN_LOG = f"results/logs/train/{LONG_RUN}.log"
METRICS = f"results/runs/{LONG_RUN}/metrics.csv"
DEADLINE = 900  # seconds for the whole cluster run (~3 min on an idle 2-core machine)


def long_run_config():
    """One FedDANE run of 2,400 rounds (~40 s on one core here, several checkpoint intervals of a
    1-minute job: 6 s) under max_runtime 1."""
    cfg = default_config()
    cfg["datasets"] = {"synthetic_1_1": dict(cfg["datasets"]["synthetic_1_1"], rounds=2400)}
    cfg["experiments"] = {"long": {"datasets": ["synthetic_1_1"], "methods": ["feddane"], "mu": [0.01],
                                   "clients_per_round": 10, "epochs": 20, "seeds": [0]}}
    cfg["simulator"]["max_runtime"] = CAP
    return cfg


def long_run_copy(path):
    workdir = workflow_copy(path)
    write_config(workdir, long_run_config())
    return workdir


def train_jobs(cluster_env, run_id=None):
    """(SLURM job id, state, time limit) of every train job SLURM still lists (MinJobAge), in order;
    with `run_id`, those of that Snakemake run only (its jobs' name)."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i|%j|%k|%T|%l"], env=cluster_env, check=True,
                         capture_output=True, text=True).stdout
    rows = [line.split("|") for line in out.splitlines()]
    return sorted((int(i), state, limit) for i, name, comment, state, limit in rows
                  if comment.startswith("rule_train") and run_id in (None, name))


def run_processes(workdir):
    """The pids of the long run's training command in `workdir` (its shell and its Python)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")) == workdir and \
                    f"--checkpoint {CHECKPOINT}" in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                pids.append(int(proc.name))
        except OSError:  # gone, or not ours to read
            continue
    return pids


class Driver:
    """Waits on the cluster run of long_run_config and cuts its jobs."""

    def __init__(self, workdir, cluster_env, snakemake_proc):
        self.workdir, self.env, self.proc = workdir, cluster_env, snakemake_proc
        self.deadline = time.monotonic() + DEADLINE
        self.logs = []  # the training log of each cut attempt, read when its job ended

    def wait(self, what, condition):
        while not condition():
            assert self.proc.poll() is None, f"the workflow ended before {what}: the run is too short for this test"
            assert time.monotonic() < self.deadline, f"no {what} after {DEADLINE} s: {train_jobs(self.env)}"
            time.sleep(0.2)

    def saved_checkpoint(self):
        """The checkpoint's modification time (ns), None while there is none."""
        try:
            return (self.workdir / CHECKPOINT).stat().st_mtime_ns
        except FileNotFoundError:
            return None

    def running_job_that_saved(self, before_ns):
        """A running train job, once its run has written a checkpoint other than `before_ns`."""
        found = []

        def saved():
            found[:] = [i for i, state, _ in train_jobs(self.env) if state == "RUNNING"]
            return found and self.saved_checkpoint() not in (None, before_ns) and run_processes(self.workdir)

        self.wait("a checkpoint of a running job", saved)
        return found[-1]

    def pause_run(self):
        """Stop the run where it is (SIGSTOP), so that it outlasts its job however fast this machine
        is, and return its checkpoint's time; SLURM continues it (SIGCONT) to send its SIGTERM."""
        for pid in run_processes(self.workdir):
            os.kill(pid, signal.SIGSTOP)
        return self.saved_checkpoint()

    def wait_until_ended(self, job):
        def ended():
            return all(state not in ("RUNNING", "COMPLETING") for i, state, _ in train_jobs(self.env) if i == job)

        self.wait(f"end of job {job}", ended)
        self.logs.append((self.workdir / TRAIN_LOG).read_text())


@pytest.fixture(scope="module")
def cut_run(slurm_cluster, tmp_path_factory):
    """The long run through profiles/slurm: its first job cancelled (scancel) after a checkpoint,
    its second cut by SLURM at its 1-minute limit, its third completing; and the same run on this
    machine, uninterrupted, meanwhile."""
    root = tmp_path_factory.mktemp("cut")
    local = long_run_copy(root / "local")
    # their output to files: a pipe nobody reads while the driver waits could fill and stall them
    local_log, cluster_log = root / "local.out", root / "cluster.out"
    local_proc = subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "1", METRICS], cwd=local, env=env(),
                                  stdout=local_log.open("w"), stderr=subprocess.STDOUT)
    cluster = long_run_copy(root / "cluster")
    code, out = snakemake(cluster, "--cores", "1", "results/datasets/synthetic_1_1.h5")  # only training on SLURM
    assert code == 0, out
    proc = subprocess.Popen([sys.executable, "-m", "snakemake", "--profile", "profiles/slurm", "--slurm-no-account",
                             "--slurm-keep-successful-logs", "--slurm-init-seconds-before-status-checks", "5",
                             "--seconds-between-status-checks", "3", METRICS], cwd=cluster,
                            env={**slurm_cluster, "PYTHONPATH": env()["PYTHONPATH"]},
                            stdout=cluster_log.open("w"), stderr=subprocess.STDOUT)
    driver = Driver(cluster, slurm_cluster, proc)
    try:
        first = driver.running_job_that_saved(None)
        driver.pause_run()
        subprocess.run(["scancel", str(first)], env=slurm_cluster, check=True)
        driver.wait_until_ended(first)
        # the cancelled run wrote a checkpoint as it stopped (SIGTERM): wait for the next job's own
        second = driver.running_job_that_saved(driver.saved_checkpoint())
        driver.pause_run()  # past its checkpoint: SLURM cuts the job at its time limit
        driver.wait_until_ended(second)
        proc.wait(timeout=max(driver.deadline - time.monotonic(), 1))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert local_proc.wait(timeout=600) == 0, local_log.read_text()
    out = cluster_log.read_text()
    run_id = re.search(r"SLURM run ID: (\S+)", out)[1]
    return dict(cluster=cluster, local=local, code=proc.returncode, out=out, first=first, second=second,
                jobs=train_jobs(slurm_cluster, run_id), attempt_logs=driver.logs)


def test_a_job_cut_at_its_time_limit_is_retried_and_resumes_to_a_local_runs_metrics(cut_run):
    assert cut_run["code"] == 0, cut_run["out"]
    states = {job: state for job, state, _ in cut_run["jobs"]}
    assert states[cut_run["second"]] == "TIMEOUT", cut_run["jobs"]
    assert list(states.values())[-1] == "COMPLETED" and list(states.values()).count("COMPLETED") == 1
    final_log = (cut_run["cluster"] / TRAIN_LOG).read_text()
    assert re.match(r"feddane mu=0.01 on synthetic_1_1: resumed from its checkpoint at round [1-9]\d*, 2400 rounds",
                    final_log), final_log
    assert (cut_run["cluster"] / METRICS).read_bytes() == (cut_run["local"] / METRICS).read_bytes()
    assert not (cut_run["cluster"] / CHECKPOINT).exists()  # the completed run removed it


def test_a_cancelled_job_is_retried_and_resumes_to_a_local_runs_metrics(cut_run):
    assert cut_run["code"] == 0, cut_run["out"]
    states = {job: state for job, state, _ in cut_run["jobs"]}
    assert states[cut_run["first"]] == "CANCELLED", cut_run["jobs"]
    # the job after the cancelled one continued from the checkpoint the cancelled one wrote
    first_log, second_log = cut_run["attempt_logs"]
    assert "starting, 2400 rounds" in first_log, first_log
    assert "resumed from its checkpoint at round" in second_log, second_log
    # each cut job ended with the run's one stop line: a checkpoint at the round it reached
    for log in (first_log, second_log):
        assert re.search(r"^fedsim train: stopped at round \d+ of 2400 by SIGTERM; checkpoint written to ", log,
                         re.M), log
    assert (cut_run["cluster"] / METRICS).read_bytes() == (cut_run["local"] / METRICS).read_bytes()


def test_under_max_runtime_a_run_goes_through_several_jobs_each_asking_at_most_the_cap(cut_run):
    assert cut_run["code"] == 0, cut_run["out"]
    jobs = cut_run["jobs"]
    assert len(jobs) >= 3 and all(limit == f"{CAP}:00" for _, _, limit in jobs), jobs
    # the cap is execution only: another one (or none) reruns nothing
    code, out = snakemake(cut_run["cluster"], "-n", METRICS, "--config", "simulator={max_runtime: 240}")
    assert code == 0 and "Nothing to be done" in out, out


def test_the_cut_jobs_logs_show_no_traceback(cut_run):
    assert cut_run["code"] == 0, cut_run["out"]
    slurm_logs = list((cut_run["cluster"] / ".snakemake" / "slurm_logs" / "rule_train").rglob("*.log"))
    assert len(slurm_logs) == len(cut_run["jobs"])
    for text in [*cut_run["attempt_logs"], *(path.read_text() for path in slurm_logs)]:
        assert "Traceback" not in text, text
