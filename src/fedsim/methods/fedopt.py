"""FedOpt (Reddi et al., ICLR 2021, Algorithm 2): FedAdagrad, FedYogi and FedAdam.

Devices run FedAvg's local SGD. The server treats the mean model change as a pseudo-gradient
and feeds it to an adaptive optimiser with state (m, v):

    Delta = sum_k a_k w_k - x,                     a_k the run's aggregation weights
    m <- beta1 m + (1 - beta1) Delta
    v <- v + Delta^2                               (adagrad)
    v <- v - (1 - beta2) Delta^2 sign(v - Delta^2) (yogi)
    v <- beta2 v + (1 - beta2) Delta^2             (adam)
    x <- x + server_lr m / (sqrt(v) + tau)

`optimizer` picks v's rule. The bare method `fedopt` is FedAdam (label "FedAdam"); the variants
`fedadagrad` and `fedyogi` set the optimizer. There is no separate `fedadam` variant: its options
would equal the method's defaults, and fedsim.methods.variant_of could not tell the two apart.

Options where the paper and the libraries differ:
- `v0`: Algorithm 2 starts from v_{-1} >= tau^2; `tau_squared` (default) takes its smallest
  value, for all three optimizers. `zero` is what the authors' TFF experiments
  (google-research/federated, optimization/docs/hyperparameters.md: adagrad and yogi
  `initial_accumulator_value=0.0`; Keras Adam starts at 0) and Flower use.
- `bias_correction`: Algorithm 2 has none (`none`, default). `kingma` scales the step by
  sqrt(1 - beta2^t) / (1 - beta1^t) in round t = 1, 2, ... (Kingma and Ba's step size; Keras Adam
  and the authors' Yogi optimiser, utils/optimizers/yogi.py, do this). For adagrad, whose v is a
  sum rather than a moving average, only the 1 / (1 - beta1^t) of m applies. `flower` is Flower's
  FedAdam since PR 4362: the same factor with t + 1 (its `server_round` starts at 1 and it adds 1),
  one round later than Kingma's. optax's Adam corrects m and v before adding its eps, which moves
  tau by sqrt(1 - beta2^t); that form is not offered.
- `tau`: 1e-3, the paper's recommendation (Flower's legacy strategies use 1e-9).
- `beta1` applies to all three, as in Algorithm 2. Keras's and Flower's Adagrad have no momentum:
  set beta1 = 0 for theirs. beta2 = 0.99 is Flower's default; the authors' TFF runs kept
  Keras's 0.999 (hyperparameters.md).

`server_lr` is the tuned setting. Adam's and Yogi's step is about server_lr per coordinate (m /
sqrt(v) is O(1)). Adagrad's starts at (1 - beta1) server_lr and shrinks as v accumulates, so it
needs larger values; the authors' best server rates (hyperparameters.md) range from 10^-2.5 to
10^0 for Adam and Yogi and from 10^-1.5 to 10^1 for Adagrad. Here the local rate is 0.01 with
E = 20 epochs on 30-700-sample devices, so Delta is O(0.01-1) per coordinate. The grid
10^-3 ... 10^1, one value per decade, brackets steps of that size for every optimizer.
"""

import math

from . import LocalProblem, Method, Option, RoundContext, Variant, weighted_average

OPTIMIZERS = ("adagrad", "yogi", "adam")


def init(params, num_devices: int) -> dict:
    return {"m": params.new_zeros(params.shape), "v": params.new_zeros(params.shape)}


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    return LocalProblem(mu=0.0, correction=None)


def step_scale(options: dict, t: int) -> float:
    """The factor on server_lr in round t = 1, 2, ...: 1, or the bias correction."""
    if options["bias_correction"] == "none":
        return 1.0
    t = t + 1 if options["bias_correction"] == "flower" else t
    scale = 1.0 / (1.0 - options["beta1"] ** t)
    if options["optimizer"] != "adagrad":
        scale *= math.sqrt(1.0 - options["beta2"] ** t)
    return scale


def server_update(ctx: RoundContext, state: dict, local_models):
    o, x = ctx.options, ctx.params
    delta = weighted_average(local_models, ctx.weights(ctx.solvers)) - x
    m = o["beta1"] * state["m"] + (1.0 - o["beta1"]) * delta
    v = state["v"]
    if ctx.round == 0 and o["v0"] == "tau_squared":
        v = v.new_full(v.shape, o["tau"] ** 2)
    square = delta.square()
    if o["optimizer"] == "adagrad":
        v = v + square
    elif o["optimizer"] == "yogi":
        v = v - (1.0 - o["beta2"]) * square * (v - square).sign()
    else:
        v = o["beta2"] * v + (1.0 - o["beta2"]) * square
    lr = o["server_lr"] * step_scale(o, ctx.round + 1)
    return x + lr * m / (v.sqrt() + o["tau"]), {"m": m, "v": v}


METHOD = Method(
    name="fedopt", label="FedAdam", family="server", local_problem=local_problem,
    server_update=server_update, init=init, down=1, up=1, tuned="server_lr",
    options={
        "optimizer": Option("adam", "the server optimiser (v's update)", choices=OPTIMIZERS),
        "server_lr": Option(0.01, "server learning rate eta", above=0.0, grid=(0.001, 0.01, 0.1, 1.0, 10.0)),
        "beta1": Option(0.9, "momentum of the pseudo-gradient m", at_least=0.0, below=1.0),
        "beta2": Option(0.99, "second-moment decay of yogi and adam", at_least=0.0, below=1.0),
        "tau": Option(1e-3, "adaptivity tau, added to sqrt(v)", above=0.0),
        "v0": Option("tau_squared", "initial v: Algorithm 2's tau^2, or zero (TFF experiments, Flower)",
                     choices=("tau_squared", "zero")),
        "bias_correction": Option("none", "none (Algorithm 2), kingma (step sqrt(1-beta2^t)/(1-beta1^t)), "
                                  "or flower (the same with t+1, Flower's FedAdam)",
                                  choices=("none", "kingma", "flower")),
    },
    variants={
        "fedadagrad": Variant("FedAdagrad", {"optimizer": "adagrad"}),
        "fedyogi": Variant("FedYogi", {"optimizer": "yogi"}),
    },
)
