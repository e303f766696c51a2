"""How each method and variant looks in the figures, and its place in legends: the one declaration.

A method's file (fedsim.methods) says what the method computes and nothing of how it is drawn;
its colour, its dash pattern and its place in legends, captions and the tuning list are declared
here, in STYLES, by name: a method or variant not in it (a plugin's) still draws, with a colour from
FALLBACK_COLORS picked by a stable hash of its name, solid, after every declared one (methods in the
registry's order, each variant after its method). No training code imports this module, so a change
of colour reruns no run (fedsim.planning.jobs' code fingerprints), and it loads no torch or
matplotlib: the workflow's captions read it at every snakemake call.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from ..methods import ENTRIES


@dataclass(frozen=True)
class Style:
    color: str          # its curves' colour in every figure (a matplotlib colour)
    # its curves' dash pattern in every figure: on, off, ... lengths in line widths; () solid. Each
    # method and variant its own (tests/test_figures.py), so that curves that coincide stay two
    dashes: tuple = ()


# The metrics a curves' figure may draw (`fedsim figure1 --metric`; the workflow draws each), and their axis labels
METRICS = {"train_loss": "training loss", "test_acc": "test accuracy"}

# Every method and variant of fedsim, in legend order (a variant right after its method).
STYLES: dict[str, Style] = {
    "fedavg": Style("tab:blue"),
    "fedprox": Style("tab:green", (4, 1.5)),
    "feddane": Style("tab:red", (6, 1.5, 1, 1.5)),
    "feddane_authors": Style("tab:orange", (1, 1.5)),
    "scaffold": Style("tab:purple", (4, 4)),
    "feddane_decayed": Style("tab:brown", (9, 2, 1, 2, 1, 2)),
    "feddane_pipelined": Style("tab:pink", (2, 1.5)),
    "feddane_exact_gradient": Style("tab:gray", (14, 2)),
    "dane": Style("tab:olive", (9, 2.5)),
    "feddyn": Style("teal", (9, 2, 1, 2)),
    "sdane": Style("tab:cyan", (1, 3)),
    "sdane_accelerated": Style("midnightblue", (9, 2, 3, 2)),
    "fednova": Style("goldenrod", (6, 1.5, 1, 1.5, 1, 1.5)),
    "fedopt": Style("black", (3, 1.5)),
    "fedadagrad": Style("yellowgreen", (2, 1.5, 2, 1.5, 8, 1.5)),
    "fedyogi": Style("deepskyblue", (2, 3)),
    "fedexp": Style("magenta", (8, 4)),
    "mimelite": Style("maroon", (1, 1.5, 1, 1.5, 1, 4)),
    "mime": Style("sienna", (12, 2, 3, 2, 3, 2)),
    "done": Style("darkgreen", (4, 1.5, 4, 1.5, 1, 1.5)),
    "scaffnew": Style("olivedrab", (6, 3, 1, 3)),
}

# The colours of methods STYLES does not name: none of them a declared method's
FALLBACK_COLORS = ("crimson", "darkorange", "slateblue", "darkcyan", "orchid", "chocolate", "seagreen",
                   "royalblue", "indianred", "darkkhaki")


def style(name: str) -> Style:
    """A method's or variant's style: its declared one, else a fallback colour (stable across runs
    and machines: crc32 of the name, not Python's salted hash) and a solid line."""
    declared = STYLES.get(name)
    if declared is not None:
        return declared
    return Style(FALLBACK_COLORS[zlib.crc32(name.encode()) % len(FALLBACK_COLORS)])


def _legend() -> tuple[str, ...]:
    declared = [name for name in STYLES if name in ENTRIES]
    return tuple(declared + [name for name in ENTRIES if name not in STYLES])


LEGEND: tuple[str, ...] = _legend()   # every method and variant of the registry, in legend order
COLORS = {name: style(name).color for name in LEGEND}
LINESTYLES = {name: (0, style(name).dashes) if style(name).dashes else "-" for name in LEGEND}  # matplotlib's ls


def in_legend_order(names) -> list[str]:
    """Methods (and variants) in legend order, once each; names the registry lacks left out."""
    wanted = set(names)
    return [name for name in LEGEND if name in wanted]
