"""Exact-gradient FedDANE: a diagnostic, not a federated method.

FedDANE with g_t averaged over ALL devices' gradients (the exact grad f(w^{t-1})), the local
problems still solved by a sample of K devices: the very devices a sampling FedDANE of the same
run settings would pick (fedsim.core.train.round_devices), so the two differ only in g_t. What it
fixes of FedDANE is what the paper blames on the inexact gradient estimate at low
participation; what it leaves is due to heterogeneity.
"""

from . import LocalProblem, Method, RoundContext, feddane


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    return LocalProblem(mu=float(ctx.mu), correction=feddane.correction_term(ctx))


METHOD = Method(
    name="feddane_exact_gradient", label="FedDANE, exact gradient", family="dane",
    local_problem=local_problem, exchanges=2, gradients="all", mu="tuned", down=2,
)
