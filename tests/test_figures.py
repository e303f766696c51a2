"""The figures, on hand-made run records: layout, FedDANE at its tuned mu, seed bands, a
diverging curve that must not squash the others, the x-axis option and the tuning figure."""

import math
import re
from pathlib import Path

import matplotlib.collections
import matplotlib.colors
import matplotlib.legend
from matplotlib.backends.backend_agg import FigureCanvasAgg
import numpy as np
import pandas as pd
import pytest

from fedsim import cli
from fedsim.outputs import figures, styles
from fedsim.methods import ENTRIES
from fedsim.core.train import read_run, write_run

from helpers.run_records import fake_run

LOSSES = [3.0, 2.0, 1.5, 1.0, 0.8]
BLOWUP = [3.0, 5.0, 40.0, 300.0, 2000.0]


@pytest.fixture
def drawn(monkeypatch):
    """The figure objects the plotting functions would save."""
    figs = []
    monkeypatch.setattr(figures, "save", lambda fig, out, **_: figs.append(fig))
    return figs


def tuned_table(rows, method="feddane", correction="exact"):
    name = "feddane_authors" if correction == "authors" else method  # chosen_settings.csv names the variant
    return pd.DataFrame([{"dataset": d, "method": name, "clients_per_round": k,
                          "epochs": e, "rounds": r, "chosen": mu} for d, k, e, r, mu in rows])


def lines(ax):
    """A panel's curves by legend label, less the note of a curve hidden under another's line (hand-made runs
    share their losses; test_a_curve_under_another_says_so checks the note)."""
    return {re.sub(r" \(on [^()]*'s line\)$", "", line.get_label()): line for line in ax.get_lines()
            if not line.get_label().startswith("_")}


def dashes(line) -> tuple:
    """A line's dash pattern as drawn (on, off, ... in line widths); () for a solid line."""
    return tuple(line._unscaled_dash_pattern[1] or ())


def canonical(pattern: tuple) -> tuple:
    """A dash pattern up to where it starts: the same pattern begun at another dash looks the same."""
    pairs = [tuple(pattern[i:i + 2]) for i in range(0, len(pattern), 2)]
    return min(tuple(pairs[i:] + pairs[:i]) for i in range(len(pairs))) if pairs else ()


def panel_runs(tmp_path, dataset="synthetic_0_0", K=10, seeds=(0,), dane=None, alpha=0.0, iid=False):
    """FedAvg, FedProx and FedDANE (mu -> losses) runs of one setting."""
    dane = dane or {0.01: LOSSES}
    kw = dict(K=K, dataset=dataset, alpha=alpha, iid=iid)
    paths = []
    for seed in seeds:
        paths.append(fake_run(tmp_path, method="fedavg", seed=seed, losses=LOSSES, **kw))
        paths.append(fake_run(tmp_path, method="fedprox", mu=1, seed=seed, losses=LOSSES, **kw))
        paths += [fake_run(tmp_path, mu=mu, seed=seed, losses=losses, **kw) for mu, losses in dane.items()]
    return paths


def test_one_row_of_datasets_in_the_papers_order(tmp_path, drawn):
    runs = panel_runs(tmp_path, "synthetic_1_1", alpha=1.0) + panel_runs(tmp_path, "synthetic_iid", iid=True)
    figures.FIGURES["figure1"](runs, None, tmp_path / "f.pdf")
    axes = drawn[0].axes
    assert [ax.get_title() for ax in axes] == ["Synthetic IID", "Synthetic (1,1)"]
    assert drawn[0]._suptitle.get_text() == "K = 10, E = 20, rounds = 4; one seed"
    assert set(lines(axes[0])) == {"FedAvg", "FedProx (μ=1)", "FedDANE (μ=0.01)"}


def test_a_generated_set_unlike_the_papers_says_how_in_its_title():
    """A scaled-up Synthetic (1,1) must not read as the paper's: what its generator set otherwise is named."""
    paper = {"generator": "fedsim.synthetic", "iid": False, "alpha": 1.0, "beta": 1.0, "num_devices": 30,
             "num_features": 60, "num_classes": 10, "seed": 0, "train_fraction": 0.9}
    title = lambda **prov: figures.dataset_title({"dataset": {"name": "mine", "provenance": {**paper, **prov}}})
    assert title() == "Synthetic (1,1)"
    assert title(num_devices=1000, seed=3) == "Synthetic (1,1), 1000 devices, seed 3"
    assert title(iid=True, num_features=100, num_classes=5) == "Synthetic IID, 100 features, 5 classes"
    assert title(train_fraction=0.8) == "Synthetic (1,1), train fraction 0.8"


def test_a_round_axis_has_whole_rounds_only(tmp_path, drawn):
    """A short run (here 4 rounds, the quick run's 20) is not ticked at half or 2.5 rounds."""
    figures.FIGURES["figure1"](panel_runs(tmp_path), None, tmp_path / "f.pdf")
    ax = drawn[0].axes[0]
    ax.figure.canvas.draw()
    low, high = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if low <= t <= high]
    assert len(ticks) >= 3 and all(float(t).is_integer() for t in ticks), ticks


