"""Mime (Karimireddy et al., 2020) with SGD with momentum as the base optimiser: MimeLite's frozen
server momentum (mimelite.py says how that is SGD on fedsim's local problem), plus an SVRG-style
correction of every local step (FedJAX `mime.py`).

First exchange: the round's devices send their full local gradients at the server model x; the
server averages them, c = sum_k a_k grad F_k(x), and sends c back with x and the momentum m. Each
device then steps, on each mini-batch B,

    y <- y - lr (g_k(y; B) - g_k(x; B) + c + beta m),

the same batch's gradient at x taken away and the mean full gradient c put in its place: SGD on
the local problem with correction c + beta m, each step's gradient anchored at x (LocalProblem's
`anchor`; the compiled kernel, the batched engine and the per-device loop all run it, at two
per-sample gradients a sample). The server then updates as MimeLite's, x by server_lr times the
mean model change and m <- beta m + c, with the same c.

`correction: none` drops the anchor and c from the local step: that is MimeLite, model for model
(tests/test_mime.py), at the cost of the first exchange. `server_lr` is the tuned setting, over
MimeLite's grid.
"""

from . import LocalProblem, Method, Option, RoundContext, mimelite, weighted_average

CORRECTIONS = ("svrg", "none")


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    lite = mimelite.local_problem(ctx, state)  # beta m for every solver (and beta's check)
    if ctx.options["correction"] == "none":
        return lite
    c = weighted_average(ctx.device_grads(ctx.solvers), ctx.weights(ctx.solvers)).unsqueeze(0)
    correction = c.expand(len(ctx.solvers), *c.shape[1:]) if lite.correction is None else lite.correction + c
    return LocalProblem(mu=0.0, correction=correction, anchor=ctx.params)


METHOD = Method(
    name="mime", label="Mime", family="drift",
    local_problem=local_problem, server_update=mimelite.server_update,
    init=mimelite.init, exchanges=2, down=3, up=2, tuned="server_lr",  # (x, m, c) down; grad, y_k up
    options={**mimelite.METHOD.options,
             "correction": Option("svrg", "each local step's SVRG-style correction (svrg), or none: MimeLite",
                                  choices=CORRECTIONS)},
)
