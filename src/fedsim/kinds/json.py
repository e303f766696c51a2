"""LEAF-format JSON train and test files or folders (LEAF's, or the FedProx authors' released
data/), imported as they are (fedsim.data.leaf.leafjson): what one sample is, its file tells."""

from ..specs import Kind, KindCommand
from ._leaf import DEVICES, FILES, FLAGS, TEST_ONLY


def build(entry, files, out, name):
    from ..data.format import FederatedDataset
    from ..data.leaf.leafjson import import_leaf_json
    from . import warn_devices

    prov = import_leaf_json(files["train"], files["test"], out, name=name, kind=entry.get("sample_kind"),
                            num_classes=entry.get("classes"),
                            order=entry["order"], test_only=entry["test_only"])
    warn_devices(out, entry.get("devices"))
    with FederatedDataset(out) as dataset:
        return (f"{dataset.num_devices} devices ({prov['user_order']} order), kind {dataset.kind}, "
                f"{int(dataset.train_sizes.sum())} train / {int(dataset.test_sizes.sum())} test samples, "
                f"{dataset.num_classes} classes; {prov['test_only_devices']} users with test data only: "
                f"{'kept' if entry['test_only'] == 'keep' else 'dropped'}")


KIND = Kind(
    "json", None,
    keys={"train": FILES, "test": FILES,
          "order": {"type": "string", "enum": ["sorted", "file"], "default": "sorted",
                    "description": "device order: sorted user ids (LEAF's and the authors' read_data) or as the "
                                   "files list them"},
          "test_only": TEST_ONLY,
          "classes": {"type": "integer", "minimum": 2,
                      "description": "number of classes (default: LEAF's for the samples; synthetic: largest "
                                     "label + 1)"},
          "devices": DEVICES,
          "sample_kind": {"type": "string", "enum": ["femnist", "shakespeare", "synthetic"],
                          "description": "how to read a sample (default: told from the first one)"}},
    required=("train", "test"), named_files=("train", "test"), build=build, mem_mb=4096, runtime=20,
    words="imported from LEAF-format JSON files", paper=True,
    command=KindCommand("import-json", "LEAF-format JSON (LEAF's, or FedProx's released data) as HDF5",
                        files={"train": ("train", dict(required=True, nargs="+", help="train JSON files or folders "
                                                                                      "(.json, .json.gz)")),
                               "test": ("test", dict(required=True, nargs="+", help="test JSON files or folders"))},
                        flags={**FLAGS, "sample_kind": "--kind"}))  # paper: the authors released their data as LEAF JSON