def test_participation_grid_has_a_row_per_dataset_and_a_column_per_k(tmp_path, drawn):
    runs = [p for d in ("synthetic_iid", "synthetic_0_0") for k in (1, 5, 30)
            for p in panel_runs(tmp_path, d, K=k, iid=d == "synthetic_iid")]
    figures.FIGURES["figure2"](runs, None, tmp_path / "f.pdf")
    axes = drawn[0].axes
    assert len(axes) == 6
    assert [ax.get_title() for ax in axes[:3]] == [f"Synthetic IID, K = {k}" for k in (1, 5, 30)]
    assert axes[3].get_title() == "Synthetic (0,0), K = 1"


def test_feddane_is_shown_at_the_tuned_mu_of_its_setting(tmp_path, drawn):
    runs = panel_runs(tmp_path, dane={0: BLOWUP, 0.1: LOSSES, 1: LOSSES})
    figures.FIGURES["figure1"](runs, tuned_table([("synthetic_0_0", 10, 20, 4, 0.1)]), tmp_path / "f.pdf")
    assert "FedDANE (μ=0.1)" in lines(drawn[0].axes[0])
    with pytest.raises(ValueError, match="several values"):
        figures.FIGURES["figure1"](runs, None, tmp_path / "f.pdf")


def test_both_feddanes_are_shown_each_at_its_own_tuned_mu(tmp_path, drawn):
    runs = panel_runs(tmp_path, dane={0: BLOWUP, 0.1: LOSSES, 1: LOSSES})
    runs += [fake_run(tmp_path, mu=mu, losses=LOSSES, correction="authors") for mu in (0, 1)]
    tuned = pd.concat([tuned_table([("synthetic_0_0", 10, 20, 4, 0.1)]),
                       tuned_table([("synthetic_0_0", 10, 20, 4, 1)], correction="authors")])
    figures.FIGURES["figure1"](runs, tuned, tmp_path / "f.pdf")
    assert set(lines(drawn[0].axes[0])) == {"FedAvg", "FedProx (μ=1)", "FedDANE (μ=0.1)",
                                            "FedDANE, authors' correction (μ=1)"}
    figures.tuning_figure(runs, tuned, tmp_path / "t.pdf", fraction=0.5)
    stars = {line.get_color(): line.get_xdata()[0] for line in drawn[1].axes[0].get_lines()
             if line.get_marker() == "*"}
    assert stars == {figures.COLORS["feddane"]: 0.1, figures.COLORS["feddane_authors"]: 1}


def test_seeds_give_a_mean_and_a_band(tmp_path, drawn):
    runs = panel_runs(tmp_path, seeds=(0, 1))
    runs.append(fake_run(tmp_path, mu=0.01, seed=2, losses=[3.0, 1.0, 1.0, 1.0, 1.0]))
    figures.FIGURES["figure1"](runs, None, tmp_path / "f.pdf")
    ax = drawn[0].axes[0]
    bands = [c for c in ax.collections if isinstance(c, matplotlib.collections.PolyCollection)]
    assert len(bands) == 3  # one per method
    dane = lines(ax)["FedDANE (μ=0.01)"]
    assert dane.get_ydata()[1] == pytest.approx((2.0 + 2.0 + 1.0) / 3)


def test_a_curve_that_returns_into_the_range_comes_down_from_the_edge(tmp_path, drawn):
    """FedDANE above the range at rounds 1-2 and back at round 3: it rises to the edge at round 1 (a
    triangle), is not drawn at round 2, and a segment comes down from the edge at round 2 (a downward
    triangle) to its loss at round 3; its own points stay its rounds'."""
    runs = panel_runs(tmp_path, dane={0.01: [3.0, 50.0, 60.0, 2.0, 1.0]})
    figures.FIGURES["figure1"](runs, None, tmp_path / "f.pdf")
    ax = drawn[0].axes[0]
    top = ax.get_ylim()[1]
    [dane] = [line for label, line in lines(ax).items() if label.startswith("FedDANE")]
    drawn_y = list(dane.get_ydata())
    assert drawn_y[:2] == [3.0, pytest.approx(top)] and math.isnan(drawn_y[2]) and drawn_y[3:] == [2.0, 1.0]
    color = figures.COLORS["feddane"]
    marks = {line.get_marker(): list(line.get_xdata()) for line in ax.get_lines()
             if line.get_color() == color and line.get_marker() in ("^", "v")}
    assert marks == {"^": [1], "v": [2]}
    descents = [line for line in ax.get_lines() if line.get_color() == color and line is not dane
                and line.get_marker() in ("None", "", None)]
    assert [(list(d.get_xdata()), list(d.get_ydata())) for d in descents] == [([2, 3], [pytest.approx(top), 2.0])]


def test_a_one_round_excursion_has_its_rise_only_and_no_empty_mark(tmp_path, drawn):
    """Above the range at round 1 alone: one triangle, up; the descent is drawn, and no empty unclipped line is
    left (its box would sit at the figure's corner and break the layout)."""
    runs = panel_runs(tmp_path, dane={0.01: [3.0, 50.0, 2.0, 1.5, 1.0]})
    figures.FIGURES["figure1"](runs, None, tmp_path / "f.pdf")
    ax = drawn[0].axes[0]
    color = figures.COLORS["feddane"]
    marks = {line.get_marker(): list(line.get_xdata()) for line in ax.get_lines()
             if line.get_color() == color and line.get_marker() in ("^", "v")}
    assert marks == {"^": [1]}
    assert all(len(line.get_xdata()) for line in ax.get_lines() if not line.get_clip_on())


