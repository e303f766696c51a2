"""FedNova (Wang et al., NeurIPS 2020): normalised averaging.

The devices run FedAvg's local SGD (tau_k = E ceil(n_k / B) steps each); the server divides
each model change by the l1 norm of the device's local weights a_k before averaging, and moves
by tau_eff:

    x <- x - tau_eff sum_k p_k (x - x_k) / a_k,        tau_eff = sum_k p_k a_k,

p_k the run's aggregation weights. The local learning rate of the paper's normalised update
and of its server step cancels (NIID-Bench#10); x - x_k is the sum of every local update, so no
a_k weighting is missing from it (JYWa/FedNova#1). With equal a_k the rule is FedAvg's.

a_k per local optimiser: plain SGD a_k = tau_k; SGD on the proximal problem (mu > 0) weighs
its j-th gradient by (1 - lr mu)^(tau_k - 1 - j), so a_k = [1 - (1 - lr mu)^tau_k] / (lr mu).

Where the paper and the authors' code (distoptim/FedNova.py, `average`) differ, the option
`tau_eff` chooses: `paper` as above, `authors` tau_eff = sum_k p_k tau_k, which their code uses
whenever mu != 0. At mu = 0 both are the same.

mu: the method's mu is "none", plain FedNova, the paper's main method; the run's mu is then 0
and the proximal normaliser and `tau_eff` have no effect. The code reads the run's mu, so a
proximal FedNova is a method entry with mu "fixed" (FedProx's mu) reusing these functions; a
Variant fixes options, not mu. FedNova has no setting of its own to tune: its normaliser
follows from the local work, which the run sets.

Left out: the normaliser of local momentum (the engine's local step has no momentum) and the
authors' server momentum `gmf` (0 in the paper's main results; a server optimiser on top of
any method, not FedNova's own).
"""

from . import LocalProblem, Method, Option, RoundContext, weighted_average

CHOICES = ("paper", "authors")


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    return LocalProblem(mu=float(ctx.mu), correction=None)


def normaliser(steps, lr: float, mu: float):
    """||a_k||_1 of tau_k = `steps` local steps of SGD, proximal with mu (numpy, float64)."""
    steps = steps.astype(float)
    if lr * mu == 0:
        return steps
    return (1 - (1 - lr * mu) ** steps) / (lr * mu)


def server_update(ctx: RoundContext, state: dict, local_models):
    x, steps = ctx.params, ctx.local_steps(ctx.solvers)
    p = ctx.weights(ctx.solvers).to(local_models.dtype)
    a = p.new_tensor(normaliser(steps, ctx.lr, float(ctx.mu)))
    # sum_k p_k a_k (or p_k tau_k) is an average over the devices: the server's, in fedsim's order
    tau_eff = weighted_average(a if ctx.options["tau_eff"] == "paper" else p.new_tensor(steps), p)
    return x - tau_eff * weighted_average(x - local_models, p / a), state


METHOD = Method(
    name="fednova", label="FedNova", family="averaging",
    local_problem=local_problem, server_update=server_update,
    down=1, up=1,  # the model down; the model (and the scalar tau_k) up
    options={"tau_eff": Option("paper", "tau_eff with mu > 0: sum p_k a_k (paper) or sum p_k tau_k (authors)",
                               choices=CHOICES)},
)
