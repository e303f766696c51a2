"""FedProx (Li et al., 2018): F_k plus a proximal term mu/2 ||w - w^{t-1}||^2."""

from . import LocalProblem, RoundContext, average_models

COMMUNICATION_ROUNDS = 1


def local_problem(ctx: RoundContext, mu: float) -> LocalProblem:
    return LocalProblem(mu=float(mu), correction=None)


server_update = average_models
