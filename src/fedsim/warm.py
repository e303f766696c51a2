"""Warm start: `python -m fedsim.warm ARGS` does what `python -m fedsim ARGS` does, without paying
for `import torch` in every job.

A workflow runs ~150 short fedsim jobs; each new Python process spends ~2-3 s importing torch,
numpy, pandas, h5py and matplotlib before it trains for a few seconds. Here the first job starts a
small server that imports all of that once and then forks a fresh child per job. The child takes
over the job's stdin/stdout/stderr (passed over a Unix socket), its working directory and its
environment, runs the command and reports the exit code. So each job is still its own process,
with its own outputs and log, and the result is the same as a cold start: a run depends only on
its config, data and seed, and a forked child starts from the server's freshly imported state.

Safety nets:
- the server's name is a hash of the interpreter, the installed torch, every fedsim source file
  (path, size, mtime) and the process's cgroup: after an edit, jobs go to a new server running
  the new code, and a job never runs inside another job's resource limits;
- the socket lives in a folder only this user can enter, and the launcher checks that the
  process listening is this user's before it sends anything;
- the job dies with its launcher: the child watches the socket and exits when the launcher is
  killed (a cancelled Snakemake job, a walltime), so no orphan keeps writing;
- the job gets its launcher's signals: SIGTERM, SIGINT (Ctrl-C) and SIGUSR1 sent to the launcher
  go on to the job, which stops as a cold one would (fedsim.core.stopping: a run saves its checkpoint
  at a round boundary, one line, exit code 128 + the signal's number), and the launcher returns its
  exit code, with no traceback of its own;
- the server exits after IDLE_SECONDS without jobs (FEDSIM_WARM_IDLE overrides) and never
  touches CUDA, so forking is safe;
- FEDSIM_WARM=0 in the environment makes it run cold (the workflow's `simulator: warm_start`);
- inside a batch-system job (SLURM, PBS, LSF, SGE, HTCondor, Flux, OAR, Cobalt) it runs cold, and
  off Linux too (macOS forbids some libraries after fork; untested there);
- anything that goes wrong before a job has started (no Unix sockets, no fork, a path too long
  for a socket, the server fails to come up) makes the launcher run the command itself, cold.

Snakemake's `benchmark:` files of warm jobs measure the launcher: their wall time is the job's,
their memory and CPU columns are not.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .core.stopping import STOP_SIGNALS, StopSignals, Stopped, exit_status
from .specs import PLUGINS_ENV

IDLE_SECONDS = 60.0
START_TIMEOUT = 120.0     # seconds to wait for a new server's imports (a cold page cache is slow)
MAX_SOCKET_PATH = 100     # bytes; AF_UNIX allows 104-108 depending on the system
PRELOAD = ("torch", "numpy", "pandas", "h5py", "fedsim.cli", "fedsim.core.train", "fedsim.outputs.summary",
           "fedsim.outputs.figures", "fedsim.data.leaf", "fedsim.data.leaf.stats", "fedsim.data.synthetic", "fedsim.core.kernel",
           "fedsim.core.shuffle")
COMPILED = ("fedsim.core.kernel", "fedsim.core.shuffle")  # preloaded modules whose warm_up() compiles their numba code
COMPILED_COMMANDS = ("train",)  # commands that call COMPILED code (another one that does compiles it itself)
# Read once at import by torch and the BLAS libraries: a job with other values gets another server.
# The registries of methods, models and kinds are built at import too, with the plugin folders' files.
IMPORT_ENV = ("PYTHONPATH", "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "NUMBA_CACHE_DIR", PLUGINS_ENV)
BATCH_JOB_ENV = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "JOB_ID", "_CONDOR_JOB_AD", "FLUX_JOB_ID",
                 "OAR_JOB_ID", "COBALT_JOBID")
HEADER = struct.Struct("!I")


def server_key(package_dir: Path | None = None) -> str:
    """A hash of everything the server has imported that a job could see change, and of the
    cgroup it runs in (its resource limits)."""
    package_dir = package_dir or Path(__file__).resolve().parent
    torch_spec = importlib.util.find_spec("torch")
    torch_file = Path(torch_spec.origin) if torch_spec and torch_spec.origin else None
    parts = [sys.executable, sys.version, str(package_dir)]
    parts += [f"{k}={os.environ.get(k, '')}" for k in IMPORT_ENV]
    if torch_file is not None:
        info = torch_file.parent.joinpath("version.py").stat()
        parts.append(f"torch {torch_file} {info.st_size} {info.st_mtime_ns}")
    for path in sorted(package_dir.rglob("*.py")):
        info = path.stat()
        parts.append(f"{path.relative_to(package_dir)} {info.st_size} {info.st_mtime_ns}")
    for folder in filter(None, os.environ.get(PLUGINS_ENV, "").split(os.pathsep)):  # a user's own methods, ...
        for path in sorted(Path(folder).rglob("*.py")):
            info = path.stat()
            parts.append(f"{path} {info.st_size} {info.st_mtime_ns}")
    cgroup = Path("/proc/self/cgroup")
    if cgroup.exists():
        parts.append(cgroup.read_text())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def socket_path(key: str) -> Path:
    """<temp>/fedsim-warm-<uid>/<key>.sock, in a folder only this user can enter; OSError where
    that folder is not ours or the path is too long for a Unix socket."""
    folder = Path(tempfile.gettempdir()) / f"fedsim-warm-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise OSError(f"{folder}: not a private folder of this user")
    path = folder / f"{key}.sock"
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise OSError(f"{path}: too long for a Unix socket")
    return path


# ---------------------------------------------------------------------------------------
# Launcher (the job's process)
# ---------------------------------------------------------------------------------------


def launch(argv: list[str]) -> int:
    """Run `fedsim ARGV` through a warm server; cold in this process if that cannot start."""
    signals = _ForwardSignals()
    try:
        with signals:
            return _launch(argv, signals)
    except Stopped as stopped:  # before the job started here or in the server's child
        print(f"fedsim {' '.join(argv[:1])}: {stopped.line()}", file=sys.stderr)
        return exit_status(stopped.signum)


class _ForwardSignals(StopSignals):
    """The launcher's STOP_SIGNALS: sent on to the job once it runs in the server's child (`pid`), which
    stops as a cold `fedsim` would (fedsim.core.stopping) and reports its exit code; before that, they stop
    the launcher at once (Stopped). (In the moment between the child's start and its process id read here,
    the job goes with its launcher, having trained nothing worth a checkpoint: queueing the signal instead
    would hold a Ctrl-C for the whole of a new server's imports.)"""

    pid = None

    def _handle(self, signum: int, frame) -> None:
        if self.pid is None:
            raise Stopped(signum)
        try:
            os.kill(self.pid, signum)
        except ProcessLookupError:  # the job has just ended: its exit code is on its way
            pass


def _launch(argv: list[str], signals: _ForwardSignals) -> int:
    cold = os.environ.get("FEDSIM_WARM") == "0" or any(name in os.environ for name in BATCH_JOB_ENV)
    if cold or not sys.platform.startswith("linux"):  # forking after `import torch`: tested on Linux only
        return _run_cold(argv)
    try:
        conn = _connect(socket_path(server_key()))
        _send_request(conn, argv)
        reply = _recv_exact(conn, 1 + HEADER.size)  # b"S" and the job's process id
        started = reply[:1] == b"S"
    except OSError:
        started = False
    if not started:
        return _run_cold(argv)
    # From here on the job runs in the server's child: wait for its exit code, sending it the signals
    # this process gets. If this process is killed, the socket closes and the child stops too.
    signals.pid = HEADER.unpack(reply[1:])[0]
    reply = _recv_exact(conn, HEADER.size)
    if not reply:
        print("fedsim.warm: the job's process ended without an exit code (killed by a signal?)", file=sys.stderr)
        return 1
    return HEADER.unpack(reply)[0]


def _run_cold(argv: list[str]) -> int:
    from .__main__ import console

    return console(argv)


def _connect(path: Path) -> socket.socket:
    """A connection to the server at `path`, starting one if none answers."""
    try:
        return _dial(path)
    except OSError:
        pass
    server = subprocess.Popen([sys.executable, "-m", "fedsim.warm", "--serve", str(path)],
                              start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, close_fds=True)
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            return _dial(path)
        except OSError:
            # Ours exited without serving, and no other holds the lock: none is coming up.
            gone = server.poll() is not None and not _server_alive(path)
            if gone or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _dial(path: Path) -> socket.socket:
    """A connection to `path`, refused unless the process listening there is this user's."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
        if hasattr(socket, "SO_PEERCRED"):
            _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                            struct.calcsize("3i")))
            if uid != os.getuid():
                raise OSError(f"{path}: served by user {uid}, not by this user")
    except OSError:
        conn.close()
        raise
    return conn


def _server_alive(path: Path) -> bool:
    """Whether a server holds the lock of `path` (it may still be importing)."""
    with open(f"{path}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        return False


def _send_request(conn: socket.socket, argv: list[str]) -> None:
    payload = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    socket.send_fds(conn, [HEADER.pack(len(payload))], [0, 1, 2])
    conn.sendall(payload)


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


# ---------------------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------------------


def serve(path: Path, idle_seconds: float) -> None:
    """Import once, then fork one child per job until idle for `idle_seconds`."""
    lock = open(f"{path}.lock", "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # another server owns this key
    # Listen before importing: launchers queue meanwhile, and a socket that cannot be bound
    # fails this server before it costs anyone an import.
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # through `finally`: the socket goes
    try:
        # After an install numba's cache is empty: compile each module in a process of its own
        # (both cores, while this one imports). Jobs are served as soon as the imports are done;
        # the server loads the compiled code from the cache once the compiles end, and the jobs
        # forked after that inherit it (_Compiles).
        compiles = _Compiles()
        for name in PRELOAD:
            __import__(name)
        _digest_code()
        _accept_jobs(listener, lock, idle_seconds, compiles)
    finally:
        path.unlink(missing_ok=True)
        listener.close()


def _digest_code() -> None:
    """Every method's code digest (a run's record and checkpoint hold it: fedsim.core.sources), once here
    and not in each job: a file's edit gives another server (server_key), so they stay this server's code's."""
    from .core.sources import run_code_digest
    from .methods import REGISTRY

    for method in REGISTRY:
        run_code_digest(method)


