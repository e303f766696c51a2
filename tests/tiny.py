"""Tiny federated problems for the unit tests: ragged devices, a few features and classes."""

import numpy as np
import torch

from fedsim.core.engine import Clients
from fedsim.models.mclr import MCLR
from fedsim.data.synthetic import write_synthetic

SIZES = [1, 7, 10, 23, 95, 4]  # ragged on purpose: a lone sample, exact and partial batches


def tiny_clients(sizes=SIZES, features=5, classes=3, seed=0, dtype=torch.float64):
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    x = torch.as_tensor(rng.normal(size=(n, features)), dtype=dtype)
    y = torch.as_tensor(rng.integers(0, classes, n))
    model = MCLR(features, classes)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return model, Clients.from_arrays(model.prepare_inputs(x), y, offsets)


def tiny_params(model, seed=1, dtype=torch.float64):
    return model.init(torch.Generator().manual_seed(seed), dtype)


def tiny_dataset(path, devices=8, alpha=0.5, beta=0.5, iid=False, seed=0):
    write_synthetic(path, name="tiny", alpha=alpha, beta=beta, iid=iid, num_devices=devices,
                    num_features=10, num_classes=4, seed=seed)
    return str(path)


def read_dataset(path, split, devices=None):
    """One split of a dataset file (every device, or `devices`), read in one go."""
    from fedsim.data.format import FederatedDataset

    with FederatedDataset(path) as ds:
        return ds.load(split, devices)
