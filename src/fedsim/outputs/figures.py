"""The paper's figures, drawn from run records.

Each curve is the mean over the seeds of a setting, with a min-max band when there are
several; a run that diverged ends in a cross at the round where its loss left the reals (on the top
edge: a NaN has no height; crosses at one spot stack downwards, so none hides another), and its legend
entry says so (a loss not finite at round 0, before any training, is the data's or the initial
model's). A curve that leaves the plotted range (a diverging FedDANE) rises to the top edge at a
triangle and is not drawn until it comes back (a stretch along the edge would read as a plateau); its
legend entry says how high it went and where it ended, instead of squashing the other curves. A round
axis spans the planned rounds, however early the runs stopped. Each method has its own dash pattern, so curves that coincide stay
two, and one within a line width of another all along says so in its legend entry. A panel's legend sits below it, never over a curve: heterogeneous panels have no empty
corner (FedDANE oscillates across the whole range).
"""

from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import transforms  # noqa: E402
from matplotlib.layout_engine import ConstrainedLayoutEngine  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter, NullLocator  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ..data.atomic import atomic_path  # noqa: E402
from ..data.synthetic import DEFAULTS as SYNTHETIC_DEFAULTS  # noqa: E402
from ..methods import ENTRIES, FAMILIES, LABELS, setting_value, variant_of  # noqa: E402
from ..core.settings import TAIL_FRACTION  # noqa: E402
from .styles import COLORS, LEGEND, LINESTYLES, METRICS  # noqa: E402
from .summary import generated, panel_order, provenance, tail_mean, tuning_scores  # noqa: E402
from ..core.records import read_run  # noqa: E402

X_AXES = {"rounds": ("round", "# rounds"),
          "communication_rounds": ("communication_rounds", "# communication rounds"),
          "vectors": ("vectors", "model-sized vectors sent (down + up, all devices)"),
          "gradient_evaluations": ("gradient_evaluations", "per-sample gradients computed (all devices)")}
BASELINES = ("fedavg", "fedprox")  # the curves that set a loss panel's range
# Each method's and variant's colour, dash pattern (LINESTYLES) and place in legends (LEGEND) are
# fedsim.outputs.styles': curves that coincide (FedProx at mu = 1 over FedAvg on Figure 3's sets) stay
# visible as two patterns.
REFERENCE_COLOR = "0.55"  # the field's best beside a family's curves (the successors' figure)
MIN_WIDTH = 5.5  # inches: a one-panel figure still holds its title and legend
LEGEND_DROP_PT = 30  # a panel's legend starts this far below its axes: under tick labels and x label
TUNED = tuple(name for name in LEGEND if ENTRIES[name].method.tuned_setting)
SYMBOLS = {"mu": "μ", "alpha": "α", "lambda": "λ", "server_lr": "η_s", "eps": "ε", "p": "p"}  # a setting's name in legends


# A generated set's provenance keys, the generator's setting each holds, and how a title says it
_SCALE = (("num_devices", "devices", "{} devices"), ("num_features", "features", "{} features"),
          ("num_classes", "classes", "{} classes"), ("seed", "seed", "seed {}"),
          ("train_fraction", "train_fraction", "train fraction {}"))


def dataset_title(record: dict) -> str:
    """A panel's title: a generated set as the paper names it, with what it sets unlike the paper's
    generator (a scaled-up set must not read as the paper's), else the dataset's name."""
    prov = provenance(record)
    if not generated(prov):  # imported, not generated here
        return record["dataset"]["name"]
    title = "Synthetic IID" if prov.get("iid") else f"Synthetic ({prov['alpha']:g},{prov['beta']:g})"
    unlike = [said.format(prov[key]) for key, setting, said in _SCALE
              if key in prov and prov[key] != SYNTHETIC_DEFAULTS[setting]]
    return ", ".join([title, *unlike])


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


def _curve(ax, runs, column: str, label: str, color: str, x: str = "round", linestyle="-",
           log_x: bool = False, reference: bool = False):
    """Mean over seeds with a min-max band, per round, where every seed still ran, at the seeds' mean
    of `x` (a cost differs between seeds: their devices differ); on a log x axis from the first
    round that cost something; a curve of one point is a dot. A `reference` (another family's best) is a thick pale line behind
    the others, without a band. Returns the mean's line."""
    frames = [m.set_index("round")[column] for m, _ in runs]
    table = pd.concat(frames, axis=1)
    xs = table.index.to_numpy() if x == "round" else \
        pd.concat([m.set_index("round")[x] for m, _ in runs], axis=1).mean(axis=1).to_numpy()
    if log_x:
        table, xs = table[xs > 0], xs[xs > 0]
    mean = table.mean(axis=1, skipna=False)
    style = dict(lw=4, alpha=0.45, zorder=1) if reference else dict(lw=1.4)
    if len(xs) == 1:  # one point (a 1-round run on a log axis, round 0 left out): a line would not show
        style.update(marker="o", ms=5)
    mean = mean.where(np.isfinite(mean))  # a NaN or inf is not drawn: the run's cross marks it
    (line,) = ax.plot(xs, mean.to_numpy(), color=color, label=label + diverged_text(runs), ls=linestyle, **style)
    if len(frames) > 1 and not reference:
        ax.fill_between(xs, table.min(axis=1), table.max(axis=1), color=color, alpha=0.25, lw=0)
    marks = set()
    for metrics, record in runs:
        stop = record["result"]["diverged_round"]
        if stop is None or stop not in set(metrics["round"]):
            continue
        row = metrics[metrics["round"] == stop].iloc[-1]  # the first evaluation that left the reals
        if log_x and not row[x] > 0:
            continue
        marks.add((float(row[x]), float(row[column]) if np.isfinite(row[column]) else None))
    for at, value in sorted(marks, key=lambda m: (m[0], m[1] is None, m[1] or 0)):
        _cross(ax, at, value, color)
    return line


