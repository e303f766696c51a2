"""The paper's figures, drawn from run records.

Each curve is the mean over the seeds of a setting, with a min-max band when there are
several; a run that diverged ends in a cross at the round where its loss left the reals.
A curve that leaves the plotted range (a diverging FedDANE) runs along the top edge from a
triangle on, and its legend entry says how high it went and where it ended, instead of squashing
the other curves or vanishing. Each method has its own dash pattern, so curves that coincide stay
two. A panel's legend sits below it, never over a curve: heterogeneous panels have no empty
corner (FedDANE oscillates across the whole range).
"""

from __future__ import annotations

import json
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import transforms  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .atomic import atomic_path  # noqa: E402
from .methods import COLORS, ENTRIES, LABELS, setting_value, variant_of  # noqa: E402
from .summary import tuning_scores  # noqa: E402
from .records import read_run  # noqa: E402

METRICS = {"train_loss": "training loss", "test_acc": "test accuracy"}
X_AXES = {"rounds": ("round", "# rounds"),
          "communication_rounds": ("communication_rounds", "# communication rounds"),
          "vectors": ("vectors", "model-sized vectors sent (down + up, all devices)"),
          "gradient_evaluations": ("gradient_evaluations", "per-sample gradients computed (all devices)")}
BASELINES = ("fedavg", "fedprox")  # the curves that set a loss panel's range
# Each method's and variant's dash pattern as its file declares it, on top of its colour: curves that
# coincide (FedProx at mu = 1 over FedAvg on Figure 3's sets) stay visible as two patterns.
LINESTYLES = {name: (0, e.dashes) if e.dashes else "-" for name, e in ENTRIES.items()}
MIN_WIDTH = 5.5  # inches: a one-panel figure still holds its title and legend
LEGEND_DROP_PT = 30  # a panel's legend starts this far below its axes: under tick labels and x label
TUNED = tuple(name for name, e in ENTRIES.items() if e.method.tuned_setting)
SYMBOLS = {"mu": "μ", "alpha": "α", "lambda": "λ", "server_lr": "η_s", "eps": "ε", "p": "p"}  # a setting's name in legends


def _provenance(record: dict) -> dict:
    prov = record["dataset"].get("provenance") or {}
    return json.loads(prov) if isinstance(prov, str) else prov


def dataset_title(record: dict) -> str:
    prov = _provenance(record)
    if record["dataset"].get("kind") == "synthetic" and "alpha" in prov:  # generated here, not imported
        return "Synthetic IID" if prov.get("iid") else f"Synthetic ({prov['alpha']:g},{prov['beta']:g})"
    return record["dataset"]["name"]


def panel_order(record: dict) -> tuple:
    """The paper's order: synthetic sets by rising heterogeneity (IID first), then the rest."""
    prov = _provenance(record)
    if record["dataset"].get("kind") == "synthetic" and "alpha" in prov:
        return (0, not prov.get("iid"), prov.get("alpha", 0), prov.get("beta", 0), record["dataset"]["name"])
    return (1, False, 0, 0, record["dataset"]["name"])


def load_runs(info_paths) -> list[tuple[pd.DataFrame, dict]]:
    runs = [read_run(p) for p in info_paths]
    for metrics, _ in runs:
        if "vectors_up" in metrics:  # absent from records written before the costs were counted
            metrics["vectors"] = metrics["vectors_down"] + metrics["vectors_up"]
    return runs


def setting(record: dict) -> tuple:
    """What a panel shows: (dataset, K, E, rounds); methods, mu and seeds vary inside it."""
    c = record["config"]
    return (record["dataset"]["name"], c["clients_per_round"], c["epochs"], c["rounds"])


def _curve(ax, runs, column: str, label: str, color: str, x: str = "round", linestyle: str = "-",
           log_x: bool = False):
    """Mean over seeds with a min-max band, per round, where every seed still ran, at the seeds' mean
    of `x` (a cost differs between seeds: their devices differ); on a log x axis from the first
    round that cost something. Returns the mean's line."""
    frames = [m.set_index("round")[column] for m, _ in runs]
    table = pd.concat(frames, axis=1)
    xs = table.index.to_numpy() if x == "round" else \
        pd.concat([m.set_index("round")[x] for m, _ in runs], axis=1).mean(axis=1).to_numpy()
    if log_x:
        table, xs = table[xs > 0], xs[xs > 0]
    mean = table.mean(axis=1, skipna=False)
    (line,) = ax.plot(xs, mean.to_numpy(), color=color, label=label, lw=1.4, ls=linestyle)
    if len(frames) > 1:
        ax.fill_between(xs, table.min(axis=1), table.max(axis=1), color=color, alpha=0.25, lw=0)
    for metrics, record in runs:
        if record["result"]["diverged_round"] is not None:
            finite = metrics[np.isfinite(metrics[column])]
            if len(finite):
                ax.plot(finite[x].iloc[-1], finite[column].iloc[-1], "x", color=color, ms=8)
    return line