def test_a_curve_under_another_says_so(tmp_path, drawn):
    """FedProx within a line width of FedAvg all along: its legend entry says it lies on FedAvg's line;
    FedDANE, apart from both, says nothing."""
    runs = [fake_run(tmp_path, method="fedavg", losses=LOSSES),
            fake_run(tmp_path, method="fedprox", mu=1.0, losses=[v * 1.002 for v in LOSSES]),
            fake_run(tmp_path, mu=0.01, losses=[3.0, 2.5, 2.2, 2.0, 1.9])]
    figures.FIGURES["figure1"](runs, None, tmp_path / "f.pdf")
    labels = [t.get_text() for t in drawn[0].axes[0].get_legend().get_texts()]
    assert labels == ["FedAvg", "FedProx (μ=1) (on FedAvg's line)", "FedDANE (μ=0.01)"]


def test_a_diverging_curve_does_not_squash_the_others(tmp_path, drawn):
    runs = panel_runs(tmp_path, dane={0.01: BLOWUP[:3] + [math.inf, math.inf]})
    figures.FIGURES["figure1"](runs, None, tmp_path / "f.pdf")
    ax = drawn[0].axes[0]
    assert ax.get_ylim() == (0, pytest.approx(1.15 * 3.0))
    markers = {line.get_marker() for line in ax.get_lines()}
    assert {"^", "x"} <= markers  # leaves the range; diverged
    # the curve rises to the top edge where it leaves (round 1), is not drawn above it (along the edge it
    # read as a plateau), its cross sits on the edge at round 3, where it diverged, and its legend says all
    [dane] = [line for label, line in lines(ax).items() if label.startswith("FedDANE")]
    drawn_y = list(dane.get_ydata())
    assert drawn_y[:2] == [3.0, pytest.approx(1.15 * 3.0)] and all(math.isnan(v) for v in drawn_y[2:])
    assert [(x, color) for color, x, _ in crosses(ax)] == [(3, figures.COLORS["feddane"])]
    assert dane.get_label() == "FedDANE (μ=0.01): ✕ diverged at round 3\n▲ up to 40, ends at 40"
    assert ax.get_legend().get_texts()[2].get_text() == dane.get_label()
    legend, axes_box = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.y1 <= axes_box.y0  # below the panel: it covers no curve


def crosses(ax):
    """The diverged marks: (colour, x, display y) of each cross."""
    marks = []
    for line in ax.get_lines():
        if line.get_marker() == "x":
            for x, y in zip(line.get_xdata(), line.get_ydata()):
                marks.append((line.get_color(), x, round(float(line.get_transform().transform((x, y))[1]), 1)))
    return marks


def test_a_figure_of_only_diverged_runs_is_drawn_and_says_so(tmp_path, drawn):
    """Both runs diverge at round 1: each cross sits at round 1, neither hides the other, the x axis
    spans the planned rounds, and the legend says diverged."""
    nan = math.nan
    runs = [fake_run(tmp_path, method="fedavg", losses=[3.0, nan, nan, nan, nan]),
            fake_run(tmp_path, mu=0.01, losses=[3.0, math.inf, math.inf, math.inf, math.inf])]
    figures.FIGURES["figure1"](runs, None, tmp_path / "f.pdf")
    ax = drawn[0].axes[0]
    lo, hi = ax.get_xlim()
    assert lo <= 0 and hi >= 4
    marks = crosses(ax)
    assert sorted(color for color, _, _ in marks) == sorted(figures.COLORS[m] for m in ("fedavg", "feddane"))
    assert all(x == 1 for _, x, _ in marks)
    assert len({y for _, _, y in marks}) == 2  # one above the other, both visible
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert texts == ["FedAvg: ✕ diverged at round 1", "FedDANE (μ=0.01): ✕ diverged at round 1"]


def test_a_figure_of_runs_not_finite_from_round_0_blames_the_data(tmp_path, drawn):
    """NaN data: every loss is NaN from the initial model on. Drawn, not a crash; the legend names the
    data, not a divergence."""
    runs = [fake_run(tmp_path, method="fedavg", losses=[math.nan] * 5),
            fake_run(tmp_path, mu=0.01, losses=[math.nan] * 5)]
    figures.FIGURES["figure1"](runs, None, tmp_path / "f.pdf")
    ax = drawn[0].axes[0]
    lo, hi = ax.get_xlim()
    assert lo <= 0 and hi >= 4
    assert sorted(x for _, x, _ in crosses(ax)) == [0, 0]
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert texts == ["FedAvg: ✕ not finite at round 0 (the data or the initial model)",
                     "FedDANE (μ=0.01): ✕ not finite at round 0 (the data or the initial model)"]


def test_coinciding_curves_differ_in_dash_pattern_and_the_title_names_the_band(tmp_path, drawn):
    """FedProx at mu = 1 equal to FedAvg (Figure 3's sets): two patterns, both visible."""
    figures.FIGURES["figure3"](panel_runs(tmp_path, seeds=(0, 1)), None, tmp_path / "f.pdf")
    ax = drawn[0].axes[0]
    patterns = {label: dashes(line) for label, line in lines(ax).items()}
    assert patterns["FedAvg"] != patterns["FedProx (μ=1)"] and len(set(patterns.values())) == 3
    assert drawn[0]._suptitle.get_text().endswith("line: mean of 2 seeds, band: min-max")


