"""LEAF's FEMNIST CNN: the convolutional model FedDANE's successors compare on.

Two 5x5 convolutions (32 and 64 channels, same padding), each followed by a ReLU and 2x2
max-pooling, a dense layer of 2,048 (ReLU) and one logit per class: 6,603,710 parameters for
28x28 images and 62 classes, as LEAF's models/femnist/cnn.py. Kernels start Glorot-uniform (for
a convolution its fan is the kernel's area times the channels, as TensorFlow counts it), biases
zero: TensorFlow's layer defaults, which LEAF keeps.

The class is the family "convolutions, each with ReLU and 2x2 max-pooling, then dense layers":
a smaller member (LeNet-5, lenet5.py) sets its channels, padding, dense widths and initialiser.

Parameters are one flat vector (P,), or a stack of K devices' models (K, P), cut into views by a
Layout. A stack runs as ONE computation: the K devices' images side by side as channel groups of
one grouped convolution, and the dense layers as batched matmuls. Each device's loss touches only
its own slice of the stack, so one backward gives every device's gradient. The backward is written
out (`_backward`: autograd's operations and bits), each layer's gradients going straight into their
views of the flat gradient vector (`stacked_grads`) or, for one device on a CPU, straight into
that layer's SGD update (`descend`).
The flattening after the last pooling is channels-first (TensorFlow's is channels-last); the
two differ by a fixed permutation of the first dense layer's rows, the same model.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import Layout, Model, glorot_uniform
from ..specs import ModelSpec, pooled_sides

# on a CPU core a round's devices one at a time run faster than their stack as one grouped convolution
# (benchmarks/cnn_round.py, docs/performance.md); a GPU gains from the stack
SPEC = ModelSpec(name="cnn", label="CNN", samples=("image",), stacks_on=("cuda",), sample_seconds=0.012,
                 convolutions=(5, 2, True))

aten = torch.ops.aten


class CNN(Model):
    """conv 5x5 x32, pool, conv 5x5 x64, pool, dense 2048, dense classes; cross-entropy."""

    spec = SPEC
    channels = (32, 64)
    hidden = (2048,)

    @property
    def kernel(self) -> int:
        return self.spec.convolutions[0]

    @property
    def same_padding(self) -> bool:
        """LEAF's "same"; False: no padding ("valid"), each convolution trims kernel - 1 (its SPEC says)."""
        return self.spec.convolutions[2]

    def __init__(self, num_classes: int = 62, side: int = 28, channels=None, hidden=None, image=None):
        """`image`: one sample's (channels, height, width); default one channel of side x side."""
        self.num_classes = num_classes
        self.image = tuple(int(n) for n in (image or (1, side, side)))
        in_channels, height, width = self.image
        self.side = height if height == width else None  # a square image's side
        self.channels = tuple(channels or self.channels)
        self.hidden = tuple(hidden or self.hidden)
        # each convolution's output (height, width), before its pooling
        self.sides = list(zip(self._sides(height), self._sides(width)))
        shapes, fan_in = {}, in_channels
        for i, c in enumerate(self.channels, 1):
            shapes |= {f"conv{i}.kernel": (c, fan_in, self.kernel, self.kernel), f"conv{i}.bias": (c,)}
            fan_in = c
        last_h, last_w = self.sides[-1]
        width = self.channels[-1] * (last_h // 2) * (last_w // 2)
        for i, h in enumerate(self.hidden, 1):
            shapes |= {f"dense{i}.kernel": (width, h), f"dense{i}.bias": (h,)}
            width = h
        shapes |= {"out.kernel": (width, num_classes), "out.bias": (num_classes,)}
        self.layout = Layout(shapes)

    def _sides(self, side: int) -> list[int]:
        if len(self.channels) != self.spec.convolutions[1]:
            raise ValueError(f"{self.name}: {len(self.channels)} channel counts for its SPEC's "
                             f"{self.spec.convolutions[1]} convolutions")
        try:
            return pooled_sides(side, *self.spec.convolutions)
        except ValueError as err:
            _, height, width = self.image
            raise ValueError(f"the {self.name} model cannot take {height}x{width} images: {err}") from None

    @property
    def padding(self) -> int:
        return self.kernel // 2 if self.same_padding else 0

    @property
    def floats_per_sample(self) -> int:
        """The activations kept per sample: each convolution's output and each dense layer's."""
        return sum(h * w * c for (h, w), c in zip(self.sides, self.channels)) + sum(self.hidden)

    def forward_flops(self) -> int:
        """Flops of one sample's forward pass (multiply-adds x 2; ReLU, pooling, loss left out)."""
        fan_in, flops = self.image[0], 0
        for (h, w), c in zip(self.sides, self.channels):
            flops += 2 * self.kernel ** 2 * h * w * fan_in * c
            fan_in = c
        return flops + sum(2 * math.prod(shape) for name, shape in self.layout.shapes.items()
                           if name.endswith(".kernel") and len(shape) == 2)

    def training_flops(self) -> int:
        """Flops of one sample's SGD step: forward, input gradients (not the first layer's: nobody
        needs them) and weight gradients, three forward passes' worth less the first layer's one."""
        (h, w), fan_in = self.sides[0], self.image[0]
        return 3 * self.forward_flops() - 2 * self.kernel ** 2 * h * w * fan_in * self.channels[0]

    @classmethod
    def build(cls, dataset, dtype, device) -> "CNN":
        """For a file's images: (C, H, W) as stored, or one channel of a square stored flat (FEMNIST's 784)."""
        shape = tuple(dataset.feature_shape)
        if len(shape) == 1:
            side = math.isqrt(shape[0])
            if side * side != shape[0]:
                raise ValueError(f"bad run setting model={cls.name!r}: {dataset.path.name}'s samples have {shape[0]} "
                                 "features, not a square image")
            shape = (1, side, side)
        elif len(shape) == 2:
            shape = (1, *shape)
        try:
            return cls(num_classes=dataset.num_classes, image=shape)
        except ValueError as err:
            raise ValueError(f"bad run setting model={cls.name!r}: {dataset.path.name}: {err}") from None

    def init(self, generator: torch.Generator, dtype=torch.float32) -> torch.Tensor:
        params = torch.zeros(self.layout.size, dtype=dtype)
        for name, view in self.layout.views(params).items():
            if view.dim() == 4:  # (out, in, k, k): fans of in k k and out k k
                area = view.shape[2] * view.shape[3]
                view.copy_(glorot_uniform(view.shape, generator, view.shape[1] * area, view.shape[0] * area))
            elif view.dim() == 2:
                view.copy_(glorot_uniform(view.shape, generator, *view.shape))
        return params

    def input_layout(self, dtype: torch.dtype) -> tuple[int, torch.dtype]:
        return math.prod(self.image), dtype

    def prepare_inputs(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        x = x.reshape(x.shape[0], -1)
        return x.clone() if out is None else out.copy_(x)

    def forward(self, p, x) -> torch.Tensor:
        """One model's views and x (B, C H W) -> (B, classes); or a stack's: (K, ...) and (K, B, C H W) ->
        (K, B, classes)."""
        if p["out.bias"].dim() == 1:
            return self.forward({name: view.unsqueeze(0) for name, view in p.items()}, x.unsqueeze(0)).squeeze(0)
        return self._stacked_forward(p, x)

    def _stacked_forward(self, p, x, tape: list | None = None) -> torch.Tensor:
        """The stack's logits (K, B, classes). `tape`: a list that gets, layer by layer, what that layer's
        backward reads (_backward): its input, kernel and ReLU output, and each pooling's indices."""
        k, b = x.shape[:2]
        # devices as channel groups: (B, K * C, H, W)
        c, height, width = self.image
        h = x.reshape(k, b, c, height, width).transpose(0, 1).reshape(b, k * c, height, width)
        for i in range(1, len(self.channels) + 1):
            weight, bias = p[f"conv{i}.kernel"].flatten(0, 1), p[f"conv{i}.bias"].flatten()
            a = F.conv2d(h, weight, bias, padding=self.padding, groups=k)
            if tape is None:
                h = F.max_pool2d(torch.relu(a), 2)
            else:
                a = torch.relu_(a)
                pooled, where = F.max_pool2d(a, 2, return_indices=True)
                tape.append((h, weight, a, where))
                h = pooled
        h = h.reshape(b, k, -1).transpose(0, 1)  # (K, B, channels x height x width), channels first
        for i in range(1, len(self.hidden) + 1):
            kernel = p[f"dense{i}.kernel"]
            z = torch.relu(torch.baddbmm(p[f"dense{i}.bias"].unsqueeze(1), h, kernel))
            if tape is not None:
                tape.append((h, kernel, z))
            h = z
        if tape is not None:
            tape.append((h, p["out.kernel"], None))
        return torch.baddbmm(p["out.bias"].unsqueeze(1), h, p["out.kernel"])

    def stacked_grads(self, stacked, x, y, weight, out=None) -> torch.Tensor:
        """Model.stacked_grads without autograd (`_backward`: autograd's operations and bits), each layer's
        gradients written into their views of `out`. Autograd's backward hands each tensor's gradient
        back as a new tensor, which Model's default then copies into the flat vector: for LEAF's CNN a
        26 MB copy into fresh memory per step."""
        out = stacked.new_empty(stacked.shape) if out is None else out
        if stacked.dim() == 1:
            self.stacked_grads(stacked.unsqueeze(0), x.unsqueeze(0), y.unsqueeze(0), weight.unsqueeze(0),
                               out.unsqueeze(0))
            return out
        self._backward(self.layout.views(stacked), x, y, weight, _Into(self.layout.views(out)))
        return out

    def descend(self, stacked, x, y, weight, lr: float, mu: float = 0.0, center=None, correction=None, anchor=None,
                grads=None) -> None:
        """Model.descend's steps, one device on a CPU: each tensor updated as soon as the backward has its
        gradient (and has taken the layer's input gradient from its old values), a dense kernel by
        blocks of rows, each block's gradient in a scratch that stays in cache through its terms and
        update. Model.descend's operations on every value, so its bits (tests/test_cnn.py), without
        writing LEAF's 26 MB dense gradient out and reading it back twice. A stack, or a GPU (where
        blocks would be many small launches): Model.descend."""
        if len(stacked) != 1 or stacked.device.type != "cpu":
            return super().descend(stacked, x, y, weight, lr, mu, center, correction, anchor, grads)
        views, layout = self.layout.views(stacked), self.layout.views
        for xt, yt, wt in zip(x, y, weight):
            at_anchor = None if anchor is None else layout(self.stacked_grads(anchor.expand_as(stacked), xt, yt, wt))
            step = _Step(views, lr, mu, None if center is None else layout(center),
                         None if correction is None else layout(correction), at_anchor)
            self._backward(views, xt, yt, wt, step)

    def _backward(self, p: dict, x, y, weight, sink) -> None:
        """The gradients of sum_b weight[k, b] loss at the stack's views `p`, layer by layer from the
        logits down, each tensor's handed to `sink` (_Into, _Step). The forward keeps what each layer's
        backward reads; the backward runs the operations autograd runs on that graph, on the same
        tensors (the same kernels: the same bits, tests/test_cnn.py)."""
        tape = []
        logits = self._stacked_forward(p, x, tape)
        # cross_entropy's backward for the weighted sum of per-sample losses: nll_loss's (minus the
        # weight at the label), then log_softmax's
        log_p = torch.log_softmax(logits.flatten(0, -2), 1)
        g = torch.zeros_like(log_p).scatter_(1, y.reshape(-1, 1), -weight.reshape(-1, 1))
        g = aten._log_softmax_backward_data(g, log_p, 1, log_p.dtype).view(logits.shape)
        names = [f"dense{i}" for i in range(1, len(self.hidden) + 1)] + ["out"]
        for name, (h, kernel, relu) in zip(reversed(names), reversed(tape[len(self.channels):])):
            if relu is not None:
                g = aten.threshold_backward(g, relu, 0)
            sink.bias(f"{name}.bias", g)
            g = sink.kernel(f"{name}.kernel", h, g, kernel)
        k, b = x.shape[:2]
        _, channels, height, width = tape[len(self.channels) - 1][2].shape  # the last convolution's output
        g = g.transpose(0, 1).reshape(b, channels, height // 2, width // 2)
        for i in range(len(self.channels), 0, -1):
            h, weight, relu, where = tape[i - 1]
            g = aten.max_pool2d_with_indices_backward(g, relu, [2, 2], [], [0, 0], [1, 1], False, where)
            g = aten.threshold_backward(g, relu, 0)
            # the first convolution's input gradient is nobody's: not computed (as autograd skips it)
            g, kernel, bias = aten.convolution_backward(g, h, weight, [weight.shape[0]], [1, 1], [self.padding] * 2,
                                                        [1, 1], False, [0, 0], k, [i > 1, True, True])
            sink.take(f"conv{i}.kernel", kernel)
            sink.take(f"conv{i}.bias", bias)

    def as_module(self, params: torch.Tensor) -> nn.Sequential:
        """The same network as torch.nn layers holding a copy of params: what a user would write by hand
        (tests/test_cnn.py checks one against the other; benchmarks/cnn_round.py times both)."""
        layers, fan_in = [nn.Unflatten(1, self.image)], self.image[0]
        for c in self.channels:
            layers += [nn.Conv2d(fan_in, c, self.kernel, padding=self.padding), nn.ReLU(), nn.MaxPool2d(2)]
            fan_in = c
        layers.append(nn.Flatten())
        dense = [shape for name, shape in self.layout.shapes.items() if name.endswith(".kernel") and len(shape) == 2]
        for i, (fan_in, fan_out) in enumerate(dense):
            layers += [nn.Linear(fan_in, fan_out)] + ([nn.ReLU()] if i < len(dense) - 1 else [])
        net = nn.Sequential(*layers).to(params.device, params.dtype)  # on params' device, as the round it is timed against
        weighted = [layer for layer in net if isinstance(layer, (nn.Conv2d, nn.Linear))]
        names = [name[:-len(".kernel")] for name in self.layout.shapes if name.endswith(".kernel")]
        views = self.layout.views(params)
        with torch.no_grad():
            for layer, name in zip(weighted, names):
                kernel = views[f"{name}.kernel"]
                layer.weight.copy_(kernel if kernel.dim() == 4 else kernel.T)
                layer.bias.copy_(views[f"{name}.bias"])
        return net


def _written(out: torch.Tensor, op, *args, **kwargs) -> None:
    """op(*args, **kwargs) written into `out`: directly where out is laid out as a new tensor would be
    (contiguous, at a multiple of 64 bytes), else through a new tensor. MKL's matmuls round
    differently into memory aligned otherwise (a 16-byte offset is enough), so a layer's gradient
    gets autograd's bits wherever its views sit in the flat vector."""
    if out.is_contiguous() and out.data_ptr() % 64 == 0:
        op(*args, **kwargs, out=out)
    else:
        out.copy_(op(*args, **kwargs))


class _Into:
    """Where stacked_grads' backward puts each gradient: into its views of the output."""

    def __init__(self, views: dict):
        self.views = views

    def bias(self, name: str, g: torch.Tensor) -> None:
        """A dense layer's bias, from its output's gradient g (K, B, width): the sum over the batch."""
        _written(self.views[name].unsqueeze(1), torch.sum, g, 1, keepdim=True)

    def kernel(self, name: str, h, g, kernel) -> torch.Tensor:
        """A dense layer's kernel, from its input h and output gradient g; returns h's gradient."""
        _written(self.views[name], torch.bmm, h.transpose(1, 2), g)
        return g.bmm(kernel.transpose(1, 2))

    def take(self, name: str, grad: torch.Tensor) -> None:
        """A convolution's kernel or bias, (K x channels, ...)."""
        self.views[name].copy_(grad.view(self.views[name].shape))


class _Step:
    """Where descend's backward puts each gradient: into its tensor's update, as Model.descend makes it:
    minus the anchor's gradient, plus the correction and mu (w - w0), times lr, subtracted from w (one
    device: views (1, *shape))."""

    BLOCK_FLOATS = 1 << 18  # a dense kernel's rows updated at once (1 MiB in float32): they stay in cache

    def __init__(self, views: dict, lr: float, mu: float, center, correction, anchor):
        self.views, self.lr, self.mu = views, lr, mu
        self.center, self.correction, self.anchor = center, correction, anchor

    def _update(self, name: str, grad: torch.Tensor, rows=slice(None)) -> None:
        w = self.views[name][:, rows]
        if self.anchor is not None:
            grad.sub_(self.anchor[name][:, rows])
        if self.correction is not None:
            grad.add_(self.correction[name][:, rows])
        if self.mu:
            grad.add_((w - self.center[name][rows]).mul_(self.mu))
        w.sub_(grad.mul_(self.lr))

    def bias(self, name: str, g: torch.Tensor) -> None:
        self._update(name, g.sum(1))

    def kernel(self, name: str, h, g, kernel) -> torch.Tensor:
        # the input's gradient from the old kernel, whole (MKL rounds a product over column blocks
        # otherwise); the kernel's own gradient by blocks of rows
        h_grad = g.bmm(kernel.transpose(1, 2))
        blocks = self.blocks(*kernel.shape[1:])
        scratch = g.new_empty(1, max(stop - start for start, stop in blocks), kernel.shape[2])
        for start, stop in blocks:
            grad = scratch[:, :stop - start]
            torch.bmm(h[:, :, start:stop].transpose(1, 2), g, out=grad)
            self._update(name, grad, slice(start, stop))
        return h_grad

    @classmethod
    def blocks(cls, rows: int, width: int) -> list[tuple[int, int]]:
        """A (rows, width) kernel's blocks of rows, (start, stop): the whole kernel where it fits in
        BLOCK_FLOATS; else multiples of 16 rows (each block's operands aligned as the whole product's)
        with a short remainder joined to the last block. So each block's product has the rows of the whole
        one, bit for bit (a sum over the batch alone; MKL takes a narrower or misaligned product another
        way)."""
        step = max(16, cls.BLOCK_FLOATS // width // 16 * 16)
        if step >= rows:
            return [(0, rows)]
        starts = list(range(0, rows, step))
        if rows - starts[-1] < step // 2:
            starts.pop()
        return list(zip(starts, starts[1:] + [rows]))

    def take(self, name: str, grad: torch.Tensor) -> None:
        self._update(name, grad.view(self.views[name].shape))


MODEL = CNN
