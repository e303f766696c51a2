"""The warm launcher (fedsim.warm) gives what a fresh `python -m fedsim` gives, dies with its job,
follows code edits and stops by itself."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedsim import warm
from fedsim.core.stopping import HOLD_FILE_ENV

from helpers.workflow import env as checkout_env

TRAIN = ["train", "--method", "feddane", "--mu", "0.1", "--clients-per-round", "3", "--epochs", "2",
         "--batch-size", "5", "--lr", "0.05"]


@pytest.fixture
def env(tmp_path_factory):
    """A private temp folder (so a private server) that goes idle quickly."""
    tmp = tmp_path_factory.mktemp("w")
    yield {**checkout_env(), "TMPDIR": str(tmp), "FEDSIM_WARM_IDLE": "3"}  # this checkout's src/, as pytest's
    for pid in server_pids(tmp):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


def server_pids(tmp) -> list[int]:
    """The server and its job children: the processes whose command line names a socket in `tmp`."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--serve" in cmdline and any(arg.startswith(str(tmp).encode()) for arg in cmdline):
            pids.append(int(proc.name))
    return pids


def fedsim(module, args, env, cwd, **kw):
    return subprocess.run([sys.executable, "-m", module, *args], env=env, cwd=cwd, capture_output=True,
                          text=True, **kw)


def test_warm_jobs_give_the_cold_outputs_and_exit_codes(data, env, tmp_path):
    outputs = {}
    for label, module in [("cold", "fedsim"), ("warm1", "fedsim.warm"), ("warm2", "fedsim.warm")]:
        args = [*TRAIN, "--data", data, "--rounds", "5", "--metrics", f"{label}/m.csv", "--info", f"{label}/r.json"]
        done = fedsim(module, args, env, tmp_path)
        assert done.returncode == 0, done.stderr
        assert "feddane mu=0.1 on tiny: done" in done.stdout  # the job's stdout reached ours
        outputs[label] = (tmp_path / label / "m.csv").read_bytes()
    assert outputs["warm1"] == outputs["cold"] == outputs["warm2"]
    assert len(server_pids(env["TMPDIR"])) == 1  # the second warm job reused the first one's server

    bad = fedsim("fedsim.warm", [*TRAIN, "--data", "missing.h5", "--metrics", "m.csv", "--info", "r.json"],
                 env, tmp_path)
    assert bad.returncode == 2 and "dataset file not found: missing.h5" in bad.stderr


