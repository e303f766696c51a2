"""Multinomial logistic regression (MCLR): the paper's model of the synthetic sets and FEMNIST.

Its weights and bias are one matrix of shape (features + 1, classes), the bias in the last row:
its inputs get a constant 1 appended once, at load time (`prepare_inputs`), and a forward pass
is one matmul. Its gradients, full or stacked, are closed forms (no autograd), and on the CPU the
compiled kernel (fedsim.core.kernel) trains and evaluates it.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from . import Model, glorot_uniform
from ..specs import ModelSpec

SPEC = ModelSpec(name="mclr", label="MCLR", samples=("features", "image"), accelerators=("kernel",),
                 linear_softmax=True, dissimilarity=True)


class MCLR(Model):
    """Multinomial logistic regression trained with plain cross-entropy.

    The reference code declares an L2 regulariser that never reaches the loss; we train
    what it trained: unregularised cross-entropy.
    """

    spec = SPEC

    def __init__(self, num_features: int, num_classes: int):
        self.num_features = num_features
        self.num_classes = num_classes

    @classmethod
    def build(cls, dataset, dtype, device) -> "MCLR":
        return cls(int(np.prod(dataset.feature_shape)), dataset.num_classes)

    def init(self, generator: torch.Generator, dtype=torch.float32) -> torch.Tensor:
        """Glorot-uniform kernel and zero bias: TensorFlow's dense-layer default, as in the reference."""
        params = torch.zeros(self.num_features + 1, self.num_classes, dtype=dtype)
        params[:-1] = glorot_uniform((self.num_features, self.num_classes), generator, self.num_features,
                                     self.num_classes).to(dtype)
        return params

    def input_layout(self, dtype: torch.dtype) -> tuple[int, torch.dtype]:
        return self.num_features + 1, dtype  # the features, then the bias input 1

    @staticmethod
    def tensors(params: torch.Tensor) -> list[torch.Tensor]:
        """Views of the kernel (features, classes) and the bias (classes,), in the order of the
        reference model's trainable variables; a leading device dimension is kept."""
        return [params[..., :-1, :], params[..., -1, :]]

    def from_tensors(self, tensors: dict, dtype=torch.float32, source="tensors") -> torch.Tensor:
        """Parameters from a `kernel` and a `bias` array (the reference model's variables)."""
        shapes = {"kernel": (self.num_features, self.num_classes), "bias": (self.num_classes,)}
        for name, shape in shapes.items():
            got = tensors.get(name)
            if got is None or tuple(got.shape) != shape:
                found = "missing" if got is None else f"shape {tuple(got.shape)}"
                raise ValueError(f"{source}: {name} must have shape {shape} for this dataset's model, {found}")
        params = torch.empty(self.num_features + 1, self.num_classes, dtype=dtype)
        kernel, bias = self.tensors(params)
        kernel.copy_(torch.as_tensor(tensors["kernel"]))
        bias.copy_(torch.as_tensor(tensors["bias"]))
        return params

    def prepare_inputs(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Flatten samples and append the constant input that multiplies the bias row.

        `out` (samples, features + 1), of any float dtype, receives them without a temporary.
        """
        x = x.reshape(x.shape[0], -1)
        out = x.new_empty(x.shape[0], x.shape[1] + 1) if out is None else out
        out[:, :-1] = x
        out[:, -1] = 1
        return out

    @staticmethod
    def logits(params: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        # = x W. For many samples MKL runs (W^T X^T)^T several times faster (measured); for a
        # mini-batch its two extra layout ops cost more than they save.
        return (params.mT @ x.mT).mT.contiguous() if len(x) > 256 else x @ params

    def loss(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of a batch (x already prepared)."""
        return F.cross_entropy(self.logits(params, x), y)

    def stats(self, params, x, y) -> tuple[float, float]:
        """Mean loss and accuracy over all rows, from one product."""
        logits, n = self.logits(params, x), max(len(y), 1)
        return F.cross_entropy(logits, y, reduction="sum").item() / n, (logits.argmax(-1) == y).sum().item() / n

    def stacked_grads(self, stacked, x, y, weight, out=None) -> torch.Tensor:
        """Per-device gradients of the weighted batch losses in closed form: X_k^T (weight_k (P_k - Y_k)),
        stacked (K, features + 1, classes), x (K, B, features + 1), y and weight (K, B)."""
        residual = torch.bmm(x, stacked).softmax(-1)
        residual.scatter_add_(-1, y.unsqueeze(-1), -torch.ones_like(residual[..., :1]))
        grads = torch.bmm(x.mT, residual * weight.unsqueeze(-1))
        return grads if out is None else out.copy_(grads)  # not bmm's out=: MKL rounds by the memory's alignment

    def descend(self, stacked, x, y, weight, lr: float, mu: float = 0.0, center=None, correction=None, anchor=None,
                grads=None) -> None:
        """Model.descend's steps in closed form, four operations a step. The weights are kept
        transposed, V = W^T (K, classes, features + 1), and the logits as (K, classes, B): the layout
        in which both matmuls and the softmax read contiguous memory (a softmax over a last dimension
        of a few classes runs several times slower). With X_w = X scaled by its slots' weights, a step is

            V <- (1 - lr mu) V - lr (softmax(V X^T) - Y^T) X_w + lr (mu w0 - c)^T

        (with an anchor, its softmax in place of Y^T: the labels cancel): bmm, softmax, sub_, baddbmm_
        (+ add_ for the constant term). The default's rule, rounded in another order."""
        v = stacked.mT.contiguous()
        x_t = x.mT.contiguous()            # (T, K, features + 1, B)
        x_w = x * weight.unsqueeze(-1)     # (T, K, B, features + 1)
        classes = torch.arange(self.num_classes, device=y.device)
        y_t = (y.unsqueeze(-2) == classes[:, None]).to(x.dtype)  # one-hot, (T, K, classes, B)
        shift = None  # lr (mu w0 - c)^T: the part of every step that does not depend on V
        if mu or correction is not None:
            shift = lr * mu * center
            if correction is not None:
                shift = shift - lr * correction
            shift = shift.mT.expand_as(v).contiguous()
        at = None if anchor is None else anchor.mT.expand_as(v).contiguous()
        for x_t_s, x_w_s, y_t_s in zip(x_t, x_w, y_t):
            target = y_t_s if at is None else torch.bmm(at, x_t_s).softmax(1)
            residual = torch.bmm(v, x_t_s).softmax(1).sub_(target)
            v.baddbmm_(residual, x_w_s, beta=1 - lr * mu, alpha=-lr)
            if shift is not None:
                v.add_(shift)
        stacked.copy_(v.mT)

    def residual(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, logits=None) -> torch.Tensor:
        """softmax(x W) - onehot(y): the loss gradient with respect to the logits, per sample."""
        r = torch.softmax(self.logits(params, x) if logits is None else logits, dim=-1)
        r[torch.arange(len(y), device=y.device), y] -= 1
        return r

    def device_grads(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, offsets) -> torch.Tensor:
        """Full local gradients grad F_k(params), one per device, stacked: (devices, *params.shape).

        Devices own contiguous rows x[offsets[k]:offsets[k+1]]; the closed form
        X_k^T (P_k - Y_k) / n_k needs one small matmul per device and no autograd.
        """
        r = self.residual(params, x, y)
        sizes = (offsets[1:] - offsets[:-1]).tolist()
        blocks = zip(torch.split(x, sizes), torch.split(r, sizes))
        sums = torch.stack([rk.T @ xk for xk, rk in blocks])  # R^T X: MKL runs it several times faster than X^T R
        n = torch.tensor(sizes, dtype=sums.dtype, device=sums.device).clamp(min=1)
        return (sums / n[:, None, None]).mT.contiguous()


MODEL = MCLR