CROSS_STEP_PT = 7  # crosses at one spot (runs diverged at one round) stack this far apart


def _cross(ax, at: float, value: float | None, color: str) -> None:
    """A diverged run's cross at x `at`: at its `value` where the metric is still finite there (accuracy),
    else on the top edge (a loss of NaN or inf has no height); a cross already at that spot pushes this one
    down, so that every curve's cross stays visible."""
    taken = ax.__dict__.setdefault("_fedsim_crosses", {})
    key = (at, value)
    shift = taken.get(key, 0)
    taken[key] = shift + 1
    base = ax.transData if value is not None else transforms.blended_transform_factory(ax.transData, ax.transAxes)
    where = transforms.offset_copy(base, fig=ax.figure, y=-CROSS_STEP_PT * shift, units="points")
    ax.plot([at], [1.0 if value is None else value], "x", color=color, ms=8, mew=1.6, transform=where,
            clip_on=False, zorder=4)


def diverged_text(runs) -> str:
    """A curve's legend note where some of its runs stopped on a non-finite loss: the round(s), and at
    round 0 (before any training) the data or the initial model as the cause, not the method."""
    stops = [record["result"]["diverged_round"] for _, record in runs]
    rounds = sorted({r for r in stops if r is not None})
    if not rounds:
        return ""
    count = sum(r is not None for r in stops)
    seeds = f" ({count} of {len(stops)} seeds)" if count < len(stops) else ""
    if rounds == [0]:
        return f": ✕ not finite at round 0 (the data or the initial model){seeds}"
    return f": ✕ diverged at round{'s' if len(rounds) > 1 else ''} {', '.join(map(str, rounds))}{seeds}"


def _chosen_setting(tuned: pd.DataFrame | None, key: tuple, method: str) -> tuple[float, float | None] | None:
    """The value (mu or tuned option) and client lr chosen for `method` (a variant name) in the setting `key`
    in chosen_settings.csv, if any (lr None: a table from before the lr was tuned)."""
    if tuned is None:
        return None
    dataset, k, e, rounds = key
    variants = tuned.apply(lambda row: variant_of(row.to_dict()), axis=1) if len(tuned) else []
    rows = tuned[(tuned["dataset"] == dataset) & (tuned["clients_per_round"] == k)
                 & (tuned["epochs"] == e) & (tuned["rounds"] == rounds) & (variants == method)]
    if not len(rows):
        return None
    return float(rows["chosen"].iloc[0]), float(rows["lr"].iloc[0]) if "lr" in rows else None


def _lr_tuned(tuned: pd.DataFrame | None, runs) -> bool:
    """Whether chosen_settings.csv chose an lr among several for some method in the settings of `runs`."""
    if tuned is None or "lr_candidates" not in tuned or not len(tuned):
        return False
    keys = {setting(record) for _, record in runs}
    mine = tuned[[key in keys for key in zip(tuned["dataset"], tuned["clients_per_round"], tuned["epochs"],
                                               tuned["rounds"])]]
    return any(len(set(str(lrs).split(";"))) > 1 for lrs in mine["lr_candidates"])


def _values(record: dict) -> tuple[float, float]:
    """A run's value of its method's setting and its client lr: what tuning chooses between."""
    return setting_value(record["config"]), float(record["config"]["lr"])


def _method_runs(runs, method: str, tuned: pd.DataFrame | None):
    """The runs of one curve (`method`: a variant name). A method given at several values of its
    setting (mu, or its tuned option) or client lrs is shown at its tuned ones only."""
    mine = [(m, r) for m, r in runs if variant_of(r["config"]) == method]
    if len({_values(r) for _, r in mine}) > 1:
        chosen = _chosen_setting(tuned, setting(mine[0][1]), method)
        if chosen is None:
            raise ValueError(f"{method} runs at several values and no tuned one for {setting(mine[0][1])}")
        value, lr = chosen
        mine = [(m, r) for m, r in mine if _values(r)[0] == value and lr in (None, _values(r)[1])]
    return mine


