"""FedExP (Jhunjhunwala et al., ICLR 2023): FedAvg with an adaptive, extrapolating server step.

Devices run FedAvg's local SGD from the sent model x. With Delta_k = w_k - x and the run's
aggregation weights a_k (n_k-proportional over the round's devices, or uniform for draws weighted
by n_k), the server steps

    Delta_bar = sum_k a_k Delta_k
    eta_g = max(1, sum_k a_k ||Delta_k||^2 / (2 (||Delta_bar||^2 + eps)))
    x <- x + eta_g Delta_bar.

By convexity of the norm, sum_k a_k ||Delta_k||^2 >= ||Delta_bar||^2, and eta_g >= 1 always: a
round never steps less far than FedAvg's. Where every Delta_k is equal, eta_g = 1 and the round
is FedAvg's.

eps and the weights. The paper states the step with uniform weights over the M participating
clients, sum_i ||Delta_i||^2 / (2 M (||Delta_bar||^2 + eps)). The authors' code (Divyansh03/FedExP
main.py) weighs by p_i = n_i / n, renormalised over the sampled clients, as above. It computes
0.5 mean_p ||Delta_i||^2 / (||Delta_bar||^2 + S eps) with S the number of participating clients:
its eps is S times the paper's. Here eps sits where the paper puts it. To reproduce the code's
value e, set eps = K e (K = clients_per_round): their README's CIFAR example (5 clients per
round, e = 1e-3) is eps = 0.005.

`eps` is the tuned setting. It stops eta_g from blowing up once ||Delta_bar|| is small (near a
stationary point, while clients still drift). eps much smaller than ||Delta_bar||^2 leaves the
raw ratio; eps much larger gives eta_g = 1, which is FedAvg. Here Delta is O(0.01-1) per
coordinate (local lr 0.01, E = 20 epochs) on models of 10^2-10^5 coordinates. Measured on
synthetic(1,1) (610 coordinates, K = 10), ||Delta_bar||^2 falls from 1 to 0.02 over 30 rounds;
eps = 10^-3 gives eta_g from 1.1 to 6, eps = 0.1 up to 1.9, and eps = 10 gives FedAvg's losses
exactly. The grid 10^-3 ... 10^1, one value per decade, includes
the paper's 1e-3 (CIFAR) and 0.1 (EMNIST), and reaches their code's K e for up to K = 100
clients per round. The default 0.1 is the paper's EMNIST value: fedsim's FEMNIST is the
closest dataset.

Options for the authors' code:
- `reported`: `paper` reports the model x^t. `authors` reports (x^t + x^{t-1}) / 2 from round 2 on,
  and x^1 after round 1, as their code evaluates. The devices still train from x^t, which the
  state keeps; it is the local problem's `center`.
- `eps_decay`: their code multiplies eps by 0.998^2 before every round, so round t = 0, 1, ... uses
  eps * eps_decay^(t+1). Set eps_decay = 0.996004 for theirs; the default 1 keeps eps fixed.
  Their code also multiplies the local lr by 0.998 each round. A method cannot do that: the local
  lr belongs to the run. Their local gradient clipping (norm 10) and weight decay (1e-4) are
  likewise the local solver's, and are not reproduced.
"""

from . import LocalProblem, Method, Option, RoundContext, weighted_average

REPORTED = ("paper", "authors")


def init(params, num_devices: int) -> dict:
    return {"model": params.clone()}  # x^t, the model sent: differs from ctx.params when `reported` is authors


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    return LocalProblem(mu=0.0, correction=None, center=state["model"])


def server_step(ctx: RoundContext, deltas):
    """(eta_g as a 0-dim tensor, Delta_bar) of a round's model changes Delta_k (solvers, *params.shape)."""
    weights = ctx.weights(ctx.solvers)
    mean = weighted_average(deltas, weights)
    spread = weighted_average(deltas.flatten(1).square().sum(1), weights)
    eps = ctx.options["eps"] * ctx.options["eps_decay"] ** (ctx.round + 1)
    return (spread / (2.0 * (mean.square().sum() + eps))).clamp(min=1.0), mean


def server_update(ctx: RoundContext, state: dict, local_models):
    sent = state["model"]
    eta, mean = server_step(ctx, local_models - sent)
    model = sent + eta * mean
    averaged = ctx.options["reported"] == "authors" and ctx.round > 0
    return (model + sent) / 2 if averaged else model, {"model": model}


METHOD = Method(
    name="fedexp", label="FedExP", family="server",
    local_problem=local_problem, server_update=server_update,
    init=init, down=1, up=1, tuned="eps",
    options={
        "eps": Option(0.1, "eps in eta_g's denominator ||Delta_bar||^2 + eps", above=0.0,
                      grid=(0.001, 0.01, 0.1, 1.0, 10.0)),
        "reported": Option("paper", "the model evaluated: x^t (paper) or (x^t + x^{t-1})/2 (authors' code)",
                           choices=REPORTED),
        "eps_decay": Option(1.0, "eps is multiplied by this before every round (authors' code: 0.998^2)",
                            above=0.0),
    },
)
