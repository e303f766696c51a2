"""FedProx (Li et al., 2018): F_k plus a proximal term mu/2 ||w - w^{t-1}||^2, mu fixed per
dataset (the FedProx paper's).

It has no default mu: the paper chose one per dataset (the workflow's `fedprox_mu`), and mu = 0 is
FedAvg. So `fedsim train --method fedprox` without `--mu` is refused in one line (fedsim.cli.NEEDS_MU:
every method whose mu is `fixed`), as Flower's flwr.server.strategy.FedProx requires its proximal_mu."""

from . import LocalProblem, Method, RoundContext


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    return LocalProblem(mu=float(ctx.mu), correction=None)


METHOD = Method(name="fedprox", label="FedProx", family="averaging",
                local_problem=local_problem, mu="fixed")