def _y_range(ax, lines: dict, metric: str, top: float | None = None) -> float | None:
    """Loss: from 0 to a little above the initial loss and the baselines (FedAvg, FedProx), or to
    `top`, so a diverging FedDANE cannot squash them; a curve above the range rises to the top edge at
    a triangle, is not drawn while above (along the edge it would read as a plateau) and comes down from
    the edge where it returns (at a downward triangle after more than one round above); its legend entry says how high it went and where it ended. Accuracy: 0
    to 1. Returns the loss range's top."""
    if not metric.endswith("loss"):
        ax.set_ylim(0, 1)
        return None
    ys = {method: np.asarray(line.get_ydata(), dtype=float) for method, line in lines.items()}
    top = top or _top_of(ys)
    ax.set_ylim(0, top)
    for method, y in ys.items():
        above = np.isfinite(y) & (y > top)  # a NaN or inf is a divergence: its cross says so
        if not above.any():
            continue
        xs = np.asarray(lines[method].get_xdata())
        leaves = above & ~np.r_[False, above[:-1]]  # the first point of each stretch above the range
        ax.plot(xs[leaves], np.full(leaves.sum(), top), "^", color=COLORS[method], ms=7, ls="none", clip_on=False)
        finite = y[np.isfinite(y)]
        # the curve rises to the edge where it leaves; the rest of the stretch is not drawn; where it returns
        # it comes down from the edge at a downward triangle, drawn apart so that the line's points stay its rounds'
        returns = np.flatnonzero(above[:-1] & ~above[1:] & np.isfinite(y[1:]))  # the last point of a stretch above
        back = returns[~leaves[returns]]  # (a stretch of one round: the line itself comes down from its rise)
        for i in back:
            ax.plot(xs[i:i + 2], [top, y[i + 1]], color=COLORS[method], ls=LINESTYLES[method],
                    lw=lines[method].get_linewidth(), clip_on=False)
        if len(back):  # (an empty unclipped line would stretch the layout to the figure's corner)
            ax.plot(xs[back], np.full(len(back), top), "v", color=COLORS[method], ms=7, ls="none", clip_on=False)
        lines[method].set_ydata(np.where(leaves, top, np.where(above, np.nan, y)))
        lines[method].set_clip_on(False)  # the rise ends on the top edge itself
        # on a line of its own: beside a long label it would run into the next panel's legend
        lines[method].set_label(f"{lines[method].get_label()}\n▲ up to {finite.max():.3g}, ends at {finite[-1]:.3g}")
    return top


def _span_rounds(ax, runs, x: str, log_x: bool) -> None:
    """A round axis spans 0 .. the planned rounds, however early every run stopped (a lone point at round
    0 would otherwise get an axis of -0.04 to 0.04); another linear axis holding one value, at least 1 wide."""
    if log_x:
        return
    lo, hi = ax.get_xlim()
    if x == "round":
        ax.set_xlim(min(lo, 0), max(hi, max(record["config"]["rounds"] for _, record in runs)))
    elif hi - lo < 1:
        ax.set_xlim(min(lo, 0), max(hi, min(lo, 0) + 1))


def _top_of(ys: dict) -> float:
    """A loss range's top: a little above the curves' first values and the baselines' highest."""
    base = [y[0] for y in ys.values() if len(y)] + [v for m, y in ys.items() if m in BASELINES for v in y]
    finite = [v for v in base if np.isfinite(v)] or [v for y in ys.values() for v in y if np.isfinite(v)]
    return 1.15 * max(finite) if finite and max(finite) > 0 else 1.0  # no finite loss at all: any range


def curve_label(method: str, record: dict, panel_k=None, show_lr: bool = False) -> str:
    """A curve's legend entry: the method, the value of its setting (μ=0.01, α=0.1) where it has one, its
    client lr where the panel's runs differ in it (tuned), and its K where it differs from the panel's
    (a method that needs every device beside sampling ones)."""
    entry, config = ENTRIES[method], record["config"]
    shown = [] if entry.method.mu == "none" and not entry.method.tuned else \
        [f"{SYMBOLS.get(entry.method.setting_name, entry.method.setting_name)}={setting_value(config):g}"]
    if show_lr:
        shown.append(f"lr={config['lr']:g}")
    if panel_k is not None and config["clients_per_round"] != panel_k:
        shown.append(f"K={config['clients_per_round']}")
    return LABELS[method] + (f" ({', '.join(shown)})" if shown else "")


