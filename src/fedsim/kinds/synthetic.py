"""Synthetic(alpha, beta) of the FedProx paper (or its IID set), generated from a seed
(fedsim.data.synthetic); the config's top-level `synthetic:` holds the settings its entries share."""

from ..specs import Kind, KindCommand
from ..data.keys import TRAIN_FRACTION
from ..data.synthetic import DEFAULTS, MEAN_SAMPLES

SHARED_KEYS = {  # the config's `synthetic:` (an entry may set its own)
    "devices": {"type": "integer", "minimum": 1, "description": "the devices"},
    "features": {"type": "integer", "minimum": 1, "description": "a sample's features"},
    "classes": {"type": "integer", "minimum": 2, "description": "the classes"},
    "train_fraction": {**TRAIN_FRACTION, "description": "each device's share of train rows"},
    "seed": {"type": "integer", "minimum": 0, "description": "the generator's seed"},
}


def build(entry, files, out, name):
    from ..data.synthetic import write_synthetic

    write_synthetic(out, name=name, alpha=float(entry["alpha"]), beta=float(entry["beta"]), iid=entry["iid"],
                    num_devices=entry["devices"], num_features=entry["features"], num_classes=entry["classes"],
                    seed=entry["seed"], train_fraction=float(entry["train_fraction"]))
    return f"Synthetic({entry['alpha']:g}, {entry['beta']:g}){' IID' if entry['iid'] else ''}, {entry['devices']} devices"


def check(entry):
    for key in ("alpha", "beta"):
        if entry["iid"] and entry[key] != 0:
            return key, "must be 0 when iid is true"
    return None


def size_gb(entry):
    """About 4 bytes a feature and label of MEAN_SAMPLES rows a device."""
    return entry["devices"] * MEAN_SAMPLES * (entry["features"] + 1) * 4 / 1e9


def detail(entry) -> str:
    return "IID" if entry["iid"] else f"alpha = {float(entry['alpha']):g}, beta = {float(entry['beta']):g}"


KIND = Kind(
    "synthetic", "synthetic",
    keys={"iid": {"type": "boolean", "description": "the IID set (alpha and beta 0)"},
          "alpha": {"type": "number", "minimum": 0, "description": "how much the devices' models differ"},
          "beta": {"type": "number", "minimum": 0, "description": "how much the devices' data differ"}},
    required=("iid", "alpha", "beta"), build=build, check=check, size_gb=size_gb,
    mem_mb=1024, runtime=10, mclr_device_epoch_s=0.00025,
    words="generated as in the FedProx paper", detail=detail, paper=True,
    command=KindCommand("generate-synthetic", "write a Synthetic(alpha, beta) dataset as HDF5",
                        defaults={"alpha": 0.0, "beta": 0.0}),
    shared="synthetic", shared_keys={key: {**rule, "default": DEFAULTS[key]} for key, rule in SHARED_KEYS.items()})