def test_every_method_and_variant_has_a_colour_and_a_dash_pattern_of_its_own():
    """fedsim.outputs.styles declares a style for each entry of the registry (methods and variants), and for
    nothing else: no two share a colour, and no two a dash pattern, even one begun at another dash;
    no fallback colour is a declared one."""
    assert list(styles.STYLES) == list(styles.LEGEND) and set(styles.STYLES) == set(ENTRIES)
    colours = {name: matplotlib.colors.to_rgba(s.color) for name, s in styles.STYLES.items()}
    patterns = {name: canonical(s.dashes) for name, s in styles.STYLES.items()}
    for declared in (colours, patterns):
        shared = {s: [n for n in declared if declared[n] == s] for s in declared.values()}
        assert all(len(names) == 1 for names in shared.values()), [n for n in shared.values() if len(n) > 1]
    assert all(len(s.dashes) % 2 == 0 and all(x > 0 for x in s.dashes) for s in styles.STYLES.values())
    assert {matplotlib.colors.to_rgba(c) for c in styles.FALLBACK_COLORS}.isdisjoint(colours.values())
    assert len(set(styles.FALLBACK_COLORS)) == len(styles.FALLBACK_COLORS)


def test_a_method_without_a_declared_style_draws_solid_in_a_stable_colour_after_the_others(monkeypatch):
    """A plugin's method (or variant) fedsim.outputs.styles does not name: a fallback colour from its name
    alone (the same in every process), a solid line, in legends after every declared entry."""
    fallback = styles.style("local_only")
    assert fallback == styles.style("local_only") and fallback.dashes == ()
    assert fallback.color == styles.FALLBACK_COLORS[3703986563 % len(styles.FALLBACK_COLORS)]  # crc32, not hash()
    assert styles.style("fedprox") is styles.STYLES["fedprox"]
    monkeypatch.setattr(styles, "ENTRIES", {"aaa_plugin": None, **ENTRIES, "local_only": None})
    assert styles._legend() == (*styles.STYLES, "aaa_plugin", "local_only")


def test_a_curves_style_is_its_methods_whatever_else_is_drawn(tmp_path, drawn):
    """Not a place in a list: FedProx looks the same beside FedAvg alone and beside every other method."""
    few = [fake_run(tmp_path / "few", method=m, mu=mu, losses=LOSSES) for m, mu in (("fedavg", 0), ("fedprox", 1))]
    many = few + [fake_run(tmp_path / "many", method=m, mu=0.01, losses=LOSSES)
                  for m in ("scaffold", "feddane_decayed", "feddane_pipelined", "feddane_exact_gradient")]
    for runs in (few, many):
        figures.FIGURES["figure1"](runs, None, tmp_path / "f.pdf")
    drawn_styles = [{label: (line.get_color(), dashes(line)) for label, line in lines(fig.axes[0]).items()}
                    for fig in drawn]
    fedprox, fedavg = styles.style("fedprox"), styles.style("fedavg")
    assert drawn_styles[0]["FedProx (μ=1)"] == drawn_styles[1]["FedProx (μ=1)"] == (fedprox.color, fedprox.dashes)
    assert drawn_styles[1]["FedAvg"] == (fedavg.color, ())
    assert len(set(drawn_styles[1].values())) == len(drawn_styles[1]) == 6


def test_test_accuracy_and_communication_rounds(tmp_path, drawn):
    runs = panel_runs(tmp_path)
    figures.FIGURES["figure3"](runs, None, tmp_path / "f.pdf", metric="test_acc", x_axis="communication_rounds")
    ax = drawn[0].axes[0]
    assert ax.get_ylim() == (0, 1) and ax.get_ylabel() == "test accuracy"
    assert ax.get_xlabel() == "# communication rounds"
    assert max(lines(ax)["FedDANE (μ=0.01)"].get_xdata()) == 8  # two per round
    assert max(lines(ax)["FedAvg"].get_xdata()) == 4


def test_beyond_figure_draws_every_method_against_rounds_and_communication_rounds(tmp_path, drawn):
    runs = []
    for dataset, iid in (("synthetic_1_1", False), ("synthetic_iid", True)):
        runs += panel_runs(tmp_path, dataset, iid=iid, alpha=0.0 if iid else 1.0)
        runs += [fake_run(tmp_path, method=m, mu=mu, dataset=dataset, iid=iid, alpha=0.0 if iid else 1.0, losses=LOSSES)
                 for m, mu in (("scaffold", 0.0), ("feddane_pipelined", 0.01))]
    figures.FIGURES["beyond"](runs, None, tmp_path / "f.pdf")
    top, bottom = drawn[0].axes[:2], drawn[0].axes[2:]
    assert [ax.get_title() for ax in top] == ["Synthetic IID", "Synthetic (1,1)"] == [ax.get_title() for ax in bottom]
    assert {ax.get_xlabel() for ax in top} == {"# rounds"} and {ax.get_xlabel() for ax in bottom} == {"# communication rounds"}
    assert set(lines(top[0])) == {"FedAvg", "FedProx (μ=1)", "FedDANE (μ=0.01)", "SCAFFOLD",
                                  "FedDANE, pipelined (μ=0.01)"}
    ends = {label: max(line.get_xdata()) for label, line in lines(bottom[0]).items()}
    assert ends["FedDANE (μ=0.01)"] == 8 and ends["FedDANE, pipelined (μ=0.01)"] == 4 and ends["SCAFFOLD"] == 4