def _panel(ax, runs, tuned, metric: str, x: str, legend: bool = True, panel_k=None, log_x: bool = False,
           y_top: float | None = None) -> float | None:
    """Draw one panel's curves; returns its loss range's top (None for accuracy)."""
    lines, curves = {}, {m: c for m in LEGEND if (c := _method_runs(runs, m, tuned))}
    show_lr = len({record["config"]["lr"] for _, record in runs}) > 1 or _lr_tuned(tuned, runs)
    for method, selected in curves.items():
        label = curve_label(method, selected[0][1], panel_k, show_lr)
        lines[method] = _curve(ax, selected, metric, label, COLORS[method], x, LINESTYLES[method], log_x)
    if log_x:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # under a decade, matplotlib labels every minor tick: overlapping
    else:  # every x axis counts something (rounds, vectors, gradients): no tick at 2.5 rounds
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
    top = _y_range(ax, lines, metric, y_top)
    _span_rounds(ax, runs, x, log_x)
    _name_hidden_curves(ax, lines)
    if not legend:
        return top
    # below the panel, under its x label: inside, it would cover the curves of an oscillating FedDANE
    # (anchored in points below the axes, under the tick labels and the x label, whatever the panel's height)
    below = transforms.offset_copy(ax.transAxes, fig=ax.figure, y=-LEGEND_DROP_PT, units="points")
    handles, labels = ax.get_legend_handles_labels()
    last = sorted(range(len(handles)), key=lambda i: handles[i].get_zorder() < 2)  # a reference (behind) last
    ax.legend([handles[i] for i in last], [labels[i] for i in last], loc="upper center", bbox_to_anchor=(0.5, 0),
              bbox_transform=below, fontsize=7, frameon=False, ncol=1, handlelength=2.5, borderaxespad=0)
    return top


LINE_HEIGHT = 0.01  # of a panel's height: about a curve's line width (1.5 pt of ~150)


def _name_hidden_curves(ax, lines: dict) -> None:
    """A curve within a line width of an earlier one wherever both are drawn (FedDANE at mu = 0 on FedAvg's on IID
    data) is hidden under it but for its dashes: its legend entry says on whose line it lies."""
    drawn = {}  # method -> (its rounds, its heights as fractions of the panel), in drawing order
    for method, line in lines.items():
        xs, ys = np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)
        heights = _axes_heights(ax, ys)
        under = next((first for first, (fx, fh) in drawn.items() if len(fx) == len(xs) and np.array_equal(fx, xs)
                      and _within(fh, heights, LINE_HEIGHT)), None)
        if under is None:
            drawn[method] = (xs, heights)
        else:
            line.set_label(f"{line.get_label()} (on {LABELS[under]}'s line)")


def _within(a: np.ndarray, b: np.ndarray, tolerance: float) -> bool:
    """Whether two curves' heights are within `tolerance` wherever both are drawn (most of their points)."""
    both = np.isfinite(a) & np.isfinite(b)
    return both.sum() > 0 and both.sum() >= 0.9 * len(a) and bool(np.all(np.abs(a[both] - b[both]) <= tolerance))


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


SUCCESSOR_AXES = ("rounds", "vectors", "gradient_evaluations")  # the rows of a family's panels
PANEL_INCHES = (3.3, 2.0)  # a successors' panel, its labels included: width, height
LEGEND_LINE_INCHES = 0.14  # a legend line at 7 pt


