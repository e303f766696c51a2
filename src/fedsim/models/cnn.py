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
its own slice of the stack, so one backward gives every device's gradient (Model.stacked_grads).
The flattening after the last pooling is channels-first (TensorFlow's is channels-last); the
two differ by a fixed permutation of the first dense layer's rows, the same model.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import Layout, Model, glorot_uniform
from ..specs import ModelSpec

# on a CPU core a round's devices one at a time run faster than their stack as one grouped convolution
# (benchmarks/cnn_round.py, docs/performance.md); a GPU gains from the stack
SPEC = ModelSpec(name="cnn", label="CNN", samples=("image",), stacks_on=("cuda",), sample_seconds=0.012)


class CNN(Model):
    """conv 5x5 x32, pool, conv 5x5 x64, pool, dense 2048, dense classes; cross-entropy."""

    spec = SPEC
    channels = (32, 64)
    hidden = (2048,)
    kernel = 5
    same_padding = True   # LEAF's "same"; False: no padding ("valid"), each convolution trims kernel - 1

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
        sides, s = [], side
        for _ in self.channels:
            s = s if self.same_padding else s - self.kernel + 1
            if s < 2 or s % 2:
                _, height, width = self.image
                raise ValueError(f"the {self.name} model cannot take {height}x{width} images: a convolution's "
                                 f"output side {s} does not halve in 2x2 pooling")
            sides.append(s)
            s //= 2
        return sides

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
        k, b = x.shape[:2]
        # devices as channel groups: (B, K * C, H, W)
        c, height, width = self.image
        h = x.reshape(k, b, c, height, width).transpose(0, 1).reshape(b, k * c, height, width)
        for i in range(1, len(self.channels) + 1):
            weight, bias = p[f"conv{i}.kernel"], p[f"conv{i}.bias"]
            h = F.conv2d(h, weight.flatten(0, 1), bias.flatten(), padding=self.padding, groups=k)
            h = F.max_pool2d(torch.relu(h), 2)
        h = h.reshape(b, k, -1).transpose(0, 1)  # (K, B, channels x height x width), channels first
        for i in range(1, len(self.hidden) + 1):
            h = torch.relu(torch.baddbmm(p[f"dense{i}.bias"].unsqueeze(1), h, p[f"dense{i}.kernel"]))
        return torch.baddbmm(p["out.bias"].unsqueeze(1), h, p["out.kernel"])

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
        net = nn.Sequential(*layers).to(params.dtype)
        weighted = [layer for layer in net if isinstance(layer, (nn.Conv2d, nn.Linear))]
        names = [name[:-len(".kernel")] for name in self.layout.shapes if name.endswith(".kernel")]
        views = self.layout.views(params)
        with torch.no_grad():
            for layer, name in zip(weighted, names):
                kernel = views[f"{name}.kernel"]
                layer.weight.copy_(kernel if kernel.dim() == 4 else kernel.T)
                layer.bias.copy_(views[f"{name}.bias"])
        return net


MODEL = CNN