def test_tuning_figure_marks_the_chosen_mu_and_diverged_runs(tmp_path, drawn):
    runs = [fake_run(tmp_path, mu=mu, seed=s, losses=losses)
            for mu, losses in ((0, BLOWUP[:2] + [math.inf] * 3), (0.1, LOSSES), (1, [3, 2, 2, 2, 2]))
            for s in (0, 1)]
    runs += [fake_run(tmp_path, mu=mu, dataset="synthetic_iid", iid=True) for mu in (0, 0.1, 1)]
    tuned = tuned_table([("synthetic_0_0", 10, 20, 4, 0.1), ("synthetic_iid", 10, 20, 4, 0)])
    figures.tuning_figure(runs, tuned, tmp_path / "t.pdf", fraction=0.5)
    axes = drawn[0].axes
    assert [ax.get_title() for ax in axes] == ["Synthetic IID", "Synthetic (0,0)"]
    star = [line for line in axes[1].get_lines() if line.get_marker() == "*"][0]
    assert star.get_xdata()[0] == 0.1 and star.get_ydata()[0] == pytest.approx(0.9)
    assert any(line.get_marker() == "x" and list(line.get_xdata()) == [0] for line in axes[1].get_lines())


def test_tuning_curves_on_one_another_are_rings_named_under_the_panel_and_the_marks_have_keys(tmp_path, drawn):
    """FedDANE's variants on IID data tune to within a marker of FedDANE: each is drawn as a wider hollow ring
    around FedDANE's points and a note under the panel names them; the legend keys the star and the cross."""
    near = {"feddane": [3, 2, 2, 2, 1.0], "feddane_decayed": [3, 2, 2, 2, 1.005],
            "feddane_pipelined": [3, 2, 2, 2, 0.998], "feddane_authors": [3, 2, 2, 2, 0.6]}
    as_run = {m: dict(method=m) for m in near} | {"feddane_authors": dict(method="feddane", correction="authors")}
    runs = [fake_run(tmp_path, mu=mu, losses=[*losses[:4], losses[4] * (1 + mu)], **as_run[m])
            for m, losses in near.items() for mu in (0, 0.1, 1)]
    runs.append(fake_run(tmp_path, mu=10, losses=BLOWUP[:2] + [math.inf] * 3, **as_run["feddane_authors"]))
    tuned = pd.DataFrame([{"dataset": "synthetic_0_0", "method": m, "clients_per_round": 10, "epochs": 20,
                           "rounds": 4, "chosen": 0} for m in near])
    figures.tuning_figure(runs, tuned, tmp_path / "t.pdf", fraction=0.5)
    ax = drawn[0].axes[0]
    curves = lines(ax)
    assert curves["FedDANE"].get_markerfacecolor() != "none" and curves["FedDANE, authors' correction"].get_markersize() == 3
    rings = [curves[label] for label in ("FedDANE, decayed", "FedDANE, pipelined")]
    assert all(ring.get_markerfacecolor() == "none" for ring in rings)
    assert sorted(ring.get_markersize() for ring in rings) == [5.5, 8.0]
    notes = [a for a in ax.artists if isinstance(a, matplotlib.legend.Legend)]
    assert [n.get_title().get_text() for n in notes] == [
        "within a marker of FedDANE:\n  FedDANE, decayed\n  FedDANE, pipelined"]
    keys = [t.get_text() for t in ax.get_legend().get_texts()]
    assert keys[-2:] == ["chosen value", "diverged (at the top edge)"] and "FedDANE, decayed" in keys


def test_a_tuned_lr_is_drawn_at_its_choice_and_along_its_own_axis(tmp_path, drawn):
    """With an lr grid, a curve shows its method at the chosen (value, lr) pair, its legend naming the lr;
    the tuning figure gives each dataset a client-lr column beside mu's: FedDANE's row has its mu and its
    lr panel, each line through its chosen point and starred there, and FedAvg, tuned over its lr alone,
    has a row of its own with only the lr panel and its legend in the blank one."""
    loss = {(0.1, 0.01): 1.5, (0.1, 0.1): 0.9, (1, 0.01): 1.0, (1, 0.1): 2.0}
    runs = [fake_run(tmp_path, mu=mu, lr=lr, losses=[3, 2, 2, 2, v]) for (mu, lr), v in loss.items()]
    runs += [fake_run(tmp_path, method="fedavg", lr=lr, losses=[3, 2, 2, 2, v]) for lr, v in ((0.01, 1.4), (0.1, 1.2))]
    tuned = pd.DataFrame([{"dataset": "synthetic_0_0", "method": m, "clients_per_round": 10, "epochs": 20,
                           "rounds": 4, "chosen": mu, "lr": lr} for m, mu, lr in (("feddane", 0.1, 0.1),
                                                                                   ("fedavg", 0, 0.1))])
    figures.FIGURES["figure1"](runs, tuned, tmp_path / "f.pdf")
    assert set(lines(drawn[0].axes[0])) == {"FedAvg (lr=0.1)", "FedDANE (μ=0.1, lr=0.1)"}
    figures.tuning_figure(runs, tuned, tmp_path / "t.pdf", fraction=0.5)
    mu_panel, dane_lr, blank, avg_lr = drawn[1].axes
    assert [ax.get_xlabel() for ax in (mu_panel, dane_lr, avg_lr)] == ["μ", "client lr", "client lr"]
    assert set(lines(mu_panel)) == set(lines(dane_lr)) == {"FedDANE"} and set(lines(avg_lr)) == {"FedAvg"}
    assert not blank.axison and [t.get_text() for t in blank.get_legend().get_texts()] == ["FedAvg", "chosen value"]
    assert list(lines(mu_panel)["FedDANE"].get_ydata()) == [1.45, 2.0]  # at lr 0.1, the chosen (tails of 2 rounds)
    assert list(lines(dane_lr)["FedDANE"].get_ydata()) == [1.75, 1.45]  # at mu 0.1, the chosen
    stars = {(ax.get_xlabel(), line.get_color()): line.get_xdata()[0] for ax in (mu_panel, dane_lr, avg_lr)
             for line in ax.get_lines() if line.get_marker() == "*"}
    assert stars == {("μ", figures.COLORS["feddane"]): 0.1, ("client lr", figures.COLORS["feddane"]): 0.1,
                     ("client lr", figures.COLORS["fedavg"]): 0.1}


