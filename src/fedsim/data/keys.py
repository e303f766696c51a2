"""Dataset keys that several kinds share, each rule declared once, and what a numeric key rule allows.

A rule is a JSON-schema property, as a kind declares its keys (fedsim.specs.Kind.keys): a kind's key
takes it (adding its own default and description), and so the config schema, the config check and the
kind's own command (fedsim.cli) refuse what it refuses; the Python API (fedsim.api) checks the same
keywords by the kinds' rules (fedsim.core.settings.key_check), and the generators (fedsim.data.synthetic)
by `allows`. No imports beyond the standard library: the kinds read it at every snakemake call.
"""

from __future__ import annotations

import math
import operator

# each device's (a LEAF user's) share of train rows, the rest its test rows: below 1, so that every
# device keeps test rows (at 1 the test split is empty and a run's test_acc reads 0 with no warning)
TRAIN_FRACTION = {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}

NUMERIC = {"integer": int, "number": float}  # a numeric rule's type: how its values are read from text
_BOUNDS = {"minimum": operator.ge, "exclusiveMinimum": operator.gt,
           "maximum": operator.le, "exclusiveMaximum": operator.lt}


def allows(rule: dict, value) -> bool:
    """Whether the number `value` is finite and within the rule's bounds."""
    return math.isfinite(value) and all(within(value, rule[bound]) for bound, within in _BOUNDS.items()
                                        if bound in rule)


def bounds(rule: dict) -> str:
    """A rule's numeric bounds in words: '>= 1', 'in [0, 1]', 'in (0, 1)' ('' where it has none)."""
    low, high = rule.get("minimum", rule.get("exclusiveMinimum")), rule.get("maximum", rule.get("exclusiveMaximum"))
    if low is not None and high is not None:
        return f"in {'[' if 'minimum' in rule else '('}{low:g}, {high:g}{']' if 'maximum' in rule else ')'}"
    if low is not None:
        return f"{'>=' if 'minimum' in rule else '>'} {low:g}"
    return f"{'<=' if 'maximum' in rule else '<'} {high:g}" if high is not None else ""


def expected(rule: dict) -> str:
    """What a numeric rule allows, in words: 'an integer >= 1', 'a finite number in (0, 1)'."""
    what = "an integer" if rule["type"] == "integer" else "a finite number"
    return f"{what} {bounds(rule)}" if bounds(rule) else what
