"""What the LSTM models of the real datasets share (char_lstm.py: Shakespeare, sent140_lstm.py).

Parameters are ONE flat vector per model, (P,), or a stack of K devices' models, (K, P): the
methods' tensor arithmetic (averages, corrections, proximal terms) then works unchanged, and the
model cuts the vector into views (`Layout`). Every function takes any leading device dims shared
by params (..., P) and inputs (..., B, T): with a stack, each matmul is a batched matmul over the
devices, and since the devices' losses only touch their own slice of the stack, the gradient of
their sum with respect to the stack is every device's own gradient (one backward for K devices).

Cells follow TensorFlow's BasicLSTMCell, as the reference code does: one kernel (in + hidden,
4 hidden) over [x, h], gates (i, j, f, o), forget bias 1 added in the cell; kernels, dense
layers and the character embedding start Glorot-uniform, biases zero (TF's variable default).
Frozen inputs (Sent140's GloVe table) live on the model, not in the trainable vector.

Full local gradients (FedDANE's first exchange, the dissimilarity metrics) follow the
reference: on a device's first n_k samples if n_k < 50, else on its first 50 * min(n_k // 50, 4)
samples (at most 4 batches of 50, in file order: deterministic).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from . import Layout, Model, glorot_uniform

GRAD_BATCH, GRAD_BATCHES = 50, 4


def lstm_layer_shapes(inputs: int, hidden: int, layers: int) -> dict:
    shapes = {}
    for layer in range(layers):
        shapes[f"lstm{layer}.kernel"] = (inputs + hidden, 4 * hidden)
        shapes[f"lstm{layer}.bias"] = (4 * hidden,)
        inputs = hidden
    return shapes


def _bias(b: torch.Tensor) -> torch.Tensor:
    return b.unsqueeze(-2)  # (..., n) -> (..., 1, n): broadcasts over the batch rows


def lstm_last(p: dict, seq: torch.Tensor, layers: int) -> torch.Tensor:
    """Last hidden state of stacked BasicLSTM cells: seq (..., B, T, D) -> (..., B, H)."""
    for layer in range(layers):
        kernel, bias = p[f"lstm{layer}.kernel"], p[f"lstm{layer}.bias"]
        d, lead = seq.shape[-1], kernel.shape[:-2]
        # the input part of all T steps in one matmul: only h @ W_h is left to the time loop
        xw = (seq.flatten(-3, -2) @ kernel[..., :d, :] + _bias(bias)).unflatten(-2, seq.shape[-3:-1])
        w_h = kernel[..., d:, :]
        hs = _Recurrence.apply(xw.reshape(-1, *xw.shape[-3:]), w_h.reshape(-1, *w_h.shape[-2:]))
        seq = hs.view(*lead, *hs.shape[1:])
    return seq[..., -1, :]


class _Recurrence(torch.autograd.Function):
    """The time loop of one LSTM layer with a hand-written backward (BPTT).

    xw (G, B, T, 4H): input part + bias of every step's gates; w_h (G, H, 4H). Returns every
    step's h, (G, B, T, H). Plain autograd would write one (H, 4H) weight gradient per time step
    and add them up (memory-bound: many times the matmuls' time); here the loop only carries the
    small per-step terms and W_h's gradient is ONE matmul over all steps at the end.
    """

    @staticmethod
    def forward(ctx, xw, w_h):
        xw = xw.permute(2, 0, 1, 3).contiguous()  # time first: every step reads and writes contiguously
        t_len, g, b, four_h = xw.shape
        hid = four_h // 4
        w_dense = w_h.contiguous()  # a slice of the flat params: read every step, copied once
        acts = torch.empty_like(xw)             # i, j, f, o after their nonlinearities
        cs, hs = xw.new_empty(2, t_len, g, b, hid).unbind(0)
        for t in range(t_len):
            a = acts[t]
            a.copy_(xw[t]) if t == 0 else torch.baddbmm(xw[t], hs[t - 1], w_dense, out=a)
            a[..., :hid].sigmoid_()
            a[..., hid:2 * hid].tanh_()
            a[..., 2 * hid:3 * hid].add_(1.0).sigmoid_()  # forget bias 1, as BasicLSTMCell
            a[..., 3 * hid:].sigmoid_()
            i, j, f, o = a.chunk(4, -1)
            torch.mul(i, j, out=cs[t])
            if t > 0:
                cs[t].addcmul_(f, cs[t - 1])
            torch.mul(o, torch.tanh(cs[t]), out=hs[t])
        ctx.save_for_backward(w_h, acts, cs, hs)
        return hs.permute(1, 2, 0, 3)

    @staticmethod
    def backward(ctx, d_hs):
        w_h, acts, cs, hs = ctx.saved_tensors
        d_hs = d_hs.permute(2, 0, 1, 3)
        t_len, hid = acts.shape[0], hs.shape[-1]
        w_t = w_h.mT.contiguous()  # read every step: a dense copy makes the matmul faster (measured)
        d_gates = torch.empty_like(acts)
        d_h = d_c = None
        for t in reversed(range(t_len)):
            i, j, f, o = acts[t].chunk(4, -1)
            tc = torch.tanh(cs[t])
            dh = d_hs[t] if d_h is None else d_hs[t] + d_h
            dc = dh * o * (1 - tc * tc)
            if d_c is not None:
                dc += d_c
            dg = d_gates[t]
            torch.mul(dc * j, i * (1 - i), out=dg[..., :hid])
            torch.mul(dc * i, 1 - j * j, out=dg[..., hid:2 * hid])
            if t > 0:
                torch.mul(dc * cs[t - 1], f * (1 - f), out=dg[..., 2 * hid:3 * hid])
            else:
                dg[..., 2 * hid:3 * hid] = 0  # c_{-1} = 0
            torch.mul(dh * tc, o * (1 - o), out=dg[..., 3 * hid:])
            d_c = dc * f
            d_h = torch.bmm(dg, w_t)
        # sum over steps of h_{t-1}^T dgates_t, as one matmul (h_{-1} = 0: step 0 adds nothing)
        d_w_h = torch.einsum("tgbh,tgbk->ghk", hs[:-1], d_gates[1:])
        return d_gates.permute(1, 2, 0, 3), d_w_h


def dense(p: dict, name: str, x: torch.Tensor) -> torch.Tensor:
    return x @ p[f"{name}.kernel"] + _bias(p[f"{name}.bias"])


class LSTMModel(Model):
    """What both LSTMs share: init, token inputs, approximate full gradients."""

    layout: Layout
    seq_len: int
    hidden: int

    @property
    def floats_per_sample(self) -> int:
        return self.seq_len * 4 * self.hidden  # the gates of every step

    def init(self, generator: torch.Generator, dtype=torch.float32) -> torch.Tensor:
        params = torch.zeros(self.layout.size, dtype=dtype)
        for name, view in self.layout.views(params).items():
            if view.dim() == 2:  # kernels and embedding: Glorot-uniform; biases stay zero
                view.copy_(glorot_uniform(view.shape, generator, *view.shape))
        return params

    def input_layout(self, dtype: torch.dtype) -> tuple[int, torch.dtype]:
        return self.seq_len, torch.int32  # token / char ids

    def prepare_inputs(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return x.to(torch.int32) if out is None else out.copy_(x)

    def gradient_rows(self, sizes: np.ndarray) -> np.ndarray:
        """The reference's rows (see the module docstring): n_k below 50, else 50 * min(n_k // 50, 4)."""
        return np.where(sizes < GRAD_BATCH, sizes, GRAD_BATCH * np.minimum(sizes // GRAD_BATCH, GRAD_BATCHES))


def lookup(table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Rows of a (possibly stacked) table: table (..., V, e), ids (..., B, T) -> (..., B, T, e)."""
    lead, (v, e) = table.shape[:-2], table.shape[-2:]
    if not lead:
        return F.embedding(ids.long(), table)
    # one gather over the devices' tables laid end to end
    shift = torch.arange(math.prod(lead), device=ids.device).view(*lead, 1, 1) * v
    return table.reshape(-1, e)[ids.long() + shift]
