"""Local training of a round's selected devices: one local-step rule, and the engines that run it.

Every engine solves the same LocalProblem with the same mini-batches (one seeded shuffle per
device, round and epoch), so they agree to rounding:

- `local_sgd_batched` is the rule for every torch model: all K devices as ONE computation, their
  models stacked along a leading device dimension, the steps run by the model's `descend` (by
  default each step's gradients from its `stacked_grads`: one autograd backward, or a model's own
  backward as the CNN's; MCLR's steps in closed form). Devices with fewer steps drop out of the
  stack: they are ordered longest-first, so the ones still training are always a prefix and no
  masking is needed.
- accelerators (`ACCELERATORS`) run the models that name them faster, on one kind of device, for
  the LocalProblem fields they declare: `kernel`, a compiled loop for MCLR on the CPU
  (fedsim.core.kernel: numba, one core, devices one after another), which also gives MCLR's full
  local gradients and its metrics in one compiled pass each. `auto` picks the model's
  accelerator where it fits the device and the problem, the general rule otherwise.
- `local_sgd_loop` is the plain per-device loop with autograd: the test oracle and the
  benchmark baseline.

On a device type a model names in `graphs_on` (the LSTMs on CUDA), the general rule replays each
step as a CUDA graph (`StepGraphs`): the same operations, launched once a step, each step's graph
captured once a run over buffers the run keeps (a model's; each round copies its values in).

No engine runs a problem without a part it asks for: each checks `LocalProblem.in_use()`
against the fields it implements and refuses, in one line, what it cannot.

Devices are named by their index in the dataset everywhere (selection, shuffling seeds);
a `Clients` may hold only some of them (`ids`), as when a round's devices are read from
the file, and `Clients.locate` turns indices into its own positions.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from . import authors, shuffle
from ..methods import LocalProblem
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
    # there (x then a view of its first columns: fedsim.core.loading.InputBuffer; gathers from it are exact, but
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
    shuffle: str = "fedsim"                # fedsim | authors (fedsim.core.authors)
    epochs_done: np.ndarray | None = None  # authors: local epochs each device has trained so far


def local_steps(sizes: np.ndarray, settings: SGDSettings) -> np.ndarray:
    """SGD steps of devices with `sizes` samples: E epochs of ceil(n_k / B) batches (batch_plan's rows;
    fedsim.core.steps, which the cost model counts too)."""
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
    (fedsim.core.shuffle; `shuffle: authors`: the authors' compounding in-place shuffle instead); the
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
    (K, *params.shape), longest plan first; the steps run in chunks (_step_chunks: the active
    devices' batches of consecutive steps gathered at once, (T, active, B, ...)) by the model's
    `descend` (by default, each step's gradients from its stacked_grads; on a device type where the
    model does not declare that stacking pays, `stacks_on`, one device at a time). A padded slot
    (sentinel row) weighs 0 and the others 1 / (real samples in the batch): each device's
    batch-mean loss.
    """
    require_fields(problem, GENERAL_FIELDS, "the batched engine")
    devices = np.asarray(devices, dtype=np.int64)
    if params.device.type in model.stacks_on:
        return _local_sgd_stacked(model, params, problem, clients, devices, settings, round_)
    # the same rule, a stack of one device at a time: each trains its own row of the result in place,
    # all with one gradient buffer (fresh memory for each would cost its page faults again)
    local = params.expand(len(devices), *params.shape).clone()
    grads = torch.empty_like(params).unsqueeze(0)
    for j in range(len(devices)):
        one = _one_device(problem, j)
        plans = _stacked_plans(clients, devices[j:j + 1], settings, round_, one.steps)
        if _graphed(model, params, one):
            graphs = StepGraphs.of(model, params, clients, 1, settings.batch_size)
            local[j:j + 1] = graphs.round(model, params, one, clients, settings.lr, plans)
        else:
            _descend(model, local[j:j + 1], params, one, clients, settings.lr, plans, grads)
    return local


def _one_device(problem: LocalProblem, j: int) -> LocalProblem:
    """The part of `problem` that solver j solves (its row of the correction)."""
    return problem if problem.correction is None else dataclasses.replace(problem,
                                                                          correction=problem.correction[j:j + 1])


