"""What the LEAF kinds share: LEAF's niid sampling as config keys, their device count and the
log lines of a sampled build."""

FILES = {"oneOf": [{"type": "string", "minLength": 1},
                   {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}]}
DEVICES = {"type": "integer", "minimum": 1}  # the count the built file must have (K = clients_fraction x devices)
SEED = {"type": "integer", "minimum": 0, "default": 0}
TEST_ONLY = {"type": "string", "enum": ["drop", "keep"], "default": "drop"}  # writers with test rows only
SAMPLING_KEYS = ("fraction", "min_samples", "min_samples_rule", "train_fraction", "seed")


def sampling_keys(fraction, min_samples, train_fraction) -> dict:
    """LEAF's sampling at these defaults (FedProx: niid, fraction 0.2 / 0.3, more than 0 / 30 samples, split 0.8)."""
    return {"fraction": {"type": "number", "minimum": 0, "maximum": 1, "default": fraction},  # 0: every user
            "min_samples": {"type": "integer", "minimum": 0, "default": min_samples},  # LEAF's -k
            # keep users with more than (LEAF before Dec 2019, the paper's) or at least -k samples
            "min_samples_rule": {"type": "string", "enum": ["more_than", "at_least"], "default": "more_than"},
            "train_fraction": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1,
                               "default": train_fraction},
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
