"""FedAvg (McMahan et al., 2017): each device runs SGD on its own loss F_k."""

from . import LocalProblem, RoundContext, average_models

COMMUNICATION_ROUNDS = 1


def local_problem(ctx: RoundContext, mu: float) -> LocalProblem:
    if mu != 0:
        raise ValueError(f"fedavg has no proximal term (got mu={mu}); use fedprox for mu > 0")
    return LocalProblem(mu=0.0, correction=None)


server_update = average_models
