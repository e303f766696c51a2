"""Local training of a round's selected devices: one local-step rule, and the engines that run it.

Every engine solves the same LocalProblem with the same mini-batches (one seeded shuffle per
device, round and epoch), so they agree to rounding:

- `local_sgd_batched` is the rule for every torch model: all K devices as ONE computation, their
  models stacked along a leading device dimension, each step's gradients from the model's
  `stacked_grads` (a closed form for MCLR, one autograd backward for the others). Devices with
  fewer steps drop out of the stack: they are ordered longest-first, so the ones still training
  are always a prefix and no masking is needed.
- accelerators (`ACCELERATORS`) run the models that name them faster, on one kind of device, for
  the LocalProblem fields they declare: `kernel`, a compiled loop for MCLR on the CPU
  (fedsim.kernel: numba, one core, devices one after another), which also gives MCLR's full
  local gradients and its metrics in one compiled pass each. `auto` picks the model's
  accelerator where it fits the device and the problem, the general rule otherwise.
- `local_sgd_loop` is the plain per-device loop with autograd: the test oracle and the
  benchmark baseline.

On a device type a model names in `graphs_on` (the LSTMs on CUDA), the general rule replays each
step as a CUDA graph (`StepGraphs`): the same operations, launched once a step.

No engine runs a problem without a part it asks for: each checks `LocalProblem.in_use()`
against the fields it implements and refuses, in one line, what it cannot.

Devices are named by their index in the dataset everywhere (selection, shuffling seeds);
a `Clients` may hold only some of them (`ids`), as when a round's devices are read from
the file, and `Clients.locate` turns indices into its own positions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from . import authors, shuffle
from .methods import LocalProblem
from .steps import local_steps as _local_steps

@dataclass
class Clients:
    """Some devices' samples of one split, prepared for the model, on the compute device.

    Row `sentinel` (the last one) is all zeros: padded batch slots gather it and
    contribute nothing, so ragged batches need no special case.
    """

    x: torch.Tensor        # (rows + 1, features); may be a view of kernel_x's padded rows (see kernel_x)
    y: torch.Tensor        # (rows + 1,)
    offsets: np.ndarray    # (held devices + 1,): the j-th held device owns rows offsets[j]:offsets[j+1]
    ids: np.ndarray | None = None  # dataset indices of the held devices, increasing; None: all, in order
    # x as the compiled kernel reads it (kernel.padded's layout): given by a loader that writes the rows
    # there (x then a view of its first columns: fedsim.train.InputBuffer; gathers from it are exact, but
    # a product over all of x may round differently than on contiguous rows: MKL, float64), else made
    # at its first use
    kernel_x: np.ndarray | None = None

    @classmethod
    def from_arrays(cls, x: torch.Tensor, y: torch.Tensor, offsets: np.ndarray, ids=None) -> "Clients":
        x = torch.cat([x, torch.zeros(1, *x.shape[1:], dtype=x.dtype, device=x.device)])
        y = torch.cat([y, torch.zeros(1, dtype=y.dtype, device=y.device)])
        ids = None if ids is None else np.asarray(ids, dtype=np.int64)
        return cls(x=x, y=y, offsets=np.asarray(offsets, dtype=np.int64), ids=ids)

    @property
    def sentinel(self) -> int:
        return len(self.x) - 1

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def locate(self, devices) -> np.ndarray:
        """Positions of the dataset's devices `devices` among the held ones."""
        devices = np.asarray(devices, dtype=np.int64)
        if self.ids is None:
            return devices
        pos = np.minimum(np.searchsorted(self.ids, devices), len(self.ids) - 1)
        if len(devices) and not np.array_equal(self.ids[pos], devices):
            raise KeyError(f"devices {sorted(set(devices.tolist()) - set(self.ids.tolist()))[:5]} not loaded")
        return pos

    def kernel_inputs(self) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) as the compiled kernel reads them: x padded (once per Clients, then reused)."""
        if self.kernel_x is None:
            from . import kernel
            self.kernel_x = kernel.padded(self.x.numpy())
        return self.kernel_x, self.y.numpy()

    def subset(self, devices) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        """The rows of `devices`, concatenated in that order, and their offsets."""
        pos = self.locate(devices)
        sizes = self.sizes[pos]
        out = np.concatenate([[0], np.cumsum(sizes)])
        rows = np.arange(out[-1]) + np.repeat(self.offsets[pos] - out[:-1], sizes)
        index = torch.from_numpy(rows).to(self.x.device)
        return self.x.index_select(0, index), self.y.index_select(0, index), out


@dataclass(frozen=True)
class SGDSettings:
    lr: float
    epochs: int
    batch_size: int
    seed: int
    shuffle: str = "fedsim"                # fedsim | authors (fedsim.authors)
    epochs_done: np.ndarray | None = None  # authors: local epochs each device has trained so far


def local_steps(sizes: np.ndarray, settings: SGDSettings) -> np.ndarray:
    """SGD steps of devices with `sizes` samples: E epochs of ceil(n_k / B) batches (batch_plan's rows;
    fedsim.steps, which the cost model counts too)."""
    return _local_steps(sizes, settings.epochs, settings.batch_size)


def local_samples(sizes: np.ndarray, settings: SGDSettings, steps: int | None = None) -> int:
    """Per-sample gradients the devices' local SGD computes: every sample each epoch, or with `steps`
    steps each, whole epochs and then full batches (an epoch's last, partial batch is never reached)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if steps is None:
        return int(settings.epochs * sizes.sum())
    epochs, rest = np.divmod(steps, -(-sizes // settings.batch_size))
    return int((epochs * sizes + rest * settings.batch_size).sum())


def batch_plan(size: int, settings: SGDSettings, round_: int, device: int, steps: int | None = None) -> np.ndarray:
    """Local row indices of every mini-batch, (steps, batch_size), padded with -1.

    Each epoch visits the device's samples in a fresh order keyed by (seed, round, device, epoch)
    (fedsim.shuffle; `shuffle: authors`: the authors' compounding in-place shuffle instead); the
    last batch of an epoch holds the remainder (as in the reference code, which never drops
    samples). `steps`: that many steps instead of E epochs (Scaffnew's random local work): the
    first batches of as many epochs as they need. The rows _stacked_plans writes for the device.
    """
    per_epoch = -(-size // settings.batch_size)
    if settings.shuffle == "authors":
        if steps is not None:
            longer = dataclasses.replace(settings, epochs=-(-steps // per_epoch))
            return batch_plan(size, longer, round_, device)[:steps]
        return authors.batch_plan(size, settings.batch_size, settings.epochs, int(settings.epochs_done[device]))
    one = np.array([0, size], dtype=np.int64)  # offsets of a lone device whose rows count from 0
    return shuffle.stacked_plans(one, one[:1], np.array([device]), settings.epochs, steps, settings.batch_size,
                                 settings.seed, round_, -1)[0]


def local_sgd_loop(model, params, problem: LocalProblem, clients: Clients, devices, settings, round_):
    """Per-device SGD with autograd: w <- w - lr (grad_batch F_k(w) + c_k + mu (w - w0))."""
    require_fields(problem, GENERAL_FIELDS, "the loop engine")
    models = []
    for j, (device, k) in enumerate(zip(devices, clients.locate(devices))):
        w = params.clone().requires_grad_(True)
        base = int(clients.offsets[k])
        for batch in batch_plan(int(clients.sizes[k]), settings, round_, int(device), problem.steps):
            rows = torch.from_numpy(batch[batch >= 0] + base).to(clients.x.device)
            (grad,) = torch.autograd.grad(model.loss(w, clients.x[rows], clients.y[rows]), w)
            if problem.anchor is not None:  # minus the same batch's gradient at the anchor (Mime)
                at = problem.anchor.clone().requires_grad_(True)
                grad = grad - torch.autograd.grad(model.loss(at, clients.x[rows], clients.y[rows]), at)[0]
            with torch.no_grad():
                if problem.correction is not None:
                    grad = grad + problem.correction[j]
                if problem.mu:
                    grad = grad + problem.mu * (w - params)
                w -= settings.lr * grad
        models.append(w.detach())
    return torch.stack(models)


def local_sgd_batched(model, params, problem: LocalProblem, clients: Clients, devices, settings, round_):
    """All devices' SGD at once, for any model: THE local-step rule of every torch model.

    The same plans and update rule as the loop, w <- w - lr (g + c_k + mu (w - w0)) with g the
    batch gradient (minus the same batch's at the anchor, for Mime). The K models are stacked
    (K, *params.shape), longest plan first; each step gathers the active devices' batches
    (active, B, ...) and gets their gradients from the model's stacked_grads (on a device type where
    the model does not declare that stacking pays, `stacks_on`, one device at a time). A padded slot
    (sentinel row) weighs 0 and the others 1 / (real samples in the batch): each device's
    batch-mean loss.
    """
    require_fields(problem, GENERAL_FIELDS, "the batched engine")
    devices = np.asarray(devices, dtype=np.int64)
    if params.device.type not in model.stacks_on:  # the same rule, a stack of one device at a time
        return torch.cat([_local_sgd_stacked(model, params, _one_device(problem, j), clients, devices[j:j + 1],
                                             settings, round_) for j in range(len(devices))])
    return _local_sgd_stacked(model, params, problem, clients, devices, settings, round_)


def _one_device(problem: LocalProblem, j: int) -> LocalProblem:
    """The part of `problem` that solver j solves (its row of the correction)."""
    return problem if problem.correction is None else dataclasses.replace(problem,
                                                                          correction=problem.correction[j:j + 1])


def _local_sgd_stacked(model, params, problem: LocalProblem, clients: Clients, devices, settings, round_):
    rows, first, steps, order = _stacked_plans(clients, devices, settings, round_, problem.steps)
    lr, mu = settings.lr, problem.mu
    stacked = params.expand(len(devices), *params.shape).clone()
    correction = None
    if problem.correction is not None:
        correction = problem.correction[torch.from_numpy(order).to(params.device)]
    index_all = torch.from_numpy(rows).to(clients.x.device)

    def sgd_step(active: int, index: torch.Tensor) -> None:
        """One step of the first `active` models of the stack on their batches' rows `index` (active, B)."""
        real = index != clients.sentinel
        weight = real.to(params.dtype) / real.sum(-1, keepdim=True).clamp(min=1)  # 1/3 in float64 for float64
        w, x, y = stacked[:active], clients.x[index], clients.y[index]
        grad = model.stacked_grads(w, x, y, weight)
        if problem.anchor is not None:  # minus the same batches' gradients at the anchor (Mime)
            grad = grad - model.stacked_grads(problem.anchor.expand_as(w), x, y, weight)
        if correction is not None:
            grad = grad + correction[:active]
        if mu:
            grad = grad + mu * (w - params)
        w -= lr * grad  # in place: updates the stack

    run_step = StepGraphs(sgd_step, stacked, index_all) if params.device.type in model.graphs_on else sgd_step
    longest = int(steps[0]) if len(steps) else 0
    # every step's plan rows, (steps, K), sent once: no host-to-device copy (and wait) per step; a
    # device's rows past its last step are never read (the active ones are a prefix)
    at = torch.from_numpy(np.minimum(first[None, :] + np.arange(longest)[:, None], len(rows) - 1))
    at = at.to(index_all.device)
    for step in range(longest):
        active = int(np.count_nonzero(steps > step))  # longest first: the active ones are a prefix
        run_step(active, index_all[at[step, :active]])
    return stacked[torch.from_numpy(np.argsort(order)).to(params.device)]


class StepGraphs:
    """A round's SGD steps replayed as CUDA graphs: one launch a step instead of one per operation.

    An LSTM step is thousands of small kernels (every operation of every time step, forward and
    backward), so on a GPU its time is their launches, not their arithmetic. Each step of the stack
    reads its batches' rows from one fixed buffer and updates the stack in place, so the step of
    `active` devices is the same graph every time: captured at its first use (after warm-up steps
    whose updates are undone), then replayed. The graphs hold this round's tensors (rows, stack,
    correction) and go with it. On another device type (the tests, on a CPU) the same buffers and
    warm-up run, and a replay is the step called again: the same numbers as the plain stacked rule.
    """

    WARMUP = 2  # eager steps before a capture: lazy initialisation (cuBLAS handles, autograd) off the graph

    def __init__(self, step, stacked: torch.Tensor, index_all: torch.Tensor):
        self.step, self.stacked = step, stacked
        self.index = index_all.new_empty(len(stacked), index_all.shape[1])  # (K, B): each step's rows, copied in
        self.graphs = {}
        self.stream = torch.cuda.Stream(stacked.device) if stacked.device.type == "cuda" else None

    def __call__(self, active: int, index: torch.Tensor) -> None:
        self.index[:active].copy_(index)
        if active not in self.graphs:
            self.graphs[active] = self._capture(active)
        self.graphs[active]()

    def _capture(self, active: int):
        saved = self.stacked.clone()
        view = self.index[:active]
        if self.stream is None:
            for _ in range(self.WARMUP):
                self.step(active, view)
            self.stacked.copy_(saved)
            return lambda: self.step(active, view)
        self.stream.wait_stream(torch.cuda.current_stream(self.stacked.device))
        with torch.cuda.stream(self.stream):  # warm-up and capture on one stream (its handles made here)
            for _ in range(self.WARMUP):
                self.step(active, view)
            self.stacked.copy_(saved)
        torch.cuda.current_stream(self.stacked.device).wait_stream(self.stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.stream):
            self.step(active, view)
        return graph.replay


def local_sgd_kernel(model, params, problem: LocalProblem, clients: Clients, devices, settings, round_):
    """The round's local SGD for MCLR as one compiled call (fedsim.kernel), on the CPU."""
    from . import kernel

    if accelerator_for(model, params.device.type) is not KERNEL:
        raise ValueError("the kernel engine runs MCLR models on the CPU (use batched)")
    require_fields(problem, KERNEL.fields, "the kernel engine")
    devices = np.asarray(devices, dtype=np.int64)
    anchor = None if problem.anchor is None else problem.anchor.numpy()
    if settings.shuffle == "fedsim":  # the batches drawn inside the call: no plan array
        correction = None if problem.correction is None else problem.correction.numpy()
        starts, sizes, steps = kernel_batches(clients, devices, settings, problem.steps)
        out = kernel.local_sgd_shuffled(*clients.kernel_inputs(), starts, sizes, devices, steps, settings.batch_size,
                                        settings.seed, round_, params.numpy(), correction, settings.lr, problem.mu,
                                        anchor)
        return torch.from_numpy(np.ascontiguousarray(out))  # the server's average then reads it without a copy
    rows, first, steps, order = _stacked_plans(clients, devices, settings, round_, problem.steps)
    correction = None if problem.correction is None else problem.correction.numpy()[order]
    out = kernel.local_sgd(*clients.kernel_inputs(), rows, first, steps, params.numpy(), correction, settings.lr,
                           problem.mu, anchor)
    local = np.empty(out.shape, out.dtype)
    local[order] = out  # in the devices' order, contiguous: the server's average reads it without a copy
    return torch.from_numpy(local)


def kernel_batches(clients: Clients, devices: np.ndarray, settings: SGDSettings, fixed_steps: int | None = None):
    """(first rows, sizes, steps) of `devices` as kernel.local_sgd_shuffled takes them: E epochs each,
    or `fixed_steps` steps."""
    pos = clients.locate(devices)
    starts, sizes = clients.offsets[pos], clients.offsets[pos + 1] - clients.offsets[pos]
    return starts, sizes, local_steps(sizes, settings) if fixed_steps is None else np.full(len(pos), fixed_steps)


def local_sgd_auto(model, params, problem: LocalProblem, clients: Clients, devices, settings, round_):
    """The model's accelerator on this device where it implements what the problem asks, else the
    general rule (local_sgd_batched)."""
    accelerator = accelerator_for(model, params.device.type, problem)
    engine = local_sgd_batched if accelerator is None else accelerator.local_sgd
    return engine(model, params, problem, clients, devices, settings, round_)


def device_grads(model, params, clients: Clients, devices) -> torch.Tensor:
    """Full local gradients grad F_k(params) of `devices` (dataset indices), (devices, *params.shape):
    the model's accelerator where it has one on this device (the kernel: no copy of their rows), the
    model's own otherwise."""
    accelerator = accelerator_for(model, params.device.type)
    if accelerator is not None:
        return accelerator.device_grads(params, clients, clients.locate(devices))
    return model.device_grads(params, *clients.subset(devices))


def all_device_grads(model, params, clients: Clients) -> torch.Tensor:
    """grad F_k(params) of every device `clients` holds, in its order, (devices, *params.shape)."""
    accelerator = accelerator_for(model, params.device.type)
    if accelerator is not None:
        return accelerator.device_grads(params, clients)
    return model.device_grads(params, clients.x[:-1], clients.y[:-1], clients.offsets)


def kernel_grads(params, clients: Clients, positions=None) -> torch.Tensor:
    """Mean loss gradients (devices, *params.shape) of the held devices at `positions` (all by default),
    MCLR on the CPU, in one compiled pass over their rows (fedsim.kernel.summed_grads)."""
    from . import kernel

    positions = np.arange(len(clients.offsets) - 1) if positions is None else positions
    starts, stops = clients.offsets[positions], clients.offsets[positions + 1]
    sums = kernel.summed_grads(*clients.kernel_inputs(), starts, stops, params.numpy())
    return torch.from_numpy(sums / np.maximum(stops - starts, 1).astype(sums.dtype)[:, None, None])


def kernel_evaluation(params, train: Clients, test: Clients) -> list[float]:
    """fedsim.metrics' six numbers (its COLUMNS, in order) at `params`, MCLR on the CPU, in one compiled
    call over both splits (fedsim.kernel.evaluation)."""
    from . import kernel

    return kernel.evaluation(*train.kernel_inputs(), train.offsets, *test.kernel_inputs(), test.offsets,
                             params.numpy())


@dataclass(frozen=True)
class Accelerator:
    """An engine that runs some models faster than the general rule, on one kind of device: the round's
    local SGD, full local gradients and the metrics. A model names the accelerators it can take
    (fedsim.models); `fields` are the LocalProblem fields it implements: a problem that asks for
    another is run by the general rule under `auto`, and refused by the accelerator itself."""

    name: str
    device: str                 # torch device type
    fields: frozenset
    local_sgd: Callable         # as local_sgd_batched
    device_grads: Callable      # (params, clients, positions=None) -> (devices, *params.shape)
    evaluation: Callable        # (params, train, test) -> fedsim.metrics.COLUMNS' values


# What every engine implements. `center` is the round loop's: it hands the engines w0 as params.
GENERAL_FIELDS = frozenset({"mu", "correction", "center", "steps", "anchor"})
KERNEL = Accelerator("kernel", "cpu", GENERAL_FIELDS, local_sgd_kernel, kernel_grads, kernel_evaluation)
ACCELERATORS = {KERNEL.name: KERNEL}


def accelerator_for(model, device_type: str, problem: LocalProblem | None = None) -> Accelerator | None:
    """The first accelerator the model names that runs on `device_type` (and implements every field
    `problem` asks for), or None."""
    for name in model.accelerators:
        accelerator = ACCELERATORS[name]
        if accelerator.device == device_type and (problem is None or problem.in_use() <= accelerator.fields):
            return accelerator
    return None


def require_fields(problem: LocalProblem, fields: frozenset, engine: str) -> None:
    """ValueError naming the first field `problem` asks for that `engine` does not implement: never
    solve a problem without part of it."""
    missing = sorted(problem.in_use() - fields)
    if missing:
        raise ValueError(f"local problem field {missing[0]!r} is not implemented by {engine}")


def _stacked_plans(clients: Clients, devices, settings, round_, fixed_steps: int | None = None):
    """Every device's batch plan as rows of `clients` (padding -> sentinel), longest first.

    Returns rows (total steps, B) with device order[j]'s steps at first[j]:first[j] + steps[j].
    One flat array rather than a (max steps, K, B) box: one long device next to K = 1000
    short ones would make the box mostly padding. `fixed_steps`: that many steps each (batch_plan).
    fedsim's shuffle writes all of them in one compiled call (fedsim.shuffle).
    """
    devices = np.asarray(devices, dtype=np.int64)
    pos = clients.locate(devices)
    if settings.shuffle == "authors":
        return _authors_plans(clients, pos, devices, settings, round_, fixed_steps)
    return shuffle.stacked_plans(clients.offsets, pos, devices, settings.epochs, fixed_steps, settings.batch_size,
                                 settings.seed, round_, clients.sentinel)


def _authors_plans(clients: Clients, pos, devices, settings, round_, fixed_steps):
    """_stacked_plans under `shuffle: authors`: each device's plan from batch_plan, stacked."""
    sizes = clients.sizes[pos]
    plans = [batch_plan(int(n), settings, round_, int(d), fixed_steps) for n, d in zip(sizes, devices)]
    steps = np.array([len(p) for p in plans], dtype=np.int64)
    order = np.argsort(-steps, kind="stable")
    first = np.cumsum(steps[order]) - steps[order]
    local = np.concatenate([plans[j] for j in order]) if plans else np.empty((0, settings.batch_size), np.int64)
    start = np.repeat(clients.offsets[pos[order]], steps[order])[:, None]
    return np.where(local >= 0, local + start, clients.sentinel), first, steps[order], order


ENGINES = {"auto": local_sgd_auto, "kernel": local_sgd_kernel, "batched": local_sgd_batched, "loop": local_sgd_loop}
