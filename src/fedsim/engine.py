"""Local training of a round's selected devices: the execution strategies.

Both strategies solve the same LocalProblem with the same mini-batches (one seeded
shuffle per device, round and epoch, so they agree to rounding):

- `local_sgd_batched` trains all K devices as ONE computation: their models are stacked
  along a leading device dimension and every SGD step is a few batched matmuls. Devices
  with fewer steps simply drop out of the stack: devices are ordered longest-first, so
  the ones still training are always a prefix of the stack and no masking is needed.
  Models without that closed-form step (the LSTMs: they provide `stacked_grads`) take
  `local_sgd_stacked`: the same stacking and drop-out, one autograd backward per step for
  all devices at once.
- `local_sgd_kernel` runs the same plans through a compiled loop (fedsim.kernel: numba, one
  core, devices one after another): the CPU engine for MCLR, several times faster than the
  batched one there; `auto` picks it for MCLR on the CPU and the batched engine otherwise
  (the LSTMs, CUDA).
- `local_sgd_loop` is the plain per-device loop with autograd: the test oracle and the
  benchmark baseline.

Whatever the engine, MCLR's full local gradients (FedDANE's correction) come from one compiled
pass on the CPU (`device_grads`, `kernel_grads`), and its metrics from one compiled call
(`kernel_evaluation`); the model's torch ops elsewhere.

Devices are named by their index in the dataset everywhere (selection, shuffling seeds);
a `Clients` may hold only some of them (`ids`), as when a round's devices are read from
the file, and `Clients.locate` turns indices into its own positions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from . import authors, shuffle
from .methods import LocalProblem
from .steps import local_steps as _local_steps

CHUNK_ROWS = 1 << 16  # samples gathered per precomputed chunk: bounds its memory for large K


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


def local_sgd_batched(model, params, problem: LocalProblem, clients: Clients, devices, settings, round_,
                      chunk_steps: int = 256):
    """All devices' SGD at once, for models that are one linear layer + softmax (MCLR).

    Weights are kept transposed, V = W^T (devices, classes, features), and logits as
    (devices, classes, batch): the layout in which both per-step matmuls and the softmax
    read contiguous memory (measured fastest). With X_w = X scaled by 1/batch count,
    one step is
        V <- (1 - lr mu) V - lr (softmax(V X^T) - Y^T) X_w + lr (mu w0 - c)^T
    i.e. bmm, softmax, sub_, baddbmm_ (+ add_ for the constant when there is one). The
    step's inputs X^T, X_w, Y^T are gathered per chunk of steps in a few large ops.
    """
    if hasattr(model, "stacked_grads"):
        return local_sgd_stacked(model, params, problem, clients, devices, settings, round_)
    devices = np.asarray(devices, dtype=np.int64)
    rows, first, steps, order = _stacked_plans(clients, devices, settings, round_, problem.steps)
    lr, mu = settings.lr, problem.mu
    stacked = params.mT.expand(len(devices), *params.mT.shape).contiguous()
    constant = None  # lr (mu w0 - c_k)^T: the part of every step that does not depend on V
    if mu or problem.correction is not None:
        constant = lr * mu * params
        if problem.correction is not None:
            constant = constant - lr * problem.correction[torch.from_numpy(order).to(params.device)]
        constant = constant.mT.expand_as(stacked).contiguous()

    anchor = None if problem.anchor is None else problem.anchor.mT.expand_as(stacked).contiguous()
    chunks = list(_chunks(steps, chunk_steps, settings.batch_size))
    most = max(((stop - start) * active for start, stop, active in chunks), default=0) * settings.batch_size
    buffers = clients.x.new_empty(2, most, clients.x.shape[1])
    for start, stop, active in chunks:
        index = rows[first[:active] + np.arange(start, stop)[:, None]]  # (T, active, B)
        x_w, x_t, y_t = _chunk_inputs(clients, index, model.num_classes, buffers)
        v, shift = stacked[:active], None if constant is None else constant[:active]  # slicing per step costs
        at = None if anchor is None else anchor[:active]
        for x_t_s, x_w_s, y_t_s in zip(x_t.unbind(0), x_w.unbind(0), y_t.unbind(0)):
            # minus one-hot labels; with an anchor (Mime), minus the softmax there (the labels cancel)
            target = y_t_s if at is None else torch.bmm(at, x_t_s).softmax(1)
            residual = torch.bmm(v, x_t_s).softmax(1).sub_(target)
            v.baddbmm_(residual, x_w_s, beta=1 - lr * mu, alpha=-lr)
            if shift is not None:
                v.add_(shift)
    return stacked[torch.from_numpy(np.argsort(order)).to(params.device)].mT.contiguous()


def local_sgd_stacked(model, params, problem: LocalProblem, clients: Clients, devices, settings, round_):
    """All devices' SGD at once for any model with `stacked_grads` (flat params, (K, P) stack).

    Same plans and update rule as the loop; each step gathers the active devices' batches
    (active, B, ...) and gets their gradients from one backward. A padded slot (sentinel row)
    weighs 0 and the others 1 / (real samples in the batch): each device's batch-mean loss.
    """
    devices = np.asarray(devices, dtype=np.int64)
    rows, first, steps, order = _stacked_plans(clients, devices, settings, round_, problem.steps)
    lr, mu = settings.lr, problem.mu
    stacked = params.expand(len(devices), *params.shape).clone()
    correction = None
    if problem.correction is not None:
        correction = problem.correction[torch.from_numpy(order).to(params.device)]
    index_all = torch.from_numpy(rows).to(clients.x.device)
    for step in range(int(steps[0]) if len(steps) else 0):
        active = int(np.count_nonzero(steps > step))  # longest first: the active ones are a prefix
        index = index_all[torch.from_numpy(first[:active] + step).to(index_all.device)]  # (active, B)
        real = index != clients.sentinel
        weight = real / real.sum(-1, keepdim=True).clamp(min=1)
        w = stacked[:active]
        grad = model.stacked_grads(w, clients.x[index], clients.y[index], weight.to(w.dtype))
        if problem.anchor is not None:  # minus the same batches' gradients at the anchor (Mime)
            at = problem.anchor.expand_as(w).clone()
            grad = grad - model.stacked_grads(at, clients.x[index], clients.y[index], weight.to(w.dtype))
        if correction is not None:
            grad = grad + correction[:active]
        if mu:
            grad = grad + mu * (w - params)
        w -= lr * grad  # in place: updates the stack
    return stacked[torch.from_numpy(np.argsort(order)).to(params.device)]


def local_sgd_kernel(model, params, problem: LocalProblem, clients: Clients, devices, settings, round_):
    """The round's local SGD for MCLR as one compiled call (fedsim.kernel), on the CPU."""
    from . import kernel

    if not kernel_fits(model, params):
        raise ValueError("the kernel engine runs MCLR models on the CPU (use batched)")
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
    """The kernel for MCLR on the CPU, the batched engine otherwise."""
    engine = local_sgd_kernel if kernel_fits(model, params) else local_sgd_batched
    return engine(model, params, problem, clients, devices, settings, round_)


