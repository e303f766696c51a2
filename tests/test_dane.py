"""DANE against a hand computation of its local problem (eta != 1), and against FedDANE with every
device: the same run, bit for bit."""

import numpy as np
import pytest

from fedsim.methods import dane
from fedsim.core.metrics import COLUMNS
from fedsim.core.train import RunConfig, run

from methods_common import device_arrays, hand_local_sgd, local_models, numpy_grad
from tiny import SIZES

EVERYONE = list(range(len(SIZES)))


@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


@pytest.mark.parametrize("engine", ["kernel", "batched", "loop"])
@pytest.mark.parametrize("eta", [0.5, 1.0])
def test_local_problem_and_steps_match_hand_computation(engine, eta):
    model, clients, params, _, problem, models = local_models(dane, 0.3, EVERYONE, EVERYONE, engine=engine, eta=eta)
    w0, n = params.numpy(), clients.sizes.astype(float)
    grads = [numpy_grad(w0, *device_arrays(clients, k), model.num_classes) for k in EVERYONE]
    g = sum(n_k * grad for n_k, grad in zip(n, grads)) / n.sum()
    assert problem.mu == 0.3
    for k in EVERYONE:
        correction = eta * g - grads[k]  # -(grad F_k(x) - eta grad f(x))
        np.testing.assert_allclose(problem.correction[k].numpy(), correction, rtol=1e-10, atol=1e-12)
        expected = hand_local_sgd(w0, *device_arrays(clients, k), model.num_classes, epochs=3, mu=0.3,
                                  correction=correction)
        np.testing.assert_allclose(models[k].numpy(), expected, rtol=1e-10, atol=1e-12)


def test_eta_changes_the_local_problem_by_eta_minus_one_times_grad_f():
    one = local_models(dane, 0.3, EVERYONE, EVERYONE, eta=1.0)[4].correction.numpy()
    half = local_models(dane, 0.3, EVERYONE, EVERYONE, eta=0.5)[4].correction.numpy()
    shift = half - one  # -grad f / 2, the same for every device, and not zero
    np.testing.assert_allclose(shift, np.broadcast_to(shift[0], shift.shape), rtol=1e-12, atol=1e-14)
    assert np.abs(shift).max() > 1e-3


@pytest.mark.parametrize("engine", ["kernel", "loop"])
def test_a_dane_run_is_a_feddane_run_with_every_device_bit_for_bit(data, engine):
    settings = dict(data=data, mu=0.1, clients_per_round=8, epochs=2, batch_size=5, lr=0.05, rounds=5,
                    engine=engine, dtype="float64")
    dane_metrics, _ = run(RunConfig(method="dane", **settings))
    feddane_metrics, _ = run(RunConfig(method="feddane", **settings))
    assert dane_metrics["train_loss"].iloc[-1] < dane_metrics["train_loss"].iloc[0]  # it trains
    np.testing.assert_array_equal(dane_metrics[COLUMNS].to_numpy(), feddane_metrics[COLUMNS].to_numpy())
    # eta = 0.5 is another method: the run differs
    other, _ = run(RunConfig(method="dane", options={"eta": 0.5}, **settings))
    assert not np.array_equal(other[COLUMNS].to_numpy(), dane_metrics[COLUMNS].to_numpy())


def test_fewer_devices_than_all_are_refused_in_one_line(data):
    with pytest.raises(ValueError, match=r"^bad run setting clients_per_round=4: dane needs every device") as err:
        run(RunConfig(data=data, method="dane", mu=0.1, clients_per_round=4, rounds=1))
    assert "\n" not in str(err.value)


def test_it_declares_two_exchanges_and_its_traffic():
    method = dane.METHOD
    assert (method.exchanges, method.gradients, method.mu, method.down, method.up) == (2, "all", "tuned", 2, 1)
    assert method.full_participation and method.resolve({}) == {"eta": 1.0}