def _tuned_mu(tuned: pd.DataFrame | None, key: tuple, method: str) -> float | None:
    """The mu chosen for `method` (a variant name) in the setting `key` in tuned_mu.csv, if any."""
    if tuned is None:
        return None
    dataset, k, e, rounds = key
    variants = tuned.apply(lambda row: variant_of(row.to_dict()), axis=1) if len(tuned) else []
    rows = tuned[(tuned["dataset"] == dataset) & (tuned["clients_per_round"] == k)
                 & (tuned["epochs"] == e) & (tuned["rounds"] == rounds) & (variants == method)]
    return float(rows["chosen"].iloc[0]) if len(rows) else None


def _method_runs(runs, method: str, tuned: pd.DataFrame | None):
    """The runs of one curve (`method`: a variant name). A method given at several values of its
    setting (mu, or its tuned option) is shown at its tuned one only."""
    mine = [(m, r) for m, r in runs if variant_of(r["config"]) == method]
    if len({setting_value(r["config"]) for _, r in mine}) > 1:
        chosen = _tuned_mu(tuned, setting(mine[0][1]), method)
        if chosen is None:
            raise ValueError(f"{method} runs at several values and no tuned one for {setting(mine[0][1])}")
        mine = [(m, r) for m, r in mine if setting_value(r["config"]) == chosen]
    return mine


def _y_range(ax, lines: dict, metric: str, top: float | None = None) -> float | None:
    """Loss: from 0 to a little above the initial loss and the baselines (FedAvg, FedProx), or to
    `top`, so a diverging FedDANE cannot squash them; a curve above the range runs along the top edge
    (so it never vanishes), a triangle marks where it left, and its legend entry says how high it
    went and where it ended. Accuracy: 0 to 1. Returns the loss range's top."""
    if not metric.endswith("loss"):
        ax.set_ylim(0, 1)
        return None
    ys = {method: np.asarray(line.get_ydata(), dtype=float) for method, line in lines.items()}
    base = [y[0] for y in ys.values()] + [np.nanmax(y) for m, y in ys.items() if m in BASELINES]
    top = top or 1.15 * max(v for v in base if np.isfinite(v))
    ax.set_ylim(0, top)
    for method, y in ys.items():
        if not (y > top).any():
            continue
        ax.plot(lines[method].get_xdata()[np.argmax(y > top)], top, "^", color=COLORS[method], ms=7, clip_on=False)
        finite = y[np.isfinite(y)]
        lines[method].set_ydata(np.minimum(y, top))
        lines[method].set_clip_on(False)  # the clipped stretch lies on the top edge itself
        lines[method].set_label(f"{lines[method].get_label()}: ▲ up to {finite.max():.3g}, ends at {finite[-1]:.3g}")
    return top


def curve_label(method: str, record: dict, panel_k=None) -> str:
    """A curve's legend entry: the method, the value of its setting (μ=0.01, α=0.1) where it has one, and
    its K where it differs from the panel's (a method that needs every device beside sampling ones)."""
    entry, config = ENTRIES[method], record["config"]
    shown = [] if entry.method.mu == "none" and not entry.method.tuned else \
        [f"{SYMBOLS.get(entry.method.setting_name, entry.method.setting_name)}={setting_value(config):g}"]
    if panel_k is not None and config["clients_per_round"] != panel_k:
        shown.append(f"K={config['clients_per_round']}")
    return LABELS[method] + (f" ({', '.join(shown)})" if shown else "")


