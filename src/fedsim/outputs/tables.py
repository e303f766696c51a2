"""A figure's findings (fedsim.outputs.summary.findings) as the Markdown tables the docs show.

One table per panel of the figure (a dataset, at its K, E and rounds; every K where the findings
ranked them in one panel, `across_k`), its curves by rank: each
method at its tuned values, its tail loss and test accuracy (mean over seeds, their range, `*` where
the seeds rank it differently), where a tuned value sits at its grid's edge, and what a run cost (the
vectors sent down and up, the per-sample gradients computed). A line above the tables names the
findings file, the commit and the config they came from, so that rerunning that config at that
commit and this command gives the same text.
"""

from __future__ import annotations

import math
import subprocess

import pandas as pd

PANEL = ["dataset", "clients_per_round", "epochs", "rounds"]  # a successors panel holds every K (across_k)
COLUMNS = ["rank", "method", "tuned", "tail loss (seeds' range)", "tail test acc (range)", "at a grid edge",
           "vectors / run", "gradients / run"]


def read_findings(path) -> pd.DataFrame:
    """A findings CSV as written: an empty text cell (no grid edge) reads as ''."""
    frame = pd.read_csv(path)
    text = ["label", "tuned", "grid_edge", "lr_edge"]
    return frame.assign(**{c: frame[c].fillna("") for c in text if c in frame})


def render(findings: pd.DataFrame, source: str, commit: str, config: str) -> str:
    """The tables of one findings file (`source`: its path as the docs cite it)."""
    lines = [f"Rendered by `python -m fedsim tables` from `{source}` (commit {commit}; config: {config}).", ""]
    # (findings written before `across_k` were rendered a table per dataset whatever their panels)
    across_k = bool(findings["across_k"].any()) if "across_k" in findings else True
    columns = [c for c in PANEL if not (across_k and c == "clients_per_round")]
    for key, panel in findings.groupby(columns, sort=False):
        lines += [panel_heading(dict(zip(columns, key)), panel), "", *table(panel), ""]
    if any(loss_cell(curve).endswith(" *") for curve in findings.to_dict("records")):
        lines += [SEEDS_NOTE, ""]
    return "\n".join(lines)


SEEDS_NOTE = "`*`: the seeds alone rank this curve differently (its place is seed noise)."


def panel_heading(key: dict, panel: pd.DataFrame) -> str:
    seeds = int(panel["seeds"].max())
    return (f"**{key['dataset']}** (K = {main_k(panel)}, E = {key['epochs']}, {key['rounds']} rounds, "
            f"{seeds} seed{'s' if seeds > 1 else ''}):")


def main_k(panel: pd.DataFrame) -> int:
    """The panel's K: the one most of its curves sample (a full-participation method runs every device)."""
    return int(panel["clients_per_round"].mode().min())


def table(panel: pd.DataFrame) -> list[str]:
    unit, scale = gradient_unit(panel)
    rows = ["| " + " | ".join(COLUMNS[:-1] + [f"gradients / run ({unit})"]) + " |", "|" + "---|" * len(COLUMNS)]
    k = main_k(panel)
    for curve in panel.sort_values(["rank", "label"], kind="stable").to_dict("records"):
        method = curve["label"] + (f" (K = {curve['clients_per_round']})" if curve["clients_per_round"] != k else "")
        vectors, gradients = curve["vectors_down"] + curve["vectors_up"], curve["gradient_evaluations"] / scale
        cells = [str(curve["rank"]), method, curve["tuned"], loss_cell(curve), accuracy_cell(curve), edges(curve),
                 _count(vectors, 0), _count(gradients, 0 if unit == "k" else 2)]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _count(value: float, decimals: int) -> str:
    """A count with thousands separators; '-' for a record from before the costs were counted."""
    return "-" if math.isnan(value) else f"{value:,.{decimals}f}"


def gradient_unit(panel: pd.DataFrame) -> tuple[str, float]:
    """Thousands, or millions where some run computes a million gradients or more."""
    return ("M", 1e6) if panel["gradient_evaluations"].max() >= 1e6 else ("k", 1e3)


def diverged(curve: dict) -> bool:
    return int(curve["diverged_seeds"]) > 0 or not math.isfinite(curve["tail_train_loss"])


def loss_cell(curve: dict) -> str:
    if diverged(curve):
        return f"diverged ({int(curve['diverged_seeds'])} of {int(curve['seeds'])} seed{'s' if curve['seeds'] > 1 else ''})"
    text = _with_range(curve, "tail_train_loss")
    return text + (" *" if curve["seeds"] > 1 and not curve["rank_every_seed"] else "")


def accuracy_cell(curve: dict) -> str:
    return "-" if diverged(curve) else _with_range(curve, "tail_test_acc")


def _with_range(curve: dict, column: str) -> str:
    mean, low, high = (curve[column + s] for s in ("", "_min", "_max"))
    if curve["seeds"] == 1:
        return f"{mean:.3f}"
    return f"{mean:.3f} ({low:.3f})" if f"{low:.3f}" == f"{high:.3f}" else f"{mean:.3f} ({low:.3f}-{high:.3f})"


EDGE_WORDS = {"lowest": "lowest", "highest": "highest", "only": "only (one-value grid)"}


def edges(curve: dict) -> str:
    """Where a tuned value sits at its grid's edge, as findings' grid_edge and lr_edge say: `lowest`,
    `highest` or `only` (a grid of one value, both edges): the best value may lie beyond it."""
    named = {"value": curve["setting"].replace("_", " "), "lr": "lr"}
    shown = [f"{named[of]} {EDGE_WORDS[curve[column]]}" for of, column in (("value", "grid_edge"), ("lr", "lr_edge"))
             if curve[column] in EDGE_WORDS]
    return ", ".join(shown) or "-"


def checkout_commit(folder=".") -> str:
    """The commit of the checkout at `folder` (short), marked where its tracked files differ from it;
    'unknown' outside a git checkout."""
    def git(*args):
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=60)

    head = git("rev-parse", "--short", "HEAD")
    if head.returncode != 0:
        return "unknown (not a git checkout)"
    changed = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    return head.stdout.strip() + (" with local changes" if changed else "")
