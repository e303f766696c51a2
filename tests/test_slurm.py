"""The workflow on a real (one-node, loopback) SLURM cluster through profiles/slurm: every job
through sbatch with the results of a local run, and a training run under `max_runtime` that is
cancelled, that SLURM cuts at its time limit, and that still ends with a local run's metrics.

The two cluster runs go at once (the cut run spends a minute waiting for its time limit), each
beside the same workflow run on this machine. Nothing here depends on the machine's pace: a hold
file (fedsim.core.stopping) keeps the cut run at a round boundary until the test has cut it, and every
wait polls a condition under a generous ceiling. Whatever fails, no process or SLURM job a test
started outlives it (cluster_workflow).

Skips with the reason where SLURM, munge or the Snakemake SLURM plugin is absent; CI
installs them (.ci/run).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedsim.core.stopping import HOLD_FILE_ENV
from helpers.workflow import REPO, copy_workflow, default_config, env, job_counts, snakemake, write_config
from slurm_cluster import slurm_cluster  # noqa: F401  (the fixture)

pytestmark = pytest.mark.workflow

DEADLINE = 900  # seconds for a whole cluster run (about 2 min on an idle 2-core machine): a ceiling, not a pace

# Every rule's jobs through the profile: Figure 1 on one dataset, FedAvg and FedDANE tuned over two mu.
PROFILE_DATASET = "synthetic_iid"

# A run longer than its jobs: cancelled, cut at the time limit, retried, resumed.
CAP = 1  # minutes: simulator.max_runtime at SLURM's shortest time limit
ROUNDS = 12  # a fraction of a second of training: the hold file, not the run's length, keeps each cut job running
LONG_RUN = "synthetic_1_1/feddane/mu0.01_K10_E20_seed0"
CHECKPOINT = f"results/checkpoints/{LONG_RUN}.pt"
TRAIN_LOG = f"results/logs/train/{LONG_RUN}.log"
METRICS = f"results/runs/{LONG_RUN}/metrics.csv"
DATASET = "results/datasets/synthetic_1_1.h5"


def profile_config():
    cfg = default_config()
    cfg["synthetic"]["devices"] = 8
    cfg["datasets"] = {PROFILE_DATASET: dict(cfg["datasets"][PROFILE_DATASET], rounds=3)}
    cfg["tuning"]["mu_grid"] = [0, 1]
    cfg["experiments"] = {"figure1": {"figure": "figure1", "datasets": [PROFILE_DATASET],
                                      "methods": ["fedavg", "feddane"], "clients_per_round": 3, "epochs": 1,
                                      "seeds": [0]}}
    return cfg


def long_run_config():
    """One FedDANE run under max_runtime 1 (SLURM's shortest limit)."""
    cfg = default_config()
    cfg["datasets"] = {"synthetic_1_1": dict(cfg["datasets"]["synthetic_1_1"], rounds=ROUNDS)}
    cfg["experiments"] = {"long": {"datasets": ["synthetic_1_1"], "methods": ["feddane"], "mu": [0.01],
                                   "clients_per_round": 10, "epochs": 20, "seeds": [0]}}
    cfg["simulator"]["max_runtime"] = CAP
    return cfg


def workflow_copy(path, cfg):
    workdir = copy_workflow(path, with_src=True)
    shutil.copytree(REPO / "profiles", workdir / "profiles", dirs_exist_ok=True)
    write_config(workdir, cfg)
    return workdir


# ---------------------------------------------------------------------------------------
# Runs, jobs and processes: started in the background, waited for, always stopped
# ---------------------------------------------------------------------------------------


def train_jobs(cluster_env, run_id):
    """(SLURM job id, state, time limit) of every train job of Snakemake run `run_id` (its jobs'
    name) that SLURM still lists (MinJobAge), in order."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i|%j|%k|%T|%l"], env=cluster_env, check=True,
                         capture_output=True, text=True).stdout
    rows = [line.split("|") for line in out.splitlines()]
    return sorted((int(i), state, limit) for i, name, comment, state, limit in rows
                  if comment.startswith("rule_train") and name == run_id)


def processes_in(folder):
    """The pids of every process whose working directory is `folder` or below it (a workflow's own
    processes and its jobs'), but this one's."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and int(proc.name) != os.getpid() and \
                    Path(os.readlink(proc / "cwd")).is_relative_to(folder):
                pids.append(int(proc.name))
        except OSError:  # gone, or not ours to read
            continue
    return pids


def wait_for(what, condition, seconds=DEADLINE, alive=None):
    """Poll `condition` until it holds; fail after `seconds`, or at once once `alive` (a process
    the condition depends on) has ended."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert alive is None or alive.poll() is None, f"the workflow ended before {what}"
        assert time.monotonic() < deadline, f"no {what} after {seconds} s"
        time.sleep(0.2)


class Workflow:
    """A Snakemake run in the background, its output in a file beside its folder (a pipe nobody
    reads while the test waits could fill and stall it)."""

    def __init__(self, workdir, args, environment):
        self.workdir, self.log = workdir, workdir.parent / f"{workdir.name}.out"
        self.proc = subprocess.Popen([sys.executable, "-m", "snakemake", *args], cwd=workdir, env=environment,
                                     stdout=self.log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)

    def output(self):
        return self.log.read_text()

    def run_id(self):
        """The SLURM run ID Snakemake names its jobs by (None before it says it)."""
        found = re.search(r"SLURM run ID: (\S+)", self.output())
        return found and found[1]

    def wait(self):
        """Its exit code, once it has ended."""
        return self.proc.wait(timeout=DEADLINE)


@contextlib.contextmanager
def workflows(cluster_env):
    """start(workdir, *args, cluster=True, hold=None): Snakemake in `workdir`, through profiles/slurm
    or on this machine; with `hold`, the runs it trains wait at each round boundary while that file
    exists. Whatever happens in the block, nothing started outlives it: each Snakemake process group
    is killed, the SLURM jobs of each run cancelled, and the processes of each folder waited for."""
    started = []

    def start(workdir, *args, cluster=True, hold=None):
        environment = {**env(), **(cluster_env if cluster else {}), "PYTHONPATH": env()["PYTHONPATH"],
                       **({HOLD_FILE_ENV: str(hold)} if hold is not None else {})}
        profile = ["--profile", "profiles/slurm", "--slurm-no-account", "--slurm-keep-successful-logs",
                   "--slurm-init-seconds-before-status-checks", "5", "--seconds-between-status-checks", "3"]
        started.append(Workflow(workdir, [*(profile if cluster else ["--cores", "1"]), *args], environment))
        return started[-1]

    try:
        yield start
    finally:
        for workflow in started:
            if workflow.proc.poll() is None:
                os.killpg(workflow.proc.pid, signal.SIGKILL)
                workflow.proc.wait()
            if workflow.run_id():
                subprocess.run(["scancel", "--name", workflow.run_id()], env=cluster_env, check=False)
        for workflow in started:
            stop_processes_in(workflow.workdir)


def stop_processes_in(folder, grace=30):
    """Give the processes of `folder` (its cancelled jobs', an idle warm server's) `grace` seconds to
    end by themselves, then kill those left, and wait for them to be gone."""
    deadline = time.monotonic() + grace
    while processes_in(folder) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in processes_in(folder):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(f"end of the processes in {folder}", lambda: not processes_in(folder), seconds=60)


class CutRun:
    """Drives the cluster run of long_run_config, whose runs the hold file keeps at a round boundary."""

    def __init__(self, workflow, cluster_env):
        self.workflow, self.env = workflow, cluster_env
        self.logs = []  # the training log of each cut attempt, read when its job ended

    def jobs(self):
        run_id = self.workflow.run_id()
        return train_jobs(self.env, run_id) if run_id else []

    def running_job_whose_log_says(self, text, after=None):
        """A running train job (other than `after`) once its run's log says `text`: the run has evaluated
        round 0 and can only stop at a round boundary past it, where the hold keeps it."""
        found = []

        def running():
            found[:] = [i for i, state, _ in self.jobs() if state == "RUNNING" and i != after]
            log = self.workflow.workdir / TRAIN_LOG
            return found and log.exists() and text in log.read_text()

        wait_for(f"running train job saying {text!r}", running, alive=self.workflow.proc)
        return found[-1]

    def wait_until_ended(self, job):
        def ended():
            return all(state not in ("RUNNING", "COMPLETING") for i, state, _ in self.jobs() if i == job)

        wait_for(f"end of job {job}", ended, alive=self.workflow.proc)
        self.logs.append((self.workflow.workdir / TRAIN_LOG).read_text())


@pytest.fixture(scope="module")
def cluster_runs(slurm_cluster, tmp_path_factory):
    """Both cluster runs, each beside the same run on this machine, at once:
    - `profile`: every job of a small Figure 1 through profiles/slurm;
    - `cut`: the long run, its first job cancelled (scancel) once its run has started, its second cut
      by SLURM at its 1-minute limit, its third completing. A hold file keeps the first two jobs' runs
      at a round boundary until they are cut, however fast this machine trains."""
    root = tmp_path_factory.mktemp("cluster")
    copies = {(name, where): workflow_copy(root / f"{name}-{where}", cfg)
              for name, cfg in (("profile", profile_config()), ("cut", long_run_config()))
              for where in ("cluster", "local")}
    code, out = snakemake(copies["cut", "cluster"], "--cores", "1", DATASET)  # only training on SLURM
    assert code == 0, out
    hold = root / "hold"
    hold.touch()
    with workflows(slurm_cluster) as start:
        profile = start(copies["profile", "cluster"])
        cut = CutRun(start(copies["cut", "cluster"], METRICS, hold=hold), slurm_cluster)
        local = [start(copies["profile", "local"], cluster=False), start(copies["cut", "local"], METRICS, cluster=False)]

        first = cut.running_job_whose_log_says(f"starting, {ROUNDS} rounds")
        subprocess.run(["scancel", str(first)], env=slurm_cluster, check=True)
        cut.wait_until_ended(first)
        # held, the next job's run waits for SLURM to cut it at its time limit
        second = cut.running_job_whose_log_says("resumed from its checkpoint", after=first)
        cut.wait_until_ended(second)
        hold.unlink()
        codes = {"profile": profile.wait(), "cut": cut.workflow.wait()}
        for workflow in local:
            assert workflow.wait() == 0, workflow.output()
        jobs = cut.jobs()
    return dict(copies=copies, codes=codes, out={"profile": profile.output(), "cut": cut.workflow.output()},
                first=first, second=second, jobs=jobs, attempt_logs=cut.logs)


def test_profile_runs_every_job_under_slurm_with_local_results(cluster_runs):
    cluster, local = cluster_runs["copies"]["profile", "cluster"], cluster_runs["copies"]["profile", "local"]
    out = cluster_runs["out"]["profile"]
    assert cluster_runs["codes"]["profile"] == 0, out

    # every rule job went through sbatch; its SLURM job id names its SLURM log
    submitted = re.findall(r"submitted with SLURM jobid (\d+) \(log: (\S+?)\)", out)
    trained = list((cluster / "results" / "runs").rglob("run.json"))
    assert len(trained) == 1 + 2
    counts = job_counts(out)
    assert counts["train"] == len(trained)
    assert len(submitted) == counts["total"] - counts["all"] - counts["plan"], out  # all but the local rules
    for job_id, log in submitted:
        assert log.endswith(f"/{job_id}.log") and Path(log).is_file(), log

    for info in trained:
        rel = info.parent.relative_to(cluster)
        assert (cluster / rel / "metrics.csv").read_bytes() == (local / rel / "metrics.csv").read_bytes(), rel
    assert (cluster / "results/summary/chosen_settings.csv").read_bytes() == (local / "results/summary/chosen_settings.csv").read_bytes()


@pytest.fixture
def cut_run(cluster_runs):
    assert cluster_runs["codes"]["cut"] == 0, cluster_runs["out"]["cut"]
    copies = cluster_runs["copies"]
    return dict(cluster_runs, cluster=copies["cut", "cluster"], local=copies["cut", "local"])


def test_a_job_cut_at_its_time_limit_is_retried_and_resumes_to_a_local_runs_metrics(cut_run):
    states = {job: state for job, state, _ in cut_run["jobs"]}
    assert states[cut_run["second"]] == "TIMEOUT", cut_run["jobs"]
    assert list(states.values())[-1] == "COMPLETED" and list(states.values()).count("COMPLETED") == 1
    final_log = (cut_run["cluster"] / TRAIN_LOG).read_text()
    assert re.match(rf"feddane mu=0.01 on synthetic_1_1: resumed from its checkpoint at round [1-9]\d*, {ROUNDS} rounds",
                    final_log), final_log
    assert (cut_run["cluster"] / METRICS).read_bytes() == (cut_run["local"] / METRICS).read_bytes()
    assert not (cut_run["cluster"] / CHECKPOINT).exists()  # the completed run removed it


def test_a_cancelled_job_is_retried_and_resumes_to_a_local_runs_metrics(cut_run):
    states = {job: state for job, state, _ in cut_run["jobs"]}
    assert states[cut_run["first"]] == "CANCELLED", cut_run["jobs"]
    # the job after the cancelled one continued from the checkpoint the cancelled one wrote
    first_log, second_log = cut_run["attempt_logs"]
    assert f"starting, {ROUNDS} rounds" in first_log, first_log
    assert "resumed from its checkpoint at round" in second_log, second_log
    # each cut job ended with the run's one stop line: a checkpoint at the round it reached
    for log in (first_log, second_log):
        assert re.search(rf"^fedsim train: stopped at round \d+ of {ROUNDS} by SIGTERM; checkpoint written to ", log,
                         re.M), log
    assert (cut_run["cluster"] / METRICS).read_bytes() == (cut_run["local"] / METRICS).read_bytes()


def test_under_max_runtime_a_run_goes_through_several_jobs_each_asking_at_most_the_cap(cut_run):
    jobs = cut_run["jobs"]
    assert len(jobs) >= 3 and all(limit == f"{CAP}:00" for _, _, limit in jobs), jobs
    # the cap is execution only: another one (or none) reruns nothing
    code, out = snakemake(cut_run["cluster"], "-n", METRICS, "--config", "simulator={max_runtime: 240}")
    assert code == 0 and "Nothing to be done" in out, out


def test_the_cut_jobs_logs_show_no_traceback(cut_run):
    slurm_logs = list((cut_run["cluster"] / ".snakemake" / "slurm_logs" / "rule_train").rglob("*.log"))
    assert len(slurm_logs) == len(cut_run["jobs"])
    for text in [*cut_run["attempt_logs"], *(path.read_text() for path in slurm_logs)]:
        assert "Traceback" not in text, text


class PlantedFailure(Exception):
    pass


def test_a_failing_cluster_test_leaves_no_process_or_job_behind(slurm_cluster, tmp_path):
    """The cleanup every cluster run here goes through: a test that fails while a job runs (planted:
    the run held at a round boundary, so it would never end by itself) kills Snakemake, cancels the job
    and leaves no process of the workflow folder running."""
    workdir = workflow_copy(tmp_path / "wf", long_run_config())
    code, out = snakemake(workdir, "--cores", "1", DATASET)
    assert code == 0, out
    hold = tmp_path / "hold"
    hold.touch()
    with pytest.raises(PlantedFailure):
        with workflows(slurm_cluster) as start:
            workflow = start(workdir, METRICS, hold=hold)
            CutRun(workflow, slurm_cluster).running_job_whose_log_says("starting")
            assert processes_in(workdir)  # Snakemake and the held run
            raise PlantedFailure
    assert not processes_in(workdir)
    wait_for("end of the run's jobs", lambda: all(state not in ("PENDING", "RUNNING", "COMPLETING")
                                                  for _, state, _ in train_jobs(slurm_cluster, workflow.run_id())),
             seconds=60)
