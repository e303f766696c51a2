"""DONE (Dinh et al., 2021): a distributed Newton-type method whose devices solve for a Newton
direction with Hessian-vector products instead of running SGD.

Every device takes part each round. First exchange: each sends its full gradient at w; the server
averages them into g = grad f(w) and sends it back. Each device then runs R Richardson iterations
on its own Hessian H_k = grad^2 F_k(w) (over all its training samples),

    d <- d - alpha (H_k d + g),        d_0 = -g,

which, for alpha < 2 / lambda_max(H_k), converge to the local Newton direction -H_k^+ g (on the
span of H_k, where d_0 starts). Second exchange: the devices send d_k and the server steps

    w <- w + eta sum_k p_k d_k        (p_k: the run's aggregation weights, n_k / n).

With identical local Hessians (one device, or IID devices) and R large, eta = 1 makes a round one
Newton step on f (tests/test_done.py). `alpha`, DONE's main setting, is tuned over a grid that
stays below 2 / lambda_max on every synthetic set of the paper (the local Hessians' top
eigenvalue reaches 108 on Synthetic (1,1) at the initial model: 2/108 = 0.0185); a run whose
alpha is at or above 2 / lambda_max of some device's Hessian at the initial model is refused in
one line at round 0, before any iteration (later the Hessians move: a run that then diverges ends
as diverged, as every run here).

Their code (CharlieDinh/DONE, algorithms/edges/edgeDONE.py) takes the Hessian of one mini-batch and
starts from d_0 = -grad F_k(w) (the device's own gradient) where it samples mini-batches, from -g in
its full-batch case: option `start` (global: -g, the default here, as fedsim's Hessians are
full-batch; local: -grad F_k(w)). A per-sample Hessian-vector product is counted as two gradient
evaluations (its cost). MCLR only: the Hessian-vector products are the closed form of
fedsim.core.theory.
"""

from . import Method, Option, RoundContext, weighted_average

STARTS = ("global", "local")


def local_solver(ctx: RoundContext, state: dict):
    grads = ctx.device_grads(ctx.gradient_devices)  # every device (gradients="all")
    g = weighted_average(grads, ctx.weights(ctx.gradient_devices))
    hessians = ctx.hessians(ctx.solvers)
    alpha = ctx.options["alpha"]
    if ctx.round == 0:
        top = max(hessians.largest())
        if alpha >= 2 / top:
            raise ValueError(f"bad method option alpha={alpha!r}: the Richardson iterations diverge at alpha >= "
                             f"2 / lambda_max = {2 / top:.4g} (the largest local Hessian eigenvalue at the initial "
                             "model)")
    if ctx.options["start"] == "global":
        d = (-g).expand(len(ctx.solvers), *g.shape).clone()
    else:
        d = -ctx.device_grads(ctx.solvers)
    for _ in range(ctx.options["iterations"]):
        d = d - alpha * (hessians.product(d) + g.unsqueeze(0))
    return ctx.params.unsqueeze(0) + d  # the devices' "models" w + d_k: their directions, as the server takes them


def server_update(ctx: RoundContext, state: dict, local_models):
    step = weighted_average(local_models - ctx.params.unsqueeze(0), ctx.weights(ctx.solvers))
    return ctx.params + ctx.options["eta"] * step, state


METHOD = Method(
    name="done", label="DONE", family="dane",
    local_solver=local_solver, server_update=server_update,
    exchanges=2, gradients="all", full_participation=True, mclr_only=True, tuned="alpha",
    down=2, up=1,  # the model and g down, d_k up (and the gradient exchange: fedsim.methods.traffic)
    options={
        "alpha": Option(0.003, "Richardson step size alpha (< 2 / lambda_max of the local Hessians)", above=0.0,
                        grid=(0.001, 0.003, 0.01)),
        "iterations": Option(40, "Richardson iterations R per round", at_least=1),
        "eta": Option(1.0, "server step size on the mean direction", above=0.0),
        "start": Option("global", "d_0: -grad f(w) (global) or the device's -grad F_k(w) (local, their code's "
                        "mini-batch case)", choices=STARTS),
    },
)