def _local_sgd_stacked(model, params, problem: LocalProblem, clients: Clients, devices, settings, round_):
    plans = _stacked_plans(clients, devices, settings, round_, problem.steps)
    if _graphed(model, params, problem):
        graphs = StepGraphs.of(model, params, clients, len(devices), settings.batch_size)
        return graphs.round(model, params, problem, clients, settings.lr, plans)
    stacked = params.expand(len(devices), *params.shape).clone()
    _descend(model, stacked, params, problem, clients, settings.lr, plans, torch.empty_like(stacked))
    return _in_device_order(stacked, plans[3])


def _descend(model, stacked, params, problem: LocalProblem, clients: Clients, lr: float, plans, grads) -> None:
    """The plans' steps on `stacked` (the devices' models in the plans' order), in place, chunk by chunk;
    `grads` (stacked's shape): the gradients' buffer for the round."""
    rows, first, steps, order = plans
    correction = None
    if problem.correction is not None:
        correction = problem.correction[torch.from_numpy(order).to(params.device)]
    for active, x, y, weight in _step_chunks(clients, rows, first, steps, stacked.dtype):
        model.descend(stacked[:active], x, y, weight, lr, problem.mu, params,
                      None if correction is None else correction[:active], problem.anchor, grads[:active])


def _sgd_step(model, w, index, x, y, sentinel, lr, mu, center, correction, anchor) -> None:
    """One step of the stack's first models `w` (active, P), in place, on their batches: rows `index`
    (active, B) of the round's inputs, gathered as x and y. A padded slot (row `sentinel`) weighs 0
    and the others 1 / (real samples in the batch): each device's batch-mean loss."""
    real = index != sentinel
    weight = real.to(w.dtype) / real.sum(-1, keepdim=True).clamp(min=1)  # 1/3 in float64 for float64
    model.descend(w, x.unsqueeze(0), y.unsqueeze(0), weight.unsqueeze(0), lr, mu, center, correction, anchor)


CHUNK_FLOATS = 1 << 21  # input values gathered for one chunk of steps (8 MiB in float32): bounds its memory
CHUNK_STEPS = 256       # ... and its steps


