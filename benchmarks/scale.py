"""Scale: federated rounds over a large population, reading only each round's devices from the file.

    python benchmarks/scale.py [--data PATH] [--devices 100000] [--features 60] [--clients-per-round 1000]
                               [--epochs 1] [--rounds 6] [--eval-devices 1000] [--method fedavg] [--threads 1]
                               [--compare]

Synthetic (1,1) with --devices devices of --features features is generated first, by a child
process (so its memory does not count), at PATH (kept, and reused when it already holds that
dataset) or in a temporary directory. Then one run trains with load=stream (each round reads its
K devices from the file) and computes the metrics on a seeded sample of --eval-devices devices;
printed: seconds per round (training with its reads, plus the evaluation that follows it; the
mean over the rounds after the first two, which each create one of the two input buffers a streamed
run alternates between), what a round waits for its rows and its share of the round (the issue's
reading figure: a round's rows are read on a second thread during the round before, see
fedsim.core.loading), and the read itself: loading.RunData.load, split into the file read
(FederatedDataset.load: for MCLR on the CPU it writes the rows straight into the model's padded
input buffer) and the rest (that buffer's bias and sentinel entries), the checksums' part of the
file read, the evaluation part, the checks made once at open, the bytes read from disk (not served
by the page cache), and this process's peak resident memory (RSS). Every part is its mean over the
same rounds (each runs once a round).
Before the runs, the rows they will read are read once, so that they find them in the page cache
(this machine's page cache keeps neither all of the 11 GB file nor always all of the 1 GB one).

--compare first runs the same training with every read through h5py (FederatedDataset.raw_chunks
off: HDF5 checks the checksums, a slice or one union read per round), then as usual, back to back
in one process, and prints both and their ratio; the two runs must give the same metrics, bit for
bit (the script stops otherwise).

Generation is the long part, and is timed and printed as its own figure. Before generating, the
script prints the dataset's exact size (the device sizes are the generator's first draw, so they
are drawn here the same way: N = 100,000 devices hold 46.0 M samples, 11.4 GB at 60 features)
and how long writing it takes at the rates measured on this 2-core machine (75 MB/s idle on
2026-11-22, 21 MB/s with another job beside it on 2026-11-25: 2.5 to 9 minutes for the
default); it stops with one line when the target disk has less free space than the file needs.
The default stays the paper's 60 features at N = 100,000, which fits the 20 minutes it is meant
to: on 2026-11-25, loaded, generation took 542 s and the whole benchmark 584 s (idle, with the
152 s generation of 2026-11-22, about 3 minutes); peak RSS 1.18 GiB in the training process and
1.42 GiB in the generating child (its largest device has 0.7 M rows), under the 4 GiB target.
--features 20 makes the file 3.5x smaller for a quick look (the rounds then do less work per
sample than the paper's data).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedsim.data import format as data
from fedsim.data import synthetic  # noqa: E402
from fedsim.core import loading, train  # noqa: E402
from fedsim.data.format import SPLITS, FederatedDataset  # noqa: E402
from timing import best_of  # noqa: E402


GENERATION_MB_PER_S = {"idle": 75.0, "loaded": 21.0}  # a 2-core machine's generation rate, idle and loaded


def dataset_size(devices: int, features: int, seed: int = 0) -> tuple[int, int, int]:
    """(samples, largest device, bytes on disk) of the Synthetic dataset the generator writes: its
    first draw is the device sizes, drawn here by its own law (float32 features and int64 labels per row)."""
    sizes = synthetic.device_sizes(np.random.default_rng(seed), devices)
    samples = int(sizes.sum())
    return samples, int(sizes.max()), samples * (4 * features + 8) + 64 * devices


def generate(path: Path, devices: int, features: int) -> float | None:
    """Write Synthetic (1,1) with `devices` devices at `path` unless it is there; seconds spent (None:
    reused). Says first how large the file will be and how long writing it takes, and stops with one
    line when its disk lacks the space."""
    wanted = {"alpha": 1.0, "beta": 1.0, "num_devices": devices, "num_features": features, "seed": 0}
    if path.is_file():
        with FederatedDataset(path) as dataset:
            if all(dataset.attrs["provenance"].get(k) == v for k, v in wanted.items()):
                return None
        raise SystemExit(f"{path} holds another dataset; pass a new path")
    samples, largest, size = dataset_size(devices, features)
    minutes = {name: size / 1e6 / rate / 60 for name, rate in GENERATION_MB_PER_S.items()}
    print(f"generating Synthetic (1,1), {devices} devices x {features} features: {samples / 1e6:.1f} M samples "
          f"(largest device {largest}), {size / 1e9:.1f} GB at {path.parent}; expect {minutes['idle']:.1f} min "
          f"(idle) to {minutes['loaded']:.1f} min (loaded) on a 2-core machine", flush=True)
    free = shutil.disk_usage(path.parent).free
    if free < size * 1.05 + 2**28:
        raise SystemExit(f"not enough disk space at {path.parent}: the dataset needs {size / 1e9:.1f} GB, "
                         f"{free / 1e9:.1f} GB free (pass --data on a larger disk, or fewer --devices or --features)")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fedsim", "generate-synthetic", "--name", f"synthetic_1_1_n{devices}",
                    "--alpha", "1", "--beta", "1", "--devices", str(devices), "--features", str(features),
                    "--seed", "0", "--out", str(path)],
                   check=True, env={**os.environ, "PYTHONPATH": str(SRC)})
    return time.perf_counter() - start


@contextmanager
def timed(owner, name: str, kind: str, events: list):
    """Append (kind, start, seconds) for every call of owner.name to `events` while inside the block."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            events.append((kind, start, time.perf_counter() - start))
    setattr(owner, name, wrapper)
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextmanager
def recorded_fetches(fetched: list):
    """Record (time, dataset name, chunk indices) of every batch of chunks the raw path fetches
    (benchmark instrumentation of fedsim.data's internals, undone on exit)."""
    fetch = data._ChunkSource.fetch

    def recorded(self, ids, chunks, usable):
        fetched.append((time.perf_counter(), self.dset.name, np.array(ids)))
        return fetch(self, ids, chunks, usable)
    data._ChunkSource.fetch = recorded
    try:
        yield
    finally:
        data._ChunkSource.fetch = fetch


