"""A Dirichlet label partition of another dataset entry's train and test rows (its `pool`) into
`devices` devices: per class over the devices (flwr-datasets' DirichletPartitioner) or per device
over the classes (Hsu et al. 2019), fedsim.data.partition. Its samples and model are its pool's."""

from ..data.keys import TRAIN_FRACTION
from ..data.partition import DEFAULTS, REPEATS, SCHEMES
from ..specs import Kind, KindCommand

PER_CLASS_KEYS = ("self_balancing", "max_retries")  # the per_class scheme's own


def build(entry, files, out, name):
    import numpy as np

    from ..data.format import FederatedDataset
    from ..data.partition import write_dirichlet

    pool = files["pool"][0]
    prov = write_dirichlet(pool, out, devices=entry["devices"], alpha=float(entry["alpha"]), name=name,
                           scheme=entry["scheme"], min_partition_size=entry["min_partition_size"],
                           train_fraction=float(entry["train_fraction"]), seed=entry["seed"], repeats=entry["repeats"],
                           **{key: entry.get(key, DEFAULTS[key]) for key in PER_CLASS_KEYS})
    with FederatedDataset(out) as dataset:
        sizes = dataset.train_sizes + dataset.test_sizes
    print(f"{name}: {prov['pool']['repeated_rows_dropped']} rows of the pool repeat an earlier one: "
          + ("dropped" if entry["repeats"] == "drop" else "kept (repeats: keep)"))
    return (f"{entry['devices']} devices from {prov['pool']['samples']} samples of {pool} "
            f"({entry['scheme']}, alpha {float(entry['alpha']):g}, seed {entry['seed']}, {prov['draws']} draw(s)); "
            f"samples per device {sizes.min()}-{sizes.max()} (median {np.median(sizes):g}), "
            f"{prov['unused_samples']} dealt to none")


def reads(entry):
    """The keys its build reads: the per_class scheme's own only for it (editing them rebuilds no per_device
    partition)."""
    return [key for key in entry if entry["scheme"] == "per_class" or key not in PER_CLASS_KEYS]


def check_pool(entry, samples):
    from ..data.partition import check_settings

    check_settings(samples, entry["devices"], entry["alpha"], scheme=entry["scheme"],
                   min_partition_size=entry["min_partition_size"], max_retries=entry["max_retries"])


def detail(entry) -> str:
    return f"of {entry.get('pool')}, alpha = {float(entry['alpha']):g}"


KIND = Kind(
    "dirichlet", None,
    keys={"pool": {"$ref": "#/definitions/name", "description": "the entry whose rows are pooled"},
          "devices": {"type": "integer", "minimum": 1, "description": "N, the devices the pool is dealt to"},
          "alpha": {"type": "number", "exclusiveMinimum": 0, "description": "the Dirichlet concentration"},
          "scheme": {"type": "string", "enum": list(SCHEMES), "default": DEFAULTS["scheme"],
                     "description": "per_class: each class over the devices (flwr-datasets' DirichletPartitioner); "
                                    "per_device: each device over the classes, equal sizes (Hsu et al. 2019)"},
          "min_partition_size": {"type": "integer", "minimum": 1, "default": DEFAULTS["min_partition_size"],
                                 "description": "the fewest samples a device may get"},
          "self_balancing": {"type": "boolean", "default": DEFAULTS["self_balancing"],
                             "description": "per_class: a device over the mean size gets no more classes"},
          "max_retries": {"type": "integer", "minimum": 0, "default": DEFAULTS["max_retries"],
                          "description": "per_class: new draws while a device is under the minimum, then refused"},
          "repeats": {"type": "string", "enum": list(REPEATS), "default": DEFAULTS["repeats"],
                      "description": "a sample the pool holds more than once: dealt once (drop) or every time "
                                     "(keep; an image may then train on one device and test on another)"},
          "train_fraction": {**TRAIN_FRACTION, "default": DEFAULTS["train_fraction"],
                             "description": "each device's share of train rows, LEAF's per-user split"},
          "seed": {"type": "integer", "minimum": 0, "default": DEFAULTS["seed"], "description": "the deal's seed"}},
    required=("pool", "alpha", "devices"), pools=True, poolable=False, built=True, build=build, reads=reads,
    check_pool=check_pool, mem_mb=8192, runtime=30, words="Dirichlet label partitions", detail=detail,
    command=KindCommand("partition-dirichlet", "a Dirichlet label partition of a dataset's rows into N devices, "
                                               "as HDF5",
                        files={"pool": ("pool", dict(required=True, help="the dataset file whose train and test "
                                                                         "rows are pooled"))},
                        dataset_name="dirichlet"))
