"""A hand computation of local SGD on a tiny problem, shared by the methods' tests."""

import numpy as np
import torch

from fedsim.data.format import FederatedDataset
from fedsim.core.engine import ENGINES, SGDSettings, local_steps
from fedsim.methods import RoundContext
from fedsim.models.mclr import MCLR

from tiny import tiny_clients, tiny_params

LR = 0.1


def numpy_grad(w, x, y, classes):
    """X^T (softmax(X w) - onehot(y)) / n, written out in numpy."""
    logits = x @ w
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(len(y)), y] -= 1
    return x.T @ p / len(y)


def hand_local_sgd(w0, x, y, classes, epochs, mu=0.0, correction=0.0):
    """Full-batch steps (batch_size >= n): w <- w - lr (grad F(w) + c + mu (w - w0))."""
    w = w0.copy()
    for _ in range(epochs):
        w = w - LR * (numpy_grad(w, x, y, classes) + correction + mu * (w - w0))
    return w


def context(model, clients, params, solvers, gradient_devices=None, weighting="samples", mu=0.0, options=None,
            settings=None, round_=0):
    gradient_devices = solvers if gradient_devices is None else gradient_devices

    def device_grads(devices):
        x, y, offsets = clients.subset(devices)
        return model.device_grads(params, x, y, offsets)

    def weights(devices):
        n = torch.as_tensor(clients.sizes[devices], dtype=params.dtype)
        return n / n.sum() if weighting == "samples" else torch.full_like(n, 1 / len(n))

    settings = settings or SGDSettings(lr=LR, epochs=3, batch_size=1000, seed=0)
    return RoundContext(round=round_, params=params, solvers=np.asarray(solvers),
                        gradient_devices=np.asarray(gradient_devices), device_grads=device_grads, weights=weights,
                        model=model, mu=mu, options=options or {}, lr=settings.lr, sizes=clients.sizes,
                        local_steps=lambda devices: local_steps(clients.sizes[devices], settings))


def local_models(method, mu, solvers, gradient_devices=None, epochs=3, engine="batched", **options):
    """Run `method`'s (a module's METHOD's) local problem through an engine, from its initial state;
    return everything a test compares."""
    method = getattr(method, "METHOD", method)
    model, clients = tiny_clients()
    params = tiny_params(model)
    settings = SGDSettings(lr=LR, epochs=epochs, batch_size=1000, seed=0)  # one full batch per epoch
    ctx = context(model, clients, params, solvers, gradient_devices, mu=mu, options=method.resolve(options),
                  settings=settings)
    problem = method.local_problem(ctx, method.init(params, len(clients.sizes)))
    models = ENGINES[engine](model, params, problem, clients, np.asarray(solvers), settings, 0)
    return model, clients, params, ctx, problem, models


def device_arrays(clients, device):
    x, y, _ = clients.subset([device])
    return x.numpy(), y.numpy()


def train_split(path):
    """A dataset file's whole train split as MCLR reads it: (model, x with its bias column, y, offsets)."""
    with FederatedDataset(path) as dataset:
        train = dataset.load("train")
        model = MCLR(int(np.prod(dataset.feature_shape)), dataset.num_classes)
    return model, model.prepare_inputs(torch.from_numpy(train.x).double()).numpy(), train.y, train.offsets


def mean_loss(w, x, y):
    """The mean cross-entropy of the samples x (bias column included), labels y, at weights w."""
    shifted = x @ w
    shifted = shifted - shifted.max(1, keepdims=True)
    return np.mean(np.log(np.exp(shifted).sum(1)) - shifted[np.arange(len(y)), y])
