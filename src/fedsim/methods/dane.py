"""DANE (Shamir, Srebro and Zhang, 2014): every device, every round.

First exchange: every device sends its full local gradient at x = w^{t-1}; the server averages
them (weights n_k / n) into g = grad f(x). Second exchange: every device k solves

    F_k(w) - <grad F_k(x) - eta g, w> + mu/2 ||w - x||^2,

that is the engine's local problem with the linear term eta g - grad F_k(x), and the server
takes the weighted mean of the models (the paper's eta_g = 1). mu is tuned over the mu grid,
as FedDANE's.

With eta = 1 this is FedDANE (feddane.py, the paper's Algorithm 2) with every device in both
subsets, and it runs on feddane's code: its correction term plus (eta - 1) g. A DANE run equals
a FedDANE run at K = N bit for bit (tests/test_dane.py). What DANE adds is the guarantee that
every device takes part (K < N is refused: Method.full_participation) and eta. S-DANE's code
(mlolab/S-DANE fedred.py, "DANE+") runs eta = 1 with mu = lambda and a local stopping rule,
which fedsim's fixed E epochs of SGD do not have.
"""

from . import LocalProblem, Method, Option, RoundContext, feddane, weighted_average


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    correction = feddane.correction_term(ctx)  # g - grad F_k(x), every device (eta = 1)
    eta = ctx.options["eta"]
    if eta != 1.0:  # eta g - grad F_k(x); the gradients are the ones feddane asked for (the run caches them)
        g = weighted_average(ctx.device_grads(ctx.gradient_devices), ctx.weights(ctx.gradient_devices))
        correction = correction + (eta - 1.0) * g
    return LocalProblem(mu=float(ctx.mu), correction=correction)


METHOD = Method(
    name="dane", label="DANE", family="dane",
    local_problem=local_problem, exchanges=2,
    gradients="all", mu="tuned", down=2, up=1,  # the model, then g down; the model up
    full_participation=True,
    options={"eta": Option(1.0, "weight of the global gradient in the linear term (1: FedDANE's)", above=0.0)},
)
