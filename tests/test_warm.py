"""The warm launcher (fedsim.warm) gives what a fresh `python -m fedsim` gives, dies with its job,
follows code edits and stops by itself."""

import contextlib
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
from fedsim.specs import PLUGINS_ENV

from helpers.workflow import env as checkout_env

HANG_GUARD = 600  # seconds: a ceiling for what is waited for, never a pace
TRAIN = ["train", "--method", "feddane", "--mu", "0.1", "--clients-per-round", "3", "--epochs", "2",
         "--batch-size", "5", "--lr", "0.05"]


@pytest.fixture
def env(tmp_path_factory):
    """A private temp folder (so a private server) that goes idle quickly (a test that needs its server
    between two jobs sets a long idle time: the fixture ends the server)."""
    tmp = tmp_path_factory.mktemp("w")
    yield {**checkout_env(), "TMPDIR": str(tmp), "FEDSIM_WARM_IDLE": "3"}  # this checkout's src/, as pytest's
    for pid in server_pids(tmp):
        with contextlib.suppress(ProcessLookupError):  # it went idle and ended meanwhile
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


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def job_servers(tmp) -> dict[int, int]:
    """The jobs running in a server's child: {the job's process: its server's}. A job whose server was
    killed (its parent now another process) is not among them."""
    pids, served = server_pids(tmp), {}
    for pid in pids:
        try:
            parent = parent_pid(pid)
        except OSError:  # ended meanwhile
            continue
        if parent in pids:
            served[pid] = parent
    return served


def wait_for(what, condition, alive=None):
    """Poll `condition` until it holds; fail at once where `alive` (a process it depends on) has ended,
    or after HANG_GUARD seconds (a hang, at any pace)."""
    deadline = time.monotonic() + HANG_GUARD
    while not condition():
        assert alive is None or alive.poll() is None, f"it ended before {what}"
        assert time.monotonic() < deadline, f"no {what} after {HANG_GUARD} s"
        time.sleep(0.05)


