"""Sent140's model: an LSTM over frozen GloVe word vectors, one logit (LEAF's, the reference's)."""

from __future__ import annotations

import h5py
import torch
import torch.nn.functional as F

from ._lstm import Layout, LSTMModel, dense, lstm_last, lstm_layer_shapes
from ..specs import ModelSpec

# a step is ~1,800 kernels, each far shorter than its launch
SPEC = ModelSpec(name="sent140_lstm", label="Sent140 LSTM", samples=("sent140",), graphs_on=("cuda",),
                 dissimilarity=True)


class Sent140LSTM(LSTMModel):
    """Frozen GloVe embedding, 2-layer LSTM 100, dense 30 (ReLU), 1 logit (binary cross-entropy)."""

    spec = SPEC
    num_classes = 2

    def __init__(self, embedding: torch.Tensor, seq_len=25, hidden=100, dense=30, layers=2):
        self.embedding = embedding  # (V + 1, dim), frozen: not in the trainable vector
        self.seq_len, self.hidden, self.layers = seq_len, hidden, layers
        self.layout = Layout({**lstm_layer_shapes(embedding.shape[1], hidden, layers),
                              "fc.kernel": (hidden, dense), "fc.bias": (dense,),
                              "out.kernel": (dense, 1), "out.bias": (1,)})

    @classmethod
    def build(cls, dataset, dtype, device) -> "Sent140LSTM":
        """The dataset file's `embedding` (its GloVe rows, token 0 the padding) on the compute device."""
        with h5py.File(dataset.path, "r") as f:
            if "embedding" not in f:
                raise ValueError(f"{dataset.path}: a sent140 dataset needs its `embedding` array")
            embedding = torch.from_numpy(f["embedding"][:]).to(device, dtype)
        return cls(embedding, seq_len=int(dataset.feature_shape[0]))

    def forward(self, p, x) -> torch.Tensor:
        h = lstm_last(p, F.embedding(x.long(), self.embedding), self.layers)
        return dense(p, "out", torch.relu(dense(p, "fc", h))).squeeze(-1)

    def losses(self, logits, y) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(logits, y.to(logits.dtype), reduction="none")

    def hits(self, logits, y) -> torch.Tensor:
        return (logits > 0) == y.bool()


MODEL = Sent140LSTM
