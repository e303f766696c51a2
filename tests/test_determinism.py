"""A run is a pure function of (config, data, seed): on CPU the thread count changes nothing."""

import pandas as pd
import pytest
import torch

from fedsim.data.synthetic import write_synthetic
from fedsim.core.train import RunConfig, run


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Synthetic's shapes (60 features, 10 classes, ragged devices): at these, torch's GEMMs and
    softmax round differently on 1 and 2 threads, so the test fails if the numerics use threads."""
    path = tmp_path_factory.mktemp("data") / "synthetic.h5"
    write_synthetic(path, name="synthetic", alpha=1, beta=1, iid=False, num_devices=10, seed=0)
    return str(path)


@pytest.mark.parametrize("extra", [{"method": "fedavg"}, {"method": "feddane", "mu": 0.1},
                                   {"method": "fedprox", "mu": 0.1, "load": "stream", "eval_devices": 6,
                                    "selection": "weighted"}])
def test_one_and_two_threads_give_identical_metrics(data, extra):
    config = dict(data=data, clients_per_round=5, epochs=1, batch_size=10, lr=0.05, rounds=2, **extra)
    threads = torch.get_num_threads()
    one, _ = run(RunConfig(threads=1, **config))
    two, _ = run(RunConfig(threads=2, **config))
    pd.testing.assert_frame_equal(one, two, check_exact=True)
    assert torch.get_num_threads() == threads  # a run leaves torch's thread count as it found it
