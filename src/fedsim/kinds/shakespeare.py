"""LEAF's Shakespeare: a device per speaking role of the Gutenberg e-book's plays, each sample 80
characters and the next one (fedsim.data.leaf.shakespeare), then LEAF's niid sampling."""

from ..specs import Kind, KindCommand
from ._leaf import FLAGS, sampled, sampling, sampling_keys


def build(entry, files, out, name):
    from ..data.leaf.shakespeare import build_shakespeare

    prov = build_shakespeare(files[0], out, name=name, **sampling(entry))
    return sampled(entry, out, name, prov, f"{prov['leaf_users']} LEAF users, text is the 1994 edition: "
                                           f"{prov['text_is_1994_edition']}")


KIND = Kind("shakespeare", "shakespeare", keys=sampling_keys(0.2, 0, 0.8), sources={"raw": ("shakespeare",)},
            built=True, build=build, mem_mb=4096, runtime=15, words="LEAF's Shakespeare", paper=True,
            command=KindCommand("prepare-shakespeare", "LEAF's Shakespeare from the Gutenberg e-book, as HDF5",
                                files={"raw": ("raw", dict(required=True, help="the e-book: 1994-01-100.zip, 100.txt "
                                                                               "or a gzipped copy"))},
                                flags=FLAGS, dataset_name="shakespeare"))
