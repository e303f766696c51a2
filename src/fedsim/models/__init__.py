"""Models: one file each in this package, and the registry that finds them.

A model is a class; an instance is the model of one dataset file, as pure functions of
(params, batch). Its parameters are ONE tensor, so that every method is plain tensor arithmetic
(averages, proximal and correction terms) and a round's K local models stack along a leading
device dimension: (K, *params.shape).

A model module declares, at its top and in literals, `SPEC = ModelSpec(...)` (fedsim.specs: what the
planning reads without torch): its name (the module's), label, the samples it takes, the engines
besides the general torch rule that run it (`accelerators`: "kernel", the compiled MCLR loop on the
CPU), where a round's devices train as one stack (`stacks_on`) and where each SGD step replays as a
CUDA graph (`graphs_on`: a step of many small kernels, as an LSTM's), whether it is `linear_softmax`
(MCLR's closed forms: the MCLR-only methods, the theorems' constants), whether its metrics compute the
gradient dissimilarities by default (`dissimilarity`: the paper's models do) and what a sample costs. It
ends with `MODEL = <its class>`, a subclass of `Model` whose `spec` is that SPEC (its fields become
the class's attributes), with

    build(dataset, dtype, device)   the model of one dataset file (a classmethod)

and implements, on an instance,

    init(generator, dtype) -> params           a seeded initial model
    input_layout(dtype) -> (width, dtype)      one sample as model input, as stored per row
    prepare_inputs(x, out=None)                rows as the file holds them -> model input
    forward(p, x)                              the outputs from the parameters' named views `p`
                                               (its `layout` cuts params into them); params and
                                               inputs may share leading device dims: (..., P) and
                                               (..., B, ...). (MCLR, one matrix, gives `logits`.)

`losses(logits, y)` and `hits(logits, y)`, per sample the loss and whether it is right, default to
cross-entropy over one logit per class and the largest logit's class; a model of another loss
replaces both (Sent140's one logit: binary cross-entropy). The rest has defaults here that a model
may replace with a faster form of the same numbers: the mean loss of a batch, the chunked loss and accuracy of a split (`stats`), every device's
gradient in one stacked backward (`stacked_grads`, written into the caller's tensor where it gives
one), the local SGD steps of a stack of devices (`descend`: the general rule's, from those
gradients) and each device's full local gradient (`device_grads`). The engines, the metrics and the round loop ask only for these: what a model
is never decides a route, its declarations do.

Adding a model: one file here with its MODEL and its test (docs/architecture.md, "Where to add").
"""

from __future__ import annotations

import dataclasses
import importlib
import math

import numpy as np
import torch
import torch.nn.functional as F

from ..specs import FILE_KINDS, MODELS_DIR, ModelSpec, PluginError, import_plugin, model_files

EVAL_FLOATS = 1 << 22   # activations per evaluation chunk (16 MiB in float32): small enough to stay near the
                        # cache, where a CNN's forward runs far faster than over one chunk of every row
# On a GPU no cache is to be kept near, and each chunk of an LSTM's evaluation is some hundreds of small
# sequential kernels (its time steps and layers): a few large chunks instead of hundreds (1 GiB of float32)
EVAL_FLOATS_GPU = 1 << 28
GRAD_FLOATS = 1 << 22   # per gradient chunk: autograd keeps several such tensors per layer


