"""FedProx (Li et al., 2018): F_k plus a proximal term mu/2 ||w - w^{t-1}||^2, mu fixed per
dataset (the FedProx paper's)."""

from . import LocalProblem, Method, RoundContext


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    return LocalProblem(mu=float(ctx.mu), correction=None)


METHOD = Method(name="fedprox", label="FedProx", color="tab:green", dashes=(4, 1.5), family="averaging",
                local_problem=local_problem, mu="fixed",
                order=20)
