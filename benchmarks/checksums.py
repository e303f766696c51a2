"""What the dataset files' checksums cost: format 2 (64 KiB chunks, Fletcher-32) against format 1
(contiguous arrays, no checksum), on the same rows, in one process.

    python benchmarks/checksums.py [--devices 1000]

Prints the time to write the train split both ways, to read it whole (`load: memory`), and to
read 10 random devices' rows (a streamed round), with the ratios format 2 / format 1.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

from fedsim.data.format import CHUNK_BYTES, FederatedDataset
from fedsim.data.synthetic import write_synthetic
from timing import best_of  # (this folder: a script's own)


def as_format_1(src: Path, dst: Path) -> None:
    """The same file with contiguous, unchecked arrays (how format 1 stored them)."""
    with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
        g.attrs.update(dict(f.attrs))
        g.attrs["format_version"] = 1
        f.copy("clients", g)
        for split in ("train", "test"):
            for name in ("x", "y", "offsets"):
                g.create_dataset(f"{split}/{name}", data=f[f"{split}/{name}"][:], track_times=False)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        checked, plain = Path(tmp) / "v2.h5", Path(tmp) / "v1.h5"
        write_synthetic(checked, name="bench", alpha=1, beta=1, iid=False, num_devices=args.devices)
        with h5py.File(checked) as f:
            x, y = f["train/x"][:], f["train/y"][:]
        print(f"train split: {len(y):,} rows x {x.shape[1]} floats = {x.nbytes / 2**20:.0f} MiB")

        def write(path, checked):
            def run():
                with h5py.File(path, "w") as f:
                    for name, array in (("x", x), ("y", y)):
                        row = array.itemsize * int(np.prod(array.shape[1:]))
                        # as the format's writer: a chunk may not exceed the array
                        chunks = (min(len(array), max(1, CHUNK_BYTES // row)), *array.shape[1:]) if checked else None
                        f.create_dataset(name, data=array, chunks=chunks, fletcher32=checked, track_times=False)
            return run
        w2 = best_of(args.repeats, write(Path(tmp) / "w2.h5", True))
        w1 = best_of(args.repeats, write(Path(tmp) / "w1.h5", False))
        as_format_1(checked, plain)
        rng = np.random.default_rng(0)
        picks = [np.sort(rng.choice(args.devices, 10, replace=False)) for _ in range(20)]
        reads = {}
        for name, path in (("format 2", checked), ("format 1", plain)):
            with FederatedDataset(path) as ds:
                reads[name] = (best_of(args.repeats, lambda: ds.load("train")),
                               best_of(args.repeats, lambda: [ds.load("train", p) for p in picks]) / len(picks))
        opened = {name: best_of(args.repeats, lambda p=path: FederatedDataset(p).close())
                  for name, path in (("format 2", checked), ("format 1", plain))}
    print(f"{'':28}{'format 2':>10}{'format 1':>10}{'ratio':>8}")
    for label, a, b in (("write the train split (s)", w2, w1),
                        ("open, with its checks (s)", opened["format 2"], opened["format 1"]),
                        ("read the train split (s)", reads["format 2"][0], reads["format 1"][0]),
                        ("read 10 devices (ms)", 1e3 * reads["format 2"][1], 1e3 * reads["format 1"][1])):
        print(f"{label:<28}{a:>10.4f}{b:>10.4f}{a / b:>7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