def successors_figure(info_paths, tuned: pd.DataFrame | None, out, metric: str = "train_loss",
                      x_axis: str = "rounds") -> None:
    """FedDANE among its successors: a block of panels per family of methods (fedsim.methods.FAMILIES,
    as each method file declares it), so that no panel holds more curves than an eye tells apart. A
    block's columns are the datasets, its rows the metric against rounds, against the model-sized
    vectors sent and against the per-sample gradients the devices computed: the axes on which methods
    that exchange twice, send control variates or compute extra gradients compare fairly. Beside a
    family's curves, in thick grey, the field's best: the curve of the dataset with the best tail (the
    tuning criterion's mean over the last rounds and the seeds) where it is another family's. Every
    block of a dataset shares its axes' ranges. Methods that need every device run at K = all devices
    beside the sampling ones at the experiment's K. Each tuned method at its tuned value. `x_axis` is
    ignored: the three are drawn."""
    runs = load_runs(info_paths)
    panels: dict[str, list] = {}
    for run in runs:
        panels.setdefault(run[1]["dataset"]["name"], []).append(run)
    keys = sorted(panels, key=lambda key: panel_order(panels[key][0][1]))
    curves = {key: {m: c for m in LEGEND if (c := _method_runs(panels[key], m, tuned))} for key in keys}
    families = _families({m for drawn in curves.values() for m in drawn})
    panel_k = min(r["config"]["clients_per_round"] for _, r in runs)  # the sampling methods' K
    per_row = max(1, 4 // len(keys))  # blocks side by side while the figure stays 4 panels wide
    block_rows = -(-len(families) // per_row)
    legend_lines = [1 + max(sum(m in drawn for m in names) for drawn in curves.values()) for names in families.values()]
    heights = [PANEL_INCHES[1] * len(SUCCESSOR_AXES) + 0.5 + LEGEND_LINE_INCHES * max(legend_lines[i:i + per_row])
               for i in range(0, len(families), per_row)]  # rows of blocks: the panels, the block's title, the legend
    fig = plt.figure(layout="constrained", figsize=(PANEL_INCHES[0] * len(keys) * per_row, sum(heights) + 0.4))
    blocks = fig.subfigures(block_rows, per_row, squeeze=False, height_ratios=heights)
    best = {key: _best_curve(drawn, metric) for key, drawn in curves.items()}
    for block, (family, names) in zip(blocks.flat, families.items()):
        _family_block(block, family, names, keys, panels, tuned, curves, best, metric, panel_k)
    first = runs[0][1]["config"]
    title = (f"K = {panel_k} (K = all devices where marked), E = {first['epochs']}, rounds = {first['rounds']}; "
             + band_text(runs) + "; thick grey: the dataset's best curve, of another family")
    fig.suptitle("\n".join(textwrap.wrap(title, width=int(13 * fig.get_figwidth()))), fontsize=10)  # 13 a 10-pt inch
    save(fig, out)


def _families(methods) -> dict[str, list[str]]:
    """The drawn methods (entries' names) by family, in legend order."""
    families: dict[str, list[str]] = {}
    for name in LEGEND:
        if name in methods:
            families.setdefault(ENTRIES[name].family, []).append(name)
    return families


def family_title(family: str, names) -> str:
    """A block's title: what the family's methods share, and who they are."""
    what = FAMILIES.get(family)
    who = ", ".join(LABELS[name] for name in names)
    return f"{what[0].upper()}{what[1:]}: {who}" if what else who


def _best_curve(curves: dict, metric: str) -> str | None:
    """Of one dataset's curves (method -> runs), the one with the best tail: the lowest loss (or highest
    accuracy) over the last rounds, mean over its seeds; a diverged curve has none."""
    tails = {}
    for method, selected in curves.items():
        values = [tail_mean(m, r["config"]["rounds"], TAIL_FRACTION, metric) for m, r in selected]
        tails[method] = np.mean(values)
    finite = {m: t for m, t in tails.items() if np.isfinite(t)}
    pick = min if metric.endswith("loss") else max
    return pick(finite, key=finite.get) if finite else None


def _family_block(block, family, names, keys, panels, tuned, curves, best, metric, panel_k) -> None:
    """One family's panels in `block` (a subfigure): a column per dataset, a row per cost axis."""
    axes = block.subplots(len(SUCCESSOR_AXES), len(keys), squeeze=False)
    for col, key in enumerate(keys):
        mine = [run for run in panels[key] if variant_of(run[1]["config"]) in names]
        reference = best[key] if best[key] not in names else None
        top = _loss_top(curves[key], metric)
        for row, axis in enumerate(SUCCESSOR_AXES):
            ax = axes[row][col]
            x, x_label = X_AXES[axis]
            if reference:
                label = f"best of {len(curves[key])}: {curve_label(reference, curves[key][reference][0][1], panel_k)}"
                _curve(ax, curves[key][reference], metric, label, REFERENCE_COLOR, x, "-", axis != "rounds",
                       reference=True)
            _panel(ax, mine, tuned, metric, x, legend=row == len(SUCCESSOR_AXES) - 1, panel_k=panel_k,
                   log_x=axis != "rounds", y_top=top)
            ax.set_xlim(*_x_range(panels[key], x, log=axis != "rounds"))
            if axis != "rounds":
                _label_within_a_decade(ax)
            if row == 0:
                ax.set_title(dataset_title(panels[key][0][1]), fontsize=9)
            ax.set_xlabel(x_label, fontsize=8)
            ax.set_ylabel(METRICS.get(metric, metric), fontsize=8)
            ax.tick_params(labelsize=7)
    width = int(11 * PANEL_INCHES[0] * len(keys))  # characters of 10-pt bold across the block: no overlap
    block.suptitle("\n".join(textwrap.wrap(family_title(family, names), width)), fontsize=10, fontweight="bold")


def _loss_top(curves: dict, metric: str) -> float | None:
    """A dataset's loss range top (as _y_range sets it) over all its curves: every family's panels of
    the dataset share it."""
    if not metric.endswith("loss"):
        return None
    means = {m: pd.concat([r.set_index("round")[metric] for r, _ in selected], axis=1).mean(axis=1, skipna=False)
             .to_numpy() for m, selected in curves.items()}
    return _top_of(means)


def _x_range(runs, x: str, log: bool) -> tuple[float, float]:
    """The range of `x` over a dataset's runs (on a log axis: its positive part), with a margin; rounds span
    0 .. the planned rounds however early the runs stopped, and runs that stopped at round 0 (nothing spent)
    get 1 .. 10 on a log axis."""
    values = pd.concat([m[x] for m, _ in runs]).to_numpy(dtype=float)
    values = values[np.isfinite(values) & (values > 0 if log else True)]
    if x == "round" and not log:
        values = np.r_[values, 0, max(r["config"]["rounds"] for _, r in runs)]
    if not len(values):
        values = np.array([1.0, 10.0])
    lo, hi = values.min(), values.max()
    return (lo / 1.3, hi * 1.3) if log else (lo - 0.02 * (hi - lo), hi + 0.02 * (hi - lo))


def _label_within_a_decade(ax) -> None:
    """A log x range that holds no power of ten (a short run's costs) gets its data's ends as ticks:
    matplotlib would label none there (the minor labels are off: across a decade they overlap)."""
    lo, hi = ax.get_xlim()
    if np.ceil(np.log10(lo)) <= np.floor(np.log10(hi)):
        return
    ends = sorted({float(f"{lo * 1.3:.6g}"), float(f"{hi / 1.3:.6g}")})  # _x_range's margins taken off
    ax.xaxis.set_major_locator(FixedLocator(ends))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}" if value >= 100 else f"{value:.3g}"))


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
    has rho > 0, where the bound promises progress. The title counts the rounds with rho > 0 and,
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
            counts = _decrease_panel(ax, tables) if tables else ""
            ax.set_title(f"{dataset_title(first[name])}, μ = {mu:g}" + (f"\n{counts}" if counts else ""), fontsize=9)
            ax.set_xlabel("round" if i == len(datasets) - 1 else "")
            ax.set_ylabel("loss decrease in a round" if j == 0 else "", fontsize=8)
    key = setting(runs[0][1])
    fig.suptitle(f"{LABELS[variant_of(runs[0][1]['config'])]}, " + ", ".join(_setting_text(key, [True] * 3))
                 + "; shaded: ρ > 0", fontsize=10)
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=8, frameon=False)
    save(fig, out, rect=(0, 0.5 / fig.get_figheight(), 1, 1))  # room for the legend below the panels