def _panel(ax, runs, tuned, metric: str, x: str, legend: bool = True, panel_k=None, log_x: bool = False,
           y_top: float | None = None) -> float | None:
    """Draw one panel's curves; returns its loss range's top (None for accuracy)."""
    lines = {}
    for method in LABELS:
        selected = _method_runs(runs, method, tuned)
        if not selected:
            continue
        label = curve_label(method, selected[0][1], panel_k)
        lines[method] = _curve(ax, selected, metric, label, COLORS[method], x, LINESTYLES[method], log_x)
    if log_x:
        ax.set_xscale("log")
    top = _y_range(ax, lines, metric, y_top)
    if not legend:
        return top
    # below the panel, under its x label: inside, it would cover the curves of an oscillating FedDANE
    # (anchored in points below the axes, under the tick labels and the x label, whatever the panel's height)
    below = transforms.offset_copy(ax.transAxes, fig=ax.figure, y=-LEGEND_DROP_PT, units="points")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0), bbox_transform=below, fontsize=7, frameon=False,
              ncol=1, handlelength=2.5, borderaxespad=0)
    return top


def experiment_figure(info_paths, tuned: pd.DataFrame | None, out, metric: str = "train_loss",
                      x_axis: str = "rounds") -> None:
    """One panel per setting: a row of datasets when each has one setting (Figures 1 and 3),
    else one row per dataset and one column per (K, E) (Figure 2). FedDANE at its tuned mu."""
    runs = load_runs(info_paths)
    panels: dict[tuple, list] = {}
    for run in runs:
        panels.setdefault(setting(run[1]), []).append(run)
    first = {key[0]: group[0][1] for key, group in panels.items()}
    datasets = sorted(first, key=lambda name: panel_order(first[name]))
    columns = sorted({key[1:] for key in panels}, key=lambda c: (c[1], c[0], c[2]))
    grid = any(sum(k[0] == d for k in panels) > 1 for d in datasets)
    shape = (len(datasets), len(columns)) if grid else (1, len(datasets))
    fig, axes = plt.subplots(*shape, figsize=(max(3.4 * shape[1], MIN_WIDTH), _row_height(runs) * shape[0]), squeeze=False)
    # what varies between panels goes into their titles, the rest into the figure's title
    varies = [len({key[i] for key in panels}) > 1 for i in (1, 2, 3)]
    x, x_label = X_AXES[x_axis]
    for key, group in panels.items():
        row, col = (datasets.index(key[0]), columns.index(key[1:])) if grid else (0, datasets.index(key[0]))
        ax = axes[row][col]
        _panel(ax, group, tuned, metric, x)
        ax.set_title(", ".join([dataset_title(first[key[0]])] + _setting_text(key, varies)), fontsize=10)
        ax.set_xlabel(x_label)
        ax.set_ylabel(METRICS.get(metric, metric))
    for ax in axes.flat:
        if not ax.has_data():
            ax.set_axis_off()
    fig.suptitle("; ".join(filter(None, [", ".join(_setting_text(next(iter(panels)), [not v for v in varies])),
                                         band_text(runs)])), fontsize=10)
    save(fig, out)


def _row_height(runs) -> float:
    """Inches per row of panels: the axes with their labels, and the legend below, a line per curve."""
    return 2.8 + 0.15 * len({variant_of(record["config"]) for _, record in runs})


def band_text(runs) -> str:
    """What a curve and its band are, for the figure's title."""
    seeds = len({record["config"]["seed"] for _, record in runs})
    return f"line: mean of {seeds} seeds, band: min-max" if seeds > 1 else "one seed"


def _setting_text(key: tuple, show: list) -> list[str]:
    return [f"{name} = {value}" for name, value, s in zip(("K", "E", "rounds"), key[1:], show) if s]


def beyond_figure(info_paths, tuned: pd.DataFrame | None, out, metric: str = "train_loss",
                  x_axis: str = "rounds") -> None:
    """Beyond the paper: one column per dataset (one setting each), the metric against rounds in
    the top row and against communication rounds below (FedDANE's family spends 2 a round, the
    pipelined one 1). Each tuned method at its tuned mu. `x_axis` is ignored: both are drawn."""
    runs = load_runs(info_paths)
    panels: dict[tuple, list] = {}
    for run in runs:
        panels.setdefault(setting(run[1]), []).append(run)
    keys = sorted(panels, key=lambda key: panel_order(panels[key][0][1]))
    fig, axes = plt.subplots(2, len(keys), figsize=(3.6 * len(keys), 2 * _row_height(runs)), squeeze=False)
    for col, key in enumerate(keys):
        for row, axis in enumerate(("rounds", "communication_rounds")):
            ax = axes[row][col]
            x, x_label = X_AXES[axis]
            _panel(ax, panels[key], tuned, metric, x)
            ax.set_title(dataset_title(panels[key][0][1]), fontsize=10)
            ax.set_xlabel(x_label)
            ax.set_ylabel(METRICS.get(metric, metric))
    fig.suptitle(", ".join(_setting_text(keys[0], [True] * 3)) + "; " + band_text(runs), fontsize=10)
    save(fig, out)