def test_cli_writes_pdf_and_png(tmp_path):
    runs = panel_runs(tmp_path)
    tuned = tmp_path / "tuned.csv"
    tuned_table([("synthetic_0_0", 10, 20, 4, 0.01)]).to_csv(tuned, index=False)
    out = tmp_path / "figs" / "figure2_test_acc.pdf"
    assert cli.main(["figure2", "--tuned", str(tuned), "--metric", "test_acc", "--out", str(out), *runs]) == 0
    assert cli.main(["tuning-figure", "--tuned", str(tuned), "--out", str(tmp_path / "figs" / "tuning.pdf"),
                     *runs]) == 0
    for name in ("figure2_test_acc", "tuning"):
        for ext in ("pdf", "png"):
            assert (tmp_path / "figs" / f"{name}.{ext}").stat().st_size > 0


def theory_run(folder, dataset, mu, rho, grad_norm_sq, losses, alpha=0.0, iid=False):
    """A FedDANE run record logged with --theory: rho and ||grad f||^2 per round (the last NaN,
    as train.run logs them: no round follows the last model)."""
    info = fake_run(folder, mu=mu, losses=losses, dataset=dataset, alpha=alpha, iid=iid)
    metrics, record = read_run(info)
    metrics["rho"], metrics["grad_norm_sq"] = [*rho, math.nan], [*grad_norm_sq, math.nan]
    record["config"]["theory"] = True
    write_run(metrics, record, Path(info).parent / "metrics.csv", info)
    return info


def test_decrease_table_pairs_each_rounds_bound_with_the_next_rounds_loss(tmp_path):
    info = theory_run(tmp_path, "synthetic_iid", 10, rho=[0.1, -0.2, 0.5], grad_norm_sq=[4.0, 1.0, 1.0],
                      losses=[3.0, 2.0, 1.5, 1.4], iid=True)
    table = figures.decrease_table(read_run(info)[0])
    assert table["round"].tolist() == [0, 1, 2]
    assert table["bound"].tolist() == pytest.approx([0.4, -0.2, 0.5])
    assert table["observed"].tolist() == pytest.approx([1.0, 0.5, 0.1])


def test_theory_figure_has_a_panel_per_dataset_and_mu_and_counts_the_bound(tmp_path, drawn):
    runs = [theory_run(tmp_path, name, mu, rho=[0.1, -0.2, 0.5], grad_norm_sq=[4.0, 1.0, 1.0],
                       losses=[3.0, 2.0, 1.5, 1.4], alpha=alpha, iid=alpha is None)
            for name, alpha in (("synthetic_1_1", 1.0), ("synthetic_iid", None)) for mu in (100, 1)]
    figures.theory_figure(runs, tmp_path / "theory.pdf")
    axes = drawn[0].axes
    # each title's second line counts the rounds (under the title: inside, it would cover an oscillating curve):
    # rounds 0 and 2 have rho > 0; round 0's decrease 1.0 meets its bound 0.4, round 2's 0.1 misses 0.5
    counts = "\nρ > 0: 2/3 rounds, bound met: 1/2"
    assert [ax.get_title() for ax in axes] == [f"Synthetic IID, μ = 1{counts}", f"Synthetic IID, μ = 100{counts}",
                                               f"Synthetic (1,1), μ = 1{counts}", f"Synthetic (1,1), μ = 100{counts}"]
    assert not axes[0].texts and axes[0].get_ylabel() == "loss decrease in a round" and not axes[1].get_ylabel()
    assert len(axes[0].patches) == 2  # the shaded rounds
    assert set(lines(axes[0])) == {"observed f(wᵗ) − f(wᵗ⁺¹)", "guaranteed ρ‖∇f(wᵗ)‖²"}


def test_theory_figure_refuses_runs_without_the_constants(tmp_path, drawn):
    with pytest.raises(ValueError, match="without the theory's constants"):
        figures.theory_figure([fake_run(tmp_path, mu=1)], tmp_path / "theory.pdf")