def _decrease_panel(ax, tables: list[pd.DataFrame]) -> str:
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
    # under the panel's title: inside, it would cover an oscillating curve (no corner is empty)
    text = f"ρ > 0: {len(held)}/{len(every)} rounds" + (f", bound met: {met}/{len(held)}" if len(held) else "")
    return text


def tuning_figure(info_paths, tuned: pd.DataFrame, out, fraction: float, methods=None) -> None:
    """The tuning criterion (mean training loss over the last rounds) against the tuned setting: one row
    per setting (mu; and FedDyn's alpha, S-DANE's lambda, a server lr, ... where such methods are tuned),
    one line per tuned method and setting, through its chosen point; band: min-max over seeds; a star
    marks the chosen value, a cross at the top edge a diverged run. Where an lr grid tuned the client lr
    jointly, each dataset gets a second column, the client lr, at each method's chosen value (the
    setting's panel is then at its chosen lr): a row's methods side by side in both, and the methods
    tuned over their lr alone (FedAvg) in a last row. `methods`: the variants to show; default: those
    `tuned` has rows of (a method tuned over its lr alone among them)."""
    runs = load_runs(info_paths)
    if methods is None:
        named = {variant_of(row) for row in tuned.to_dict("records")} if tuned is not None else set()
        methods = [m for m in LEGEND if m in named] or TUNED  # in legend order
    profiles = tuning_profiles(tuning_scores(runs, methods, fraction), tuned)
    first = {r["dataset"]["name"]: r for _, r in reversed(runs)}
    datasets = sorted(set(profiles["dataset"]), key=lambda name: panel_order(first[name]))
    rows = tuning_rows(profiles)
    axes_of = ("setting", "lr") if (profiles["axis"] == "lr").any() else ("setting",)
    columns = [(name, kind) for name in datasets for kind in axes_of]
    fig, axes = plt.subplots(len(rows), len(columns), figsize=(3.4 * len(columns), 3.0 * len(rows)),
                             squeeze=False)
    extra_in = 0.0  # inches added below the rows that have a note under a panel
    for row, (setting, variants) in enumerate(rows):
        shown, notes = [], []
        for ax, (name, kind) in zip(axes[row], columns):
            axis_name = setting if kind == "setting" else "lr"
            if axis_name is None:  # the row of methods tuned over their lr alone: no setting's panel
                ax.axis("off")
                continue
            data = profiles[(profiles["dataset"] == name) & (profiles["axis"] == axis_name)
                            & profiles["variant"].isin(variants)]
            if len(data):
                notes.append((ax, _tuning_panel(ax, data)))
            ax.set_title(dataset_title(first[name]), fontsize=10)
            ax.set_xlabel("client lr" if axis_name == "lr" else SYMBOLS.get(axis_name, axis_name))
            shown.append(ax)
        if not any(each.get_legend() for each in axes[row]):  # a colour per method: one legend, in the first panel
            handles = {}
            for each in shown:
                handles.update(zip(*reversed(each.get_legend_handles_labels())))
            handles.update(_marker_keys(shown))
            axes[row][0].legend(handles.values(), handles.keys(), fontsize=7, framealpha=0.8, edgecolor="none",
                                **({"loc": "center"} if setting is None else {}))
        shown[0].set_ylabel(f"training loss, last {fraction:g} of rounds")
        lines = [_coincidence_note(ax, on) for ax, on in notes if on]
        extra_in += 7 * 1.4 * max(lines) / 72 if lines else 0  # (the x label's room holds its drop)
    fig.set_size_inches(fig.get_figwidth(), fig.get_figheight() + extra_in)
    save(fig, out)


def tuning_rows(profiles: pd.DataFrame) -> list[tuple[str | None, list[str]]]:
    """The tuning figure's rows: (setting, its methods), settings in SYMBOLS' order, then (None, the
    methods tuned over their client lr alone) where there are such."""
    settings = profiles.loc[profiles["axis"] != "lr"].groupby("axis")["variant"].unique()
    order = list(SYMBOLS)
    rows = [(name, sorted(settings[name])) for name in
            sorted(settings.index, key=lambda n: (order.index(n) if n in order else len(order), n))]
    lr_alone = sorted(set(profiles["variant"]) - {v for _, variants in rows for v in variants})
    return rows + ([(None, lr_alone)] if lr_alone else [])


