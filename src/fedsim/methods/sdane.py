"""S-DANE and Acc-S-DANE (Jiang, Rodomanov and Stich, NeurIPS 2024), with local SGD.

The server keeps the model x (ctx.params: the model evaluated) and the prox-centre sequence v
(v = x at the start), plus A = 0, B = 1 for the accelerated form. Round t, over the solvers S
(means weighted by ctx.weights: n_k-proportional), mu the strong convexity (`strong_convexity`):

    centre     S-DANE: y = v, a = 1/lambda;
               Acc:    a > 0 solves lambda a^2 = (A + a) B,  y = (A x + a v) / (A + a);
    exchange 1 the server sends y; each solver sends grad f_k(y); the server sends back
               h_k = grad f_k(y) - mean_S grad f_j(y);
    local      w_k ~ argmin f_k(w) - <h_k, w> + lambda/2 ||w - y||^2 (E epochs of SGD from y);
    exchange 2 each solver sends w_k and grad f_k(w_k); the server sets
               x+ = mean w_k,  g = mean grad f_k(w_k),
               v+ = (mu a x+ + B v - a g) / (mu a + B)    (S-DANE: B = 1),
               Acc: A += a, B += mu a.

With one device and an exact local solve, x+ = v+ = prox_{f/lambda}(v): the proximal-point
method (tests/test_sdane.py).

`lambda` is tuned over its grid, the decades 0.001 to 100; default 1. 1/lambda is the proximal
step: a large lambda makes a round about one gradient step of length 1/lambda, a small one a
long step that local SGD (contracting by about 1 - lr lambda a step) must solve accurately, as
its residual reaches v divided by lambda. The theory takes lambda about the devices' second-order
dissimilarity. Measured at the paper's synthetic settings (all 30 devices, E = 20, B = 10,
lr 0.01, 200 rounds, seed 0; mean loss of the last 20 rounds), the best decade is 0.01-0.1 on
synthetic_iid (Acc-S-DANE: 0.001 or below), 1 on synthetic_0_0 and 10 on synthetic_1_1 (both
forms), the loss rising a decade off either way. Local SGD needs lr lambda < 2: lambda = 100 only for
lr < 0.02 (above, it diverges locally and tuning drops it).

`adaptive` (off by default) is their line search: after the round, accept it and halve lambda if

    mean_S <grad f_k(w_k) - h_k(x+), y - w_k> >= ||g||^2 / (2 lambda),

else keep x, v (and A, B) and double lambda. h_k(x+) = grad f_k(x+) - mean_S grad f_j(x+) is
taken at the new mean x+, not at y: this is what the convergence proof needs (with h at y an
exact local solve always passes, and lambda would halve for ever), and what their code computes
(check_adaptive_acceptance). It costs the solvers a third exchange (x+ down, grad f_k(x+) up)
that the fixed counts below (exchanges 2, down 2, up 3) leave out. lambda then lives in the
state as a power-of-two factor on the option. Like their code, it needs every device in every
round: a run where it is on and not every device solves is refused.

Where their code (mlolab/S-DANE, src/optimizers/sdane.py) differs, fedsim follows the paper:
- it rescales each f_k by n n_k / N and takes plain means (the paper's f = (1/n) sum f_k); fedsim
  takes f_k = F_k and n_k-weighted means, so that f is the objective every method here minimises.
  Their form needs a proximal weight per device (lambda N / (n n_k)), which LocalProblem's one mu
  cannot express;
- their local step treats the proximal term implicitly, w+ = (w/lr + lambda y + h_k - g_k(w)) /
  (1/lr + lambda): it is fedsim's step with the learning rate lr / (1 + lr lambda);
- their default local solver stops once ||grad of the local objective||^2 <= (lambda^2/4)
  ||w - y||^2; fedsim runs E epochs (a stopping rule would need a new kind of local step in
  the engines, not built);
- after a rejected step, their accelerated form keeps h_k from the old y; fedsim recomputes it at
  the new y.
"""

import numpy as np

from . import LocalProblem, Method, Option, RoundContext, Variant, weighted_average


