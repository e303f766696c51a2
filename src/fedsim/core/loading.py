"""How a run reads its dataset: the train split held in memory or read round by round, the devices
the metrics are computed on, and each row written once into the tensors the model reads (RunData).

Scale: `load: stream` reads only each round's devices from the file instead of holding the
train split (`auto` streams above STREAM_ABOVE_BYTES); `eval_devices` computes the metrics on
a seeded sample of devices, drawn once per run (fedsim.core.train.eval_sample). Both give the same
numbers as holding everything, when the sample is all devices.

Read ahead: streamed, round t + 1's devices (known from (seed, t + 1) alone) are read on a second
thread while round t trains and evaluates (RunData.round_train): the file read and its checksums
release the GIL, as do the compiled kernel and torch, so on two cores the round waits only for what
the read takes beyond the previous round's work.

Threads for copies: the run's `threads` serve the data copies at load time, which are exact at any
thread count (the numerics run on one torch thread: fedsim.core.train says why). A read ahead copies
on one, since torch's thread count is the whole process's.

Memory: for MCLR on the CPU the rows go straight into the compiled kernel's padded layout
(InputBuffer); a streamed run's rounds take turns with two such buffers (InputPool).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import torch

from ..data.format import FederatedDataset
from .engine import KERNEL, Clients, accelerator_for
from .machine import thread_setup
from .settings import RunConfig

STREAM_ABOVE_BYTES = 1 << 30  # `load: auto` streams a train split larger than this (as model inputs)


def compute_device(name: str) -> torch.device:
    """Where the numerics run: the device a config names (auto: a GPU where there is one)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


@contextmanager
def torch_threads(count: int | None):
    """torch's intra-op thread count inside the block, restored after it (None: left as it is)."""
    if count is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class InputBuffer:
    """Room for `rows` samples of MCLR input in the compiled kernel's layout: x (rows, width), each row
    the features, the bias input 1, then zeros up to the kernel's padded width; and int64 labels.
    The features are written in place (RunData.load_padded) after `prepare`.

    Rows [0, ready) have their bias 1, except the sentinel row (all zero); rows from `ready` on are
    zeros. Every page is written once here, so that the rounds that later reach a row pay no page
    fault for it (on a virtual machine a fault can cost as much as reading the row; paid here, it
    falls in the round that creates the buffer).
    """

    def __init__(self, rows: int, features: int, dtype: np.dtype):
        from . import kernel
        self.features = features
        self.x = np.empty((rows, kernel.padded_width(features + 1)), dtype)
        self.y = np.empty(rows, np.int64)
        self.x.fill(0)
        self.y.fill(0)
        self.ready, self.sentinel = 0, None

    def prepare(self, n: int) -> None:
        """Rows [0, n) ready for their features (bias 1, zero padding), row n the all-zero sentinel:
        only the bias entries of rows not ready yet and of the previous sentinel are written."""
        if self.sentinel is not None:
            self.x[self.sentinel, self.features] = 1
        self.x[self.ready:n, self.features] = 1
        self.ready = max(self.ready, n + 1)
        self.x[n], self.y[n], self.sentinel = 0, 0, n

    def free(self) -> bool:
        """Whether nothing outside refers to this buffer's memory (no Clients, tensor or view of it):
        two references each, the attribute's and getrefcount's argument."""
        return sys.getrefcount(self.x) == 2 and sys.getrefcount(self.y) == 2


class InputPool:
    """The per-round input buffers, reused from round to round once no Clients refers to them.

    The training loop lets go of round t-1's Clients before it takes round t's; round t + 1's rows are
    read ahead meanwhile, so two buffers serve every round, in turn (one, read round by round). A round's
    fresh memory costs page faults, on a virtual machine as much as the read itself; reused memory
    costs none. The evaluation sample's buffers, which live for the whole
    run, never come from here.
    """

    KEEP = 2

    def __init__(self, features: int, dtype: np.dtype):
        self.features, self.dtype, self.buffers = features, dtype, []

    def take(self, rows: int) -> InputBuffer:
        """A free buffer of at least `rows` rows: a kept one, else a new one (kept when there is room)."""
        for buffer in self.buffers:
            if len(buffer.x) >= rows and buffer.free():
                return buffer
        self.buffers = [b for b in self.buffers if not b.free()]  # free but too small: dropped
        buffer = InputBuffer(rows * 2, self.features, self.dtype)  # room for larger rounds, faulted in once
        if len(self.buffers) < self.KEEP:
            self.buffers.append(buffer)
        return buffer