def eval_chunk_rows(floats_per_sample: int, device_type: str) -> int:
    """Rows of one evaluation chunk on a device type (EVAL_FLOATS, or EVAL_FLOATS_GPU on CUDA)."""
    return max(1, (EVAL_FLOATS_GPU if device_type == "cuda" else EVAL_FLOATS) // floats_per_sample)


class Model:
    """What every model declares, and the defaults built on its per-sample losses."""

    spec: ModelSpec
    # the spec's fields, set on each class that declares a spec (__init_subclass__)
    name: str
    label: str
    samples: tuple[str, ...] = ()
    accelerators: tuple[str, ...] = ()
    stacks_on: tuple[str, ...] = ("cpu", "cuda")
    graphs_on: tuple[str, ...] = ()
    linear_softmax = False
    layout: Layout | None = None  # the named tensors a flat parameter vector holds
    floats_per_sample = 1   # activations one sample's forward pass keeps: bounds the chunks below

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "spec" in cls.__dict__:
            for f in dataclasses.fields(cls.spec):
                setattr(cls, f.name, getattr(cls.spec, f.name))

    @classmethod
    def takes(cls, samples: str | None) -> bool:
        return cls.spec.takes(samples)

    @classmethod
    def build(cls, dataset, dtype: torch.dtype, device: torch.device) -> "Model":
        raise NotImplementedError

    def init(self, generator: torch.Generator, dtype=torch.float32) -> torch.Tensor:
        raise NotImplementedError

    def input_layout(self, dtype: torch.dtype) -> tuple[int, torch.dtype]:
        raise NotImplementedError

    def prepare_inputs(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, p: dict, x) -> torch.Tensor:
        raise NotImplementedError

    def logits(self, params, x) -> torch.Tensor:
        return self.forward(self.layout.views(params), x)

    def losses(self, logits, y) -> torch.Tensor:
        """Per sample: cross-entropy of one logit per class (a model of another loss replaces it)."""
        return F.cross_entropy(logits.flatten(0, -2), y.flatten(), reduction="none").view(y.shape)

    def hits(self, logits, y) -> torch.Tensor:
        """Per sample: whether the largest logit is the label's."""
        return logits.argmax(-1) == y

    def from_tensors(self, tensors: dict, dtype=torch.float32, source="tensors") -> torch.Tensor:
        """Parameters from named arrays (an initial model file, fedsim.core.authors)."""
        raise ValueError(f"{source}: only MCLR models (synthetic, FEMNIST) take an initial model file, "
                         f"not {self.name}")

    def sample_losses(self, params, x, y) -> torch.Tensor:
        return self.losses(self.logits(params, x), y)

    def loss(self, params, x, y) -> torch.Tensor:
        """Mean loss of a batch."""
        return self.sample_losses(params, x, y).mean()

    def stats(self, params, x, y) -> tuple[float, float]:
        """Mean loss and accuracy over all rows, in chunks that bound the activations' memory."""
        rows = eval_chunk_rows(self.floats_per_sample, x.device.type)
        loss = correct = 0.0
        with torch.no_grad():
            for start in range(0, len(y), rows):
                logits, yb = self.logits(params, x[start:start + rows]), y[start:start + rows]
                loss += self.losses(logits, yb).sum().item()
                correct += self.hits(logits, yb).sum().item()
        n = max(len(y), 1)
        return loss / n, correct / n

    def stacked_grads(self, stacked, x, y, weight, out=None) -> torch.Tensor:
        """Gradients of sum_b weight[k, b] loss(stacked[k]; x[k, b], y[k, b]), per device: (K, *shape),
        written into `out` where given (a tensor of stacked's shape; a model's own form takes it too),
        else into a new tensor.
        Each device's loss touches only its own slice of the stack, so one backward of the sum gives
        every device's own gradient. The backward runs to each named tensor, not to the flat vector:
        a view's backward would write a zero-filled copy of the whole vector per tensor (for the
        CNN's 6.6M parameters, most of a step's time)."""
        with torch.enable_grad():
            parts = {name: view.detach().requires_grad_(True) for name, view in self.layout.views(stacked).items()}
            loss = (self.losses(self.forward(parts, x), y) * weight).sum()
            grads = torch.autograd.grad(loss, list(parts.values()))
        return torch.cat([g.flatten(stacked.dim() - 1) for g in grads], -1, out=out)

    def descend(self, stacked, x, y, weight, lr: float, mu: float = 0.0, center=None, correction=None, anchor=None,
                grads=None) -> None:
        """Local SGD steps of the stack's models (K, *shape), in place: one per batch, step t on x[t] and y[t]
        ((T, K, B, ...) and (T, K, B)) with the slots' weights weight[t] (each device's batch-mean loss),

            w <- w - lr (g + c + mu (w - w0)),

        g each device's gradient of its weighted batch loss (minus the same batch's at `anchor`: Mime),
        c its row of `correction` (K, *shape), w0 = `center`. `grads`: where the gradients may go (a
        tensor of stacked's shape, the engine's for the round: fresh memory each step costs page
        faults). The general rule's steps (fedsim.core.engine), from stacked_grads; the update rounds as the
        loop engine's, w - (lr g)."""
        for xt, yt, wt in zip(x, y, weight):
            grad = self.stacked_grads(stacked, xt, yt, wt, out=grads)
            if anchor is not None:
                grad.sub_(self.stacked_grads(anchor.expand_as(stacked), xt, yt, wt))
            if correction is not None:
                grad.add_(correction)
            if mu:
                grad.add_((stacked - center).mul_(mu))
            stacked.sub_(grad.mul_(lr))

    def gradient_rows(self, sizes: np.ndarray) -> np.ndarray:
        """How many of each device's first rows its full local gradient reads: all of them."""
        return sizes

    def device_grads(self, params: torch.Tensor, x, y, offsets) -> torch.Tensor:
        """Full local gradients, one per device (over its `gradient_rows`): (devices, *params.shape).

        Devices' samples are boxed (G, M) with padded slots weighted 0; a chunk of G devices runs
        as one stacked forward and backward at G copies of params.
        """
        offsets = np.asarray(offsets)
        used = self.gradient_rows(np.diff(offsets))
        grads = params.new_zeros(len(used), *params.shape)
        width = max(int(used.max(initial=0)), 1)
        per_chunk = max(1, GRAD_FLOATS // self.floats_per_sample // width)
        for lo in range(0, len(used), per_chunk):
            hi = min(lo + per_chunk, len(used))
            if used[lo:hi].sum() == 0:
                continue
            slot = np.arange(width)
            real = slot < used[lo:hi, None]
            index = torch.from_numpy(np.where(real, offsets[lo:hi, None] + slot, 0)).to(x.device)
            weight = torch.from_numpy(real / np.maximum(used[lo:hi, None], 1)).to(params)
            self.stacked_grads(params.expand(hi - lo, *params.shape), x[index], y[index], weight, out=grads[lo:hi])
        return grads


class Layout:
    """Named shapes packed into one flat vector, in order."""

    def __init__(self, shapes: dict[str, tuple[int, ...]]):
        self.shapes = shapes
        self.size = sum(math.prod(s) for s in shapes.values())

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """(..., P) -> {name: (..., *shape)}, views sharing flat's memory (and autograd graph)."""
        out, at = {}, 0
        for name, shape in self.shapes.items():
            n = math.prod(shape)
            out[name] = flat[..., at:at + n].unflatten(-1, shape)
            at += n
        return out


def glorot_uniform(shape, generator: torch.Generator, fan_in: int, fan_out: int) -> torch.Tensor:
    """TensorFlow's default initialiser (the reference code's), drawn in float64 from `generator`."""
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return (2 * torch.rand(shape, generator=generator, dtype=torch.float64) - 1) * limit


def _discover() -> dict[str, type]:
    """Every model module's MODEL, by name (a module's name is its model's): this package's, then
    those of the plugins' models/ folders (fedsim.specs.plugin_dirs), which the same declarations
    list (fedsim.specs.model_specs)."""
    found = {}
    for path in model_files():
        if path.parent == MODELS_DIR:
            module = importlib.import_module(f"{__name__}.{path.stem}")
        else:  # a user's own model file: imported from where it is
            module = import_plugin("models", path)
        model = module.MODEL
        if model.name != path.stem:
            raise PluginError(f"{path} declares a model named {model.name!r}: name it {path.stem!r}")
        found[model.name] = model
    return found


REGISTRY: dict[str, type] = _discover()


def get_model(name: str) -> type:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(REGISTRY)}") from None


def default_model(kind: str) -> str:
    """The paper's model of a dataset file's kind (fedsim.specs.FILE_KINDS): the LSTMs for Shakespeare
    and Sent140, MCLR otherwise."""
    return FILE_KINDS[kind][1] if kind in FILE_KINDS else "mclr"


def for_dataset(dataset, dtype: torch.dtype, device: torch.device, name: str | None = None) -> Model:
    """The model `name` (default: the paper's for the dataset's kind) of one dataset file; ValueError
    in one line where it does not take the file's samples."""
    model = get_model(name or default_model(dataset.kind))
    samples = FILE_KINDS[dataset.kind][0] if dataset.kind in FILE_KINDS else None
    if not model.takes(samples):
        raise ValueError(f"bad run setting model={model.name!r}: it takes {' or '.join(model.samples)} samples, "
                         f"not the {samples} of {dataset.path.name}")
    return model.build(dataset, dtype, device)