def init(params, num_devices: int) -> dict:
    import torch  # here, not at the top: see fedsim.methods

    def scalar(value):  # 0-dim float64 tensors: they checkpoint, and keep the scalars' precision
        return torch.tensor(value, dtype=torch.float64, device=params.device)
    return {"v": params.clone(), "A": scalar(0.0), "B": scalar(1.0), "lambda_scale": scalar(1.0)}


def step(ctx: RoundContext, state: dict) -> tuple[float, float, object]:
    """(lambda, a, y) of this round."""
    lam = ctx.options["lambda"] * float(state["lambda_scale"])
    if not ctx.options["accelerated"]:
        return lam, 1.0 / lam, state["v"]
    A, B = float(state["A"]), float(state["B"])
    a = (B + np.sqrt(B * B + 4.0 * lam * A * B)) / (2.0 * lam)  # lambda a^2 = (A + a) B, a > 0
    return lam, a, (A * ctx.params + a * state["v"]) / (A + a)


def check(ctx: RoundContext) -> None:
    everyone = len(ctx.sizes)
    if ctx.options["adaptive"] and not (len(ctx.solvers) == everyone and len(np.unique(ctx.solvers)) == everyone):
        raise ValueError(f"bad run setting clients_per_round={len(ctx.solvers)}: sdane with adaptive=True needs "
                         f"every device each round (K = {everyone}, uniform selection)")


def control_variates(ctx: RoundContext, point):
    """h_k = grad f_k(point) - mean_S grad f_j(point), one row per solver."""
    grads = ctx.grads_at(point, ctx.solvers)
    return grads - weighted_average(grads, ctx.weights(ctx.solvers)).unsqueeze(0)


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    check(ctx)
    lam, _, y = step(ctx, state)
    return LocalProblem(mu=lam, correction=-control_variates(ctx, y), center=y)


def server_update(ctx: RoundContext, state: dict, local_models):
    lam, a, y = step(ctx, state)
    mu, A, B, v = ctx.options["strong_convexity"], state["A"], state["B"], state["v"]
    weights = ctx.weights(ctx.solvers)
    x_new = weighted_average(local_models, weights)
    grads = ctx.grads_at(local_models, ctx.solvers)
    g = weighted_average(grads, weights)
    if ctx.options["adaptive"]:
        h = control_variates(ctx, x_new)
        gap = weighted_average(((grads - h) * (y.unsqueeze(0) - local_models)).flatten(1).sum(1), weights)
        if not gap >= g.square().sum() / (2 * lam):  # reject: the same x, v, A, B, lambda doubled
            return ctx.params, {**state, "lambda_scale": state["lambda_scale"] * 2}
        state = {**state, "lambda_scale": state["lambda_scale"] / 2}
    b = float(B) if ctx.options["accelerated"] else 1.0
    v_new = (mu * a * x_new + b * v - a * g) / (mu * a + b)
    if ctx.options["accelerated"]:
        A, B = A + a, B + mu * a
    return x_new, {**state, "v": v_new, "A": A, "B": B}


METHOD = Method(
    name="sdane", label="S-DANE", family="dane",
    local_problem=local_problem, server_update=server_update,
    init=init, exchanges=2, tuned="lambda",
    down=2, up=3,  # y, then the mean gradient, down; grad f_k(y), then w_k and grad f_k(w_k), up
    options={
        "lambda": Option(1.0, "the proximal weight lambda of the local problem (1/lambda: the proximal step)",
                         above=0.0, grid=(0.001, 0.01, 0.1, 1.0, 10.0, 100.0)),
        "strong_convexity": Option(0.0, "the strong convexity mu of f the method assumes", at_least=0.0),
        "accelerated": Option(False, "Acc-S-DANE: the accelerated form (y from x and v, A and B)"),
        "adaptive": Option(False, "adapt lambda by their line search (halve on accept, double and retry on "
                                  "reject); every device each round"),
    },
    variants={"sdane_accelerated": Variant("Acc-S-DANE", {"accelerated": True})},
)