def _step_chunks(clients: Clients, rows: np.ndarray, first: np.ndarray, steps: np.ndarray, dtype):
    """The round's steps in chunks of consecutive steps with the same active devices (longest first: a
    prefix): (active, x (T, active, B, ...), y (T, active, B), weight (T, active, B)), the batches' rows of
    T steps gathered in one call each, not one a step. x is a view of one buffer the chunks share
    (gathered into, not made anew: fresh memory costs page faults), valid until the next chunk.
    The weights: 0 for a padded slot (sentinel row), else 1 / (real samples in the batch)."""
    device, batch = clients.x.device, rows.shape[1]
    index_all = torch.from_numpy(rows).to(device)  # every step's rows sent once (no copy, and no wait, per step)
    row_floats = max(1, math.prod(clients.x.shape[1:]))
    buffer, start = None, 0
    for active in range(len(steps), 0, -1):
        end = int(steps[active - 1])
        span = max(1, min(CHUNK_STEPS, CHUNK_FLOATS // (active * batch * row_floats)))
        for lo in range(start, end, span):
            at = first[:active] + np.arange(lo, min(lo + span, end))[:, None]
            index = index_all[torch.from_numpy(at).to(device)]  # (T, active, B)
            flat = index.flatten()
            if buffer is None or len(buffer) < len(flat):
                buffer = clients.x.new_empty(len(flat), *clients.x.shape[1:])
            x = torch.index_select(clients.x, 0, flat, out=buffer[:len(flat)]).view(*index.shape, *clients.x.shape[1:])
            real = index != clients.sentinel
            weight = real.to(dtype) / real.sum(-1, keepdim=True).clamp(min=1)
            yield active, x, clients.y.index_select(0, flat).view(index.shape), weight
        start = max(start, end)


def _step_rows(rows: np.ndarray, first: np.ndarray, steps: np.ndarray, device):
    """Each SGD step's (active devices, their batches' rows (active, B)), from _stacked_plans' output.

    Every step's plan rows, (steps, K), are sent once: no host-to-device copy (and wait) per step; a
    device's rows past its last step are never read (longest first: the active ones are a prefix)."""
    index_all = torch.from_numpy(rows).to(device)
    longest = int(steps[0]) if len(steps) else 0
    at = torch.from_numpy(np.minimum(first[None, :] + np.arange(longest)[:, None], len(rows) - 1)).to(device)
    for step in range(longest):
        active = int(np.count_nonzero(steps > step))
        yield active, index_all[at[step, :active]]


def _in_device_order(stacked: torch.Tensor, order: np.ndarray) -> torch.Tensor:
    """The stack's models (longest plan first) in the callers' device order: a new tensor."""
    return stacked[torch.from_numpy(np.argsort(order)).to(stacked.device)]


def _graphed(model, params, problem: LocalProblem) -> bool:
    """Whether the steps run as StepGraphs: on a device type the model names, with the problem's tensors
    in the model's dtype (the graphs' buffers hold that dtype; another would round otherwise)."""
    terms = (problem.correction, problem.anchor)
    return params.device.type in model.graphs_on and all(t is None or t.dtype == params.dtype for t in terms)


# Each model's StepGraphs, as long as the model lives: a run builds its model once, so its buffers and
# graphs last the run and go with it (a weak key: nothing here keeps a model, or its GPU memory, alive).
_HELD: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class StepGraphs:
    """A run's SGD steps replayed as CUDA graphs: one launch a step instead of one per operation.

    An LSTM step is thousands of small kernels (every operation of every time step, forward and
    backward), so on a GPU its time is their launches, not their arithmetic. A graph replays its
    kernels on fixed addresses, so everything a step reads or writes lives in buffers made once for
    the model (`of`: the run's), sized for the most devices a round has had: the stack of models,
    w0 (the proximal term's centre), the correction and anchor, the step's batch rows and their
    inputs. Each round copies its values in; each step gathers its batches' inputs from the round's
    rows (outside the graph: a streamed run's rounds bring new tensors). The step of the stack's first
    `active` devices is then the same graph in every round: captured at its first use (after WARMUP
    eager steps whose updates are undone) under a key of what changes its operations (`active`,
    which terms the problem has, mu, lr) and replayed from then on. A round with more devices than
    the buffers hold makes larger ones and captures anew. No number depends on an earlier round:
    every buffer entry a step reads is written by its own round first, so a resumed run computes what
    the uninterrupted one did. On another device type (the tests, on a CPU) the same buffers and
    warm-up run, and a replay is the step called again: the same numbers as the plain stacked rule.
    """

    WARMUP = 2  # eager steps before a capture: lazy initialisation (cuBLAS handles, autograd) off the graph

    def __init__(self, layout: tuple, capacity: int):
        device, dtype, shape, batch, x_shape, x_dtype, y_dtype = layout
        self.layout, self.capacity, self.batch, self.x_shape = layout, capacity, batch, x_shape
        self.stack = torch.empty(capacity, *shape, dtype=dtype, device=device)
        self.center = torch.empty(shape, dtype=dtype, device=device)
        self.correction = self.anchor = None  # made at a problem's first use of them
        self.index = torch.empty(capacity, batch, dtype=torch.int64, device=device)  # each step's rows
        self.x = torch.empty(capacity * batch, *x_shape, dtype=x_dtype, device=device)  # ... and their inputs
        self.y = torch.empty(capacity * batch, dtype=y_dtype, device=device)
        self.sentinel = torch.zeros((), dtype=torch.int64, device=device)  # the round's padding row
        self.graphs = {}
        self.captures = 0  # graphs captured (on a CPU: warm-ups run), for the tests
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    @classmethod
    def of(cls, model, params: torch.Tensor, clients: Clients, devices: int, batch_size: int) -> StepGraphs:
        """The model's StepGraphs for a round of `devices` devices: the ones it has where they fit the
        round's shapes and number of devices, else new ones (the old buffers and graphs dropped)."""
        layout = (params.device, params.dtype, tuple(params.shape), batch_size, tuple(clients.x.shape[1:]),
                  clients.x.dtype, clients.y.dtype)
        held = _HELD.get(model)
        if held is None or held.layout != layout or held.capacity < devices:
            capacity = devices if held is None or held.layout != layout else max(devices, held.capacity)
            _HELD.pop(model, None)  # freed before the larger buffers are made
            held = _HELD[model] = cls(layout, capacity)
        return held

    @staticmethod
    def held(model) -> StepGraphs | None:
        """The StepGraphs a model's rounds use now, if any."""
        return _HELD.get(model)

    def round(self, model, params, problem: LocalProblem, clients: Clients, lr: float, plans) -> torch.Tensor:
        """_local_sgd_stacked's round: the devices' local models, (devices, *params.shape), in their order."""
        rows, first, steps, order = plans
        self._load(params, problem, clients, order)
        terms = (problem.correction is not None, problem.anchor is not None, float(problem.mu), float(lr))
        for active, index in _step_rows(rows, first, steps, clients.x.device):
            flat = index.flatten()
            self.index[:active].copy_(index)
            torch.index_select(clients.x, 0, flat, out=self.x[:len(flat)])
            torch.index_select(clients.y, 0, flat, out=self.y[:len(flat)])
            self._replay(model, (active, *terms))
        return _in_device_order(self.stack[:len(order)], order)

    def _load(self, params, problem: LocalProblem, clients: Clients, order: np.ndarray) -> None:
        """The round's values into the buffers: its devices' starting models, w0, their corrections (in
        the stack's order), the anchor, the padding row."""
        k = len(order)
        self.stack[:k].copy_(params.expand(k, *params.shape))
        self.center.copy_(params)
        if problem.correction is not None:
            if self.correction is None:
                self.correction = torch.empty_like(self.stack)
            self.correction[:k].copy_(problem.correction[torch.from_numpy(order).to(params.device)])
        if problem.anchor is not None:
            if self.anchor is None:
                self.anchor = torch.empty_like(self.center)
            self.anchor.copy_(problem.anchor)
        self.sentinel.fill_(clients.sentinel)

    def _step(self, model, active: int, correction: bool, anchor: bool, mu: float, lr: float) -> None:
        n = active * self.batch
        _sgd_step(model, self.stack[:active], self.index[:active], self.x[:n].view(active, self.batch, *self.x_shape),
                  self.y[:n].view(active, self.batch), self.sentinel, lr, mu, self.center,
                  self.correction[:active] if correction else None, self.anchor if anchor else None)

    def _replay(self, model, key: tuple) -> None:
        if key not in self.graphs:
            self.graphs[key] = self._capture(model, key)
        graph = self.graphs[key]
        if graph is None:  # no graph on this device type: the step itself
            self._step(model, *key)
        else:
            graph.replay()

    def _capture(self, model, key: tuple):
        """The step of `key` as a CUDA graph (None on another device type), after WARMUP eager steps
        whose updates to the stack are undone."""
        active = key[0]
        saved = self.stack[:active].clone()
        self.captures += 1
        if self.stream is None:
            for _ in range(self.WARMUP):
                self._step(model, *key)
            self.stack[:active].copy_(saved)
            return None
        device = self.stack.device
        self.stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(self.stream):  # warm-up and capture on one stream (its handles made here)
            for _ in range(self.WARMUP):
                self._step(model, *key)
            self.stack[:active].copy_(saved)
        torch.cuda.current_stream(device).wait_stream(self.stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.stream):
            self._step(model, *key)
        return graph


def local_sgd_kernel(model, params, problem: LocalProblem, clients: Clients, devices, settings, round_):
    """The round's local SGD for MCLR as one compiled call (fedsim.core.kernel), on the CPU."""
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
    MCLR on the CPU, in one compiled pass over their rows (fedsim.core.kernel.summed_grads)."""
    from . import kernel

    positions = np.arange(len(clients.offsets) - 1) if positions is None else positions
    starts, stops = clients.offsets[positions], clients.offsets[positions + 1]
    sums = kernel.summed_grads(*clients.kernel_inputs(), starts, stops, params.numpy())
    return torch.from_numpy(sums / np.maximum(stops - starts, 1).astype(sums.dtype)[:, None, None])


def kernel_evaluation(params, train: Clients, test: Clients) -> list[float]:
    """fedsim.core.metrics' six numbers (its COLUMNS, in order) at `params`, MCLR on the CPU, in one compiled
    call over both splits (fedsim.core.kernel.evaluation)."""
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
    evaluation: Callable        # (params, train, test) -> fedsim.core.metrics.COLUMNS' values


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
    fedsim's shuffle writes all of them in one compiled call (fedsim.core.shuffle).
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
