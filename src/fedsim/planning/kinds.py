"""The data kinds of a workflow config, as the planning sees them: what each builds, and a dataset
entry's samples, model and fit. No torch: the workflow reads this at every snakemake call.

A kind (a dataset entry's `kind:`) builds files of one file kind (fedsim.specs.FILE_KINDS: their
samples and default model), or of a kind known only once built (a JSON import: its file's; a
Dirichlet partition: its pool's). It declares whether a partition may pool its rows, whether it is
built from raw files or other datasets, its raw sources and what an MCLR run on it costs. Only the
planning imports this module: editing it (a cost figure, say) reruns no run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..arrays import describe
from ..specs import FILE_KINDS, TOKEN_SAMPLES, import_plugin, model_spec, plugin_files


@dataclass(frozen=True)
class Kind:
    """A dataset entry's kind, as the planning sees it."""

    name: str
    file_kind: str | None   # the kind of the files it builds (fedsim.specs.FILE_KINDS); None: known once built
    poolable: bool = True   # a Dirichlet partition may pool its rows (Sent140's word ids mean nothing
                            # without its file's embedding; fedsim.partition refuses its files too)
    built: bool = False     # built from raw files or other datasets (datasets.csv lists them)
    # The files its rule reads, by input name: raw sources (`sources:` of the config; "raw" replaced by
    # the files of the entry's key `own_files` where it names some: FEMNIST's LEAF JSON, an .npz), the
    # files of entry keys of their own (`named_files`: a JSON import's train and test), the dataset it
    # pools (`pools`: a Dirichlet partition's). fedsim.planning.kinds.inputs reads them; common.smk
    # makes them paths.
    sources: dict = field(default_factory=dict)
    own_files: str | None = None
    named_files: tuple[str, ...] = ()
    pools: bool = False
    # an MCLR run's seconds per selected device and local epoch, evaluation included (fedsim.planning.cost)
    mclr_device_epoch_s: float = 0.001
    # A kind declared in a file of its own (a plugin's kinds/<name>.py): its entry's keys, as JSON
    # schema properties (a `default` fills an entry that leaves the key out; `required`: a list of
    # keys), and its builder, build(entry, files, out, name) -> one line for the log, which writes
    # the dataset file (fedsim.data.write_dataset); `files`: its entry's `own_files`. The workflow's
    # build_dataset rule runs it (`fedsim build-dataset`). fedsim's own kinds have rules of their own.
    keys: dict = field(default_factory=dict)
    required: tuple[str, ...] = ()
    build: Callable | None = None
    # How the report names its datasets (fedsim.planning.captions): what the kind is, in a few words,
    # and an entry's own settings beyond its device count, detail(entry) -> text
    words: str | None = None
    detail: Callable | None = None

    @property
    def samples(self) -> str | None:
        return FILE_KINDS[self.file_kind][0] if self.file_kind else None

    @property
    def default_model(self) -> str | None:
        return FILE_KINDS[self.file_kind][1] if self.file_kind else None


def _synthetic_detail(entry) -> str:  # the schema requires iid, alpha and beta
    return "IID" if entry["iid"] else f"alpha = {_number(entry['alpha'])}, beta = {_number(entry['beta'])}"


def _dirichlet_detail(entry) -> str:
    return f"of {entry.get('pool')}, alpha = {_number(entry['alpha'])}"


def _number(x) -> str:
    return f"{float(x):g}"


KINDS = {kind.name: kind for kind in (
    Kind("synthetic", "synthetic", mclr_device_epoch_s=0.00025, words="generated as in the FedProx paper",
         detail=_synthetic_detail),
    Kind("json", None, named_files=("train", "test"), words="imported from LEAF-format JSON files"),
    Kind("femnist", "femnist", built=True, sources={"raw": ("nist_by_class",)}, own_files="json",
         words="LEAF's FEMNIST (the paper's: 10 letters)"),
    Kind("femnist62", "femnist", built=True, sources={"raw": ("nist_by_class", "nist_by_write")}, own_files="json",
         words="LEAF's FEMNIST (62 classes)"),
    Kind("shakespeare", "shakespeare", built=True, sources={"raw": ("shakespeare",)}, words="LEAF's Shakespeare"),
    Kind("sent140", "sent140", poolable=False, built=True, sources={"raw": ("sent140",), "glove": ("glove",)},
         words="LEAF's Sent140"),
    Kind("dirichlet", None, poolable=False, built=True, pools=True, words="Dirichlet label partitions",
         detail=_dirichlet_detail),
    Kind("arrays", None, own_files="npz",   # a user's .npz: features or images, as its `x` says (fedsim.arrays)
         words="imported from .npz arrays"),
)}


def _plugin_kinds() -> dict[str, Kind]:
    """The KIND of each file of the plugins' kinds/ folders (fedsim.specs.plugin_dirs), by name: a
    file's name is its kind's (its path in PLUGIN_KIND_FILES)."""
    found = {}
    for path in plugin_files("kinds"):
        module = import_plugin("kinds", path)
        kind = getattr(module, "KIND", None)
        if not isinstance(kind, Kind) or kind.name != path.stem:
            raise ImportError(f"{path}: a kind file declares KIND = Kind({path.stem!r}, ...) (fedsim.planning.kinds)")
        if kind.name in KINDS or kind.name in found:
            raise ImportError(f"{path}: the kind {kind.name} is declared already")
        if kind.build is None:
            raise ImportError(f"{path}: kind {kind.name} declares no build(entry, files, out, name)")
        found[kind.name] = kind
        PLUGIN_KIND_FILES[kind.name] = path
    return found