class _Compiles:
    """The COMPILED modules' first compile, each in a process of its own. A job forked before they
    end and that needs them (COMPILED_COMMANDS) waits for them in its own process, then loads the
    code from numba's cache; the server loads it once they end, for the jobs forked after."""

    def __init__(self):
        # each process's stdout a pipe that nobody writes: a reader sees its end when the process ends
        self.processes = [subprocess.Popen([sys.executable, "-c", f"import {name}; {name}.warm_up()"],
                                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for name in COMPILED]
        self.loaded = False

    def load_when_done(self) -> bool:
        """In the server: once every compile has ended, the compiled code loaded here (a failed
        compile only leaves the compiling to warm_up). Whether it is loaded."""
        if not self.loaded and all(process.poll() is not None for process in self.processes):
            for process in self.processes:
                process.stdout.close()
            for name in COMPILED:
                sys.modules[name].warm_up()
            self.loaded = True
        return self.loaded

    def wait(self) -> None:
        """In a job forked before the code was loaded: until every compile has ended."""
        if not self.loaded:
            for process in self.processes:
                process.stdout.read()


def _accept_jobs(listener: socket.socket, lock, idle_seconds: float, compiles: _Compiles) -> None:
    start_dir = os.getcwd()
    children, last_active = set(), time.monotonic()
    while children or time.monotonic() - last_active < idle_seconds:
        listener.settimeout(1.0 if compiles.load_when_done() else 0.1)
        children -= _reaped(children)
        if children:
            last_active = time.monotonic()
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        pid = os.fork()
        if pid == 0:
            lock.close()  # a job outliving a killed server must not keep new servers from starting
            listener.close()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _child(conn, start_dir, compiles)  # never returns
        conn.close()
        children.add(pid)
        last_active = time.monotonic()


def _reaped(children: set[int]) -> set[int]:
    done = set()
    for pid in children:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            done.add(pid)
    return done


def _child(conn: socket.socket, start_dir: str, compiles: _Compiles) -> None:
    """Become the job: its stdio, cwd and environment; run it; report the exit code."""
    code = 1
    try:
        conn.setblocking(True)
        msg, fds, _, _ = socket.recv_fds(conn, HEADER.size, 3)
        request = json.loads(_recv_exact(conn, HEADER.unpack(msg)[0]))
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # `python -m` puts the start folder first on sys.path: the job's, as in a cold start
        sys.path[:] = [request["cwd"] if entry == start_dir else entry for entry in sys.path]
        # The signals reach the job from its launcher, which sends on what it gets (not what it ignores),
        # whatever the server inherited. Until the command installs its own (fedsim.cli), one ends the
        # job at once, with one line (_run_job); once it has ended, its exit code goes back regardless.
        for signum in STOP_SIGNALS:
            signal.signal(signum, _stop_at_once)
        threading.Thread(target=_die_with_launcher, args=(conn,), daemon=True).start()
        conn.sendall(b"S" + HEADER.pack(os.getpid()))
        code = _run_job(request["argv"], compiles)
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
        conn.sendall(HEADER.pack(code))
    finally:
        os._exit(code)


def _stop_at_once(signum: int, frame) -> None:
    raise Stopped(signum)


def _run_job(argv: list[str], compiles: _Compiles) -> int:
    sys.argv = ["fedsim", *argv]
    try:
        from .__main__ import console

        if argv[:1] and argv[0] in COMPILED_COMMANDS:
            compiles.wait()
        code = console(argv)
    except Stopped as stopped:  # before the command's own signal handling began
        print(f"fedsim {' '.join(argv[:1])}: {stopped.line()}", file=sys.stderr)
        code = exit_status(stopped.signum)
    except SystemExit as stop:  # argparse errors, --help
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _die_with_launcher(conn: socket.socket) -> None:
    """The launcher never sends after its request: any return from recv means it is gone."""
    try:
        conn.recv(1)
    except OSError:
        pass
    os._exit(143)


def main() -> int:
    if sys.argv[1:2] == ["--serve"]:
        serve(Path(sys.argv[2]), float(os.environ.get("FEDSIM_WARM_IDLE", IDLE_SECONDS)))
        return 0
    return launch(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
