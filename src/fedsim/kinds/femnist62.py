"""LEAF's own FEMNIST: 62 classes, a device per writer (fedsim.data.leaf.femnist62), from LEAF data
folders (`json`, each with train/ and test/; a writer several hold taken from the first with its
train rows) or from NIST's by_class.zip and by_write.zip, sampled as LEAF does (its small FEMNIST:
preprocess.sh -s niid --sf 0.05 -k 0 -t sample)."""

from ..specs import Kind, KindCommand
from ._leaf import FILES, FLAGS, SAMPLING_KEYS, TEST_ONLY, sampled, sampling, sampling_keys


def build(entry, files, out, name):
    from ..data.leaf.femnist62 import build_femnist62_json, build_femnist62_nist
    from . import warn_devices

    if "json" in entry:
        prov = build_femnist62_json(list(files), out, name=name, test_only=entry["test_only"])
        warn_devices(out, entry.get("devices"))
        return (f"{prov['users_in_several_sources']} writers in several folders, each taken from the first with "
                f"its train rows; {prov['test_only_devices']} writers with test rows only: "
                f"{'kept' if entry['test_only'] == 'keep' else 'dropped'}")
    prov = build_femnist62_nist(*files[:2], out, name=name, **sampling(entry))
    return sampled(entry, out, name, prov, f"{prov['writers']} writers, {prov['writer_images']} images matched to "
                                           f"a class, {prov['unmatched_images']} without one (left out)")


def reads(entry):
    """From LEAF data folders, only test_only (their sampling is done); from NIST, LEAF's sampling."""
    unread = SAMPLING_KEYS if "json" in entry else ("test_only",)
    return [key for key in entry if key not in unread]


KIND = Kind("femnist62", "femnist",
            keys={**sampling_keys(0.05, 0, 0.9), "json": FILES, "test_only": TEST_ONLY},
            sources={"raw": ("nist_by_class", "nist_by_write")}, own_files="json", built=True, build=build,
            reads=reads, mem_mb=8192, runtime=120, words="LEAF's FEMNIST (62 classes)",
            command=KindCommand("prepare-femnist62", "LEAF's own FEMNIST (62 classes, one device per writer) from "
                                                     "LEAF data folders or NIST, as HDF5",
                                files={"json": ("raw", dict(nargs="+", help="LEAF data folders, each with train/ and "
                                                                            "test/ (a writer several hold is taken "
                                                                            "from the first with its train rows)")),
                                       "nist": ("raw", dict(nargs=2, metavar=("BY_CLASS", "BY_WRITE"),
                                                            help="NIST SD19 by_class.zip and by_write.zip (instead "
                                                                 "of --json), sampled as LEAF does"))},
                                flags=FLAGS, dataset_name="femnist62"))
