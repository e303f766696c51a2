"""Scaffnew / ProxSkip (Mishchenko et al., ICML 2022): local steps with control variates, and
communication after a random number of them.

Every device takes part (full participation). Device k keeps a control variate h_k (zero at the
start) and runs SGD steps on F_k(w) - <h_k, w> at the run's learning rate gamma,

    x_k <- x_k - gamma (g_k(x_k) - h_k),

where g_k is a mini-batch gradient. After each step a coin (one for all devices) comes up with
probability p, and then they communicate: a round here is one communication, so its number of
local steps is geometric with mean 1/p, drawn from (seed, round) (the same in every engine, and a
resumed run draws it again). The server averages

    x = sum_k a_k (x_k - (gamma / p) h_k)

and every device moves its control variate, h_k <- h_k + (p / gamma) (x - x_k), which keeps
sum_k a_k h_k = 0. With p = 1 (one step a round) and full batches a round is a gradient step on f
(tests/test_scaffnew.py). a_k: `weighting` paper (1/N: the paper's f is the plain mean of the
f_k) or samples (the run's weights, n_k / n: f = sum_k p_k F_k, the objective of every other
method here). `p`, its main setting, is tuned over a grid of mean local work from 20 steps
(p = 0.05) to 500 (p = 0.002), FedAvg's E = 20 epochs being 60-1,400 steps on the synthetic sets.
"""

import numpy as np

from . import LocalProblem, Method, Option, RoundContext, weighted_average

STEPS_STREAM = 20  # keeps the draws of the local steps apart from fedsim.core.train's streams
WEIGHTINGS = ("paper", "samples")


def local_steps(seed: int, round_: int, p: float) -> int:
    """The round's local steps: the first heads of a coin of probability p, counted from 1."""
    return int(np.random.default_rng([seed, round_, STEPS_STREAM]).geometric(p))


def init(params, num_devices: int) -> dict:
    return {"h": params.new_zeros((num_devices, *params.shape))}


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    return LocalProblem(mu=0.0, correction=-state["h"][ctx.solvers],
                        steps=local_steps(ctx.seed, ctx.round, ctx.options["p"]))


def server_update(ctx: RoundContext, state: dict, local_models):
    p, gamma, h = ctx.options["p"], ctx.lr, state["h"]
    if ctx.options["weighting"] == "paper":
        weights = local_models.new_full((len(ctx.solvers),), 1 / len(ctx.solvers))
    else:
        weights = ctx.weights(ctx.solvers)
    x = weighted_average(local_models - (gamma / p) * h[ctx.solvers], weights)
    h[ctx.solvers] += (p / gamma) * (x.unsqueeze(0) - local_models)  # in place, as scaffold's table
    return x, {"h": h}


METHOD = Method(
    name="scaffnew", label="Scaffnew", family="drift",
    local_problem=local_problem, server_update=server_update,
    init=init, full_participation=True, tuned="p",  # x down, x_k - (gamma/p) h_k up
    options={
        "p": Option(0.01, "probability of communicating after a local step (mean local steps 1/p)", above=0.0, at_most=1.0,
                    grid=(0.002, 0.005, 0.01, 0.02, 0.05)),
        "weighting": Option("paper", "the average: plain over the devices (paper) or by samples", choices=WEIGHTINGS),
    },
)
