"""A dataset entry of a workflow config, as its kind (fedsim.kinds) declares it: the entry with its
kind's shared settings, the files its build reads, its samples, model and fit. No torch: the
workflow reads this at every snakemake call; only the planning imports this module.
"""

from __future__ import annotations

from ..specs import IMAGE, Kind, model_spec  # noqa: F401  (Kind: where plugin kinds written before fedsim.kinds import it)
from ..kinds import KINDS


# ---- A dataset entry of a config: what it is built from, its samples and its model

def resolved_entry(cfg, dataset) -> dict:
    """A dataset entry with the settings its kind's entries share (Kind.shared: the config's
    `synthetic:`) where it sets none of its own."""
    entry = cfg["datasets"][dataset]
    shared = KINDS[entry["kind"]].shared
    return {**cfg.get(shared, {}), **entry} if shared else dict(entry)


def n_devices(cfg, dataset):
    """Number of devices of a dataset, where the config determines it (else None): a generated or
    partitioned set's count, or the count a built kind's entry declares (checked when the file is built)."""
    return resolved_entry(cfg, dataset).get("devices")


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
    kind = KINDS[entry["kind"]]
    if kind.pools:
        return entry_samples(cfg, entry["pool"]) if entry.get("pool") in cfg["datasets"] else None
    if kind.describe:  # its files' headers say (an unreadable file: the config check names it)
        try:
            return kind.describe(entry)["samples"]
        except ValueError:
            return None
    return kind.samples


def entry_shape(cfg, dataset) -> tuple | None:
    """One sample's shape where its entry's own files tell it before the build (Kind.describe: an .npz's
    header; a partition: its pool's), else None."""
    entry = cfg["datasets"][dataset]
    kind = KINDS[entry["kind"]]
    if kind.pools:
        return entry_shape(cfg, entry["pool"]) if entry.get("pool") in cfg["datasets"] else None
    if kind.describe:
        try:
            return tuple(kind.describe(entry)["shape"])
        except ValueError:
            return None
    return None


def kind_default_model(cfg, dataset) -> str | None:
    """The model a dataset entry trains without a `model:`: its kind's (a partition: its pool's kind's);
    None where its built file decides (a JSON import: MCLR for features, the LSTMs for their tokens)."""
    entry = cfg["datasets"][dataset]
    if KINDS[entry["kind"]].pools:
        return kind_default_model(cfg, entry["pool"]) if entry.get("pool") in cfg["datasets"] else None
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


def own_model(cfg, dataset) -> str | None:
    """The model a dataset entry's runs name, or None where it trains its kind's default: a run's folder
    names its model wherever the default is not used, so that two models never share a run folder."""
    model = cfg["datasets"][dataset].get("model")
    return None if model is None or model == kind_default_model(cfg, dataset) else model


def fit_problem(cfg, dataset) -> str | None:
    """What is wrong with a dataset entry's model for its samples, or None."""
    model, samples = entry_model(cfg, dataset), entry_samples(cfg, dataset)
    if model is None:
        return None
    spec = model_spec(model)
    if not spec.takes(samples):
        return f"{model} takes {' or '.join(spec.samples)} samples; {dataset}'s samples are {samples}"
    shape = entry_shape(cfg, dataset) if samples == IMAGE else None
    problem = spec.image_problem(shape)
    return f"{model} cannot take {dataset}'s {'x'.join(map(str, shape))} (C x H x W) images: {problem}" if problem else None
