"""FedDANE (Li et al., 2019), the paper's Algorithm 2.

First exchange: the devices S_t send their full local gradients at w^{t-1}; the server
averages them into g_t. Second exchange: the devices S'_t solve

    F_k(w) + <g_t - grad F_k(w^{t-1}), w - w^{t-1}> + mu/2 ||w - w^{t-1}||^2

and the server averages their models. Whether S'_t is drawn independently of S_t (the
paper) or equals it (the reference code) is the run's `second_subset` setting, decided
by whoever builds the RoundContext.

The option `correction` says how the linear term is computed:
- `exact`: g_t - grad F_k(w^{t-1}), as above (the paper);
- `authors`: what the authors' code computes (flearn/optimizer/pggd.py, `set_params`):
  `_, gprev = client.get_grads()` keeps the SECOND of the model's gradient tensors (for MCLR,
  the bias gradient), and `zip(g_t, gprev)` pairs the i-th tensor of g_t with gprev[i], a
  scalar. For MCLR the term is [g_t kernel - gprev[0], g_t bias - gprev[1]]. Every FedDANE
  curve the paper shows for synthetic data and FEMNIST ran with it. For the LSTM models
  their code never got this far (see README, "What the paper's results rest on"), so it is
  defined for MCLR only.
"""

import numpy as np

from . import LocalProblem, Method, Option, RoundContext, Variant, weighted_average

CORRECTIONS = ("exact", "authors")


def local_problem(ctx: RoundContext, state: dict) -> LocalProblem:
    return LocalProblem(mu=float(ctx.mu), correction=correction_term(ctx, ctx.options["correction"]))


def correction_term(ctx: RoundContext, correction: str = "exact"):
    """g_t - grad F_k(w^{t-1}) for each solver k (or the authors' version of it)."""
    grads = ctx.device_grads(ctx.gradient_devices)
    g_t = weighted_average(grads, ctx.weights(ctx.gradient_devices))
    if np.array_equal(ctx.solvers, ctx.gradient_devices):
        own = grads  # S'_t = S_t: the solvers' gradients are already here
    else:
        own = ctx.device_grads(ctx.solvers)
    if correction == "authors":  # else "exact" (the option's domain: CORRECTIONS)
        own = authors_subtrahend(ctx.model, own)
    return g_t.unsqueeze(0) - own


def authors_subtrahend(model, own):
    """What the authors' code subtracts from g_t in place of each device's gradient: tensor i
    of the model gets the scalar gprev[i], gprev being the device's second gradient tensor."""
    if not model.linear_softmax:
        raise ValueError("the authors' correction (feddane_authors) is defined for the MCLR models only "
                         "(the authors' FedDANE never ran on the LSTM models)")
    out = own.new_empty(own.shape)
    gprev = model.tensors(own)[1]  # (devices, classes): each device's bias gradient
    views = model.tensors(out)
    if gprev.shape[-1] < len(views):  # zip() would stop early and leave a tensor's term stale
        raise ValueError(f"the authors' correction (feddane_authors) needs >= {len(views)} classes")
    for i, view in enumerate(views):
        scalar = gprev[:, i].reshape(-1, *([1] * (view.dim() - 1)))
        view.copy_(scalar.expand_as(view))
    return out


METHOD = Method(
    name="feddane", label="FedDANE", family="dane",
    local_problem=local_problem, exchanges=2,
    gradients="sampled", mu="tuned", down=2,  # the model, then g_t
    options={"correction": Option("exact", "the linear term: the paper's (exact) or the authors' code's",
                                  choices=CORRECTIONS)},
    variants={"feddane_authors": Variant("FedDANE, authors' correction", {"correction": "authors"}, mclr_only=True)},
)
