"""Shakespeare's model: a character LSTM predicting the next character (LEAF's, the reference's)."""

from __future__ import annotations

import torch

from ._lstm import Layout, LSTMModel, dense, lookup, lstm_last, lstm_layer_shapes
from ..specs import ModelSpec

# a step is ~5,700 kernels, each far shorter than its launch
SPEC = ModelSpec(name="char_lstm", label="char LSTM", samples=("shakespeare",), graphs_on=("cuda",),
                 dissimilarity=True)


class CharLSTM(LSTMModel):
    """Char embedding 8, 2-layer LSTM 256, next char over 80 symbols (the last step's logits)."""

    spec = SPEC

    def __init__(self, num_classes=80, seq_len=80, embed=8, hidden=256, layers=2):
        self.num_classes, self.seq_len, self.hidden, self.layers = num_classes, seq_len, hidden, layers
        self.layout = Layout({"embed": (num_classes, embed), **lstm_layer_shapes(embed, hidden, layers),
                              "out.kernel": (hidden, num_classes), "out.bias": (num_classes,)})

    @classmethod
    def build(cls, dataset, dtype, device) -> "CharLSTM":
        return cls(num_classes=dataset.num_classes, seq_len=int(dataset.feature_shape[0]))

    def forward(self, p, x) -> torch.Tensor:
        return dense(p, "out", lstm_last(p, lookup(p["embed"], x), self.layers))


MODEL = CharLSTM