def test_jobs_forked_during_the_first_compile_give_the_cold_outputs(data, env, tmp_path):
    """After an install (numba's cache empty) the server serves jobs once it has imported, while the
    compiles run: a training job forked meanwhile waits for them, then loads their code."""
    fresh = {**env, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    args = [*TRAIN, "--data", data, "--rounds", "3", "--metrics", "{}/m.csv", "--info", "{}/r.json"]
    outputs = {}
    for label, module, environment in [("cold", "fedsim", env), ("warm", "fedsim.warm", fresh)]:
        done = fedsim(module, [a.format(label) for a in args], environment, tmp_path)
        assert done.returncode == 0, done.stderr
        outputs[label] = (tmp_path / label / "m.csv").read_bytes()
    assert outputs["warm"] == outputs["cold"]
    assert any((tmp_path / "numba-cache").rglob("*.nbi"))  # the code came from this cache


def test_a_killed_launcher_takes_its_job_along(data, env, tmp_path):
    args = [*TRAIN, "--data", data, "--rounds", "100000", "--metrics", "m.csv", "--info", "r.json"]
    launcher = subprocess.Popen([sys.executable, "-m", "fedsim.warm", *args], env=env, cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(server_pids(env["TMPDIR"])) < 2:  # the server and the job's child
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)
    launcher.kill()
    launcher.wait()
    deadline = time.monotonic() + 10
    while len(server_pids(env["TMPDIR"])) > 1:
        assert time.monotonic() < deadline, "the job outlived its launcher"
        time.sleep(0.1)
    assert not (tmp_path / "m.csv").exists()


def test_ctrl_c_reaches_the_job_which_stops_as_a_cold_one_does(data, env, tmp_path):
    """Ctrl-C in a terminal signals the launcher's process group, not the job (the server's child): the
    launcher sends it on; the job saves its checkpoint at a round boundary and ends with one line,
    the launcher with the job's exit code and no traceback of its own; the rerun resumes exactly."""
    rounds = 20
    args = [*TRAIN, "--data", data, "--rounds", str(rounds), "--checkpoint", "ckpt.pt", "--metrics", "m.csv",
            "--info", "r.json"]
    hold = tmp_path / "hold"  # the job waits at its first round boundary for the Ctrl-C, at any pace
    hold.touch()
    launcher = subprocess.Popen([sys.executable, "-m", "fedsim.warm", *args], env={**env, HOLD_FILE_ENV: str(hold)},
                                cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert "starting" in launcher.stdout.readline()  # the job has evaluated round 0
        os.killpg(launcher.pid, signal.SIGINT)
        _, err = launcher.communicate(timeout=120)
    finally:  # held, the job would wait for ever
        hold.unlink()
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    assert launcher.returncode == 128 + signal.SIGINT, err
    assert re.fullmatch(rf"fedsim train: stopped at round \d+ of {rounds} by SIGINT; checkpoint written to ckpt.pt; "
                        "rerun the same command to resume\n", err), err
    assert (tmp_path / "ckpt.pt").exists() and not (tmp_path / "m.csv").exists()

    rerun = fedsim("fedsim.warm", args, env, tmp_path)
    assert rerun.returncode == 0 and "resumed from its checkpoint" in rerun.stdout, rerun.stderr
    cold = fedsim("fedsim", [*args[:-6], "--metrics", "cold.csv", "--info", "cold.json"], env, tmp_path)
    assert cold.returncode == 0, cold.stderr
    assert (tmp_path / "m.csv").read_bytes() == (tmp_path / "cold.csv").read_bytes()


def test_the_server_stops_when_idle(data, env, tmp_path):
    args = [*TRAIN, "--data", data, "--rounds", "1", "--metrics", "m.csv", "--info", "r.json"]
    assert fedsim("fedsim.warm", args, env, tmp_path).returncode == 0
    assert server_pids(env["TMPDIR"])
    deadline = time.monotonic() + 30
    while server_pids(env["TMPDIR"]):
        assert time.monotonic() < deadline, "the server did not stop after 3 idle seconds"
        time.sleep(0.2)
    assert not list(Path(env["TMPDIR"]).rglob("*.sock"))


def test_a_job_outliving_a_killed_server_does_not_block_the_next_server(data, env, tmp_path):
    long = [*TRAIN, "--data", data, "--rounds", "100000", "--metrics", "a.csv", "--info", "a.json"]
    launcher = subprocess.Popen([sys.executable, "-m", "fedsim.warm", *long], env=env, cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(server_pids(env["TMPDIR"])) < 2:
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)
    pids = server_pids(env["TMPDIR"])
    server = next(pid for pid in pids if parent_pid(pid) not in pids)
    os.kill(server, signal.SIGKILL)
    try:
        start = time.monotonic()
        short = [*TRAIN, "--data", data, "--rounds", "1", "--metrics", "b.csv", "--info", "b.json"]
        job = subprocess.Popen([sys.executable, "-m", "fedsim.warm", *short], env=env, cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        seen = set()  # the processes of the socket folder while the job runs: a new server among them
        while job.poll() is None:
            seen.update(server_pids(env["TMPDIR"]))
            assert time.monotonic() - start < 60, "the next job is blocked"
            time.sleep(0.05)
        assert job.returncode == 0, job.stderr.read()
        assert time.monotonic() - start < 30
        assert seen - set(pids), seen  # served by a new server (its idle end, seconds later, is not ours to time)
    finally:
        launcher.kill()
        launcher.wait()


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_socket_folder_others_can_enter_is_not_used(data, env, tmp_path):
    folder = Path(env["TMPDIR"]) / f"fedsim-warm-{os.getuid()}"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    args = [*TRAIN, "--data", data, "--rounds", "1", "--metrics", "m.csv", "--info", "r.json"]
    assert fedsim("fedsim.warm", args, env, tmp_path).returncode == 0  # ran cold
    assert not server_pids(env["TMPDIR"]) and not list(folder.iterdir())


def test_warm_off_runs_cold(data, env, tmp_path):
    args = [*TRAIN, "--data", data, "--rounds", "1", "--metrics", "m.csv", "--info", "r.json"]
    for switch in [{"FEDSIM_WARM": "0"}, {"SLURM_JOB_ID": "42"}]:
        assert fedsim("fedsim.warm", args, {**env, **switch}, tmp_path).returncode == 0
        assert not server_pids(env["TMPDIR"])


def test_a_code_edit_gets_a_new_server(tmp_path):
    package = tmp_path / "fedsim"
    shutil.copytree(Path(warm.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    before = warm.server_key(package)
    assert warm.server_key(package) == before
    engine = package / "core" / "engine.py"
    engine.write_text(engine.read_text() + "\n# edited\n")
    assert warm.server_key(package) != before