class RunData:
    """A run's view of its dataset file: the train split held in memory or read round by round
    (only the round's devices), and the devices the metrics are computed on, `eval_ids` (None: all)."""

    def __init__(self, config: RunConfig, dataset: FederatedDataset, model, dtype: torch.dtype,
                 eval_ids: np.ndarray | None):
        self.dataset, self.device, self.dtype = dataset, compute_device(config.device), dtype
        self.model, self.eval_ids = model, eval_ids  # the run's, checked before these loads (train.run_data)
        self.threads, self.flush = config.threads, not config.keep_subnormals
        self.width, self.input_dtype = self.model.input_layout(self.dtype)
        self.sizes = dataset.train_sizes
        # the kernel accelerator (MCLR on the CPU): rows read straight into its padded layout (load_padded)
        self.padded = accelerator_for(self.model, self.device.type) is KERNEL
        if self.padded:
            self.round_inputs = InputPool(self.width - 1, torch.empty(0, dtype=self.input_dtype).numpy().dtype)
        split_bytes = int(self.sizes.sum()) * self.width * self.input_dtype.itemsize
        self.stream = config.load == "stream" or (config.load == "auto" and split_bytes > STREAM_ABOVE_BYTES)
        if self.stream and self.eval_ids is None and split_bytes > STREAM_ABOVE_BYTES:
            raise ValueError(f"bad run setting eval_devices=None: evaluating all {dataset.num_devices} devices "
                             f"would hold the whole train split ({split_bytes / 2**30:.1f} GiB); sample some")
        # one read at a time (a read ahead runs on its own thread; the file's chunk buffers are shared)
        self._reading, self._reader, self._ahead = threading.Lock(), None, None
        self.train = None if self.stream else self.load("train")
        self.eval_train = self.train if self.train is not None and self.eval_ids is None else \
            self.load("train", self.eval_ids)
        self.eval_test = self.load("test", self.eval_ids)

    def load(self, split: str, devices=None, reuse: bool = False, copy_threads: bool = True,
             to_device: bool = True) -> Clients:
        """Rows of `devices` (default: all) as model inputs on the compute device.

        Written once into their final tensors, sentinel row included: at 10^5 devices these
        copies are a visible part of a round. `reuse`: in memory a previous round's inputs had,
        once nothing refers to them (a round's training rows; never the evaluation sample's).
        `copy_threads`: the copies on the run's `threads` torch threads; off for a read ahead,
        since torch's thread count is the whole process's and the numerics run beside it on one.
        `to_device`: off for a read ahead too, whose rows the round moves itself (on_device): its
        thread then makes no call on the accelerator, where the main thread may be capturing a
        CUDA graph (StepGraphs), which a copy or an allocation from another thread would break.
        """
        devices = None if devices is None else np.unique(devices)
        with self._reading:
            clients = self._load(split, devices, reuse, self.threads if copy_threads else None)
        return self.on_device(clients) if to_device else clients

    def on_device(self, clients: Clients) -> Clients:
        """`clients` with their rows on the compute device (the same object where they are there)."""
        x, y = clients.x.to(self.device), clients.y.to(self.device)
        return clients if x is clients.x and y is clients.y else dataclasses.replace(clients, x=x, y=y)

    def _load(self, split: str, devices: np.ndarray | None, reuse: bool, threads: int | None) -> Clients:
        if self.padded:
            return self.load_padded(split, devices, reuse, threads)
        part = self.dataset.load(split, devices)
        n = len(part.y)
        x = torch.empty(n + 1, self.width, dtype=self.input_dtype)
        y = torch.empty(n + 1, dtype=torch.int64)
        with torch_threads(threads):
            self.model.prepare_inputs(torch.from_numpy(part.x), out=x[:n])
            y[:n] = torch.from_numpy(part.y)
        x[n], y[n] = 0, 0
        return Clients(x=x, y=y, offsets=part.offsets, ids=devices)

    def load_padded(self, split: str, devices: np.ndarray | None, reuse: bool, threads: int | None) -> Clients:
        """load() for MCLR on the CPU: the rows in an InputBuffer, where the compiled kernel reads
        them (Clients.kernel_x); the model's x is a view of its first features + 1 columns, rows
        apart by the padded width (gathers from it are exact; a product over all of it can round
        differently, see Clients.kernel_x). The file read writes the features there itself when the
        dtypes agree: one copy."""
        sizes = self.sizes if split == "train" else self.dataset.test_sizes
        n = int(sizes.sum() if devices is None else sizes[devices].sum())
        features = self.width - 1
        buffer = self.round_inputs.take(n + 1) if reuse else InputBuffer(n + 1, features, self.round_inputs.dtype)
        buffer.prepare(n)
        if self.dataset.x_dtypes[split] == buffer.x.dtype:
            part = self.dataset.load(split, devices, x_into=buffer.x, y_into=buffer.y)
        else:  # another dtype (float64 runs of a float32 file): converted in one pass
            part = self.dataset.load(split, devices, y_into=buffer.y)
            with torch_threads(threads):
                torch.from_numpy(buffer.x)[:n, :features].copy_(torch.from_numpy(part.x).reshape(n, features))
        x = torch.from_numpy(buffer.x[:n + 1, :features + 1])
        return Clients(x=x, y=torch.from_numpy(buffer.y[:n + 1]), offsets=part.offsets, ids=devices,
                       kernel_x=buffer.x[:n + 1])

    def round_train(self, devices: np.ndarray, upcoming: np.ndarray | None = None) -> Clients:
        """Train rows holding at least `devices`; streamed, `upcoming` (the next round's devices) are
        then read ahead on a second thread, and the next call for them waits for that read (and
        raises what it raised: a damaged file stops the round that needs its rows, as before)."""
        if self.train is not None:
            return self.train
        ahead, self._ahead = self._ahead, None
        if ahead is not None and np.array_equal(ahead.devices, np.unique(devices)):
            clients = self.on_device(ahead.result())
        else:
            if ahead is not None:  # not this round's rows (a caller's own order): wait for it, drop it
                ahead.exception()
            clients = self.load("train", devices, reuse=True)
        if upcoming is not None:
            if self._reader is None:
                self._reader = ThreadPoolExecutor(1, thread_name_prefix="fedsim-read-ahead",
                                                  initializer=thread_setup(self.flush))
            self._ahead = self._reader.submit(self.load, "train", upcoming, True, False, False)
            self._ahead.devices = np.unique(upcoming)
        return clients

    def close(self) -> None:
        """Wait for a read ahead still running (its rows are not needed) and end its thread."""
        if self._reader is not None:
            self._reader.shutdown(wait=True)
        self._reader = self._ahead = None

    def record(self) -> dict:
        sampled = self.eval_ids is not None
        return {"load": "stream" if self.stream else "memory", "eval_sampled": sampled,
                "eval_devices": len(self.eval_ids) if sampled else self.dataset.num_devices}