def test_real_diverging_runs_keep_their_curves(tmp_path, drawn):
    """The clipping rule on simulator runs: FedDANE at lr = 1 climbs far above FedAvg's range and
    stays finite, the authors' FedDANE at lr = 1e38 leaves the reals. Both curves stay drawn."""
    from fedsim.core.train import RunConfig, run
    from tiny import tiny_dataset

    base = dict(data=tiny_dataset(tmp_path / "tiny.h5"), clients_per_round=3, epochs=2, batch_size=5, rounds=12)
    runs = {}
    for name, kw in {"fedavg": dict(lr=0.05), "feddane": dict(mu=0.0, lr=1.0),
                     "feddane_authors": dict(mu=0.0, lr=1e38)}.items():
        metrics, record = run(RunConfig(method=name, **base, **kw))
        runs[name] = (metrics, tmp_path / name / "run.json")
        write_run(metrics, record, tmp_path / name / "metrics.csv", runs[name][1])
    figures.FIGURES["figure1"]([path for _, path in runs.values()], None, tmp_path / "f.pdf")
    ax = drawn[0].axes[0]
    top = ax.get_ylim()[1]
    assert top == pytest.approx(1.15 * runs["fedavg"][0]["train_loss"].max())
    climbing = runs["feddane"][0]["train_loss"]
    assert climbing.max() > 10 * top and math.isfinite(climbing.iloc[-1])
    [dane] = [line for label, line in lines(ax).items() if label.startswith("FedDANE (")]
    drawn_y = dane.get_ydata()
    assert len(drawn_y) == 13 and np.nanmax(drawn_y) == pytest.approx(top)  # rises to the edge
    above = climbing.to_numpy() > top
    assert np.isnan(drawn_y[above][1:]).all() and (drawn_y[~above] == climbing[~above]).all()  # no plateau
    assert dane.get_label().endswith(f"▲ up to {climbing.max():.3g}, ends at {climbing.iloc[-1]:.3g}")
    [authors] = [line for label, line in lines(ax).items() if label.startswith("FedDANE, authors'")]
    stop = len(runs["feddane_authors"][0]) - 1  # the round whose loss left the reals
    assert len(authors.get_xdata()) == stop + 1
    crosses = [line for line in ax.get_lines() if line.get_marker() == "x"]
    assert len(crosses) == 1 and crosses[0].get_color() == figures.COLORS["feddane_authors"]
    assert [line.get_marker() for line in ax.get_lines()].count("^") >= 1


def costed_run(folder, method, losses, K=10, dataset="synthetic_0_0", iid=False, seed=0, **kw):
    """A run record with the costs the successors' figure draws against (vectors, gradients per round)."""
    info = fake_run(folder, method=method, losses=losses, K=K, dataset=dataset, iid=iid, seed=seed, **kw)
    metrics, record = read_run(info)
    per_round = 2 * K * ENTRIES[method].method.exchanges
    metrics["vectors_down"] = metrics["vectors_up"] = metrics["round"] * per_round
    metrics["gradient_evaluations"] = metrics["round"] * 1000 * K
    write_run(metrics, record, Path(info).parent / "metrics.csv", info)
    return info


SUCCESSORS = {"fedavg": (0, [3, 2, 1.5, 1.2, 1.0]), "fedprox": (1, [3, 2.2, 1.8, 1.5, 1.4]),
              "feddane": (0.01, [3, 2.5, 2.0, 1.8, 1.7]), "dane": (0.01, [3, 1.5, 0.5, 0.3, 0.2]),
              "scaffold": (0, [3, 2, 1.0, 0.6, 0.5]), "fedopt": (0, [3, 2.6, 2.4, 2.3, 2.2])}


def test_successors_figure_draws_each_family_in_panels_of_its_own_beside_the_fields_best(tmp_path, drawn):
    runs = [costed_run(tmp_path, m, losses, K=30 if m == "dane" else 10, dataset=d, iid=d == "synthetic_iid", mu=mu)
            for d in ("synthetic_0_0", "synthetic_iid") for m, (mu, losses) in SUCCESSORS.items()]
    figures.FIGURES["successors"](runs, None, tmp_path / "s.pdf")
    blocks = drawn[0].subfigs
    assert [b._suptitle.get_text() for b in blocks] == [
        "Averaging local models: FedAvg, FedProx", "DANE's gradient correction and Newton-type: FedDANE, DANE",
        "Control variates against client drift: SCAFFOLD", "Server optimisers: FedAdam"]
    for block, family in zip(blocks, (("FedAvg", "FedProx"), ("FedDANE", "DANE"), ("SCAFFOLD",), ("FedAdam",))):
        assert len(block.axes) == 6  # rounds, vectors, gradients (rows) x the two datasets (columns)
        assert [ax.get_title() for ax in block.axes[:2]] == ["Synthetic IID", "Synthetic (0,0)"]
        for ax in block.axes:
            drawn_here = {label.split(" (")[0] for label in lines(ax) if not label.startswith("best of")}
            assert drawn_here == set(family)
            reference = [label for label in lines(ax) if label.startswith("best of")]
            # DANE has the lowest tail on both sets: beside every other family, grey, not in its own
            assert reference == ([] if "DANE" in family else ["best of 6: DANE (μ=0.01, K=30)"])
        legends = [ax.get_legend() for ax in block.axes]
        assert [legend is not None for legend in legends] == [False] * 4 + [True] * 2  # below the bottom row
        if "DANE" not in family:
            assert legends[-1].get_texts()[-1].get_text().startswith("best of 6")  # the reference last
    # a dataset's panels of one row share their ranges across the families: curves compare between blocks
    for row in range(3):
        for col in range(2):
            ranges = {(b.axes[2 * row + col].get_xlim(), b.axes[2 * row + col].get_ylim()) for b in blocks}
            assert len(ranges) == 1


@pytest.fixture
def saved(monkeypatch):
    """The figures as written: laid out (tick labels placed) by the real save."""
    figs, save = [], figures.save
    monkeypatch.setattr(figures, "save", lambda fig, out, **kw: (figs.append(fig), save(fig, out, **kw)))
    return figs


