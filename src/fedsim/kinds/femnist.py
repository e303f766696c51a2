"""FedProx's FEMNIST: 200 devices of 3 of the letters a-j each (their my_sample.py,
fedsim.data.leaf.femnist), from a pool of LEAF JSON files or folders (`json`) or NIST's by_class.zip."""

from ..specs import Kind, KindCommand
from ._leaf import DEVICES, FILES, FLAGS, SEED


def build(entry, files, out, name):
    import sys

    from ..data.leaf.femnist import build_femnist, read_json_pool, read_nist_pool
    from . import warn_devices

    pool, info = read_json_pool(list(files)) if "json" in entry else read_nist_pool(files[0])
    print(f"{name}: {info}")
    prov = build_femnist(pool, out, variant=entry["variant"], seed=entry["seed"], name=name, pool_info=info,
                         allow_reuse=entry["allow_reuse"])
    if prov["wrapped_draws"]:
        print(f"WARNING: {name}: {prov['repeated_samples']} samples repeat an image of their own device and "
              f"{prov['wrapped_draws']} draws ran past the end of a class: the pool "
              f"({prov['pool_used_per_class']} images per class a-j) is small for the construction", file=sys.stderr)
    warn_devices(out, entry.get("devices"))
    return f"the {entry['variant']} construction, seed {entry['seed']}"


KIND = Kind("femnist", "femnist",
            keys={"json": FILES,  # LEAF JSON files or folders (searched recursively); else NIST's by_class.zip
                  "variant": {"type": "string", "enum": ["faithful", "corrected"], "default": "faithful",
                              "description": "my_sample.py as the authors ran it, or corrected"},
                  "allow_reuse": {"type": "boolean", "default": False,
                                  "description": "build from a pool with fewer than 100 images in a class a-j "
                                                 "(refused otherwise: devices would repeat images)"},
                  "seed": SEED, "devices": DEVICES},
            sources={"raw": ("nist_by_class",)}, own_files="json", built=True, build=build, mem_mb=4096, runtime=30,
            words="LEAF's FEMNIST (the paper's: 10 letters)", paper=True,
            command=KindCommand("prepare-femnist", "FedProx's FEMNIST (a-j, 200 devices) from LEAF JSON or NIST, "
                                                   "as HDF5",
                                files={"json": ("raw", dict(nargs="+", help="LEAF JSON files or folders (searched "
                                                                            "recursively)")),
                                       "nist": ("raw", dict(help="NIST SD19 by_class.zip (instead of --json)"))},
                                flags=FLAGS, dataset_name="femnist"))