def device_grads(model, params, clients: Clients, devices) -> torch.Tensor:
    """Full local gradients grad F_k(params) of `devices` (dataset indices), (devices, *params.shape):
    the compiled kernel for MCLR on the CPU (no copy of their rows), the model's own otherwise."""
    if kernel_fits(model, params):
        return kernel_grads(params, clients, clients.locate(devices))
    return model.device_grads(params, *clients.subset(devices))


def all_device_grads(model, params, clients: Clients) -> torch.Tensor:
    """grad F_k(params) of every device `clients` holds, in its order, (devices, *params.shape)."""
    if kernel_fits(model, params):
        return kernel_grads(params, clients)
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


def kernel_fits(model, params) -> bool:
    """Whether the compiled kernel can train `model`: MCLR (no stacked_grads), on the CPU."""
    return not hasattr(model, "stacked_grads") and params.device.type == "cpu"


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


def _chunk_inputs(clients: Clients, index: np.ndarray, num_classes: int, buffers: torch.Tensor):
    """X / batch count (T, m, B, D), X^T (T, m, D, B) and one-hot Y^T (T, m, C, B) of a chunk.

    The two large ones are written into `buffers` (2, >= T m B, D), which every chunk of a
    round reuses: fresh memory for each chunk costs page faults, measurably.
    """
    index = torch.from_numpy(index).to(clients.x.device)
    flat, (n, d) = index.flatten(), (index.numel(), clients.x.shape[1])
    # index_select: several times faster than advanced indexing x[index] here
    x_w = torch.index_select(clients.x, 0, flat, out=buffers[0, :n]).view(*index.shape, d)
    x_t = buffers[1, :n].view(*index.shape[:-1], d, index.shape[-1]).copy_(x_w.mT)
    x_w /= (index != clients.sentinel).sum(-1).clamp(min=1)[..., None, None]
    y = clients.y.index_select(0, flat).view(index.shape)
    y_t = (y.unsqueeze(-2) == torch.arange(num_classes, device=y.device)[:, None]).to(x_w.dtype)
    return x_w, x_t, y_t


def _chunks(steps_desc: np.ndarray, chunk_steps: int, batch_size: int):
    """(start, stop, active) step ranges in which the first `active` devices still train."""
    start = 0
    for active in range(len(steps_desc), 0, -1):
        end = int(steps_desc[active - 1])
        span = max(1, min(chunk_steps, CHUNK_ROWS // (active * batch_size)))
        for lo in range(start, end, span):
            yield lo, min(lo + span, end), active
        start = max(start, end)


ENGINES = {"auto": local_sgd_auto, "kernel": local_sgd_kernel, "batched": local_sgd_batched, "loop": local_sgd_loop}
