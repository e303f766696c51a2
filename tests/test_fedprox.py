import numpy as np
import pytest

from fedsim.methods import fedavg, fedprox

from methods_common import device_arrays, hand_local_sgd, local_models


@pytest.mark.parametrize("engine", ["kernel", "batched", "loop"])
def test_local_steps_match_hand_computation(engine):
    model, clients, params, _, problem, models = local_models(fedprox, 0.7, [4, 1], engine=engine)
    assert problem.mu == 0.7 and problem.correction is None
    for j, device in enumerate([4, 1]):
        x, y = device_arrays(clients, device)
        expected = hand_local_sgd(params.numpy(), x, y, model.num_classes, epochs=3, mu=0.7)
        np.testing.assert_allclose(models[j].numpy(), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("engine", ["kernel", "batched", "loop"])
def test_mu_zero_is_fedavg_bit_for_bit(engine):
    prox = local_models(fedprox, 0.0, [0, 3, 4], engine=engine)[-1]
    avg = local_models(fedavg, 0.0, [0, 3, 4], engine=engine)[-1]
    assert (prox == avg).all()
