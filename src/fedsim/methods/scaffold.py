"""SCAFFOLD (Karimireddy et al., 2020), control variates of option II.

The server keeps a control variate c, each device k its own c_k (zero until k first trains).
A selected device runs local SGD with the step

    w <- w - lr (grad F_k(w; batch) - c_k + c),

the local problem F_k(w) + <c - c_k, w - w0>, and then sets (option II)

    c_k+ = c_k - c + (w0 - w_k) / (steps_k lr),      steps_k = E ceil(n_k / B).

The server moves the model by `server_lr` times the mean model change and c by the participants'
control changes:

    w <- w0 + server_lr sum_k a_k (w_k - w0),        c <- c + sum_{k in S, once each} p_k (c_k+ - c_k),

a_k the run's aggregation weights, p_k = n_k / n. The paper weighs the control changes by 1/N;
p_k keeps c the n_k-weighted mean of every c_k, the weighting of f = sum_k p_k F_k that every
method here minimises: with all devices selected and one full-batch step, a round is one step
of gradient descent on f (tests/test_scaffold.py).
"""

import numpy as np

from . import LocalProblem, Method, Option, RoundContext, weighted_average


def init(params, num_devices: int) -> dict:
    return {"control": params.new_zeros(params.shape),
            "device_controls": params.new_zeros((num_devices, *params.shape))}


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    own = state["device_controls"][ctx.solvers]
    return LocalProblem(mu=0.0, correction=state["control"].unsqueeze(0) - own)


def server_update(ctx: RoundContext, state: dict, local_models):
    w0, control, table = ctx.params, state["control"], state["device_controls"]
    steps = local_models.new_tensor(ctx.local_steps(ctx.solvers)).reshape(-1, *[1] * w0.dim())
    old = table[ctx.solvers]
    new = old - control + (w0 - local_models) / (steps * ctx.lr)
    devices, first = np.unique(ctx.solvers, return_index=True)  # a device drawn twice counts once
    p = local_models.new_tensor(ctx.sizes[devices] / ctx.sizes.sum())
    control = control + weighted_average(new[first] - old[first], p)
    table[devices] = new[first]  # in place: copying the (devices x model) table every round would cost more
    params = w0 + ctx.options["server_lr"] * weighted_average(local_models - w0, ctx.weights(ctx.solvers))
    return params, {"control": control, "device_controls": table}


METHOD = Method(
    name="scaffold", label="SCAFFOLD", family="drift",
    local_problem=local_problem,
    server_update=server_update, init=init, down=2, up=2,  # (model, c) down, (model, c_k change) up
    options={"server_lr": Option(1.0, "server learning rate eta_g", above=0.0)},
)
