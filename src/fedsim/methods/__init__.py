"""Federated methods: one file each in this package, and the registry that finds them.

A method is three pure functions over explicit state (as FedJAX's and optax's algorithms):

    init(params, num_devices)               -> state          # dict of tensors, {} for none
    local_problem(ctx, state)               -> LocalProblem   # what each solving device minimises
    server_update(ctx, state, local_models) -> (params, state)

(or, for a method whose devices do not run SGD on such a problem, `local_solver(ctx, state) ->
local_models` in place of local_problem: DONE's Richardson iterations on Hessian-vector products).

Every local problem is one choice, per solving device k, of

    min_w  F_k(w) + <c_k, w - w0> + mu/2 ||w - w0||^2,

which the engine (fedsim.core.engine) solves with E epochs of mini-batch SGD from w0, by whichever
execution strategy the run picked. w0 is the global model unless the method names another
`center` (S-DANE's y, the model FedDyn's server sends). The state is the method's memory across rounds (server
state and per-device tables, as SCAFFOLD's control variates); the run checkpoints it with the
model, so a resumed run ends bit-identical.

A method module ends with `METHOD = Method(...)`: its name, label and family in the figures,
exchanges per round, the vectors each device sends and receives (`traffic`), which devices send
full gradients first, whether every device must take part, how its mu (or the one option it is
tuned over) is chosen, its settings (`options`) and named variants. The CLI, the run settings, the workflow (its schema,
its runs and their mu) and the figures read REGISTRY, which holds every module here that
declares a METHOD: adding a method is one file plus its test (scaffold.py is the example). A user's
own method file, in the methods/ folder of a folder FEDSIM_PLUGINS names, joins them by the same rule
(PLUGIN_METHOD_FILES: its path, which the workflow fingerprints for its runs; docs/methods.md). How it
looks (colour, dash pattern, place in legends) is no part of it: fedsim.outputs.styles declares that, by name.

No module here imports torch: the workflow reads the registry at start-up, and a second of
torch import there would be paid by every `snakemake` call. Tensors arrive from the run.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..specs import PluginError, import_plugin, plugin_files

if TYPE_CHECKING:
    import torch

MU_CHOICES = ("none", "fixed", "tuned")   # mu always 0 | the dataset's fedprox_mu (no default) | tuned over a grid
GRADIENTS = ("none", "sampled", "all")    # who sends a full gradient at w^{t-1} before solving
TUNED_MU = "mu"                           # the tuned setting's name where it is mu (else an option's)
# The families a method declares (`family`): the successors' figure draws each in panels of its own,
# so that no panel holds more curves than an eye can tell apart. A method without one is its own family.
FAMILIES = {
    "averaging": "averaging local models",
    "dane": "DANE's gradient correction and Newton-type",
    "drift": "control variates against client drift",
    "server": "server optimisers",
}


@dataclass(frozen=True)
class LocalProblem:
    """F_k(w) + <correction[k], w - w0> + mu/2 ||w - w0||^2 for each solving device k."""

    mu: float
    correction: torch.Tensor | None  # (solvers, *params.shape), or None for no linear term
    center: torch.Tensor | None = None  # w0: where SGD starts and the proximal term is centred (None: the model)
    steps: int | None = None  # SGD steps every solver takes this round (None: E epochs; Scaffnew draws them)
    anchor: torch.Tensor | None = None  # each step's batch gradient minus the same batch's gradient here (Mime)

    def in_use(self) -> set[str]:
        """The fields that ask something of the solver: mu when nonzero, any other field when set.
        Each engine implements a set of them (fedsim.core.engine) and refuses a problem asking for more."""
        return {f.name for f in dataclasses.fields(self)
                if (getattr(self, f.name) != 0 if f.name == "mu" else getattr(self, f.name) is not None)}


@dataclass
class RoundContext:
    """What the server knows in one round; methods read it, never mutate it."""

    round: int
    params: torch.Tensor                       # the global model w^{t-1}
    solvers: np.ndarray                        # devices that solve the local problem (S'_t)
    gradient_devices: np.ndarray               # devices asked for a full local gradient (S_t)
    device_grads: Callable[[np.ndarray], torch.Tensor]  # full local gradients at params
    weights: Callable[[np.ndarray], torch.Tensor]       # aggregation weights, summing to 1
    model: object = None                       # the model (its tensor layout, for methods that need it)
    mu: float = 0.0                            # the run's mu
    seed: int = 0                              # the run's seed: a method's own draws are keyed by (seed, round)
    options: dict = field(default_factory=dict)  # the method's settings, every one filled in
    lr: float = 0.0                            # the local learning rate
    sizes: np.ndarray | None = None            # every device's number of training samples
    local_steps: Callable[[np.ndarray], np.ndarray] | None = None  # SGD steps each device takes
    # the devices' local Hessians at params (MCLR): .product(V) -> H_k V_k per device, .largest() -> their
    # top eigenvalues; for methods with a local solver of their own (DONE)
    hessians: Callable[[np.ndarray], Any] | None = None
    # full local gradients of devices at another point than params: one model for all, or one each
    grads_at: Callable[[torch.Tensor, np.ndarray], torch.Tensor] | None = None


@dataclass(frozen=True)
class Option:
    """One setting of a method: its default, and its domain, the values it takes. The domain is
    declared here once: the config check (fedsim.planning.configcheck) refuses a value outside it before any
    job, and the run (RunConfig) before any round; a method's code may assume it."""

    default: Any
    help: str
    choices: tuple = ()               # the allowed values, where they are a list
    above: float | None = None        # numbers: the exclusive lower bound
    at_least: float | None = None     # numbers: the inclusive lower bound
    below: float | None = None        # numbers: the exclusive upper bound
    at_most: float | None = None      # numbers: the inclusive upper bound
    grid: tuple = ()                  # the values it is tuned over, where the method is tuned over it

    def __post_init__(self):
        assert self.above is None or self.at_least is None, self.help
        assert self.below is None or self.at_most is None, self.help
        for value in (self.default, *self.grid):
            assert self.contains(value), f"{self.help}: {value!r} is outside its own domain ({self.domain})"

    @property
    def is_number(self) -> bool:
        return isinstance(self.default, (int, float)) and not isinstance(self.default, bool)

    @property
    def domain(self) -> str:
        """The values it takes, in words: 'one of a, b', 'a number in [0, 1)', 'an integer >= 1'."""
        if self.choices:
            return f"one of {', '.join(map(str, self.choices))}"
        if isinstance(self.default, bool):
            return "true or false"
        if not self.is_number:
            return type(self.default).__name__
        what = "an integer" if isinstance(self.default, int) else "a number"
        bounds = {">": self.above, ">=": self.at_least, "<": self.below, "<=": self.at_most}
        given = [(op, bound) for op, bound in bounds.items() if bound is not None]
        if len(given) == 2:  # a lower and an upper bound (__post_init__): interval notation
            (low_op, low), (high_op, high) = given
            return f"{what} in {'(' if low_op == '>' else '['}{low:g}, {high:g}{')' if high_op == '<' else ']'}"
        return " ".join([what, *(f"{op} {bound:g}" for op, bound in given)])

    def contains(self, value) -> bool:
        """Whether `value`, as given (no text read as a number), lies in the domain."""
        if self.choices:
            return value in self.choices and isinstance(value, type(self.default))
        if isinstance(self.default, bool) or not self.is_number:
            return isinstance(value, type(self.default))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        if isinstance(self.default, int) and not isinstance(value, int):
            return False
        return ((self.above is None or value > self.above) and (self.at_least is None or value >= self.at_least)
                and (self.below is None or value < self.below) and (self.at_most is None or value <= self.at_most))

    def check(self, name: str, value):
        """The value (an int made a float where the option is one) if it lies in the domain, else a
        ValueError naming it."""
        if isinstance(self.default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not self.contains(value):
            raise ValueError(f"bad method option {name}={value!r}: expected {self.domain}")
        return value

    def parse(self, name: str, value):
        """check(), where the value may be command-line text (`--option NAME=VALUE`): text read as
        the option's type first."""
        if isinstance(value, str) and not isinstance(self.default, str):
            value = self._from_text(value)
        return self.check(name, value)

    def _from_text(self, text: str):
        """The option's type read from text, or the text itself where it does not read (check names it)."""
        if isinstance(self.default, bool):  # bool("False") is True
            return {"true": True, "1": True, "false": False, "0": False}.get(text.lower(), text)
        try:
            return type(self.default)(text)
        except ValueError:
            return text


@dataclass(frozen=True)
class Variant:
    """A method with some of its options set, under its own name (a curve of its own)."""

    label: str
    options: dict
    mclr_only: bool = False   # defined for the MCLR models only


def no_state(params, num_devices: int) -> dict:
    return {}


def weighted_average(stacked: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_k weights[k] * stacked[k] over the leading device dimension, in fedsim's order on the CPU
    (device by device from zeros, each product and sum rounded: the same bits on any CPU and BLAS).
    How is fedsim.average's, imported at the first call: the registry loads neither numba nor torch."""
    from ..average import weighted_average as average

    return average(stacked, weights)


def average_models(ctx: RoundContext, state: dict, local_models: torch.Tensor):
    """The server rule of FedAvg, FedProx and FedDANE: the weighted average of the local models."""
    return weighted_average(local_models, ctx.weights(ctx.solvers)), state


def server_step(method: "Method", ctx: RoundContext, state: dict, local_models):
    """The method's server rule, its model checked: a tensor as the global model is (a wrong shape would
    train on silently in the compiled kernel, which takes the array it is given), or one line naming the
    method's file."""
    params, state = method.server_update(ctx, state, local_models)
    model = ctx.params
    if type(params) is not type(model) or (params.shape, params.dtype, params.device) != \
            (model.shape, model.dtype, model.device):
        where = PLUGIN_METHOD_FILES.get(method.name, f"fedsim/methods/{method.name}.py")
        got = ", ".join(f"{part} {tuple(value) if part == 'shape' else value}" for part in ("shape", "dtype", "device")
                        if (value := getattr(params, part, None)) is not None)
        raise ValueError(f"{where}: server_update returned {type(params).__name__} ({got or 'no array'}), not "
                         f"{type(model).__name__} of the global model's shape {tuple(model.shape)}, dtype {model.dtype} "
                         f"and device {model.device}")
    return params, state


def traffic(method: "Method", ctx: RoundContext) -> tuple[int, int]:
    """(vectors down, vectors up) of one round, each model-sized vector to or from one device counted
    once. A solver receives `method.down` vectors and sends `method.up`; where full gradients come
    first, each gradient device receives the model and sends its gradient, and a solver that was
    one already holds the model (one vector down fewer)."""
    down, up = method.down * len(ctx.solvers), method.up * len(ctx.solvers)
    if method.gradients != "none":
        down += len(ctx.gradient_devices) - len(np.intersect1d(ctx.solvers, ctx.gradient_devices))
        up += len(ctx.gradient_devices)
    return down, up


@dataclass(frozen=True)
class Method:
    name: str
    label: str                        # its name in figures, tables and captions (its look: fedsim.outputs.styles)
    family: str | None = None         # one of FAMILIES; None: a family of its own
    local_problem: Callable | None = None  # what the engines solve by SGD; or, instead,
    local_solver: Callable | None = None   # (ctx, state) -> local models: a local solver of the method's own
    server_update: Callable = average_models
    init: Callable = no_state
    exchanges: int = 1                # server <-> device exchanges per round (communication rounds)
    gradients: str = "none"           # sampled: S_t, K devices (S'_t per the run's second_subset); all: every device
    mu: str = "none"                  # see MU_CHOICES
    options: dict = field(default_factory=dict)   # name -> Option
    variants: dict = field(default_factory=dict)  # name -> Variant
    down: int = 1                     # vectors each solver receives per round (the model included)
    up: int = 1                       # vectors each solver sends per round (its model included)
    full_participation: bool = False  # every device, every round: K = N, uniform selection
    tuned: str | None = None          # the option tuned over its grid (mu must then be "none")
    mclr_only: bool = False           # defined for the MCLR models only (a local solver on their Hessians)

    def __post_init__(self):
        assert self.mu in MU_CHOICES and self.gradients in GRADIENTS, self.name
        assert (self.local_problem is None) != (self.local_solver is None), self.name
        assert self.tuned is None or (self.mu == "none" and self.options[self.tuned].grid), self.name
        assert self.family is None or self.family in FAMILIES, self.name

    @property
    def tuned_setting(self) -> str | None:
        """What the method is tuned over: "mu", an option's name, or None."""
        return TUNED_MU if self.mu == "tuned" else self.tuned

    @property
    def setting_name(self) -> str:
        """The name of the number that tells a method's runs apart: its tuned option, else mu."""
        return self.tuned or TUNED_MU

    def resolve(self, options: dict, from_text: bool = True) -> dict:
        """Every option of the method, given ones checked against their domain, the rest at their
        default. from_text: a value may be command-line text, read as its option's type (Option.parse);
        False: it must have that type already (a config file's, where quotes are the user's)."""
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            known = ", ".join(self.options) or "none"
            raise ValueError(f"bad method option {unknown[0]!r}: {self.name} takes {known}")
        return {name: (opt.parse if from_text else opt.check)(name, options[name]) if name in options
                else opt.default for name, opt in self.options.items()}


def _discover() -> tuple[dict[str, Method], dict[str, set]]:
    """Every method module's METHOD, by name (legend order is fedsim.outputs.styles'), and the method modules
    each one imports: this package's, then each plugin folder's methods/<name>.py (FEDSIM_PLUGINS,
    fedsim.specs.plugin_dirs; its path in PLUGIN_METHOD_FILES), whose name may be no other's."""
    modules = {info.name: importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)}
    found, uses, where = [], {}, {}
    for name, module in modules.items():
        method = getattr(module, "METHOD", None)
        if isinstance(method, Method):
            if method.name != name:
                raise ImportError(f"fedsim/methods/{name}.py declares a method named {method.name!r}: name it {name!r}")
            found.append(method)
            uses[name] = {name} | {n for n, m in modules.items() if any(v is m for v in vars(module).values())}
            where[name] = Path(module.__file__)
    for path in plugin_files("methods"):
        if path.stem in where:
            raise PluginError(f"{path}: the method {path.stem} is declared already, by {where[path.stem]}")
        module = import_plugin("methods", path)
        method = getattr(module, "METHOD", None)
        if not isinstance(method, Method) or method.name != path.stem:
            raise PluginError(f"{path}: a method file declares METHOD = Method(name={path.stem!r}, ...) "
                              "(fedsim.methods)")
        if TUNED_MU in method.options:  # the runs' --mu and folders would take it for the proximal term
            raise PluginError(f"{path}: an option named {TUNED_MU!r} is the proximal term's (Method.mu); "
                              "name the option otherwise")
        found.append(method)
        uses[method.name] = {method.name} | {n for n, m in modules.items()
                                             if any(v is m for v in vars(module).values())}
        where[method.name] = PLUGIN_METHOD_FILES[method.name] = path
    return {m.name: m for m in sorted(found, key=lambda m: m.name)}, uses


PLUGIN_METHOD_FILES: dict[str, Path] = {}  # a plugin method's file, by name (its code, fingerprinted for its runs)
REGISTRY, USES = _discover()  # USES[name]: the method modules (its own included) a method's code is in


@dataclass(frozen=True)
class Entry:
    """A name the workflow and the figures use: a method, or a variant of one."""

    name: str
    method: Method
    label: str
    options: dict             # the options it fixes
    mclr_only: bool = False

    @property
    def family(self) -> str:
        """Its method's family (a variant's is its method's); a method without one: its name."""
        return self.method.family or self.method.name


def _entries() -> dict[str, Entry]:
    entries = {}
    for method in REGISTRY.values():
        entries[method.name] = Entry(method.name, method, method.label, {}, method.mclr_only)
        for name, v in method.variants.items():
            entries[name] = Entry(name, method, v.label, dict(v.options), v.mclr_only or method.mclr_only)
    return entries


ENTRIES: dict[str, Entry] = _entries()   # methods by name, each one's variants after it
LABELS = {name: e.label for name, e in ENTRIES.items()}


def get_method(name: str) -> Method:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(unknown_method(name)) from None


def unknown_method(name) -> str:
    """One line: every name a run takes (methods and variants), and the one whose label `name` is
    (FedAdam is fedopt's) where it is one."""
    def plain(text):
        return "".join(c for c in str(text).lower() if c.isalnum())
    same_label = [n for n, label in LABELS.items() if plain(label) == plain(name)]
    hint = f" ({LABELS[same_label[0]]} is {same_label[0]})" if same_label else ""
    return f"unknown method {name!r}{hint}; choose one of {', '.join(ENTRIES)}"


def resolve(name: str, options: dict | None = None) -> tuple[str, dict]:
    """(method name, all its options) of a method or variant name with extra `options`."""
    entry = ENTRIES.get(name)
    if entry is None:
        raise ValueError(unknown_method(name))
    return entry.method.name, entry.method.resolve({**entry.options, **(options or {})})


def variant_of(config: dict) -> str:
    """The name (method or variant) of what a run's config (run.json's `config`, or a runs.csv row) ran."""
    name, options = resolve(config["method"], options_of(config))
    method = REGISTRY[name]
    for variant_name, variant in method.variants.items():
        if all(options[k] == v for k, v in variant.options.items()):
            return variant_name
    return method.name


def setting_value(config: dict) -> float:
    """The value of a run's setting_name (run.json's `config`, or a runs.csv row): its tuned
    option's, else its mu."""
    name, options = resolve(config["method"], options_of(config))
    tuned = REGISTRY[name].tuned
    return float(options[tuned]) if tuned else float(config["mu"])


def describe_setting(config: dict) -> str:
    """'mu=0.01', 'alpha=0.1', ...: what tells a run of its method apart from the others, for logs."""
    name, _ = resolve(config["method"], options_of(config))
    return f"{REGISTRY[name].setting_name}={setting_value(config):g}"


def options_of(config: dict) -> dict:
    """A config's method options: a dict, or its JSON text (as runs.csv holds it)."""
    options = config.get("options") or {}
    return json.loads(options) if isinstance(options, str) else dict(options)
