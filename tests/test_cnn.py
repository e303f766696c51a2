"""The CNN family (fedsim.models.cnn, lenet5): LEAF's CNN's and LeNet-5's layers and sizes, one stacked
computation for K devices that equals K separate ones, and the batched engine against the per-device loop."""

import numpy as np
import pytest
import torch
from torch import nn

from fedsim.core.engine import Clients, SGDSettings, local_sgd_batched, local_sgd_loop
from fedsim.methods import LocalProblem
from fedsim.models import Model
from fedsim.models.cnn import CNN
from fedsim.models.lenet5 import LeNet5

SIZES = [1, 7, 12, 5]  # ragged devices


def small_cnn():
    return CNN(num_classes=5, side=8, channels=(2, 3), hidden=(6,))


def small_lenet():
    return LeNet5(num_classes=5, side=16, channels=(2, 3), hidden=(6, 4))  # 16 -> 12 -> 6 -> 2 -> 1


def images(model, n, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, model.side * model.side, generator=g, dtype=dtype)
    return x, torch.randint(0, model.num_classes, (n,), generator=g)


def reference_module(model: CNN, params: torch.Tensor) -> nn.Module:
    """LEAF's CNN written with torch.nn layers, its weights copied from params."""
    c1, c2 = model.channels
    net = nn.Sequential(nn.Unflatten(1, (1, model.side, model.side)),
                        nn.Conv2d(1, c1, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(c1, c2, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(c2 * (model.side // 4) ** 2, model.hidden[0]), nn.ReLU(),
                        nn.Linear(model.hidden[0], model.num_classes)).to(params.dtype)
    copy_weights(model, params, net, [(1, "conv1"), (4, "conv2"), (8, "dense1"), (10, "out")])
    return net


def reference_lenet(model: LeNet5, params: torch.Tensor) -> nn.Module:
    """LeNet-5 written with torch.nn layers (NIID-Bench's SimpleCNNMNIST), its weights copied from params."""
    (c1, c2), (h1, h2), s = model.channels, model.hidden, model.side
    net = nn.Sequential(nn.Unflatten(1, (1, s, s)), nn.Conv2d(1, c1, 5), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(c1, c2, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(c2 * ((s - 4) // 2 - 4) ** 2 // 4, h1), nn.ReLU(), nn.Linear(h1, h2), nn.ReLU(),
                        nn.Linear(h2, model.num_classes)).to(params.dtype)
    copy_weights(model, params, net, [(1, "conv1"), (4, "conv2"), (8, "dense1"), (10, "dense2"), (12, "out")])
    return net


def copy_weights(model, params, net, layers):
    p = model.layout.views(params)
    with torch.no_grad():
        for index, name in layers:
            kernel = p[f"{name}.kernel"]
            net[index].weight.copy_(kernel if kernel.dim() == 4 else kernel.T)
            net[index].bias.copy_(p[f"{name}.bias"])


def test_leaf_femnist_cnn_has_its_parameter_count_and_shapes():
    model = CNN()
    assert model.layout.size == 6_603_710  # LEAF's models/femnist/cnn.py at 28x28 and 62 classes
    shapes = model.layout.shapes
    assert shapes["conv1.kernel"] == (32, 1, 5, 5) and shapes["conv2.kernel"] == (64, 32, 5, 5)
    assert shapes["dense1.kernel"] == (7 * 7 * 64, 2048) and shapes["out.kernel"] == (2048, 62)
    params = model.init(torch.Generator().manual_seed(0))
    x, _ = images(model, 3, dtype=torch.float32)
    assert model.logits(params, x).shape == (3, 62)
    assert model.logits(params.expand(2, -1), x.expand(2, -1, -1)).shape == (2, 3, 62)


def test_init_is_glorot_uniform_with_zero_biases():
    model = CNN()
    views = model.layout.views(model.init(torch.Generator().manual_seed(0)))
    for name, fan_in, fan_out in (("conv1", 25, 32 * 25), ("conv2", 32 * 25, 64 * 25), ("dense1", 3136, 2048)):
        limit = (6 / (fan_in + fan_out)) ** 0.5
        kernel = views[f"{name}.kernel"]
        assert kernel.abs().max() <= limit and kernel.abs().max() > 0.95 * limit
        assert abs(kernel.std().item() - limit / 3 ** 0.5) < 0.05 * limit  # uniform(-l, l)
        assert torch.all(views[f"{name}.bias"] == 0)


@pytest.mark.parametrize("make, reference", [(small_cnn, reference_module), (small_lenet, reference_lenet),
                                             (LeNet5, reference_lenet)])
def test_logits_equal_the_same_network_in_torch_nn(make, reference):
    model = make()
    params = model.init(torch.Generator().manual_seed(1), torch.float64)
    params[model.layout.size - 20:] += 0.1  # biases too (LEAF's start at zero)
    x, _ = images(model, 9)
    expected = reference(model, params)(x)
    torch.testing.assert_close(model.logits(params, x), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(model.as_module(params)(x), expected, rtol=1e-12, atol=1e-12)


def test_lenet5_has_its_parameter_count_shapes_and_he_uniform_init():
    model = LeNet5()
    assert model.layout.size == 48_846  # 156 + 2,416 + 30,840 + 10,164 + 5,270 at 28x28 and 62 classes
    shapes = model.layout.shapes
    assert shapes["conv1.kernel"] == (6, 1, 5, 5) and shapes["conv2.kernel"] == (16, 6, 5, 5)
    assert shapes["dense1.kernel"] == (4 * 4 * 16, 120) and shapes["dense2.kernel"] == (120, 84)
    assert shapes["out.kernel"] == (84, 62)
    # 28 -> 24 -> 12 (pool) -> 8 -> 4: multiply-adds of the convolutions and the dense layers, x 2
    assert model.forward_flops() == 2 * (24 * 24 * 6 * 25 + 8 * 8 * 16 * 150 + 256 * 120 + 120 * 84 + 84 * 62)
    views = model.layout.views(model.init(torch.Generator().manual_seed(0)))
    for name, fan_in in (("conv1", 25), ("conv2", 150), ("dense1", 256), ("dense2", 120), ("out", 84)):
        bound = (6 / fan_in) ** 0.5  # He-uniform: Kaiming's rule for ReLU
        kernel = views[f"{name}.kernel"]
        assert kernel.abs().max() <= bound and kernel.abs().max() > 0.8 * bound
        assert torch.all(views[f"{name}.bias"] == 0)


def test_a_stack_of_devices_equals_each_device_alone():
    """Devices as channel groups of one convolution: each device sees only its own model and images."""
    model = small_cnn()
    stacked = torch.stack([model.init(torch.Generator().manual_seed(s), torch.float64) for s in range(3)])
    x, y = images(model, 3 * 4)
    x, y = x.view(3, 4, -1), y.view(3, 4)
    logits = model.logits(stacked, x)
    for k in range(3):
        torch.testing.assert_close(logits[k], model.logits(stacked[k], x[k]), rtol=1e-12, atol=1e-12)
    weight = torch.rand(3, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    grads = model.stacked_grads(stacked, x, y, weight)
    for k in range(3):
        w = stacked[k].clone().requires_grad_(True)
        (expected,) = torch.autograd.grad((model.sample_losses(w, x[k], y[k]) * weight[k]).sum(), w)
        torch.testing.assert_close(grads[k], expected, rtol=1e-10, atol=1e-12)



@pytest.mark.parametrize("make", [small_cnn, small_lenet, CNN])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("devices", [1, 3])
@pytest.mark.parametrize("offset", [0, 1])
def test_the_hand_written_backward_gives_autograds_bits(make, dtype, devices, offset):
    """CNN.stacked_grads (no autograd, each layer's gradients written into their views of `out`) equals
    Model.stacked_grads (autograd's backward, then the views joined) bit for bit: for one device and a
    stack, into a new tensor and into memory at an odd offset (where MKL's matmuls round otherwise)."""
    model = make()
    g = torch.Generator().manual_seed(devices)
    stacked = torch.stack([model.init(torch.Generator().manual_seed(s), dtype) for s in range(devices)])
    stacked[:, model.layout.size - 20:] += 0.1  # biases too (LEAF's start at zero)
    x = torch.rand(devices, 7, model.side * model.side, generator=g, dtype=dtype)
    y = torch.randint(0, model.num_classes, (devices, 7), generator=g)
    weight = torch.rand(devices, 7, generator=g, dtype=dtype)
    weight[0, -2:] = 0  # padded slots
    expected = Model.stacked_grads(model, stacked, x, y, weight)
    out = torch.full((devices, model.layout.size + offset), float("nan"), dtype=dtype)[:, offset:]
    assert model.stacked_grads(stacked, x, y, weight, out=out) is out
    assert torch.equal(out, expected)
    assert torch.equal(model.stacked_grads(stacked, x, y, weight), expected)
    if devices == 1:
        assert torch.equal(model.stacked_grads(stacked[0], x[0], y[0], weight[0]), expected[0])


@pytest.mark.parametrize("make", [small_cnn, small_lenet, CNN])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("terms", ["none", "mu and correction", "anchor"])
def test_one_devices_steps_by_blocks_give_the_general_rules_bits(make, dtype, terms):
    """CNN.descend for one device on a CPU (each tensor updated inside the backward, a dense kernel by
    blocks of rows: LEAF's first one in 25 blocks) against Model.descend (the whole gradient vector,
    then the terms and the update), bit for bit, over two steps with padded slots."""
    model = make()
    g = torch.Generator().manual_seed(2)
    params = model.init(torch.Generator().manual_seed(1), dtype)
    x = torch.rand(2, 1, 5, model.side * model.side, generator=g, dtype=dtype)
    y = torch.randint(0, model.num_classes, (2, 1, 5), generator=g)
    weight = torch.full((2, 1, 5), 0.2, dtype=dtype)
    weight[1, 0] = torch.tensor([0.5, 0.5, 0, 0, 0])
    extra = {"none": {},
             "anchor": {"anchor": params + 0.01 * torch.randn(params.shape, generator=g, dtype=dtype)},
             "mu and correction": {"mu": 0.3, "correction": 0.01 * torch.randn(1, *params.shape, generator=g,
                                                                                dtype=dtype)}}[terms]
    start = params + 0.01 * torch.randn(1, *params.shape, generator=g, dtype=dtype)
    blocks, whole = start.clone(), start.clone()
    model.descend(blocks, x, y, weight, 0.05, center=params, **extra)
    Model.descend(model, whole, x, y, weight, 0.05, center=params, **extra)
    assert (blocks != start).any()
    assert torch.equal(blocks, whole)

@pytest.mark.parametrize("make", [small_cnn, small_lenet])
@pytest.mark.parametrize("stacked", [False, True])
@pytest.mark.parametrize("batch_size", [1, 4, 20])
def test_batched_engine_equals_the_per_device_loop(batch_size, stacked, make, monkeypatch):
    """A whole round on ragged devices, proximal and correction terms on: the general rule one device
    at a time (the CNN on a CPU) and as one stack (on a GPU; here forced on the CPU)."""
    if stacked:
        monkeypatch.setattr(CNN, "stacks_on", ("cpu", "cuda"))
    model = make()
    params = model.init(torch.Generator().manual_seed(1), torch.float64)
    x, y = images(model, sum(SIZES), seed=3)
    clients = Clients.from_arrays(model.prepare_inputs(x), y, np.concatenate([[0], np.cumsum(SIZES)]))
    devices = np.array([2, 0, 3, 1])
    correction = 0.01 * torch.randn(len(devices), *params.shape, generator=torch.Generator().manual_seed(4),
                                    dtype=torch.float64)
    problem = LocalProblem(mu=0.3, correction=correction)
    settings = SGDSettings(lr=0.1, epochs=2, batch_size=batch_size, seed=7)
    batched = local_sgd_batched(model, params, problem, clients, devices, settings, 2)
    loop = local_sgd_loop(model, params, problem, clients, devices, settings, 2)
    assert (batched != params).any(dim=1).all()
    torch.testing.assert_close(batched, loop, rtol=1e-12, atol=1e-14)


def test_device_grads_are_each_devices_full_gradient():
    model = small_cnn()
    params = model.init(torch.Generator().manual_seed(1), torch.float64)
    x, y = images(model, sum(SIZES), seed=3)
    offsets = np.concatenate([[0], np.cumsum(SIZES)])
    grads = model.device_grads(params, x, y, offsets)
    for k in range(len(SIZES)):
        w = params.clone().requires_grad_(True)
        rows = slice(offsets[k], offsets[k + 1])
        (expected,) = torch.autograd.grad(model.loss(w, x[rows], y[rows]), w)
        torch.testing.assert_close(grads[k], expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("make", [
    lambda: LeNet5(num_classes=10, image=(3, 32, 32)),   # CIFAR-10's images: 32 -> 28 -> 14 -> 10 -> 5
    lambda: CNN(num_classes=4, image=(2, 12, 16), channels=(2, 3), hidden=(5,)),   # not square
])
def test_any_channels_and_sides_a_stack_equals_the_torch_nn_network_per_device(make):
    """C x H x W images: the stacked forward of K devices equals each device's torch.nn network."""
    model = make()
    params = torch.stack([model.init(torch.Generator().manual_seed(s), torch.float64) for s in range(3)])
    g = torch.Generator().manual_seed(1)
    x = torch.rand(3, 4, *model.image, generator=g, dtype=torch.float64).flatten(2)
    stacked = model.forward(model.layout.views(params), x)
    for k in range(3):
        torch.testing.assert_close(stacked[k], model.as_module(params[k])(x[k]), rtol=1e-10, atol=1e-12)
    if model.image == (3, 32, 32):  # LeNet-5 on CIFAR-10, as the papers count it
        assert model.layout.size == 456 + 2416 + 48120 + 10164 + 850 == 62006


def test_an_image_the_poolings_cannot_halve_is_refused_in_one_line():
    with pytest.raises(ValueError, match="cannot take 30x30 images: a convolution's output side 15 does not halve"):
        CNN(side=30)
    with pytest.raises(ValueError, match="lenet5 model cannot take 30x30 images: a convolution's output side 9"):
        LeNet5(side=30)


def femnist_like(path, devices=4, per_device=8, classes=10, seed=0):
    """A tiny file of FEMNIST's kind: 28x28 images as 784 features in [0, 1]."""
    from fedsim.data.format import write_dataset

    rng = np.random.default_rng(seed)
    n = devices * per_device
    y = rng.integers(0, classes, n)
    x = (rng.random((n, 784)) * 0.5 + (y[:, None] == np.arange(784) % classes) * 0.5).astype(np.float32)
    train = np.arange(n) % per_device < per_device * 3 // 4
    offsets = [np.arange(devices + 1) * c for c in (per_device * 3 // 4, per_device - per_device * 3 // 4)]
    write_dataset(path, name="tiny-femnist", kind="femnist", num_classes=classes,
                  clients=[f"w{k}" for k in range(devices)], train_x=x[train], train_y=y[train],
                  train_offsets=offsets[0], test_x=x[~train], test_y=y[~train], test_offsets=offsets[1],
                  provenance={})
    return str(path)


def test_a_run_trains_the_cnn_it_is_asked_for(tmp_path):
    """`model: cnn` on a FEMNIST file: the CNN's runs train, on the general rule, resumably reproducible."""
    from fedsim.core.settings import RunConfig
    from fedsim.core.train import run

    config = RunConfig(data=femnist_like(tmp_path / "f.h5"), method="feddane", mu=0.01, model="cnn",
                       clients_per_round=2, epochs=1, batch_size=4, lr=0.05, rounds=2)
    metrics, record = run(config)
    assert list(metrics["round"]) == [0, 1, 2] and np.isfinite(metrics["train_loss"]).all()
    assert record["config"]["model"] == "cnn"
    again, _ = run(config)
    assert again.equals(metrics)


@pytest.mark.parametrize("settings, message", [
    (dict(method="done", clients_per_round=4), "bad run setting method='done'.*MCLR models only"),
    (dict(method="fedavg", theory=True), "bad run setting theory=True"),
    (dict(method="fedavg", engine="kernel"), "bad run setting engine='kernel': it runs MCLR models on the CPU"),
])
def test_what_the_cnn_cannot_run_is_refused_in_one_line(tmp_path, settings, message):
    from fedsim.core.settings import RunConfig
    from fedsim.core.train import run

    config = RunConfig(**{"data": femnist_like(tmp_path / "f.h5"), "model": "cnn", "clients_per_round": 2,
                          "epochs": 1, "rounds": 1, **settings})
    with pytest.raises(ValueError, match=message):
        run(config)


def test_a_model_that_does_not_take_the_datasets_samples_is_refused(tmp_path):
    from fedsim.core.settings import RunConfig
    from fedsim.core.train import run

    from tiny import tiny_dataset
    config = RunConfig(data=tiny_dataset(tmp_path / "s.h5"), method="fedavg", model="cnn", rounds=1,
                       clients_per_round=2)
    with pytest.raises(ValueError, match="bad run setting model='cnn': it takes image samples, not the features of s.h5"):
        run(config)