def successors_figure(info_paths, tuned: pd.DataFrame | None, out, metric: str = "train_loss",
                      x_axis: str = "rounds") -> None:
    """FedDANE among its successors: one column per dataset holding every method (those that need
    every device at K = all devices beside the sampling ones at the experiment's K), the metric
    against rounds, against the model-sized vectors sent and against the per-sample gradients the
    devices computed: the axes on which methods that exchange twice, send control variates or
    compute extra gradients compare fairly. Each tuned method at its tuned value. `x_axis` is
    ignored: the three are drawn."""
    runs = load_runs(info_paths)
    panels: dict[str, list] = {}
    for run in runs:
        panels.setdefault(run[1]["dataset"]["name"], []).append(run)
    keys = sorted(panels, key=lambda key: panel_order(panels[key][0][1]))
    rows = ("rounds", "vectors", "gradient_evaluations")
    curves = len({variant_of(record["config"]) for _, record in runs})
    legend_inches = 0.5 + 0.115 * curves  # the bottom row's legends, a line per curve, under its x labels
    height = 3.0 * len(rows) + legend_inches
    fig, axes = plt.subplots(len(rows), len(keys), figsize=(3.9 * len(keys), height), squeeze=False)
    panel_k = min(r["config"]["clients_per_round"] for _, r in runs)  # the sampling methods' K
    for col, key in enumerate(keys):
        top = None  # the rounds panel's loss range, kept on the cost axes (they start after round 0)
        for row, axis in enumerate(rows):
            ax = axes[row][col]
            x, x_label = X_AXES[axis]
            top = _panel(ax, panels[key], tuned, metric, x, legend=row == len(rows) - 1, panel_k=panel_k,
                         log_x=axis != "rounds", y_top=top)
            ax.set_title(dataset_title(panels[key][0][1]), fontsize=10)
            ax.set_xlabel(x_label, fontsize=8)
            ax.set_ylabel(METRICS.get(metric, metric))
    first = runs[0][1]["config"]
    title = (f"K = {panel_k} (K = all devices where marked), E = {first['epochs']}, rounds = {first['rounds']}; "
             + band_text(runs))
    lines = textwrap.wrap(title, width=int(10 * 3.9 * len(keys)))  # 10 pt: 13 characters an inch; a margin
    fig.suptitle("\n".join(lines), fontsize=10)
    # tight_layout makes room for the legends below the bottom row (they are the axes'), rect for the title
    save(fig, out, rect=(0, 0, 1, 1 - 0.18 * (len(lines) - 1) / height))


