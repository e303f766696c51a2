"""The paper's figures, drawn from run records.

Each curve is the mean over the seeds of a setting, with a min-max band when there are
several; a run that diverged ends in a cross at the round where its loss left the reals.
"""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .atomic import atomic_path  # noqa: E402
from .train import read_run  # noqa: E402

LABELS = {"fedavg": "FedAvg", "fedprox": "FedProx", "feddane": "FedDANE"}
COLORS = {"fedavg": "tab:blue", "fedprox": "tab:green", "feddane": "tab:red"}


def _provenance(record: dict) -> dict:
    prov = record["dataset"].get("provenance") or {}
    return json.loads(prov) if isinstance(prov, str) else prov


def dataset_title(record: dict) -> str:
    prov = _provenance(record)
    if record["dataset"].get("kind") == "synthetic" and prov:
        return "Synthetic IID" if prov.get("iid") else f"Synthetic ({prov['alpha']:g},{prov['beta']:g})"
    return record["dataset"]["name"]


def panel_order(record: dict) -> tuple:
    """The paper's order: synthetic sets by rising heterogeneity (IID first), then the rest."""
    prov = _provenance(record)
    if record["dataset"].get("kind") == "synthetic" and prov:
        return (0, not prov.get("iid"), prov.get("alpha", 0), prov.get("beta", 0), record["dataset"]["name"])
    return (1, False, 0, 0, record["dataset"]["name"])


def load_runs(info_paths) -> list[tuple[pd.DataFrame, dict]]:
    return [read_run(p) for p in info_paths]


def _curve(ax, runs, column: str, label: str, color: str) -> None:
    """Mean over seeds with a min-max band; the rounds where every seed still ran."""
    frames = [m.set_index("round")[column] for m, _ in runs]
    table = pd.concat(frames, axis=1)
    mean = table.mean(axis=1, skipna=False)
    ax.plot(mean.index, mean.to_numpy(), color=color, label=label, lw=1.4)
    if len(frames) > 1:
        ax.fill_between(table.index, table.min(axis=1), table.max(axis=1), color=color, alpha=0.2, lw=0)
    for metrics, record in runs:
        if record["result"]["diverged_round"] is not None:
            finite = metrics[np.isfinite(metrics[column])]
            if len(finite):
                ax.plot(finite["round"].iloc[-1], finite[column].iloc[-1], "x", color=color, ms=8)


def figure1(info_paths, tuned: pd.DataFrame, out, column: str = "train_loss") -> None:
    """Training loss vs rounds of FedAvg, FedProx and FedDANE (tuned mu), one panel per dataset."""
    runs = load_runs(info_paths)
    first = {r["dataset"]["name"]: r for _, r in reversed(runs)}
    datasets = sorted(first, key=lambda name: panel_order(first[name]))
    fig, axes = plt.subplots(1, len(datasets), figsize=(3.6 * len(datasets), 3.2), squeeze=False)
    for ax, name in zip(axes[0], datasets):
        mine = [(m, r) for m, r in runs if r["dataset"]["name"] == name]
        chosen = tuned.loc[tuned["dataset"] == name, "chosen_mu"]
        for method in ("fedavg", "fedprox", "feddane"):
            selected = [(m, r) for m, r in mine if r["config"]["method"] == method]
            if method == "feddane" and len(chosen):
                selected = [(m, r) for m, r in selected if r["config"]["mu"] == float(chosen.iloc[0])]
            if not selected:
                continue
            mu = selected[0][1]["config"]["mu"]
            label = LABELS[method] + ("" if method == "fedavg" else f" (μ={mu:g})")
            _curve(ax, selected, column, label, COLORS[method])
        ax.set_title(dataset_title(mine[0][1]))
        ax.set_xlabel("# rounds")
        _clip_to_baselines(ax, mine, column)
        ax.legend(fontsize=8, frameon=False)
    axes[0][0].set_ylabel(column.replace("_", " "))
    save(fig, out)


def _clip_to_baselines(ax, runs, column: str) -> None:
    """Keep a diverging curve from flattening the others: cap the y-axis near the start."""
    start = [m[column].iloc[0] for m, _ in runs if np.isfinite(m[column].iloc[0])]
    if start and column.endswith("loss"):
        ax.set_ylim(0, 1.15 * max(start))


def save(fig, out) -> None:
    """Write `out` (.pdf) and the .png beside it, each atomically."""
    out = str(out)
    stem = out[: -len(".pdf")] if out.endswith(".pdf") else out
    fig.tight_layout()
    for ext in ("pdf", "png"):
        with atomic_path(f"{stem}.{ext}") as tmp:
            fig.savefig(tmp, format=ext, dpi=150)
    plt.close(fig)
