"""The data kinds: a dataset entry's `kind:`, one file each, fedsim's here and a user's own in a
plugin folder's kinds/ (FEDSIM_PLUGINS). A kind's file declares its KIND (fedsim.specs.Kind): its
config keys, the files its build reads, its build, its samples and default model. The schema, the
config check, the workflow's one build_dataset rule and `fedsim build-dataset` take every kind from
here; no code outside this folder names one.

No torch: the planning reads the kinds at every snakemake call (a kind's build imports its builder).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from ..specs import Kind, PLUGINS_ENV, TOKEN_SAMPLES, PluginError, import_plugin, plugin_files

KINDS: dict[str, Kind] = {}   # filled below, in place: a plugin kind's file may import the planning first
KIND_FILES: dict[str, Path] = {}  # each kind's file (a plugin's is fingerprinted for its builds)
PLUGIN_KIND_FILES: dict[str, Path] = {}
KINDS_DIR = Path(__file__).parent


class KindFileError(PluginError):
    """A kind file that does not declare a kind as fedsim.kinds reads it (one line naming the file)."""


class Files(list):
    """The files a build reads: a list of its raw files (the entry's own, else its raw sources'), and
    by input name each input's, files["glove"] (a list, as the kind's sources, named_files and pool say)."""

    def __init__(self, named: dict[str, list[str]]):
        super().__init__(named.get("raw", []))
        self.named = named

    def __getitem__(self, key):
        if isinstance(key, str):
            if key not in self.named:
                raise ValueError(f"no input {key!r} (the build's inputs: {', '.join(self.named) or 'none'})")
            return self.named[key]
        return super().__getitem__(key)


def _declared(path: Path, module) -> Kind:
    kind = getattr(module, "KIND", None)
    if not isinstance(kind, Kind) or kind.name != path.stem:
        raise KindFileError(f"{path}: a kind file declares KIND = Kind({path.stem!r}, ...) (fedsim.kinds)")
    if kind.name in KINDS:
        raise KindFileError(f"{path}: the kind {kind.name} is declared already, by {KIND_FILES[kind.name]}")
    if kind.build is None:
        raise KindFileError(f"{path}: kind {kind.name} declares no build(entry, files, out, name)")
    return kind


def _register(path: Path, module) -> None:
    kind = _declared(path, module)
    KINDS[kind.name], KIND_FILES[kind.name] = kind, path


for _path in sorted(KINDS_DIR.glob("*.py")):
    if not _path.name.startswith("_"):
        _register(_path, importlib.import_module(f"{__name__}.{_path.stem}"))
for _path in plugin_files("kinds"):
    _register(_path, import_plugin("kinds", _path))
    PLUGIN_KIND_FILES[_path.stem] = _path

BUILT_KINDS = tuple(name for name, kind in KINDS.items() if kind.built)
# the kinds whose samples are token ids, which only their own model reads
TOKEN_KINDS = tuple(name for name, kind in KINDS.items() if kind.samples in TOKEN_SAMPLES)


def kind_of(name) -> Kind:
    """The kind `name`, or one line naming the kinds there are and where a user's own are found."""
    if name not in KINDS:
        raise ValueError(f"unknown kind {name!r}: the kinds are {', '.join(KINDS)}; a kind of your own is "
                         f"kinds/{name}.py in a folder ${PLUGINS_ENV} names (now {_plugins_text()})")
    return KINDS[name]


def _plugins_text() -> str:
    value = os.environ.get(PLUGINS_ENV)
    return f"{PLUGINS_ENV}={value}" if value else "unset"


def warn_devices(out, declared) -> None:
    """A kind whose device count only its built file knows (LEAF's sampling, a JSON import): say so
    loudly when the file has another count than the entry's `devices` (the planning's K = clients_fraction
    x devices)."""
    from ..data.format import FederatedDataset

    if declared is None:
        return
    with FederatedDataset(out) as dataset:
        built = dataset.num_devices
    if built != declared:
        print(f"WARNING: {out} has {built} devices but the config declares devices: {declared}; "
              f"clients_fraction gives K = fraction x {declared} (set devices: {built} for the exact fraction)",
              file=sys.stderr)


def complete(entry: dict) -> dict:
    """A dataset entry as a build takes it, from `fedsim build-dataset`'s --entry: its kind's defaults
    where it leaves a key out (the workflow's config check has filled them already); one line naming a
    required key it lacks."""
    kind = kind_of(entry.get("kind"))
    rules = {**kind.shared_keys, **kind.keys}
    full = {**{key: rule["default"] for key, rule in rules.items() if "default" in rule}, **entry}
    missing = [key for key in kind.required if key not in full]
    if missing:
        raise ValueError(f"kind {kind.name}: the entry lacks {', '.join(missing)} (its keys: {', '.join(rules)})")
    import jsonschema  # (only here: the registry is read at every snakemake call)

    for key, value in entry.items():  # the rules the config check applies, for an entry given by hand
        if key in rules and "$ref" not in str(rules[key]):  # (a $ref: a name the config's schema defines)
            error = jsonschema.exceptions.best_match(jsonschema.Draft7Validator(rules[key]).iter_errors(value))
            if error is not None:
                raise ValueError(f"kind {kind.name}: bad {key}={value!r}: {' '.join(error.message.split())}")
    return full


def build(entry: dict, named: dict[str, list[str]], out, name) -> str:
    """Build the dataset file `out` of a dataset entry (complete's) from its named input files; the
    build's line for the log."""
    return KINDS[entry["kind"]].build(entry, Files(named), out, name)
