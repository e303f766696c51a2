"""LeNet-5 as the successors' papers use it on 28x28 images: the small CNN of a CPU-sized comparison.

conv 5x5 x6, pool, conv 5x5 x16, pool (no padding: 28 -> 24 -> 12 -> 8 -> 4), dense 120, dense
84, one logit per class, ReLU throughout: NIID-Bench's SimpleCNNMNIST (Li et al. 2022), the
LeNet-5 of LeCun et al. (1998) with ReLU and max-pooling. 48,846 parameters at 62 classes, 135
times fewer than LEAF's CNN (cnn.py) and 60 times fewer flops a sample.

Initialised He-uniform (Kaiming's rule for ReLU: weights uniform in +-sqrt(6 / fan_in), biases
zero), not torch.nn's default that NIID-Bench keeps (+-1/sqrt(fan_in), a sixth of the variance):
from that start, FedAvg on FEMNIST-62 (K = 10, E = 1, B = 10) sat at the class frequencies' loss
(3.38) for 25 rounds at lr 0.1 and for all of its 40-50 rounds at lr 0.01, 0.03, 0.2 and 0.3,
where He's start learns from the first round (71 % test accuracy at round 40, lr 0.1). On a CPU budget of tens of rounds, that is the whole run.

Everything else (the stacked forward, the layout, the equivalent torch.nn network) is the CNN
family's (cnn.py).
"""

from __future__ import annotations

import math

import torch

from .cnn import CNN
from ..specs import ModelSpec

# its small convolutions gain from running a round's devices as one grouped convolution on a CPU core
# too, unlike LEAF's CNN (benchmarks/cnn_round.py --model lenet5, docs/performance.md)
SPEC = ModelSpec(name="lenet5", label="LeNet-5", samples=("image",), stacks_on=("cpu", "cuda"),
                 sample_seconds=0.0003, convolutions=(5, 2, False))


class LeNet5(CNN):
    """conv 5x5 x6, pool, conv 5x5 x16, pool, dense 120, dense 84, dense classes; cross-entropy."""

    spec = SPEC
    channels = (6, 16)
    hidden = (120, 84)

    def init(self, generator: torch.Generator, dtype=torch.float32) -> torch.Tensor:
        params = torch.zeros(self.layout.size, dtype=dtype)
        for name, view in self.layout.views(params).items():
            if name.endswith(".kernel"):  # conv (out, in, k, k): fan_in = in k k; dense (in, out): in
                fan_in = math.prod(view.shape[1:]) if view.dim() == 4 else view.shape[0]
                bound = math.sqrt(6 / fan_in)
                view.copy_((2 * torch.rand(view.shape, generator=generator, dtype=torch.float64) - 1) * bound)
        return params

MODEL = LeNet5