def decrease_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per round t (where the theory was logged): rho, Theorem 1's guaranteed decrease
    rho ||grad f(w^t)||^2 and the observed one f(w^t) - f(w^{t+1}), f the training loss."""
    table = pd.DataFrame({"round": metrics["round"], "rho": metrics["rho"],
                          "bound": metrics["rho"] * metrics["grad_norm_sq"],
                          "observed": metrics["train_loss"] - metrics["train_loss"].shift(-1)})
    return table[np.isfinite(table["rho"]) & np.isfinite(table["observed"])]


SYMLOG_FLOOR = 1e-3  # decreases smaller than this are drawn on a linear scale around 0


def _symlog_ticks(largest: float) -> list[float]:
    """0 and +-powers of ten up to `largest`, at most three a side (every decade crowds the axis)."""
    top = max(int(np.ceil(np.log10(max(largest, SYMLOG_FLOOR)))), int(np.log10(SYMLOG_FLOOR)))
    decades = list(range(int(np.log10(SYMLOG_FLOOR)), top + 1))
    if len(decades) > 3:  # the floor's own tick would sit on 0's
        decades = decades[1:]
    kept = decades[::-(-len(decades) // 3)]
    return [0.0, *(10.0 ** k for k in kept), *(-(10.0 ** k) for k in kept)]


def theory_figure(info_paths, out) -> None:
    """Theorem 1 on the data: one row per dataset, one column per mu (runs with --theory). In
    each panel the observed decrease of the training loss and the decrease the theorem
    guarantees, rho ||grad f||^2, against rounds (symlog axis: both change sign); a shaded round
    has rho > 0, where the bound promises progress. The text counts the rounds with rho > 0 and,
    among them, those whose observed decrease met the bound (the theorem bounds an expectation:
    one run is one draw of it). Several seeds: every seed's rounds are counted, their means drawn."""
    runs = [(m, r) for m, r in load_runs(info_paths)]
    for _, record in runs:
        if not record["config"].get("theory"):
            raise ValueError(f"{record['dataset']['name']}: a run without the theory's constants (train --theory)")
    first = {r["dataset"]["name"]: r for _, r in reversed(runs)}
    datasets = sorted(first, key=lambda name: panel_order(first[name]))
    mus = sorted({r["config"]["mu"] for _, r in runs})
    fig, axes = plt.subplots(len(datasets), len(mus), figsize=(3.3 * len(mus), 2.4 * len(datasets) + 0.6),
                             squeeze=False, sharex=True)
    for i, name in enumerate(datasets):
        for j, mu in enumerate(mus):
            ax = axes[i][j]
            tables = [decrease_table(m) for m, r in runs if r["dataset"]["name"] == name and r["config"]["mu"] == mu]
            if tables:
                _decrease_panel(ax, tables)
            ax.set_title(f"{dataset_title(first[name])}, μ = {mu:g}", fontsize=9)
            ax.set_xlabel("round" if i == len(datasets) - 1 else "")
    key = setting(runs[0][1])
    fig.suptitle(f"{LABELS[variant_of(runs[0][1]['config'])]}, " + ", ".join(_setting_text(key, [True] * 3))
                 + "; shaded: ρ > 0", fontsize=10)
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=8, frameon=False)
    save(fig, out, rect=(0, 0.5 / fig.get_figheight(), 1, 1))  # room for the legend below the panels


