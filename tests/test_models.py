import torch

from tiny import tiny_clients, tiny_params


def finite_difference_grad(f, params, eps=1e-6):
    grad = torch.zeros_like(params)
    for i in range(params.numel()):
        step = torch.zeros_like(params).view(-1)
        step[i] = eps
        step = step.view_as(params)
        grad.view(-1)[i] = (f(params + step) - f(params - step)) / (2 * eps)
    return grad


def test_mclr_gradients_match_finite_differences():
    model, clients = tiny_clients()
    params = tiny_params(model)
    x, y, offsets = clients.subset([4])  # the 95-sample device
    numeric = finite_difference_grad(lambda p: model.loss(p, x, y).item(), params)

    w = params.clone().requires_grad_(True)
    (autograd,) = torch.autograd.grad(model.loss(w, x, y), w)
    closed_form = model.device_grads(params, x, y, offsets)[0]

    torch.testing.assert_close(autograd, numeric, rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(closed_form, numeric, rtol=1e-6, atol=1e-8)


def test_device_grads_are_per_device():
    model, clients = tiny_clients()
    params = tiny_params(model)
    x, y, offsets = clients.subset([4, 1, 2])
    stacked = model.device_grads(params, x, y, offsets)
    for j, device in enumerate([4, 1, 2]):
        xk, yk, _ = clients.subset([device])
        w = params.clone().requires_grad_(True)
        (expected,) = torch.autograd.grad(model.loss(w, xk, yk), w)
        torch.testing.assert_close(stacked[j], expected)


def test_init_is_glorot_uniform_with_zero_bias():
    model, _ = tiny_clients(features=200, classes=50)
    params = tiny_params(model)
    limit = (6 / 250) ** 0.5
    assert params.shape == (201, 50)
    assert torch.all(params[-1] == 0)
    assert params[:-1].abs().max() <= limit
    assert abs(params[:-1].std().item() - limit / 3**0.5) < 0.02 * limit  # uniform(-l, l) has std l/sqrt(3)


def test_readmes_models_table_states_each_models_size():
    """README's "Models, and adding one" lists every registered model with its parameter count."""
    import re
    from pathlib import Path

    from fedsim import models
    from fedsim.models.char_lstm import CharLSTM
    from fedsim.models.cnn import CNN
    from fedsim.models.lenet5 import LeNet5
    from fedsim.models.sent140_lstm import Sent140LSTM

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = readme.split("## Models, and adding one", 1)[1].split("\n\n", 2)[1]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \|.*\| ([^|]+) \|$", table, re.M)}
    assert set(rows) == set(models.REGISTRY)
    sizes = {"char_lstm": CharLSTM().layout.size, "sent140_lstm": Sent140LSTM(torch.zeros(2, 300)).layout.size,
             "cnn": CNN().layout.size, "lenet5": LeNet5().layout.size}
    for name, size in sizes.items():
        assert rows[name].startswith(f"{size:,}"), (name, rows[name])