def replay_checksums(path: Path, batches: list) -> tuple[float, float, int]:
    """Seconds to fetch `batches` of chunks again and to check their Fletcher-32 checksums with the
    compiled check (the one load() runs fused with its copy, so timed apart here), and their bytes."""
    check = data._compiled()[0]
    check(np.zeros((1, 8), np.uint8), 4, np.zeros(1, bool))  # loaded from numba's cache outside the timing
    fetching = checking = 0.0
    size = 0
    with FederatedDataset(path) as dataset:
        for name, ids in batches:
            source = dataset._chunks.get(name) or dataset._chunks.setdefault(name, data._ChunkSource(dataset._f[name]))
            chunks, whole = source.buffer(len(ids))[:len(ids)], np.zeros(len(ids), bool)  # as load() does
            begun = time.perf_counter()
            for _ in source.fetch(ids, chunks, whole):
                pass
            fetching += time.perf_counter() - begun
            begun = time.perf_counter()
            bad = np.zeros(len(ids), bool)
            check(chunks, source.nbytes, bad)
            checking += time.perf_counter() - begun
            size += chunks.nbytes
            if bad.any() or not whole.all():
                raise SystemExit(f"{path}: a chunk failed on replay")
    return fetching, checking, size


def warm_page_cache(config: train.RunConfig) -> float:
    """Read once the rows the run will read (each round's selections and the evaluation sample), so
    that the runs measured find them in the page cache alike: this machine's page cache does not
    keep all of an 11 GB file, nor always all of a 1 GB one. Seconds spent."""
    begun = time.perf_counter()
    with FederatedDataset(config.data) as dataset:
        sizes = dataset.train_sizes
        sample = train.eval_sample(config.eval_devices, dataset.num_devices, config.seed)
        for split in SPLITS:
            dataset.load(split, sample)
        for t in range(config.rounds):
            for stream in (train.SELECTION_STREAM, train.SECOND_SUBSET_STREAM):
                dataset.load("train", np.unique(train.select_devices(config.seed, t, stream, config.clients_per_round,
                                                                     sizes, config.selection)))
    return time.perf_counter() - begun