PLUGIN_KIND_FILES: dict[str, Path] = {}  # a plugin kind's file, by kind (its code, fingerprinted for its build)
KINDS.update(_plugin_kinds())
BUILT_KINDS = tuple(name for name, kind in KINDS.items() if kind.built)
# the kinds whose samples are token ids, which only their own model reads
TOKEN_KINDS = tuple(name for name, kind in KINDS.items() if kind.samples in TOKEN_SAMPLES)


# ---- A dataset entry of a config: what it is built from, its samples and its model

def inputs(cfg, dataset) -> dict[str, list[tuple[str, str]]]:
    """The files a dataset entry's build reads, by input name, each ("source", a raw source),
    ("file", a path the entry names) or ("dataset", another entry of the config), as its kind declares
    them (Kind.sources, own_files, named_files, pools)."""
    entry, kind = cfg["datasets"][dataset], KINDS[cfg["datasets"][dataset]["kind"]]
    found = {name: [("source", source) for source in names] for name, names in _source_inputs(entry, kind).items()}
    if kind.own_files and kind.own_files in entry:
        found["raw"] = [("file", path) for path in _paths(entry[kind.own_files])]
    found |= {key: [("file", path) for path in _paths(entry[key])] for key in kind.named_files}
    if kind.pools:
        found["pool"] = [("dataset", entry["pool"])]
    return found


def sources(cfg, dataset) -> list[str]:
    """The raw sources a dataset entry's own build reads."""
    entry = cfg["datasets"][dataset]
    return [source for names in _source_inputs(entry, KINDS[entry["kind"]]).values() for source in names]


def _source_inputs(entry, kind) -> dict[str, tuple[str, ...]]:
    """The kind's raw sources by input name, but "raw" where the entry names files of its own instead."""
    own = kind.own_files is not None and kind.own_files in entry
    return {name: names for name, names in kind.sources.items() if not (own and name == "raw")}


def _paths(value) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def entry_samples(cfg, dataset) -> str | None:
    """What one sample of the config's dataset `dataset` is (a partition: its pool's); None where
    only its built file can say (a JSON import)."""
    entry = cfg["datasets"][dataset]
    if entry["kind"] == "dirichlet":
        return entry_samples(cfg, entry["pool"]) if entry.get("pool") in cfg["datasets"] else None
    if entry["kind"] == "arrays":  # its x's header says (an unreadable file: the config check names it)
        try:
            return describe(entry["npz"])["samples"]
        except ValueError:
            return None
    return KINDS[entry["kind"]].samples


def kind_default_model(cfg, dataset) -> str | None:
    """The model a dataset entry trains without a `model:`: its kind's (a partition: its pool's kind's);
    None where its built file decides (a JSON import: MCLR for features, the LSTMs for their tokens)."""
    entry = cfg["datasets"][dataset]
    if entry["kind"] == "dirichlet":
        return kind_default_model(cfg, entry["pool"]) if entry.get("pool") in cfg["datasets"] else None
    if entry["kind"] == "arrays":  # features or images: MCLR either way
        return "mclr"
    return KINDS[entry["kind"]].default_model


def entry_model(cfg, dataset) -> str | None:
    """The model a dataset entry's runs train: its `model:`, else its kind's default (None: its file's)."""
    return cfg["datasets"][dataset].get("model") or kind_default_model(cfg, dataset)


def entry_dissimilarity(cfg, dataset) -> bool:
    """Whether a dataset entry's runs compute the metrics' gradient dissimilarities: its `dissimilarity:`,
    else its model's default (fedsim.specs.ModelSpec; a JSON import's file default counts as MCLR's)."""
    value = cfg["datasets"][dataset].get("dissimilarity")
    if value is not None:
        return bool(value)
    model = entry_model(cfg, dataset)
    return model is None or model_spec(model).dissimilarity


def trains_linear_softmax(cfg, dataset) -> bool:
    """Whether a dataset entry's runs train an MCLR-like model (a JSON import's default counts as MCLR:
    a feature set's, what the config check cannot tell from its tokens before the file is built)."""
    model = entry_model(cfg, dataset)
    return model is None or model_spec(model).linear_softmax


def model_tag(cfg, dataset) -> str:
    """'' where a dataset entry trains its kind's default model, else '_<model>': a run's identity names
    its model wherever the default is not used, so that two models never share a run folder."""
    model = cfg["datasets"][dataset].get("model")
    return "" if model is None or model == kind_default_model(cfg, dataset) else f"_{model}"


def fit_problem(cfg, dataset) -> str | None:
    """What is wrong with a dataset entry's model for its samples, or None."""
    model, samples = entry_model(cfg, dataset), entry_samples(cfg, dataset)
    if model is None:
        return None
    spec = model_spec(model)
    if spec.takes(samples):
        return None
    return f"{model} takes {' or '.join(spec.samples)} samples; {dataset}'s samples are {samples}"
