"""Tables over many runs: the one-row-per-run summary and the choice of the tuned methods' mu.

A run's `method` here is what the workflow and the figures call it: a method or a variant
(feddane_authors), with the method's `options` beside it as JSON (fedsim.methods)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..methods import ENTRIES, LABELS, REGISTRY, options_of, resolve, setting_value, variant_of
from ..core.settings import TAIL_FRACTION, RunConfig, setting_columns
from ..core.records import COUNT_COLUMNS, read_run

# RunConfig's RESULT fields (fedsim.core.settings): a new one is a column here and a tuning-group key
SETTING_COLUMNS = setting_columns()
# what a record written before a setting existed ran with: the setting's default
DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig) if f.default is not dataclasses.MISSING}
# where the time went and what the run cost (empty for records written before these columns existed)
TIMING_COLUMNS = ["local_sgd_seconds", "evaluation_seconds"]
COST_COLUMNS = list(COUNT_COLUMNS)
RESULT_COLUMNS = ["final_train_loss", "final_train_acc", "final_test_acc", "diverged_round",
                  "rounds_completed", "wall_seconds", *TIMING_COLUMNS, *COST_COLUMNS]
# the curves oscillate: what a run reached is better read as a mean over its last rounds
TAIL_COLUMNS = ["tail_train_loss", "tail_test_acc"]


def group_columns(columns: list[str]) -> list[str]:
    """A curve's key: every setting but the one tuned over (mu) and the one averaged over (seed)."""
    return [c for c in columns if c not in ("mu", "seed")]


GROUP_COLUMNS = group_columns(SETTING_COLUMNS)
# A tuning group's key: a curve's, less the client lr, which is tuned jointly with the method's setting
# where an experiment gives an lr grid (one lr in the group otherwise: the choice is the setting's alone)
TUNE_COLUMNS = [c for c in GROUP_COLUMNS if c != "lr"]


def run_settings(record: dict, columns=SETTING_COLUMNS) -> dict:
    """A run's settings among `columns`; an unset one (no init file, every device evaluated) reads
    as "": a grouping key, never NaN (pandas' groupby drops NaN keys)."""
    settings = {c: record["config"].get(c, DEFAULTS.get(c)) for c in columns if c != "dataset"}
    settings = {c: "" if value is None else value for c, value in settings.items()}
    if "method" in settings:
        settings["method"] = variant_of(record["config"])
    if "options" in settings:
        settings["options"] = options_text(record["config"])
    return {"dataset": record["dataset"]["name"], **settings} if "dataset" in columns else settings


def options_text(config: dict) -> str:
    """A run's method options, all of them, as canonical JSON (one text per set of options)."""
    return json.dumps(resolve(config["method"], config.get("options") or {})[1], sort_keys=True)


def _run_row(info_path, fraction: float) -> dict:
    metrics, record = read_run(info_path)
    row = run_settings(record)
    newer = [*TIMING_COLUMNS, *COST_COLUMNS]
    row.update({c: record["result"][c] for c in RESULT_COLUMNS if c not in newer})
    row.update({c: record["result"].get(c) for c in newer})  # empty for a record from before them
    rounds = record["config"]["rounds"]
    row["tail_train_loss"] = tail_loss(metrics, rounds, fraction)
    row["tail_test_acc"] = tail_mean(metrics, rounds, fraction, "test_acc")
    row["run"] = str(info_path)
    return row


def provenance(record: dict) -> dict:
    prov = record["dataset"].get("provenance") or {}
    return json.loads(prov) if isinstance(prov, str) else prov


def generated(prov: dict) -> bool:
    """A synthetic dataset generated here, not imported: its provenance names alpha, beta and iid (a
    partition's names alpha alone)."""
    return {"alpha", "beta", "iid"} <= prov.keys()


def panel_order(record: dict) -> tuple:
    """The paper's order of datasets (figures' panels, findings' tables): synthetic sets by rising
    heterogeneity (IID first), then the rest."""
    prov = provenance(record)
    if generated(prov):
        return (0, not prov.get("iid"), prov.get("alpha", 0), prov.get("beta", 0), record["dataset"]["name"])
    return (1, False, 0, 0, record["dataset"]["name"])


def dataset_order(runs: pd.DataFrame) -> dict[str, int]:
    """Each dataset of summarise's `runs` -> its place in panel_order (one record read per dataset)."""
    keys = {row.dataset: panel_order(json.loads(Path(row.run).read_text()))  # run.json alone, not its metrics
            for row in runs.drop_duplicates("dataset").itertuples()}
    return {name: place for place, name in enumerate(sorted(keys, key=keys.get))}


def summarise(info_paths, fraction: float = TAIL_FRACTION) -> pd.DataFrame:
    """One row per run; diverged_round stays empty for runs that did not diverge; the tail columns
    average the last `fraction` of rounds (the tuning criterion's rule)."""
    rows = [_run_row(p, fraction) for p in info_paths]
    frame = pd.DataFrame(rows, columns=[*SETTING_COLUMNS, *RESULT_COLUMNS, *TAIL_COLUMNS, "run"])
    frame["diverged_round"] = frame["diverged_round"].astype("Int64")
    return frame.sort_values(["dataset", "method", "mu", "clients_per_round", "epochs", "seed"], kind="stable")