def measure(config: train.RunConfig, raw_chunks: bool) -> dict:
    """One training run; seconds per steady round (the rounds after the first two: each of those
    creates one of the two input buffers a streamed run alternates between, whose pages fault in
    once a run) and the means of its parts over those rounds: each part runs once a round (the read
    for a round begins during the round before it, on the read-ahead thread)."""
    FederatedDataset.raw_chunks = raw_chunks
    stamps, blocks, events, fetched = [], [], [], []
    start = time.perf_counter()
    try:
        with timed(loading.RunData, "round_train", "waiting", events), \
                timed(loading.RunData, "load", "reading", events), timed(FederatedDataset, "load", "file", events), \
                timed(train, "evaluate", "evaluation", events), recorded_fetches(fetched):
            metrics, record = train.run(config, on_round=lambda row: (stamps.append(time.perf_counter()),
                                                                      blocks.append(disk_blocks())))
    finally:
        FederatedDataset.raw_chunks = True
    rounds = [b - a for a, b in zip(stamps, stamps[1:])]
    steady = rounds[2:] or rounds[-1:]
    lo, hi = stamps[-1 - len(steady)], stamps[-1]  # the steady rounds' span

    def per_call(kind):
        times = [seconds for k, begun, seconds in events if k == kind and lo <= begun < hi]
        return statistics.mean(times) if times else 0.0
    batches = [(name, ids) for begun, name, ids in fetched if lo <= begun < hi]
    reads = max(1, sum(1 for k, begun, _ in events if k == "reading" and lo <= begun < hi))
    fetching, checking, size = replay_checksums(Path(config.data), batches) if batches else (0.0, 0.0, 0)
    return {"setup": stamps[0] - start, "rounds": rounds, "round": statistics.mean(steady),
            **{kind: per_call(kind) for kind in ("waiting", "reading", "file", "evaluation")},
            "replay_fetch": fetching / reads, "checksums": checking / reads,
            "chunk_bytes": size / reads, "disk": (blocks[-1] - blocks[-1 - len(steady)]) * 512 / len(steady),
            "metrics": metrics, "record": record}