def tuning_profiles(scores: pd.DataFrame, tuned: pd.DataFrame | None) -> pd.DataFrame:
    """The tuning scores as the figure draws them, each with its row (`axis`), position (`x`) and whether it
    is the chosen point (`chosen`): in its setting's row, a method's runs at its chosen lr; in the lr row
    (where its lr was tuned), its runs at its chosen value. A method tuned over its lr alone (FedAvg) is
    in the lr row only."""
    parts = []
    for (variant, name, k, e, rounds), group in scores.groupby(["variant", "dataset", "clients_per_round",
                                                                  "epochs", "rounds"]):
        chosen = _chosen_setting(tuned, (name, k, e, rounds), variant)
        value, lr = chosen if chosen is not None else (None, None)
        several_lrs = group["lr"].nunique() > 1
        if group["value"].nunique() > 1 or not several_lrs:
            at = group[np.isclose(group["lr"], lr)] if several_lrs and lr is not None else group
            parts.append(at.assign(axis=at["setting"], x=at["value"], chosen=np.isclose(at["value"], value)
                                   if value is not None else False))
        if several_lrs:
            at = group[np.isclose(group["value"], value)] if value is not None else group
            parts.append(at.assign(axis="lr", x=at["lr"], chosen=np.isclose(at["lr"], lr) if lr is not None
                                   else False))
    return pd.concat(parts, ignore_index=True)


def _tuning_panel(ax, data: pd.DataFrame) -> dict:
    """One dataset's tuning curves along one axis (a setting, or the client lr). A curve within a marker of
    an earlier one at every point (FedDANE's variants on IID data) is drawn as rings around that one's
    points; returned: {the earlier curve's label: the labels of those drawn on it}, for _coincidence_note."""
    finite = data.loc[np.isfinite(data["score"]), "score"]
    top = 2 * finite.max() if len(finite) else 10.0
    _grid_axis(ax, sorted(data["x"].unique()))
    dead = not np.isfinite(data["score"]).all()
    _score_axis(ax, [*finite, *([top] if dead else [])])
    # a method tuned in several settings (K, E) of the panel: a line and a colour per setting
    several = data.groupby("variant")[["clients_per_round", "epochs", "rounds"]].nunique().max().max() > 1
    drawn = {}  # label -> its points' heights (axes fraction), of the curves not drawn on another
    on = {}  # label of such a curve -> the labels of those drawn on it
    for (variant, k, e, rounds), group in data.groupby(["variant", "clients_per_round", "epochs", "rounds"]):
        stats = group.groupby("x")["score"].agg(["mean", "min", "max"])
        label = LABELS[variant] + (f", K={k}, E={e}" if several else "")
        style = dict(color=COLORS[variant], ls=LINESTYLES[variant]) if not several else {}
        style.update(marker="o", ms=3)
        heights = pd.Series(_axes_heights(ax, stats["mean"].clip(upper=top)), index=stats.index)
        under = next((first for first, seen in drawn.items()
                      if seen.index.equals(heights.index) and _within(seen.to_numpy(), heights.to_numpy(), MARKER_HEIGHT)),
                     None)
        if under is None:
            drawn[label] = heights
        else:
            on.setdefault(under, []).append(label)
            style.update(ms=3 + 2.5 * len(on[under]), mfc="none")
        line = ax.plot(stats.index, stats["mean"].clip(upper=top), label=label, **style)[0]
        ax.fill_between(stats.index, stats["min"].clip(upper=top), stats["max"].clip(upper=top),
                        color=line.get_color(), alpha=0.2, lw=0)
        dead = stats.index[~np.isfinite(stats["max"])]
        if len(dead):  # (an empty unclipped line would stretch the layout to the origin)
            ax.plot(dead, [top] * len(dead), "x", color=line.get_color(), ms=8, clip_on=False)
        chosen = group.loc[group["chosen"], "x"].unique()
        if len(chosen):
            ax.plot(chosen[0], min(stats.loc[chosen[0], "mean"], top), "*", color=line.get_color(), ms=13)
    if several:  # labels and colours differ by panel: each its own legend
        ax.legend(fontsize=7, framealpha=0.8, edgecolor="none")
    return on


MARKER_HEIGHT = 0.02  # of a tuning panel's height: about its points' marker (3 pt of ~150)


def _axes_heights(ax, values) -> np.ndarray:
    """Where values fall on the panel's y axis, as a fraction of its height (log axes included)."""
    points = np.column_stack([np.ones(len(values)), np.asarray(values, dtype=float)])
    return ax.transLimits.transform(ax.transScale.transform(points))[:, 1]


MARKER_KEYS = {"*": "chosen value", "x": "diverged (at the top edge)"}  # the tuning panels' marks


