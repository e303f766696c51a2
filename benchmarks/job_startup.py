"""What a workflow job pays before and after its work: `python -m fedsim` (a fresh process that
imports torch) against `python -m fedsim.warm` (a child forked from a server that imported it
once), on the same short training job, measured in the same run.

    python benchmarks/job_startup.py [--jobs 10] [--rounds 1]

The warm server is started (and left to exit when idle) before timing, as it is after a
workflow's first job.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fedsim.data.synthetic import write_synthetic


def job_seconds(module: str, data: Path, folder: Path, rounds: int, env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", module, "train", "--data", str(data), "--method", "fedavg",
                    "--rounds", str(rounds), "--metrics", str(folder / "m.csv"), "--info", str(folder / "r.json")],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1, help="training rounds per job (1: start-up dominates)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = tmp / "s.h5"
        write_synthetic(data, name="bench", alpha=1, beta=1, iid=False, seed=0)
        # a private server that exits 5 s after the benchmark
        env = {**os.environ, "TMPDIR": str(tmp), "FEDSIM_WARM_IDLE": "5"}
        job_seconds("fedsim.warm", data, tmp, args.rounds, env)  # starts the server
        times = {"cold (python -m fedsim)": [], "warm (python -m fedsim.warm)": []}
        for _ in range(args.jobs):  # interleaved, so drifts of the machine hit both alike
            for label, module in zip(times, ("fedsim", "fedsim.warm")):
                times[label].append(job_seconds(module, data, tmp, args.rounds, env))
    print(f"{args.jobs} jobs each, fedavg, {args.rounds} round(s) on Synthetic (1,1); "
          f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    medians = {label: statistics.median(t) for label, t in times.items()}
    for label, median in medians.items():
        print(f"{label:32s} {median:6.3f} s per job (median)")
    cold, warm = medians.values()
    print(f"saved per job                    {cold - warm:6.3f} s  (cold / warm {cold / warm:.1f}x)")


if __name__ == "__main__":
    main()