def disk_blocks() -> int:
    """512-byte blocks this process has read from disk so far (reads served by the page cache: none)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_inblock


def percent(part: float, whole: float) -> str:
    """part as a share of whole; a whole too short to time (a small dataset read in no measurable time) says so."""
    return f"{100 * part / whole:.0f} %" if whole > 0 else "- % (too short to time)"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b > 0 else "- (too short to time)"


def report(m: dict, label: str, raw_chunks: bool) -> None:
    share = m["waiting"] / m["round"]
    print(f"{label}seconds per round   {m['round']:7.2f}   (mean of rounds 3-{len(m['rounds'])}; all: "
          f"{', '.join(f'{r:.2f}' for r in m['rounds'])})")
    print(f"  reading devices   {m['waiting']:7.3f}   = {100 * share:.0f} % of a round (target < 25 %): what the round "
          f"waits for its rows (RunData.round_train)")
    print(f"  the read itself   {m['reading']:7.3f}   = {100 * m['reading'] / m['round']:.0f} % of a round: "
          f"loading.RunData.load, read ahead on a second thread while the previous round trains")
    print(f"    file            {m['file']:7.3f}   FederatedDataset.load: "
          f"{'raw checksummed chunks' if raw_chunks else 'through h5py (HDF5 checks the checksums)'}")
    if raw_chunks:
        print(f"      checksums     {m['checksums']:7.3f}   = {percent(m['checksums'], m['reading'])} of the reading: "
              f"Fletcher-32 over the {m['chunk_bytes'] / 1e6:.0f} MB of whole chunks a round fetches "
              f"(fetching them: {m['replay_fetch']:.3f} s; both replayed after the run)")
    print(f"    model inputs    {m['reading'] - m['file']:7.3f}   the rest of loading.RunData.load (the input "
          f"buffer's bias and sentinel; fresh rows' page faults)")
    print(f"  evaluation        {m['evaluation']:7.3f}")
    print(f"  read from disk    {m['disk'] / 1e6:7.1f} MB a round (0: every read served by the page cache)")


def open_checks(path: Path, devices: np.ndarray, repeats: int = 3) -> dict:
    """Best-of seconds of the checks made at open (once a run) and of the device index check
    made at each load."""
    def best(fn):
        return best_of(repeats, fn)
    with FederatedDataset(path) as dataset:
        labels = sum(len(dataset._f[f"{split}/y"]) for split in SPLITS)
        return {"open": best(lambda: FederatedDataset(path).close()),
                "layout": best(lambda: [dataset._check_layout(split) for split in SPLITS]),
                "labels": best(lambda: [dataset._check_labels(split) for split in SPLITS]), "label_count": labels,
                "indices": best(lambda: dataset._device_indices(devices))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, help="dataset file (generated there if missing)")
    parser.add_argument("--devices", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=60)
    parser.add_argument("--clients-per-round", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--eval-devices", type=int, default=1000)
    parser.add_argument("--method", choices=["fedavg", "fedprox", "feddane"], default="fedavg")
    parser.add_argument("--mu", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compare", action="store_true",
                        help="first run every read through h5py, then as usual; print both")
    args = parser.parse_args()
    begin = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp:
        path = args.data or Path(tmp) / "synthetic_1_1.h5"
        generation = generate(path, args.devices, args.features)
        config = train.RunConfig(data=str(path), method=args.method, mu=args.mu, rounds=args.rounds,
                                 clients_per_round=args.clients_per_round, epochs=args.epochs,
                                 load="stream", eval_devices=args.eval_devices, threads=args.threads)
        warming = warm_page_cache(config)
        before = measure(config, raw_chunks=False) if args.compare else None
        m = measure(config, raw_chunks=True)
        with FederatedDataset(path) as dataset:
            samples = int(dataset.train_sizes.sum())
        checks = open_checks(path, train.select_devices(config.seed, 1, train.SELECTION_STREAM,
                                                        args.clients_per_round, dataset.train_sizes, config.selection))

    record = m["record"]
    print(f"Synthetic (1,1): {args.devices} devices x {args.features} features, {samples} training samples; "
          f"{args.method} K={args.clients_per_round}, E={args.epochs}, B=10; load=stream, metrics on "
          f"{record['data_access']['eval_devices']} devices; {args.threads} thread(s), torch {torch.__version__}")
    print(f"dataset generation  {'reused ' + str(path) if generation is None else f'{generation:7.1f} s'}"
          f"   (a child process; not in the figures below)")
    print(f"page cache warmed with the rows the run reads: {warming:.1f} s (not in the figures below)")
    print(f"set-up (open, evaluation sample, round 0 metrics) {m['setup']:7.2f} s")
    if before is not None:
        if not before["metrics"].equals(m["metrics"]):
            raise SystemExit("the two read paths gave different metrics")
        report(before, "[h5py reads] ", raw_chunks=False)
        report(m, "[raw chunks] ", raw_chunks=True)
        print(f"same metrics, bit for bit; reading: h5py / raw chunks = {ratio(before['reading'], m['reading'])}, "
              f"file read alone {ratio(before['file'], m['file'])} (same process, back to back)")
    else:
        report(m, "", raw_chunks=True)
    print(f"checks at open (once a run): offsets and shapes {checks['layout'] * 1e3:.1f} ms, labels in range "
          f"{checks['labels']:.3f} s ({checks['label_count'] / 1e6:.1f} M labels, read with their checksums); "
          f"the whole open {checks['open']:.3f} s. At each load: device indices {checks['indices'] * 1e6:.0f} us")
    print(f"peak RSS            {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:7.2f} GiB   (target < 4)")
    print(f"whole benchmark     {time.perf_counter() - begin:7.1f} s   (generation included; target < 20 min)")
    print(f"final train loss    {m['metrics']['train_loss'].iloc[-1]:.4f} (round 0: {m['metrics']['train_loss'].iloc[0]:.4f})")


if __name__ == "__main__":
    main()
