"""Hand-made run records, as train.run writes them, without training: for the tables and figures."""

import math

import numpy as np
import pandas as pd

from fedsim.methods import REGISTRY
from fedsim.core.train import write_run

def fake_run(folder, method="feddane", mu=0.0, K=10, E=20, seed=0, losses=(3.0, 2.0, 1.0, 0.5),
             dataset="synthetic_0_0", alpha=0.0, iid=False, correction="exact", **settings):
    """Write a run record (metrics.csv + run.json) whose training loss follows `losses`
    (round 0 first); a non-finite loss ends the run there, as train.run does. `settings`: more
    of the record's config (a folder of their own)."""
    losses = list(losses)
    stop = next((t for t, v in enumerate(losses) if not math.isfinite(v)), None)
    kept = losses if stop is None else losses[: stop + 1]
    rounds = len(losses) - 1
    metrics = pd.DataFrame({
        "round": range(len(kept)),
        "communication_rounds": [t * REGISTRY[method].exchanges for t in range(len(kept))],
        "train_loss": kept,
        "train_acc": np.linspace(0.1, 0.9, len(kept)),
        "test_loss": kept,
        "test_acc": np.linspace(0.1, 0.8, len(kept)),
    })
    provenance = {"generator": "fedsim.synthetic", "iid": iid, "alpha": alpha, "beta": alpha}  # as synthetic.py records
    record = {
        "config": {"method": method, "mu": mu, "clients_per_round": K, "epochs": E, "seed": seed,
                   "rounds": rounds, "lr": 0.01, "batch_size": 10, "selection": "uniform",
                   "second_subset": "independent", "options": {"correction": correction} if method == "feddane" else {}, "rng": "fedsim",
                   "init": None, **settings},
        "dataset": {"name": dataset, "kind": "synthetic", "devices": 30, "provenance": provenance},
        "result": {"rounds_completed": len(kept) - 1, "final_train_loss": kept[-1],
                   "final_train_acc": 0.9, "final_test_acc": 0.8, "diverged_round": stop,
                   "wall_seconds": 1.0},
    }
    more = "".join(f"_{k}{v}" for k, v in settings.items())
    run_dir = folder / dataset / f"{method}_{correction}" / f"mu{mu:g}_K{K}_E{E}_seed{seed}{more}"
    write_run(metrics, record, run_dir / "metrics.csv", run_dir / "run.json")
    return str(run_dir / "run.json")