def _marker_keys(axes) -> dict:
    """Legend keys for the marks the panels hold (a star at a chosen value, a cross for a diverged run), in grey."""
    from matplotlib.lines import Line2D

    marks = {line.get_marker() for ax in axes for line in ax.get_lines()}
    return {text: Line2D([], [], ls="none", marker=mark, color="0.35", ms=8 if mark == "*" else 6)
            for mark, text in MARKER_KEYS.items() if mark in marks}


def _coincidence_note(ax, on: dict) -> int:
    """Names the curves drawn on others, below the panel, under its x label (as the curves' figures place
    their legends): inside, it would cover a curve or the row's legend. Returns its number of lines."""
    from matplotlib.legend import Legend

    text = "\n".join(f"within a marker of {first}:" + "".join(f"\n  {label}" for label in labels)
                     for first, labels in on.items())
    below = transforms.offset_copy(ax.transAxes, fig=ax.figure, y=-LEGEND_DROP_PT, units="points")
    note = Legend(ax, [], [], loc="upper center", bbox_to_anchor=(0.5, 0), bbox_transform=below, frameon=False,
                  borderaxespad=0, title=text, title_fontsize=7, alignment="left")
    ax.add_artist(note)
    note.set_clip_on(False)  # (add_artist clips to the axes: the layout would then leave it no room)
    return text.count("\n") + 1


def _grid_axis(ax, grid: list[float]) -> None:
    """A tick with its label at every value of the grid and nowhere else: a log axis, symlog where 0
    is one of them (the linear stretch up to the smallest positive value)."""
    positive = [v for v in grid if v > 0]
    if len(positive) < len(grid):
        ax.set_xscale("symlog", linthresh=min(positive, default=1.0))
    elif len(grid) > 1:
        ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(grid))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.xaxis.set_minor_locator(NullLocator())


def _score_axis(ax, values) -> None:
    """The criterion's axis, holding every value between two labelled ticks: linear where they span
    less than a factor 10, else log with plain-number labels at 1, 2, 5 (or fewer, over many decades)
    times a power of ten."""
    values = np.asarray(values, dtype=float)
    if not len(values):
        return
    lo, hi = values.min(), values.max()
    if lo == hi:  # one value: matplotlib's own range around it
        return
    if lo <= 0 or hi < 10 * lo:
        ticks = MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
        below = max([t for t in ticks if t <= lo], default=lo)
        above = min([t for t in ticks if t >= hi], default=hi)
        ax.set_ylim(below - 0.04 * (above - below), above + 0.04 * (above - below))
        ax.yaxis.set_major_locator(FixedLocator([t for t in ticks if below <= t <= above]))
        return
    ax.set_yscale("log")
    ticks = _log_ticks(lo, hi)
    ax.set_ylim(ticks[0] / 1.1, ticks[-1] * 1.1)
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _log_ticks(lo: float, hi: float, most: int = 8) -> list[float]:
    """Round values from the largest at or below `lo` to the smallest at or above `hi`: 1, 2 and 5
    times powers of ten, or only the powers (every k-th) where those would be more than `most`."""
    first, last = int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi)))
    for mantissas, step in (((1, 2, 5), 1), ((1,), 1), ((1,), 2), ((1,), 3), ((1,), 5)):
        candidates = [m * 10.0 ** k for k in range(first, last + 1, step) for m in mantissas] + [10.0 ** (last + step)]
        below = max(t for t in candidates if t <= lo)
        above = min(t for t in candidates if t >= hi)
        ticks = [t for t in candidates if below <= t <= above]
        if len(ticks) <= most:
            return ticks
    return ticks


def shown_tick_labels(axis) -> list:
    """The major tick labels an axis draws (with text, in its view), as last laid out."""
    lo, hi = sorted(axis.get_view_interval())
    ticks = axis.get_major_ticks()[:len(axis.get_majorticklocs())]  # the objects beyond hold stale labels
    return [tick.label1 for tick in ticks if tick.label1.get_visible() and tick.label1.get_text()
            and lo <= tick.get_loc() <= hi]


def _turn_crowded_labels(fig) -> bool:
    """Turn upright the x tick labels of an axes where side by side two would overlap (a grid's values
    crowd at one end of a log axis); whether any were."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    turned = False
    for ax in fig.axes:
        labels = [label for label in shown_tick_labels(ax.xaxis) if label.get_rotation() != 90]
        boxes = sorted((label.get_window_extent(renderer) for label in labels), key=lambda b: b.x0)
        if any(a.x1 > b.x0 for a, b in zip(boxes, boxes[1:])):
            ax.tick_params(axis="x", labelrotation=90)
            turned = True
    return turned


def save(fig, out, rect=(0, 0, 1, 1)) -> None:
    """Write `out` (.pdf) and the .png beside it, each atomically; the panels fill `rect` (figure
    fractions: left, bottom, right, top)."""
    out = str(out)
    stem = out[: -len(".pdf")] if out.endswith(".pdf") else out
    constrained = isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)  # (the successors' figure)
    for _ in range(2):  # laid out, then again where crowded labels were turned
        if not constrained:  # a constrained layout places itself
            fig.tight_layout(rect=rect)
        if not _turn_crowded_labels(fig):
            break
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
