"""A real one-node SLURM cluster on loopback, for the tests: munged, slurmctld, slurmd.

The daemons run as ordinary background processes (no systemd), each under `timeout` so
they stop by themselves even if the test process dies; the fixture stops them by pid.
Facts that shaped this (slurm-wlm 22.05, snakemake-executor-plugin-slurm 2.x):
- the plugin deletes every SLURM_* variable (SLURM_CONF too) inside a job, so `srun` in
  the job only finds the configuration at the default path /etc/slurm/slurm.conf: the
  fixture links it there for the test's duration (and refuses to replace a real one);
- without slurmdbd, `sacct` fails: the profile uses `squeue` as status command, which
  needs finished jobs to stay visible (MinJobAge well above the first status check).
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

DEFAULT_CONF = Path("/etc/slurm/slurm.conf")
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo")
LIFETIME = "1800"  # seconds: the daemons' own upper bound
LOCK = Path("/tmp/fedsim-test-slurm.lock")  # one test cluster at a time: they share DEFAULT_CONF
# The node offers more CPUs and memory than the machine (config_overrides): the tests' jobs are mostly
# waiting and starting Python, and a held run holds its CPU while it waits to be cut.
NODE_CPUS = 8


def missing_requirements() -> str | None:
    absent = [d for d in DAEMONS if shutil.which(d) is None]
    if absent:
        return f"SLURM/munge not installed ({', '.join(absent)}): apt-get install slurm-wlm munge"
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        return "snakemake-executor-plugin-slurm not installed"
    if os.geteuid() != 0:
        return "the test cluster's slurmd must run as root"
    if DEFAULT_CONF.exists() and not DEFAULT_CONF.is_symlink():
        return f"{DEFAULT_CONF} exists: not replacing a real SLURM configuration"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slurm_conf(root: Path, host: str) -> str:
    return f"""\
ClusterName=fedsim-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge.sock
CryptoType=crypto/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
ReturnToService=2
MinJobAge=600
KillWait=5
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
NodeName={host} NodeAddr=127.0.0.1 CPUs={NODE_CPUS} RealMemory={NODE_CPUS * 2000} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


READY_SECONDS = 300  # a ceiling for a daemon to come up, not a pace


def wait_until(what, command, ready, env=None, daemon=None, seconds=READY_SECONDS) -> None:
    """Run `command` until `ready(its CompletedProcess)`; fail where `daemon` (the process it waits for)
    has ended, or after `seconds` (a hang)."""
    deadline = time.monotonic() + seconds
    while True:
        out = subprocess.run(command, env=env, capture_output=True, text=True)
        if ready(out):
            return
        if daemon is not None and daemon.poll() is not None:
            raise RuntimeError(f"{daemon.args[2]} ended before {what}: {out.stdout} {out.stderr}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} after {seconds} s: {out.stdout} {out.stderr}")
        time.sleep(0.5)


def wait_until_idle(env, seconds=READY_SECONDS) -> None:
    wait_until("idle test SLURM node", ["sinfo", "-h", "-o", "%T"], lambda out: out.stdout.strip() == "idle", env,
               seconds=seconds)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """Start the cluster; yield the environment to talk to it; stop every daemon."""
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool"):
        (root / sub).mkdir()
    key = root / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, host))
    env = {**os.environ, "SLURM_CONF": str(conf)}

    procs = []
    lock = LOCK.open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        procs.append(subprocess.Popen(
            ["timeout", LIFETIME, "munged", "-F", "--force", f"--key-file={key}", f"--socket={root}/munge.sock",
             f"--pid-file={root}/munged.pid", f"--log-file={root}/munged.log", f"--seed-file={root}/munge.seed"]))
        DEFAULT_CONF.parent.mkdir(parents=True, exist_ok=True)
        DEFAULT_CONF.unlink(missing_ok=True)
        DEFAULT_CONF.symlink_to(conf)
        wait_until("munge credential", ["munge", "-n", f"--socket={root}/munge.sock"], lambda out: out.returncode == 0,
                   daemon=procs[-1])
        procs.append(subprocess.Popen(["timeout", LIFETIME, "slurmctld", "-D", "-f", str(conf)], env=env))
        wait_until("answer of slurmctld", ["scontrol", "ping"], lambda out: "is UP" in out.stdout, env,
                   daemon=procs[-1])
        procs.append(subprocess.Popen(["timeout", LIFETIME, "slurmd", "-D", "-f", str(conf), "-N", host], env=env))
        wait_until_idle(env)
        yield env
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        if DEFAULT_CONF.is_symlink() and DEFAULT_CONF.resolve() == conf.resolve():
            DEFAULT_CONF.unlink()
        lock.close()
