"""LEAF's FEMNIST CNN: the convolutional model FedDANE's successors compare on.

Two 5x5 convolutions (32 and 64 channels, same padding), each followed by a ReLU and 2x2
max-pooling, a dense layer of 2,048 (ReLU) and one logit per class: 6,603,710 parameters for
28x28 images and 62 classes, as LEAF's models/femnist/cnn.py. Kernels start Glorot-uniform (for
a convolution its fan is the kernel's area times the channels, as TensorFlow counts it), biases
zero: TensorFlow's layer defaults, which LEAF keeps.

Parameters are one flat vector (P,), or a stack of K devices' models (K, P), cut into views by a
Layout. A stack runs as ONE computation: the K devices' images side by side as channel groups of
one grouped convolution, and the dense layers as batched matmuls. Each device's loss touches only
its own slice of the stack, so one backward gives every device's gradient (Model.stacked_grads).
The flattening after the second pooling is channels-first (TensorFlow's is channels-last); the
two differ by a fixed permutation of the dense layer's rows, the same model.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from . import Layout, Model, glorot_uniform


class CNN(Model):
    """conv 5x5 x32, pool, conv 5x5 x64, pool, dense 2048, dense classes; cross-entropy."""

    name = "cnn"
    label = "CNN"
    kinds = ("femnist",)
    # on a CPU core a round's devices one at a time run faster than their stack as one grouped
    # convolution (benchmarks/cnn_round.py, docs/performance.md); a GPU gains from the stack
    stacks_on = ("cuda",)

    def __init__(self, num_classes: int = 62, side: int = 28, channels=(32, 64), hidden: int = 2048,
                 kernel: int = 5):
        if side % 4:
            raise ValueError(f"the CNN takes square images of a side divisible by 4 (two 2x2 poolings), not {side}")
        self.num_classes, self.side, self.channels = num_classes, side, channels
        self.hidden, self.kernel = hidden, kernel
        c1, c2 = channels
        flat = c2 * (side // 4) ** 2
        self.layout = Layout({"conv1.kernel": (c1, 1, kernel, kernel), "conv1.bias": (c1,),
                              "conv2.kernel": (c2, c1, kernel, kernel), "conv2.bias": (c2,),
                              "dense.kernel": (flat, hidden), "dense.bias": (hidden,),
                              "out.kernel": (hidden, num_classes), "out.bias": (num_classes,)})

    @property
    def floats_per_sample(self) -> int:
        c1, c2 = self.channels
        return self.side ** 2 * c1 + (self.side // 2) ** 2 * c2 + self.hidden  # the activations kept

    @classmethod
    def build(cls, dataset, dtype, device) -> "CNN":
        pixels = math.prod(dataset.feature_shape)
        side = math.isqrt(pixels)
        if side * side != pixels:
            raise ValueError(f"bad run setting model='cnn': {dataset.path.name}'s samples have {pixels} features, "
                             "not a square image")
        return cls(num_classes=dataset.num_classes, side=side)

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
        return self.side * self.side, dtype

    def prepare_inputs(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        x = x.reshape(x.shape[0], -1)
        return x.clone() if out is None else out.copy_(x)

    def forward(self, p, x) -> torch.Tensor:
        """One model's views and x (B, side^2) -> (B, classes); or a stack's: (K, ...) and (K, B, side^2) ->
        (K, B, classes)."""
        if p["out.bias"].dim() == 1:
            return self.forward({name: view.unsqueeze(0) for name, view in p.items()}, x.unsqueeze(0)).squeeze(0)
        k, b = x.shape[:2]
        # devices as channel groups: (B, K * channels, side, side)
        h = x.reshape(k, b, 1, self.side, self.side).transpose(0, 1).reshape(b, k, self.side, self.side)
        for layer in ("conv1", "conv2"):
            weight, bias = p[f"{layer}.kernel"], p[f"{layer}.bias"]
            h = F.conv2d(h, weight.flatten(0, 1), bias.flatten(), padding=self.kernel // 2, groups=k)
            h = F.max_pool2d(torch.relu(h), 2)
        h = h.reshape(b, k, -1).transpose(0, 1)  # (K, B, c2 (side / 4)^2), channels first
        h = torch.relu(torch.baddbmm(p["dense.bias"].unsqueeze(1), h, p["dense.kernel"]))
        return torch.baddbmm(p["out.bias"].unsqueeze(1), h, p["out.kernel"])

    def losses(self, logits, y) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, -2), y.flatten(), reduction="none").view(y.shape)

    def hits(self, logits, y) -> torch.Tensor:
        return logits.argmax(-1) == y


MODEL = CNN
