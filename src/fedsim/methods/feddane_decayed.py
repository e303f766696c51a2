"""Decayed FedDANE: FedDANE whose correction term fades, so that a run starts as FedDANE and
ends as FedProx (the paper's suggestion for its gradient-correction's harm late in training).

Round t (counted from 0) solves FedDANE's subproblem with the correction scaled by

    s_t = 1 / (1 + t / tau),

a harmonic decay: s_0 = 1, s_tau = 1/2, and s_t -> 0. `tau` (rounds) is the setting. It still
spends two exchanges per round: the devices' gradients are asked for whatever s_t is.
"""

from . import LocalProblem, Method, Option, RoundContext, feddane


def decay(round_: int, tau: float) -> float:
    return 1.0 / (1.0 + round_ / tau)


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    correction = feddane.correction_term(ctx) * decay(ctx.round, ctx.options["tau"])
    return LocalProblem(mu=float(ctx.mu), correction=correction)


METHOD = Method(
    name="feddane_decayed", label="FedDANE, decayed", family="dane",
    local_problem=local_problem,
    exchanges=2, gradients="sampled", mu="tuned", down=2,
    options={"tau": Option(20.0, "rounds until the correction term is halved (s_t = 1/(1 + t/tau))",
                           above=0.0)},
)
