"""Pipelined FedDANE: FedDANE in one exchange per round, with a stale global gradient.

Round t sends the devices S_t the model w^{t-1} and the previous round's aggregate gradient
g_{t-1}; each solves FedDANE's subproblem with it,

    F_k(w) + <g_{t-1} - grad F_k(w^{t-1}), w - w^{t-1}> + mu/2 ||w - w^{t-1}||^2,

and sends back its model and its gradient grad F_k(w^{t-1}) together. The server averages the
models, and the gradients into g_t for the next round. In the first round there is no g yet and
no correction: the round is FedProx's. One communication round per round.
"""

from . import LocalProblem, Method, RoundContext, average_models, weighted_average


def init(params, num_devices: int) -> dict:
    return {"gradient": params.new_zeros(params.shape), "has_gradient": params.new_zeros(())}


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    if not bool(state["has_gradient"]):
        return LocalProblem(mu=float(ctx.mu), correction=None)
    own = ctx.device_grads(ctx.solvers)
    return LocalProblem(mu=float(ctx.mu), correction=state["gradient"].unsqueeze(0) - own)


def server_update(ctx: RoundContext, state: dict, local_models):
    params, _ = average_models(ctx, state, local_models)
    gradient = weighted_average(ctx.device_grads(ctx.solvers), ctx.weights(ctx.solvers))
    return params, {"gradient": gradient, "has_gradient": state["has_gradient"].new_ones(())}


METHOD = Method(
    name="feddane_pipelined", label="FedDANE, pipelined", family="dane",
    local_problem=local_problem,
    server_update=server_update, init=init, exchanges=1, mu="tuned",
    down=2, up=2,  # the model and g_{t-1} down, the model and grad F_k(w^{t-1}) up
)
