"""FedDyn (Acar et al., ICLR 2021): dynamic regularisation.

Each device k keeps g_k (zero until k first trains), the server h (zero) and the model theta
it sends. A selected device solves, from theta^{t-1},

    theta_k = argmin L_k(theta) - <g_k, theta> + alpha/2 ||theta - theta^{t-1}||^2

(the local problem with correction -g_k and mu = alpha), then sets

    g_k <- g_k - alpha (theta_k - theta^{t-1}).

The server, with m the number of devices and S the round's devices (a device drawn twice
counts once in the state, as in scaffold.py):

    h <- h - alpha (1/m) sum_{k in S} (theta_k - theta^{t-1}),
    theta^t = mean_{k in S} theta_k - h / alpha.

The increments of h are those of the g_k, divided by m: h stays the mean of every device's
g_k (tests/test_feddyn.py), so "h from the stale g_k of all devices" (alpemreacar/FedDyn#3) and
the incremental rule are the same thing. The sum is over the model changes, each taken from
theta^{t-1} (the reading of FedLab#319 and PFLlib#29 that keeps h -> 0 at a fixed point).

Options (default: the paper):
- `alpha`: the regularisation weight, the setting FedDyn is tuned over. Grid 0.001 to 1 in
  decades: the authors' default 0.01 in the middle, and the project's mu grid without 0 (alpha
  is a proximal weight, and h / alpha needs alpha > 0); its top, 1, is the FedProx mu of the
  synthetic datasets. The proximal part of a local step scales by 1 - lr alpha: keep lr alpha < 2.
- `reported`: `paper` evaluates and returns theta^t; `authors` (their utils_methods.py,
  train_FedDyn) evaluates the mean of the active models while the devices still start from
  theta^t, which the state keeps and the local problem names as its centre.
- `weighting`: `paper` as above: h the plain mean of all g_k, the plain mean over S. A fixed
  point then has sum_k grad L_k = 0: it minimises the unweighted mean of the device losses, not
  f = sum_k p_k F_k (p_k = n_k / N) that the other methods here minimise and the metrics measure.
  `samples`: h <- h - alpha sum_{k in S} p_k (theta_k - theta^{t-1}) (h = sum_k p_k g_k) and the
  mean over S with the run's aggregation weights: its fixed points have grad f = 0. The authors'
  code reaches the same fixed points another way: its alpha_k = alpha / (m n_k / N) per device
  makes its h (alpha times the mean over all devices of g_k / alpha_k) equal to sum_k p_k g_k.

Left out: the authors' per-device alpha_k on the devices (LocalProblem.mu is one number for
all solvers, so it cannot be expressed), and their gradient clipping at norm 10 and weight decay
(not local steps this simulator has). A diverging run (as reported in FL-bench#133, #169) ends
at its first non-finite loss, as every run here does.
"""

import numpy as np

from . import LocalProblem, Method, Option, RoundContext, weighted_average

CHOICES = ("paper", "authors")
WEIGHTINGS = ("paper", "samples")


def init(params, num_devices: int) -> dict:
    return {"g": params.new_zeros((num_devices, *params.shape)), "h": params.new_zeros(params.shape),
            "model": params.clone()}


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    return LocalProblem(mu=float(ctx.options["alpha"]), correction=-state["g"][ctx.solvers], center=state["model"])


def server_update(ctx: RoundContext, state: dict, local_models):
    alpha, sent, table = float(ctx.options["alpha"]), state["model"], state["g"]
    change = local_models - sent
    devices, first = np.unique(ctx.solvers, return_index=True)  # a device drawn twice counts once
    table[devices] -= alpha * change[first]  # in place, as scaffold's table
    if ctx.options["weighting"] == "paper":
        p = change.new_full((len(devices),), 1 / table.shape[0])
        # the plain mean as the server's average (fedsim.average's order), not torch's reduction
        mean = weighted_average(local_models, change.new_full((len(ctx.solvers),), 1 / len(ctx.solvers)))
    else:
        p = change.new_tensor(ctx.sizes[devices] / ctx.sizes.sum())
        mean = weighted_average(local_models, ctx.weights(ctx.solvers))
    h = state["h"] - alpha * weighted_average(change[first], p)
    model = mean - h / alpha
    params = model if ctx.options["reported"] == "paper" else mean
    return params, {"g": table, "h": h, "model": model}


METHOD = Method(
    name="feddyn", label="FedDyn", family="drift",
    local_problem=local_problem, server_update=server_update,
    init=init, down=1, up=1, tuned="alpha",  # theta^{t-1} down, theta_k up
    options={
        "alpha": Option(0.01, "regularisation weight alpha", above=0.0, grid=(0.001, 0.01, 0.1, 1.0)),
        "reported": Option("paper", "the model evaluated and returned: theta^t (paper) or the mean of the "
                           "active models (authors)", choices=CHOICES),
        "weighting": Option("paper", "h and the mean over S: plain over devices (paper) or by samples "
                            "(the n_k-weighted objective)", choices=WEIGHTINGS),
    },
)
