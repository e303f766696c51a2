"""FedAvg (McMahan et al., 2017): each device runs SGD on its own loss F_k."""

from . import LocalProblem, Method, RoundContext


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    return LocalProblem(mu=0.0, correction=None)


METHOD = Method(name="fedavg", label="FedAvg", family="averaging", local_problem=local_problem)
