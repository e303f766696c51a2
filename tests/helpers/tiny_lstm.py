"""Tiny LSTM models (the paper's two, at toy sizes), ragged devices for them, and small dataset files
in the Shakespeare and Sent140 formats."""

import numpy as np
import torch

from fedsim.data.format import write_dataset
from fedsim.core.engine import Clients
from fedsim.models.char_lstm import CharLSTM
from fedsim.models.sent140_lstm import Sent140LSTM

SIZES = [1, 7, 12, 23, 4]  # ragged devices


def tiny_char(dtype=torch.float64):
    return CharLSTM(num_classes=6, seq_len=5, embed=3, hidden=4)


def tiny_sent(dtype=torch.float64, vocab=9):
    table = torch.randn(vocab + 1, 4, generator=torch.Generator().manual_seed(2), dtype=dtype)
    table[-1] = 0  # unknown / padding word
    return Sent140LSTM(table, seq_len=5, hidden=4, dense=3)


def tiny_inputs(model, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    vocab = model.num_classes if isinstance(model, CharLSTM) else len(model.embedding)
    x = torch.randint(0, vocab, (n, model.seq_len), generator=g, dtype=torch.int32)
    return x, torch.randint(0, model.num_classes, (n,), generator=g)


def params_of(model, dtype=torch.float64):
    return model.init(torch.Generator().manual_seed(1), dtype)


def tiny_clients(model, sizes=SIZES):
    x, y = tiny_inputs(model, sum(sizes), seed=3)
    return Clients.from_arrays(x, y, np.concatenate([[0], np.cumsum(sizes)]))


def write_leaf_like(path, kind, devices=4, per_device=30, seed=0):
    """A tiny file in the Shakespeare (uint8 chars) or Sent140 (int32 ids + embedding) format."""
    rng = np.random.default_rng(seed)
    classes, seq, dtype, vocab = (80, 80, np.uint8, 80) if kind == "shakespeare" else (2, 25, np.int32, 20)
    n = devices * per_device
    x = rng.integers(0, vocab, (n, seq)).astype(dtype)
    y = (x[:, -1] % classes).astype(np.int64)  # learnable: the label is a function of the last token
    train = np.arange(n) % per_device < per_device * 3 // 4
    offsets = [np.arange(devices + 1) * c for c in (per_device * 3 // 4, per_device - per_device * 3 // 4)]
    write_dataset(path, name=f"tiny-{kind}", kind=kind, num_classes=classes,
                  clients=[f"d{k}" for k in range(devices)], train_x=x[train], train_y=y[train],
                  train_offsets=offsets[0], test_x=x[~train], test_y=y[~train], test_offsets=offsets[1],
                  provenance={})
    if kind == "sent140":  # as fedsim.data.leaf.common.write_partition stores `extras`
        import h5py
        with h5py.File(path, "r+") as f:
            emb = rng.normal(size=(vocab + 1, 300)).astype(np.float32)
            emb[-1] = 0
            f.create_dataset("embedding", data=emb, track_times=False)
    return str(path)