@contextlib.contextmanager
def held_warm_job(args, env, cwd, name="launcher"):
    """`python -m fedsim.warm ARGS` (a training job) in the background, held at its first round
    boundary: yields the launcher once the job is paused there, so that the test sees which process
    runs it at any pace, and the job's servers then ({job: server}, job_servers). Leaving the block
    lifts the hold and waits for the launcher: its CompletedProcess (stdout from a file, as a pipe
    nobody reads could stall it) in `launcher.done`."""
    hold, out = cwd / f"{name}.hold", cwd / f"{name}.out"
    hold.touch()
    with open(out, "w") as stdout:
        launcher = subprocess.Popen([sys.executable, "-m", "fedsim.warm", *args], env={**env, HOLD_FILE_ENV: str(hold)},
                                    cwd=cwd, stdout=stdout, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("pause of the job", lambda: "fedsim train: paused at round" in out.read_text(), alive=launcher)
        launcher.servers = job_servers(env["TMPDIR"])
        yield launcher
        hold.unlink()
        err = launcher.communicate(timeout=HANG_GUARD)[1]
        launcher.done = subprocess.CompletedProcess(launcher.args, launcher.returncode, out.read_text(), err)
    finally:  # held, the job would wait for ever
        hold.unlink(missing_ok=True)
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def test_warm_jobs_give_the_cold_outputs_and_exit_codes(data, env, tmp_path):
    env = {**env, "FEDSIM_WARM_IDLE": "3600"}  # the server waits for the second job, however late it comes
    outputs, servers = {}, {}
    for label, module in [("cold", "fedsim"), ("warm1", "fedsim.warm"), ("warm2", "fedsim.warm")]:
        args = [*TRAIN, "--data", data, "--rounds", "5", "--metrics", f"{label}/m.csv", "--info", f"{label}/r.json"]
        if module == "fedsim":
            done = fedsim(module, args, env, tmp_path)
        else:
            with held_warm_job(args, env, tmp_path, label) as launcher:
                servers[label] = set(launcher.servers.values())  # the server whose child runs the job
            done = launcher.done
        assert done.returncode == 0, done.stderr
        assert "feddane mu=0.1 on tiny: done" in done.stdout  # the job's stdout reached ours
        outputs[label] = (tmp_path / label / "m.csv").read_bytes()
    assert outputs["warm1"] == outputs["cold"] == outputs["warm2"]
    assert len(servers["warm1"]) == 1, servers  # the first warm job ran in a server's child, not cold
    assert servers["warm2"] == servers["warm1"], servers  # the second warm job reused the first one's server

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
    args = [*TRAIN, "--data", data, "--rounds", "20", "--metrics", "m.csv", "--info", "r.json"]
    with held_warm_job(args, env, tmp_path) as launcher:  # the job cannot end by itself meanwhile
        assert len(launcher.servers) == 1, launcher.servers  # the job runs in a server's child
        (job,) = launcher.servers
        launcher.kill()
        launcher.wait()
        wait_for("end of the job after its launcher's", lambda: job not in server_pids(env["TMPDIR"]))
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
    args = [*TRAIN, "--data", data, "--rounds", "3", "--metrics", "m.csv", "--info", "r.json"]
    with held_warm_job(args, env, tmp_path) as launcher:
        assert len(launcher.servers) == 1, launcher.servers  # a server's child runs the job
        (server,) = launcher.servers.values()
    assert launcher.done.returncode == 0, launcher.done.stderr
    wait_for("end of the server after 3 idle seconds", lambda: server not in server_pids(env["TMPDIR"]))
    assert not server_pids(env["TMPDIR"])
    assert not list(Path(env["TMPDIR"]).rglob("*.sock"))


def test_a_job_outliving_a_killed_server_does_not_block_the_next_server(data, env, tmp_path):
    """The killed server leaves its socket file behind, and its job (its child) runs on: the next job
    gets a new server, which runs it in a child of its own. Were it blocked (the old job holding the
    server's lock), the launcher would wait out its start timeout and run the job cold, in itself."""
    long = [*TRAIN, "--data", data, "--rounds", "20", "--metrics", "a.csv", "--info", "a.json"]
    with held_warm_job(long, env, tmp_path, "long") as first:  # the job runs on while held: it outlives its server
        assert len(first.servers) == 1, first.servers
        (old_job, old_server), = first.servers.items()
        os.kill(old_server, signal.SIGKILL)
        wait_for("end of the killed server", lambda: old_server not in server_pids(env["TMPDIR"]))
        short = [*TRAIN, "--data", data, "--rounds", "3", "--metrics", "b.csv", "--info", "b.json"]
        with held_warm_job(short, env, tmp_path, "short") as second:  # hang guard: a job blocked for ever fails here
            assert old_job in server_pids(env["TMPDIR"])  # the old job still runs, its server gone
            # the next job runs in a server's child, not cold in its launcher, and that server is a new one
            assert len(second.servers) == 1 and old_server not in second.servers.values(), second.servers
        assert second.done.returncode == 0, second.done.stderr
        assert (tmp_path / "b.csv").exists()
        first.kill()  # the old job goes with its launcher


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


def test_a_plugin_edit_or_another_plugin_folder_gets_a_new_server(tmp_path, monkeypatch):
    """The server builds the methods', models' and kinds' registries at import, plugins' files with them:
    an edited plugin file, or another FEDSIM_PLUGINS, must not be served by the old imports."""
    method = tmp_path / "mine" / "methods" / "mymethod.py"
    method.parent.mkdir(parents=True)
    method.write_text("# a user's method\n")
    monkeypatch.setenv(PLUGINS_ENV, str(tmp_path / "mine"))
    before = warm.server_key()
    assert warm.server_key() == before
    method.write_text("# a user's method, edited\n")
    edited = warm.server_key()
    assert edited != before
    monkeypatch.setenv(PLUGINS_ENV, str(tmp_path / "other"))
    assert warm.server_key() not in (before, edited)