def tail_mean(metrics: pd.DataFrame, rounds: int, fraction: float, column: str) -> float:
    """Mean of `column` over the last `fraction` of the rounds (at least the last); NaN if the run
    stopped early (diverged)."""
    first = rounds - max(1, math.ceil(fraction * rounds)) + 1
    if not np.isfinite(metrics["train_loss"]).all() or metrics["round"].iloc[-1] < rounds:
        return math.nan
    return float(metrics.loc[metrics["round"] >= first, column].mean())


def tail_loss(metrics: pd.DataFrame, rounds: int, fraction: float) -> float:
    """Mean training loss over the last `fraction` of the rounds; inf if the run diverged."""
    value = tail_mean(metrics, rounds, fraction, "train_loss")
    return math.inf if math.isnan(value) else value


def tuned_view(config: dict) -> dict:
    """A run as the tuning and the findings see it: `setting` (mu or the option the method is tuned
    over), its `value`, and `options` without that option (the runs of one grid share them)."""
    name, options = resolve(config["method"], options_of(config))
    setting = REGISTRY[name].setting_name
    options = {k: v for k, v in options.items() if k != setting}
    return {"setting": setting, "value": setting_value(config), "options": json.dumps(options, sort_keys=True)}


def tuning_scores(runs, methods, fraction: float) -> pd.DataFrame:
    """One row per run of `methods` (names as fedsim.methods.variant_of gives them) among `runs`
    ((metrics, record) pairs): its variant, settings, the tuned setting's name and value, seed and tail
    loss (the criterion)."""
    methods, rows = [methods] if isinstance(methods, str) else list(methods), []
    for metrics, record in runs:
        config = record["config"]
        if variant_of(config) not in methods:
            continue
        rows.append({"variant": variant_of(config), **run_settings(record, GROUP_COLUMNS), **tuned_view(config),
                     "seed": config["seed"], "score": tail_loss(metrics, config["rounds"], fraction)})
    if not rows:
        raise ValueError(f"no runs of {', '.join(methods)} to tune")
    return pd.DataFrame(rows)


def tune(info_paths, methods, fraction: float) -> pd.DataFrame:
    """For each method of `methods` and each of its settings, the value of its tuned setting (mu, or
    an option such as FedDyn's alpha) and the client lr whose runs reach the lowest tail loss (mean over
    seeds). `candidates`, `lr_candidates` and `scores` list every (value, lr) pair tried, aligned; `lr`
    is the chosen one's."""
    runs = tuning_scores(map(read_run, info_paths), methods, fraction)
    scores = runs.groupby([*TUNE_COLUMNS, "setting", "value", "lr"], as_index=False)["score"].mean()
    criterion = f"lowest mean train_loss over the last {fraction:g} of rounds, mean over seeds; diverged = inf"
    table = []
    for key, group in scores.groupby([*TUNE_COLUMNS, "setting"], sort=False):
        group = group.sort_values(["value", "lr"])
        best = group.iloc[int(np.argmin(group["score"].to_numpy()))]  # ties: the smallest value, then lr
        table.append({**dict(zip([*TUNE_COLUMNS, "setting"], key)), "lr": best["lr"],
                      "candidates": ";".join(f"{m:g}" for m in group["value"]),
                      "lr_candidates": ";".join(f"{m:g}" for m in group["lr"]),
                      "scores": ";".join(f"{s:.6g}" for s in group["score"]),
                      "chosen": best["value"], "score": best["score"], "criterion": criterion})
    return pd.DataFrame(table, columns=[*GROUP_COLUMNS, "setting", "candidates", "lr_candidates", "scores", "chosen",
                                        "score", "criterion"])


FINDING_SETTING = [c for c in TUNE_COLUMNS if c not in ("method", "options")]  # what a panel holds fixed


