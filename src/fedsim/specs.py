"""What a model declares and what a dataset file holds, read without torch.

A model declares its `SPEC`, a ModelSpec, at the top of its file in fedsim/models/; `model_specs()`
reads those declarations from the files' text, without importing them (a model's file imports
torch), and tests/test_specs.py checks that what it reads is what the imported model declares. The
planning (fedsim.planning.kinds, the config check, the cost model) reads them at every snakemake call; the
models import this module too, so it is training code: an edit of it reruns the runs.

Samples are named by what a model needs to read them: `features` (a vector), `image` (C x H x W,
which a feature model reads flattened), or a token set (`shakespeare`: characters; `sent140`: words
as GloVe ids), whose ids mean something only to the model built for them. A dataset file's `kind`
attribute (fedsim.data) says which its samples are, and which model it trains by default.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Callable

FEATURES, IMAGE = "features", "image"
MODELS_DIR = Path(__file__).with_name("models")
# Folders of a user's own models (<folder>/models/*.py) and data kinds (<folder>/kinds/*.py)
PLUGINS_ENV = "FEDSIM_PLUGINS"
# A dataset file's kind: (what one sample is, the paper's model for it). A JSON import's file takes
# the kind of what it holds, a Dirichlet partition its pool's.
FILE_KINDS = {
    "synthetic": (FEATURES, "mclr"),
    "femnist": (IMAGE, "mclr"),
    "shakespeare": ("shakespeare", "char_lstm"),
    "sent140": ("sent140", "sent140_lstm"),
    "features": (FEATURES, "mclr"),   # a user's own arrays (fedsim.data.arrays)
    "images": (IMAGE, "mclr"),
}
TOKEN_SAMPLES = tuple(samples for samples, _ in FILE_KINDS.values() if samples not in (FEATURES, IMAGE))


@dataclass(frozen=True)
class ModelSpec:
    """What a model declares (the SPEC at the top of its file, in literals only)."""

    name: str               # its file's name: what `--model` and run.json call it
    label: str              # its name in tables and figures
    samples: tuple[str, ...]  # the samples it takes (FEATURES, IMAGE, a token set)
    accelerators: tuple[str, ...] = ()  # engines besides the general torch rule (fedsim.core.engine.ACCELERATORS)
    stacks_on: tuple[str, ...] = ("cpu", "cuda")  # devices where a round's devices train as one stack
    graphs_on: tuple[str, ...] = ()     # devices where each SGD step replays as a CUDA graph
    linear_softmax: bool = False        # MCLR's closed forms: the MCLR-only methods, the theorems
    # the metrics' two gradient dissimilarities by default (every evaluated device's full gradient, about
    # twice the cost of its loss): the paper's diagnostics, on for its models; a run can ask for them
    dissimilarity: bool = False
    # local SGD's seconds per training sample (forward and backward) on one CPU core, from
    # benchmarks/cnn_round.py (the `batched` engine, as a run takes it) rounded up: fedsim.planning.cost prices a
    # run from it. None only where the data kind prices it (MCLR per device and epoch, the LSTMs'
    # calibrated constants); any other model must declare it.
    sample_seconds: float | None = None
    # its convolutions, each followed by 2x2 pooling, as (kernel, how many, same padding): an image's
    # height and width must halve through them (pooled_sides); the planning checks a dataset's images
    convolutions: tuple | None = None

    def __post_init__(self):
        priced_by_kind = self.linear_softmax or all(s in TOKEN_SAMPLES for s in self.samples)
        if self.sample_seconds is None and not priced_by_kind:
            raise ValueError(f"model {self.name}: declare its sample_seconds (fedsim.planning.cost prices its runs by it)")

    def takes(self, samples: str | None) -> bool:
        """Whether it reads these samples (None: not known yet, so not refused here)."""
        return samples is None or samples in self.samples

    def image_problem(self, shape) -> str | None:
        """Why it cannot read images of `shape` (C, H, W), or None."""
        if self.convolutions is None or shape is None or len(shape) != 3:
            return None
        try:
            for side in shape[1:]:
                pooled_sides(side, *self.convolutions)
        except ValueError as err:
            channels_last = shape[2] in (1, 3, 4) and shape[0] > 4
            return str(err) + (" (channels last? fedsim reads C x H x W)" if channels_last else "")
        return None


def pooled_sides(side: int, kernel: int, layers: int, same_padding: bool) -> list[int]:
    """Each convolution's output side before its 2x2 pooling, for an input side `side`: a valid
    convolution trims kernel - 1, and the pooling halves an even side of at least 2; ValueError otherwise."""
    sides = []
    for _ in range(layers):
        side = side if same_padding else side - kernel + 1
        if side < 2 or side % 2:
            raise ValueError(f"a convolution's output side {side} does not halve in 2x2 pooling")
        sides.append(side)
        side //= 2
    return sides


@dataclass(frozen=True)
class KindCommand:
    """A kind's own command, `fedsim <name>`: an alias of `fedsim build-dataset` for that kind (fedsim.cli
    builds it). Its options are the kind's keys (--<key>, or the flag `flags` gives it; a default only
    the command has in `defaults`), the options in `files` (option -> (the build's input it fills,
    add_argument's keywords); two filling one input: give one of them), --name (default `dataset_name`;
    None: required) and --out."""

    name: str
    help: str
    files: dict = field(default_factory=dict)
    flags: dict = field(default_factory=dict)
    defaults: dict = field(default_factory=dict)
    dataset_name: str | None = None


@dataclass(frozen=True)
class Kind:
    """What a data kind declares: the KIND of its one file, fedsim/kinds/<name>.py or a plugin's
    kinds/<name>.py (fedsim.kinds reads them). The planning reads everything but `build` at every
    snakemake call, so a kind's file imports no torch (its build imports what it needs)."""

    name: str
    file_kind: str | None   # the kind of the files it builds (FILE_KINDS); None: its pool's, its files' or known once built
    # its dataset entry's keys, as JSON schema properties (a `default` fills an entry that leaves the key
    # out; `required`: the keys it must give); fedsim.planning.configcheck builds the schema from them
    keys: dict = field(default_factory=dict)
    required: tuple[str, ...] = ()
    # build(entry, files, out, name) -> one line for the log: writes the dataset file (fedsim.data.write_dataset)
    # from the entry (its keys, defaults filled, without the training keys) and `files` (fedsim.kinds.Files:
    # a list of its raw files, and files["<input>"] each named input's)
    build: Callable | None = None
    # a top-level config section of settings its entries share (each may set its own), and their keys as
    # JSON schema properties (a `default` fills the section)
    shared: str | None = None
    shared_keys: dict = field(default_factory=dict)
    # The files its build reads, by input name: raw sources (`sources:` of the config; "raw" replaced by
    # the files of the entry's key `own_files` where it names some: FEMNIST's LEAF JSON, an .npz), the
    # files of entry keys of their own (`named_files`: a JSON import's train and test), the dataset it
    # pools (`pools`: a Dirichlet partition's, whose samples and model it takes)
    sources: dict = field(default_factory=dict)
    own_files: str | None = None
    named_files: tuple[str, ...] = ()
    pools: bool = False
    poolable: bool = True   # a partition may pool its rows (Sent140's word ids mean nothing without its embedding)
    built: bool = False     # built from raw files or other datasets (datasets.csv lists them)
    model: str | None = None    # its default model where its file kind does not say (a user's arrays: MCLR)
    # describe(entry) -> {"samples", "shape", "rows", "devices": whether it has device ids (else a pool)}: what
    # its own files hold, read before the build (ValueError: one line naming the file)
    describe: Callable | None = None
    check_pool: Callable | None = None  # check_pool(entry, samples): ValueError where its pool cannot hold it
    reads: Callable | None = None       # reads(entry) -> the keys its build reads (default: all but the training keys)
    check: Callable | None = None       # check(entry) -> (key, what is wrong) or None: beyond the schema
    size_gb: Callable | None = None     # size_gb(entry) -> the dataset's size before it is built, in GB
    mem_mb: int = 8192      # its build job's resources
    runtime: int = 30       # minutes
    # an MCLR run's seconds per selected device and local epoch, evaluation included (fedsim.planning.cost)
    mclr_device_epoch_s: float = 0.001
    # How the report names its datasets (fedsim.planning.captions): what the kind is, in a few words,
    # and an entry's own settings beyond its device count, detail(entry) -> text
    words: str | None = None
    detail: Callable | None = None
    paper: bool = False     # the paper's kind of data (its findings may stand beside a figure of it)
    command: KindCommand | None = None  # its own command, kept from before `fedsim build-dataset`

    @property
    def samples(self) -> str | None:
        return FILE_KINDS[self.file_kind][0] if self.file_kind else None

    @property
    def default_model(self) -> str | None:
        return FILE_KINDS[self.file_kind][1] if self.file_kind else self.model


def _read_spec(path: Path) -> ModelSpec | None:
    """The SPEC = ModelSpec(...) of a model file, from its text; None where it declares none."""
    tree = ast.parse(path.read_text(), str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["SPEC"]:
            call = node.value
            if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "ModelSpec" and not call.args):
                raise PluginError(f"{path}: SPEC must be ModelSpec(name=..., ...) with keyword arguments")
            try:
                declared = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
            except ValueError:
                raise PluginError(f"{path}: SPEC's arguments must be literals (the planning reads them without "
                                 "importing the file)") from None
            try:
                return ModelSpec(**declared)
            except (TypeError, ValueError) as err:
                raise PluginError(f"{path}: {err}") from None
    return None


PLUGIN_PARTS = ("methods", "models", "kinds")  # what a plugin folder holds, a folder each


def plugin_dirs(part: str) -> list[Path]:
    """The `part` folder (methods, models, kinds) of each folder FEDSIM_PLUGINS names (os.pathsep-separated),
    where it has one: a user's own methods, models and data kinds, found beside fedsim's. A named folder
    that is none, or holds none of PLUGIN_PARTS (the methods/ folder itself, say), is a PluginError: its
    files would be missed without a word, and a run of them refused as of an unknown name."""
    folders = [Path(d) for d in os.environ.get(PLUGINS_ENV, "").split(os.pathsep) if d]
    for folder in folders:
        if not folder.is_dir():
            raise PluginError(f"{PLUGINS_ENV} names {folder}, which is not a folder")
        if not any((folder / each).is_dir() for each in PLUGIN_PARTS):
            raise PluginError(f"{PLUGINS_ENV} names {folder}, which holds no {', '.join(PLUGIN_PARTS)} folder: name "
                              "the folder that holds them")
    return [folder / part for folder in folders if (folder / part).is_dir()]


def plugin_files(part: str) -> list[Path]:
    """The module files of every plugin folder's `part` folder (methods, models, kinds), sorted; `_`
    modules hold shared parts."""
    return [path for folder in plugin_dirs(part) for path in sorted(folder.glob("*.py"))
            if not path.name.startswith("_")]


class PluginError(ImportError, ValueError):
    """A file of a user's own (FEDSIM_PLUGINS), or a model's declaration, that cannot be read as what its
    folder says it is: every registry is built at import, so the commands and the workflow turn it into one
    line naming the file (fedsim.__main__, workflow/rules/common.smk). A ValueError too: a bad declaration."""


def import_plugin(part: str, path: Path):
    """A user's own file of `part`, imported from where it is, as module fedsim_plugin_<part>.<stem>; what
    goes wrong in it (a syntax error, an exception at import) is a PluginError naming it."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(f"fedsim_plugin_{part}.{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[spec.name]
        line = f" line {err.lineno}" if isinstance(err, SyntaxError) else ""
        raise PluginError(f"{path}{line}: {type(err).__name__}: {getattr(err, 'msg', None) or err}") from err
    return module


def model_files(folders=None) -> list[Path]:
    """Every model module of `folders` (default: fedsim.models', then the plugins'); `_` modules hold
    shared parts."""
    folders = folders if folders is not None else [MODELS_DIR, *plugin_dirs("models")]
    return [path for folder in folders for path in sorted(Path(folder).glob("*.py")) if not path.name.startswith("_")]


def model_specs(folder: Path | None = None) -> dict[str, ModelSpec]:
    """Every model's declaration, by name: a module each, of `folder` (default: fedsim.models and the
    plugins' models/)."""
    return _specs(tuple(model_files(None if folder is None else [folder])))


@cache
def _specs(paths: tuple[Path, ...]) -> dict[str, ModelSpec]:
    found, where = {}, {}
    for path in paths:
        spec = _read_spec(path)
        if spec is None:
            raise PluginError(f"{path}: a model file declares its SPEC = ModelSpec(...) (fedsim.specs)")
        if spec.name != path.stem:
            raise PluginError(f"{path} declares a model named {spec.name!r}: name it {path.stem!r}")
        if spec.name in found:
            raise PluginError(f"{path}: the model {spec.name} is declared already, by {where[spec.name]}")
        found[spec.name], where[spec.name] = spec, path
    return found


def model_spec(name: str) -> ModelSpec:
    specs = model_specs()
    if name not in specs:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(specs)}")
    return specs[name]


def model_file(name: str) -> Path:
    """The file that declares the model `name`: fedsim.models' or a plugin's."""
    model_spec(name)  # an unknown name: its one-line error
    return next(path for path in model_files() if path.stem == name)




