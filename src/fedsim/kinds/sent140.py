"""LEAF's Sent140: a device per Twitter user of Sentiment140, each tweet 25 GloVe word ids (the
embedding rows that occur stored in the file: fedsim.data.leaf.sent140), then LEAF's niid sampling.
Its ids mean nothing without its own embedding: no partition pools it."""

from ..specs import Kind, KindCommand
from ._leaf import FLAGS, sampled, sampling, sampling_keys


def build(entry, files, out, name):
    from ..data.leaf.sent140 import build_sent140

    prov = build_sent140(files[0], files["glove"][0], out, dim=entry["glove_dim"], name=name, **sampling(entry))
    return sampled(entry, out, name, prov, f"{prov['leaf_users']} users in the CSVs, vocabulary "
                                           f"{prov['vocab_size']} GloVe words")


KIND = Kind("sent140", "sent140",
            keys={**sampling_keys(0.3, 30, 0.8),
                  "glove_dim": {"type": "integer", "enum": [50, 100, 200, 300], "default": 300,
                                "description": "GloVe vector length (the member glove.6B.<dim>d.txt)"}},
            sources={"raw": ("sent140",), "glove": ("glove",)}, poolable=False, built=True, build=build,
            mem_mb=8192, runtime=60, words="LEAF's Sent140", paper=True,
            command=KindCommand("prepare-sent140", "LEAF's Sent140 from Sentiment140 and GloVe, as HDF5",
                                files={"raw": ("raw", dict(required=True, help="trainingandtestdata.zip (or one "
                                                                               "Sentiment140 CSV)")),
                                       "glove": ("glove", dict(required=True, help="glove.6B.zip (or a GloVe .txt)"))},
                                flags={**FLAGS, "glove_dim": "--dim"}, dataset_name="sent140"))
