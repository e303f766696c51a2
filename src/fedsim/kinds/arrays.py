"""A user's own .npz of arrays (fedsim.data.arrays): x (n x d features or n x C x H x W images), y (n
integer labels), optional device ids and test marks. Without device ids it is one pool, which a
partition deals to devices; MCLR is its default model either way."""

from ..data.arrays import DEFAULTS, describe
from ..data.keys import TRAIN_FRACTION
from ..specs import Kind, KindCommand


def build(entry, files, out, name):
    from ..data.arrays import import_arrays
    from ..data.format import FederatedDataset

    npz = files[0]
    prov = import_arrays(npz, out, name=name, train_fraction=float(entry["train_fraction"]), seed=entry["seed"],
                         classes=entry.get("classes"))
    with FederatedDataset(out) as dataset:
        return (f"{prov['rows']} rows of {npz}, {dataset.num_devices} device(s) ({prov['devices']}), "
                f"{dataset.kind} {tuple(dataset.feature_shape)}, {dataset.num_classes} classes; "
                f"{int(dataset.train_sizes.sum())} train / {int(dataset.test_sizes.sum())} test rows")


KIND = Kind(
    "arrays", None,
    keys={"npz": {"type": "string", "minLength": 1},
          "train_fraction": {**TRAIN_FRACTION, "default": DEFAULTS["train_fraction"],
                             "description": "without `test`: each device's share of train rows, LEAF's per-user "
                                            "split"},
          "seed": {"type": "integer", "minimum": 0, "default": DEFAULTS["seed"], "description": "the split's seed"},
          "classes": {"type": "integer", "minimum": 2,
                      "description": "number of classes: labels 0 .. classes - 1 (default: largest label + 1)"}},
    required=("npz",), own_files="npz", model="mclr", describe=lambda entry: describe(entry["npz"]), build=build,
    mem_mb=8192, runtime=20, words="imported from .npz arrays",
    command=KindCommand("import-arrays", "a user's .npz of arrays (x, y; optional device, test) as HDF5",
                        files={"npz": ("raw", dict(required=True, help="x: n x d features or n x C x H x W images; y: "
                                                                       "n integer labels; device: n device ids (none: "
                                                                       "a pool, one device); test: n booleans"))},
                        dataset_name="arrays"))
