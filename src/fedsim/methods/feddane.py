"""FedDANE (Li et al., 2019), the paper's Algorithm 2.

First exchange: the devices S_t send their full local gradients at w^{t-1}; the server
averages them into g_t. Second exchange: the devices S'_t solve

    F_k(w) + <g_t - grad F_k(w^{t-1}), w - w^{t-1}> + mu/2 ||w - w^{t-1}||^2

and the server averages their models. Whether S'_t is drawn independently of S_t (the
paper) or equals it (the reference code) is the run's `second_subset` setting, decided
by whoever builds the RoundContext.
"""

import numpy as np

from . import LocalProblem, RoundContext, average_models, weighted_average

COMMUNICATION_ROUNDS = 2


def local_problem(ctx: RoundContext, mu: float) -> LocalProblem:
    grads = ctx.device_grads(ctx.gradient_devices)
    g_t = weighted_average(grads, ctx.weights(ctx.gradient_devices))
    if np.array_equal(ctx.solvers, ctx.gradient_devices):
        own = grads  # S'_t = S_t: the solvers' gradients are already here
    else:
        own = ctx.device_grads(ctx.solvers)
    return LocalProblem(mu=float(mu), correction=g_t.unsqueeze(0) - own)


server_update = average_models
