"""MimeLite (Karimireddy et al., 2020) with SGD with momentum as the base optimiser, as FedJAX's
`mime_lite` with `optimizers.sgd(lr, momentum=beta)` (optax's trace: m' = beta m + g, step lr m').

The server sends the model x and its momentum m. Each device k applies the base optimiser with
the momentum frozen at m; the trace makes that step

    y <- y - lr (g_k(y; batch) + beta m),

which is plain SGD on the local problem F_k(w) + <c_k, w - x> with c_k = beta m, the same for
every device. That is how MimeLite's local step is SGD on fedsim's local problem: the run's E
epochs of mini-batch SGD at the run's lr, with correction beta m. After training, each device also
sends grad F_k(x), its full local gradient at the model it received. With the run's aggregation
weights a_k, the server updates (FedJAX `mime_lite.py`, `server_update`)

    x <- x - server_lr sum_k a_k (x - y_k)
    m <- beta m + sum_k a_k grad F_k(x).

FedJAX weighs both sums by the devices' sample counts; a_k are those under uniform selection. The
momentum takes the mean full gradient at x, never the model change. The paper's update is
server_lr = 1, the plain average of the y_k; that value gives FedAvg's average exactly. With
beta = 0 a round is FedAvg's. With one full-batch local step on every device, a round is SGD with
momentum on f at step lr * server_lr.

Momentum written as a damped average, m' = (1 - beta) g + beta m, run at local lr eta, equals
this form at local lr (1 - beta) eta (m is then (1 - beta) times the trace, step for step). A
method cannot rescale the run's local lr, so only FedJAX's form is offered: for the damped one,
scale the run's lr.

`server_lr` is the tuned setting. It scales the mean model change: 1 is the paper's average (the
default), below 1 damps the round. The frozen momentum enters every one of the E ceil(n_k / B)
local steps (60 to 1400 on 30-700-sample devices with B = 10) at up to 1/(1 - beta) = 10 times a
gradient's size, and does not fade as the local model moves, so a round moves far more than
FedAvg's. Measured on
synthetic(1,1) (lr 0.01, E = 20, K = 10, beta 0.9), the training loss after 100 rounds is 1.4
for server_lr 0.01, 0.6 for 0.003 and 0.001, 1.2 for 0.0003 (FedAvg: 0.9); server_lr 1 reaches
175 after 30 rounds, 0.1 reaches 31. The grid takes half-decades from 0.001 to 0.1, around that
optimum, and the paper's 1.
"""

from . import LocalProblem, Method, Option, RoundContext, weighted_average


def init(params, num_devices: int) -> dict:
    return {"momentum": params.new_zeros(params.shape)}


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    beta = ctx.options["beta"]
    if beta == 0.0:
        return LocalProblem(mu=0.0, correction=None)
    m = state["momentum"]
    return LocalProblem(mu=0.0, correction=(beta * m).unsqueeze(0).expand(len(ctx.solvers), *m.shape))


def server_update(ctx: RoundContext, state: dict, local_models):
    x, weights, lr = ctx.params, ctx.weights(ctx.solvers), ctx.options["server_lr"]
    average = weighted_average(local_models, weights)
    params = average if lr == 1.0 else x + lr * (average - x)
    gradient = weighted_average(ctx.device_grads(ctx.solvers), weights)
    return params, {"momentum": ctx.options["beta"] * state["momentum"] + gradient}


METHOD = Method(
    name="mimelite", label="MimeLite", family="drift",
    local_problem=local_problem, server_update=server_update,
    init=init, down=2, up=2, tuned="server_lr",  # (x, m) down; (y_k, grad F_k(x)) up
    options={
        "beta": Option(0.9, "momentum of the base optimiser (optax's trace)", at_least=0.0, below=1.0),
        "server_lr": Option(1.0, "server learning rate: x <- x - server_lr mean(x - y_k)", above=0.0,
                            grid=(0.001, 0.003, 0.01, 0.03, 0.1, 1.0)),
    },
)