def shown_labels(fig, axis):
    """An axis's tick labels as drawn, (text, window box) each, in the axes' view only."""
    renderer = FigureCanvasAgg(fig).get_renderer()  # (a closed figure's canvas has none)
    fig.draw_without_rendering()
    return [(label.get_text(), label.get_window_extent(renderer)) for label in figures.shown_tick_labels(axis)]


def test_tuning_figure_shows_every_grid_value_and_score_with_labels_that_never_overlap(tmp_path, saved):
    """DONE's alpha grid crowds the low end of FedDyn's (0.001, 0.003, 0.01 beside 0.1, 1), DONE's scores
    sit between 1 and 2 and FedDyn's decades below; MimeLite's and FedAdam's server lr grids together
    hold 8 values, 4 decades."""
    def run(method, option, value, loss):
        return fake_run(tmp_path, method=method, losses=[3, loss], options={option: value})
    runs = [run("done", "alpha", a, loss) for a, loss in ((0.001, 1.45), (0.003, 1.47), (0.01, 1.9))]
    runs += [run("feddyn", "alpha", a, loss) for a, loss in ((0.001, 0.05), (0.01, 0.27), (0.1, 0.28), (1, 0.35))]
    runs += [run("mimelite", "server_lr", v, 0.5 + v) for v in (0.001, 0.003, 0.01, 0.03, 0.1, 1)]
    runs += [run("fedopt", "server_lr", v, 0.7 + v) for v in (0.001, 0.01, 0.1, 1, 10)]
    figures.tuning_figure(runs, None, tmp_path / "t.pdf", fraction=0.5)
    alpha, server_lr = saved[0].axes
    for ax, grid, scores in ((alpha, [0.001, 0.003, 0.01, 0.1, 1], [1.45, 1.47, 1.9, 0.05, 0.27, 0.28, 0.35]),
                             (server_lr, [0.001, 0.003, 0.01, 0.03, 0.1, 1, 10], [0.501, 0.503, 10.7])):
        assert [text for text, _ in shown_labels(saved[0], ax.xaxis)] == [f"{v:g}" for v in grid]
        bottom, top = ax.get_ylim()
        ticks = [float(text) for text, _ in shown_labels(saved[0], ax.yaxis)]
        assert min(ticks) <= min(scores) and max(scores) <= max(ticks) and bottom <= min(ticks) and max(ticks) <= top
        for score in scores:  # each read between two labelled ticks at most 2.5 times apart (1, 2, 5, 10)
            assert min(t for t in ticks if t >= score) <= 2.5 * max(t for t in ticks if t <= score)
        for axis in (ax.xaxis, ax.yaxis):
            boxes = [box for _, box in shown_labels(saved[0], axis)]
            assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:]), axis


def test_a_curve_of_one_point_is_drawn_as_a_dot():
    """A 1-round run on a log cost axis keeps one point (round 0 cost nothing): it shows as a dot,
    not as an invisible line; a longer curve stays a line."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from fedsim.outputs.figures import _curve

    record = {"result": {"diverged_round": None}}
    short = pd.DataFrame({"round": [0, 1], "train_loss": [2.0, 1.5], "vectors_up": [0, 10]})
    longer = pd.DataFrame({"round": [0, 1, 2], "train_loss": [2.0, 1.5, 1.2], "vectors_up": [0, 10, 20]})
    fig, ax = plt.subplots()
    dot = _curve(ax, [(short, record)], "train_loss", "one", "C0", x="vectors_up", log_x=True)
    line = _curve(ax, [(longer, record)], "train_loss", "two", "C1", x="vectors_up", log_x=True)
    plt.close(fig)
    assert list(dot.get_xdata()) == [10] and dot.get_marker() == "o"
    assert list(line.get_xdata()) == [10, 20] and line.get_marker() in ("None", None, "")


def test_a_log_axis_within_one_decade_labels_its_data_ends():
    """A short run's costs (20 to 40 vectors) hold no power of ten: the axis is labelled at the
    data's ends, not left bare; a range across decades keeps matplotlib's own ticks."""
    import matplotlib.pyplot as plt

    from fedsim.outputs.figures import _label_within_a_decade

    fig, (short, wide) = plt.subplots(1, 2)
    for ax, (lo, hi) in ((short, (20, 40)), (wide, (20, 4000))):
        ax.plot([lo, hi], [1, 2])
        ax.set_xscale("log")
        ax.set_xlim(lo / 1.3, hi * 1.3)
        _label_within_a_decade(ax)
    fig.canvas.draw()
    assert [t.get_text() for t in short.get_xticklabels()] == ["20", "40"]
    assert list(wide.get_xticks()) != [20, 4000]
    plt.close(fig)


def test_the_successors_figure_draws_runs_not_finite_from_round_0(tmp_path, drawn):
    """Nothing spent, nothing finite: the cost axes still get a range (min() of nothing before)."""
    runs = [costed_run(tmp_path, m, [math.nan] * 5) for m in ("fedavg", "feddane", "scaffold")]
    figures.successors_figure(runs, None, tmp_path / "s.pdf")
    rounds_axes = [ax for ax in drawn[0].axes if ax.get_xlabel() == "# rounds"]
    assert rounds_axes and all(ax.get_xlim()[0] <= 0 and ax.get_xlim()[1] >= 4 for ax in rounds_axes)
