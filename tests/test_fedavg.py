import numpy as np
import pytest
import torch

from fedsim.methods import fedavg
from fedsim.core.train import RunConfig

from methods_common import device_arrays, hand_local_sgd, local_models


@pytest.mark.parametrize("engine", ["kernel", "batched", "loop"])
def test_local_steps_match_hand_computation(engine):
    model, clients, params, _, problem, models = local_models(fedavg, 0.0, [4, 2], engine=engine)
    assert problem.mu == 0 and problem.correction is None
    for j, device in enumerate([4, 2]):
        x, y = device_arrays(clients, device)
        expected = hand_local_sgd(params.numpy(), x, y, model.num_classes, epochs=3)
        np.testing.assert_allclose(models[j].numpy(), expected, rtol=1e-10, atol=1e-12)


def test_server_averages_with_sample_weights():
    _, clients, _, ctx, _, models = local_models(fedavg, 0.0, [4, 2])
    n = clients.sizes[[4, 2]].astype(float)
    expected = (n[0] * models[0] + n[1] * models[1]) / n.sum()
    torch.testing.assert_close(fedavg.METHOD.server_update(ctx, {}, models)[0], expected)


def test_rejects_a_proximal_term():
    with pytest.raises(ValueError, match="mu=0.5: fedavg has no proximal term"):
        RunConfig(data="unused.h5", method="fedavg", mu=0.5).validate()