def findings(info_paths, fraction: float = TAIL_FRACTION, across_k: bool = False,
             tuned: pd.DataFrame | None = None) -> pd.DataFrame:
    """What a figure shows, in numbers: per panel (setting) and curve (method at its tuned setting's
    value, under the figure's label), the tail means over the seeds with their min and max, the panel's
    ranking of the curves by tail loss (1 = lowest), whether every seed alone ranks the curve the same
    (an ordering that flips between seeds is noise, not a finding), and where a tuned value sits in the
    grid it was chosen from (`tuned`: chosen_settings.csv's rows). `info_paths`: a figure's runs, one value per
    method. `across_k`: one panel holds every K (methods that need every device beside sampling ones)."""
    runs = summarise(info_paths, fraction)
    views = pd.DataFrame([tuned_view(row) for row in runs[["method", "options", "mu"]].to_dict("records")],
                         index=runs.index)
    runs = runs.drop(columns="options").join(views)
    curve = [*GROUP_COLUMNS, "setting", "value"]
    panel = [c for c in FINDING_SETTING if not (across_k and c == "clients_per_round")]
    if runs.groupby([*FINDING_SETTING, "method", "options"])[["value", "lr"]].nunique().max().max() > 1:
        raise ValueError("findings: a method at several values of its setting or lr in one panel; give a figure's "
                         "runs (one each)")
    stats = runs.groupby(curve, sort=False).agg(
        seeds=("seed", "nunique"),
        **{f"{c}{s}": (c, f) for c in [*TAIL_COLUMNS, *COST_COLUMNS] for s, f in (("", "mean"), ("_min", "min"),
                                                                                  ("_max", "max"))
           if c in TAIL_COLUMNS or s == ""},
        diverged_seeds=("diverged_round", "count")).reset_index()
    stats["rank"] = panel_ranks(stats, panel)
    per_seed = runs.assign(rank=panel_ranks(runs, [*panel, "seed"]))
    stable = per_seed.groupby(curve, sort=False)["rank"].nunique().eq(1).rename("rank_every_seed").reset_index()
    stats = stats.merge(stable, on=curve)
    stats["label"] = stats["method"].map(LABELS)
    stats["grid_edge"] = [grid_edge(tuned, row) if _setting_tuned(row["method"]) else "" for row in
                          stats.to_dict("records")]
    stats["lr_edge"] = [grid_edge(tuned, row, "lr") for row in stats.to_dict("records")]
    stats["tuned"] = [tuned_text(row) for row in stats.to_dict("records")]
    columns = ["dataset", "clients_per_round", "epochs", "rounds", "method", "label", "setting", "value", "lr",
               "tuned", "grid_edge", "lr_edge", "seeds", *stats.columns[len(curve) + 1:-4]]
    order = dataset_order(runs)
    return stats[columns].assign(across_k=across_k).sort_values(
        ["dataset", *([] if across_k else ["clients_per_round"]), "epochs", "rank"], kind="stable",
        key=lambda column: column.map(order) if column.name == "dataset" else column)


def panel_ranks(frame: pd.DataFrame, panel: list[str]) -> pd.Series:
    """Each row's rank within its panel by tail_train_loss (1 = lowest, ties share the lower rank). A tail
    that is not finite (a diverged run: inf; NaN, no tail at all) ranks after every finite one, never
    ahead (pandas would leave NaN unranked)."""
    tails = frame["tail_train_loss"].astype(float).fillna(math.inf)
    return tails.groupby([frame[c] for c in panel]).rank(method="min").astype(int)


def _setting_tuned(variant: str) -> bool:
    """Whether a method's setting is tuned (FedAvg's is not, though an lr grid tunes its lr)."""
    method = ENTRIES[variant].method
    return bool(method.tuned) or method.mu == "tuned"


def tuned_text(curve: dict) -> str:
    """What a findings curve runs at, as the docs' tables name it: its setting's value where it has one
    (`mu 0.01`, `eps 0.1`; `mu 1 (fixed)` where the method's mu is the dataset's, never tuned: FedProx's)
    and its client lr where that was tuned (`lr 0.03`); '-' for neither."""
    method = ENTRIES[curve["method"]].method
    fixed = " (fixed)" if method.mu == "fixed" and not method.tuned else ""
    shown = [] if method.mu == "none" and not method.tuned else [f"{curve['setting'].replace('_', ' ')} {curve['value']:g}{fixed}"]
    if curve["lr_edge"]:
        shown.append(f"lr {curve['lr']:g}")
    return ", ".join(shown) or "-"


def grid_edge(tuned: pd.DataFrame | None, curve: dict, of: str = "value") -> str:
    """Where a findings curve's value (`of`: "value", its setting's; "lr", its client lr) sits in the grid it
    was tuned over: `lowest` or `highest` (an edge: the best value may lie beyond it), `inside`, `only`
    (a grid of one setting value), or "" where it was not tuned (a fixed value; an lr no grid varied). The
    grid is chosen_settings.csv's row of the curve's setting; without one (values taken from another experiment's
    tuning, `mu_from`), the rows of its dataset, method and setting that chose these values, where they agree."""
    if tuned is None or not len(tuned):
        return ""
    mine = tuned[(tuned["dataset"] == curve["dataset"]) & (tuned["method"] == curve["method"])
                 & (tuned["setting"] == curve["setting"]) & np.isclose(tuned["chosen"].astype(float), curve["value"])
                 & np.isclose(tuned["lr"].astype(float), curve["lr"])]
    here = mine[(mine["clients_per_round"] == curve["clients_per_round"]) & (mine["epochs"] == curve["epochs"])
                & (mine["rounds"] == curve["rounds"])]
    column = "candidates" if of == "value" else "lr_candidates"
    edges = {_edge(curve[of], row[column], of == "lr") for row in (here if len(here) else mine).to_dict("records")}
    return edges.pop() if len(edges) == 1 else ""


def _edge(value: float, candidates: str, blank_if_one: bool = False) -> str:
    grid = sorted({float(v) for v in str(candidates).split(";")})
    if len(grid) == 1:
        return "" if blank_if_one else "only"
    return "lowest" if np.isclose(value, grid[0]) else "highest" if np.isclose(value, grid[-1]) else "inside"
