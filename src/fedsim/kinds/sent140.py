"""LEAF's Sent140: a device per Twitter user of Sentiment140, each tweet 25 GloVe word ids (the
embedding rows that occur stored in the file: fedsim.data.leaf.sent140), then LEAF's niid sampling.
Its ids mean nothing without its own embedding: no partition pools it."""

from ..specs import Kind
from ._leaf import sampled, sampling, sampling_keys


def build(entry, files, out, name):
    from ..data.leaf.sent140 import build_sent140

    prov = build_sent140(files[0], files["glove"][0], out, dim=entry["glove_dim"], name=name, **sampling(entry))
    return sampled(entry, out, name, prov, f"{prov['leaf_users']} users in the CSVs, vocabulary "
                                           f"{prov['vocab_size']} GloVe words")


KIND = Kind("sent140", "sent140",
            keys={**sampling_keys(0.3, 30, 0.8),
                  "glove_dim": {"type": "integer", "enum": [50, 100, 200, 300], "default": 300}},
            sources={"raw": ("sent140",), "glove": ("glove",)}, poolable=False, built=True, build=build,
            mem_mb=8192, runtime=60, words="LEAF's Sent140", paper=True)
