"""What the LEAF kinds share: LEAF's niid sampling as config keys, their device count and the
log lines of a sampled build."""

from ..data.keys import TRAIN_FRACTION

FILES = {"oneOf": [{"type": "string", "minLength": 1},
                   {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}]}
# the count the built file must have (K = clients_fraction x devices)
DEVICES = {"type": "integer", "minimum": 1,
           "description": "the device count the config declares (a warning if the file has another)"}
SEED = {"type": "integer", "minimum": 0, "default": 0, "description": "the sampling's seed"}
TEST_ONLY = {"type": "string", "enum": ["drop", "keep"], "default": "drop",
             "description": "users with test rows only: dropped (LEAF's read_data) or kept as devices without "
                            "train rows"}
FLAGS = {"devices": "--expect-devices"}  # the kinds' own commands' flag for the device count
SAMPLING_KEYS = ("fraction", "min_samples", "min_samples_rule", "train_fraction", "seed")


def sampling_keys(fraction, min_samples, train_fraction) -> dict:
    """LEAF's sampling at these defaults (FedProx: niid, fraction 0.2 / 0.3, more than 0 / 30 samples, split 0.8)."""
    return {"fraction": {"type": "number", "minimum": 0, "maximum": 1, "default": fraction,
                         "description": "LEAF's niid sampling fraction (0: every user)"},
            "min_samples": {"type": "integer", "minimum": 0, "default": min_samples,
                            "description": "LEAF's -k: the fewest samples a user may have (see min_samples_rule)"},
            "min_samples_rule": {"type": "string", "enum": ["more_than", "at_least"], "default": "more_than",
                                 "description": "keep users with more than (LEAF before Dec 2019, the paper's) "
                                                "or at least min_samples samples"},
            "train_fraction": {**TRAIN_FRACTION, "default": train_fraction,
                               "description": "each user's share of train samples"},
            "seed": SEED, "devices": DEVICES}


def sampling(entry) -> dict:
    """A builder's keywords of LEAF's sampling (fraction 0: every user)."""
    return dict(fraction=float(entry["fraction"]) or None, min_samples=entry["min_samples"],
                min_samples_rule=entry["min_samples_rule"], train_fraction=float(entry["train_fraction"]),
                seed=entry["seed"])


def sampled(entry, out, name, prov, first_line) -> str:
    """Log the build's first line, check its device count, and give LEAF's sampling line."""
    from ..data.leaf.niid import kept_line
    from . import warn_devices

    print(f"{name}: {first_line}")
    warn_devices(out, entry.get("devices"))
    return kept_line(name, prov["counts"], prov["sampling"]).removeprefix(f"{name}: ")