def _decrease_panel(ax, tables: list[pd.DataFrame]) -> None:
    every = pd.concat(tables)
    mean = every.groupby("round")[["rho", "bound", "observed"]].mean()
    positive = mean.index[mean["rho"] > 0]
    for t in positive:
        ax.axvspan(t - 0.5, t + 0.5, color="tab:green", alpha=0.15, lw=0)
    ax.plot(mean.index, mean["observed"], color="0.2", lw=1.0, label="observed f(wᵗ) − f(wᵗ⁺¹)")
    ax.plot(mean.index, mean["bound"], color="tab:red", lw=1.2, label="guaranteed ρ‖∇f(wᵗ)‖²")
    ax.axhline(0, color="0.6", lw=0.6)
    ax.set_yscale("symlog", linthresh=SYMLOG_FLOOR)
    ax.yaxis.set_major_locator(FixedLocator(_symlog_ticks(mean[["bound", "observed"]].abs().max().max())))
    held = every[every["rho"] > 0]
    met = int((held["observed"] >= held["bound"]).sum())
    text = f"ρ > 0: {len(held)}/{len(every)} rounds" + (f"\nbound met: {met}/{len(held)}" if len(held) else "")
    ax.text(0.98, 0.97, text, transform=ax.transAxes, ha="right", va="top", fontsize=7,
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"})


def tuning_figure(info_paths, tuned: pd.DataFrame, out, fraction: float, methods=TUNED) -> None:
    """The tuning criterion (mean training loss over the last rounds) against the tuned setting: one
    column per dataset, one row per setting (mu; and FedDyn's alpha, S-DANE's lambda, a server lr, ...
    where such methods are tuned), one line per tuned method and setting; band: min-max over seeds;
    a star marks the chosen value, a cross at the top edge a diverged run."""
    runs = load_runs(info_paths)
    scores = tuning_scores(runs, methods, fraction)
    first = {r["dataset"]["name"]: r for _, r in reversed(runs)}
    datasets = sorted(set(scores["dataset"]), key=lambda name: panel_order(first[name]))
    names = sorted(set(scores["setting"]), key=lambda n: (list(SYMBOLS).index(n) if n in SYMBOLS else len(SYMBOLS), n))
    fig, axes = plt.subplots(len(names), len(datasets), figsize=(3.4 * len(datasets), 3.0 * len(names)),
                             squeeze=False)
    for row, setting_name in enumerate(names):
        for ax, name in zip(axes[row], datasets):
            data = scores[(scores["dataset"] == name) & (scores["setting"] == setting_name)]
            if len(data):
                _tuning_panel(ax, data, tuned, name)
            ax.set_title(dataset_title(first[name]), fontsize=10)
            ax.set_xlabel(SYMBOLS.get(setting_name, setting_name))
        if not any(each.get_legend() for each in axes[row]):  # a colour per method: one legend, in the first panel
            handles = {}
            for each in axes[row]:
                handles.update(zip(*reversed(each.get_legend_handles_labels())))
            axes[row][0].legend(handles.values(), handles.keys(), fontsize=7, framealpha=0.8, edgecolor="none")
        axes[row][0].set_ylabel(f"training loss, last {fraction:g} of rounds")
    save(fig, out)


def _tuning_panel(ax, data: pd.DataFrame, tuned, name: str) -> None:
    """One dataset's tuning curves of one setting (the methods tuned over it)."""
    finite = data.loc[np.isfinite(data["score"]), "score"]
    top = 2 * finite.max() if len(finite) else 10.0
    # a method tuned in several settings (K, E) of the panel: a line and a colour per setting
    several = data.groupby("variant")[["clients_per_round", "epochs", "rounds"]].nunique().max().max() > 1
    for (variant, k, e, rounds), group in data.groupby(["variant", "clients_per_round", "epochs", "rounds"]):
        stats = group.groupby("value")["score"].agg(["mean", "min", "max"])
        label = LABELS[variant] + (f", K={k}, E={e}" if several else "")
        color = COLORS[variant] if not several else None
        line = ax.plot(stats.index, stats["mean"].clip(upper=top), "o-", ms=3, label=label, color=color)[0]
        ax.fill_between(stats.index, stats["min"].clip(upper=top), stats["max"].clip(upper=top),
                        color=line.get_color(), alpha=0.2, lw=0)
        dead = stats.index[~np.isfinite(stats["max"])]
        if len(dead):  # (an empty unclipped line would stretch the layout to the origin)
            ax.plot(dead, [top] * len(dead), "x", color=line.get_color(), ms=8, clip_on=False)
        chosen = _tuned_mu(tuned, (name, k, e, rounds), variant)
        if chosen is not None and chosen in stats.index:
            ax.plot(chosen, stats.loc[chosen, "mean"], "*", color=line.get_color(), ms=13)
    grid = sorted(data["value"].unique())
    ax.set_xscale("symlog", linthresh=min([m for m in grid if m > 0], default=1.0))
    ax.set_xticks(grid, [f"{m:g}" for m in grid], rotation=45 if len(grid) > 5 else 0)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(_log_labels(True))  # plain numbers, not powers of ten
    ax.yaxis.set_minor_formatter(_log_labels(len(finite) and finite.max() < 10 * finite.min()))
    if not np.isfinite(data["score"]).all():
        ax.set_ylim(top=top * 1.05)  # room for the crosses of diverged runs
    if several:  # labels and colours differ by panel: each its own legend
        ax.legend(fontsize=7, framealpha=0.8, edgecolor="none")


def _log_labels(every: bool) -> FuncFormatter:
    """Plain-number tick labels for a log axis: on every tick, or (minor ticks of an axis
    spanning decades) on the 2s and 5s only."""
    def label(value: float, _) -> str:
        mantissa = value / 10 ** np.floor(np.log10(value))
        return f"{value:g}" if every or round(mantissa) in (2, 5) else ""
    return FuncFormatter(label)


def save(fig, out, rect=(0, 0, 1, 1)) -> None:
    """Write `out` (.pdf) and the .png beside it, each atomically; the panels fill `rect` (figure
    fractions: left, bottom, right, top)."""
    out = str(out)
    stem = out[: -len(".pdf")] if out.endswith(".pdf") else out
    fig.tight_layout(rect=rect)
    for ext in ("pdf", "png"):
        with atomic_path(f"{stem}.{ext}") as tmp:
            fig.savefig(tmp, format=ext, dpi=150)
    plt.close(fig)


# The figures an experiment's `figure` may name (the config schema's enum; tests/test_one_fact.py ties
# them): the curves' figures, each the command `fedsim <name>` drawing f(runs, tuned, out, metric, x_axis)
# (the paper's figures differ in their runs only), and `theory`, the command `fedsim theory-figure`.
CURVE_FIGURES = {"figure1": experiment_figure, "figure2": experiment_figure, "figure3": experiment_figure,
                 "beyond": beyond_figure, "successors": successors_figure}
FIGURES = {**CURVE_FIGURES, "theory": theory_figure}
