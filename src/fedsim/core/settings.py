"""A run's settings, declared once: RunConfig's fields, and what each one is.

Each field's metadata gives its help text, its allowed values (`choices`) or range (`check`),
and its role:

- RESULT: shapes what the run computes, its metrics.csv beyond float rounding. A column of
  runs.csv, a key of the tuning groups (fedsim.outputs.summary), part of the checkpoint fingerprint.
- NUMERICS: the same computation, rounded otherwise (engine, device, dtype): part of the
  checkpoint fingerprint only, since a resumed run must end bit-identical to one never stopped.
- EXECUTION: how the data is read and copied (threads, load): the same bits at any value.

The `train` command's options (fedsim.cli), RunConfig.validate, the runs table's setting columns
(fedsim.outputs.summary) and the checkpoint fingerprint (fedsim.core.checkpoint) are derived from these fields, so a
new setting is one field here, and a new RESULT field can never merge tuning groups unseen.

No torch here: the CLI builds its parser from this module, and the workflow may import it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..data import keys
from ..methods import ENTRIES, REGISTRY, get_method, resolve, unknown_method, variant_of
from ..specs import model_specs

RESULT, NUMERICS, EXECUTION = "result", "numerics", "execution"


@dataclass(frozen=True)
class Check:
    """A number's range: `cast` reads it from text, `ok` accepts it, `what` names it in errors."""

    cast: Callable[[str], Any]
    ok: Callable[[Any], bool]
    what: str


COUNT = Check(int, lambda v: v >= 1, "an integer >= 1")
INDEX = Check(int, lambda v: v >= 0, "an integer >= 0")
NON_NEGATIVE = Check(float, lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0")
POSITIVE = Check(float, lambda v: math.isfinite(v) and v > 0, "a finite number > 0")


def key_check(rule: dict) -> Check | None:
    """The Check of a dataset key's numeric rule (a JSON-schema property: a kind's key, fedsim.data.keys):
    its type and bounds, as the config schema reads them; None where the rule is not numeric."""
    if not isinstance(rule.get("type"), str) or rule["type"] not in keys.NUMERIC:  # (a list of types: not one)
        return None
    return Check(keys.NUMERIC[rule["type"]], lambda v: keys.allows(rule, v), keys.expected(rule))


def setting(default=dataclasses.MISSING, *, help: str, role: str = RESULT, choices: tuple = (),
            check: Check | None = None, column: str | None = None, factory=dataclasses.MISSING):
    """A RunConfig field with its metadata; `column` renames it in runs.csv (where it is RESULT)."""
    metadata = {"help": help, "role": role, "choices": tuple(choices), "check": check, "column": column}
    return field(default=default, default_factory=factory, metadata=metadata)


def _method_help() -> str:
    return "a method or a variant (fedsim.methods: " + "; ".join(
        f"{name}: {e.label}" for name, e in ENTRIES.items()) + ")"


def _options_help() -> str:
    return "a setting of the method, repeatable (" + "; ".join(
        f"{m.name} {name}: {o.help}, {o.domain}, default {o.default}" for m in REGISTRY.values()
        for name, o in m.options.items()) + ")"


MODEL_NAMES = tuple(model_specs())  # the models of fedsim.models, read from their declarations
# The engines of fedsim.core.engine.ENGINES and the dtypes of fedsim.core.train.DTYPES, named here without
# importing torch (tests/test_train.py checks they agree).
ENGINE_NAMES = ("auto", "kernel", "batched", "loop")
DTYPE_NAMES = ("float32", "float64")
# A run saves its state every CHECKPOINT_EVERY rounds once CHECKPOINT_SECONDS have passed since
# the last save: a short run writes none, a kill costs at most the longer of the two.
CHECKPOINT_EVERY, CHECKPOINT_SECONDS = 10, 30.0


@dataclass(frozen=True)
class RunConfig:
    """One run's settings. The RESULT fields come first, in runs.csv's column order."""

    data: str = setting(help="dataset HDF5 file", column="dataset")
    method: str = setting(help=_method_help(), choices=tuple(ENTRIES))
    mu: float = setting(0.0, check=NON_NEGATIVE, help="weight of the proximal term mu/2 ||w - w0||^2")
    clients_per_round: int = setting(10, check=COUNT, help="K: devices selected per round")
    epochs: int = setting(20, check=COUNT, help="E: local epochs per round")
    seed: int = setting(0, check=INDEX, help="seeds the selections, mini-batches, initial model and metrics sample")
    rounds: int = setting(200, check=INDEX, help="rounds of training (metrics of rounds 0..rounds)")
    lr: float = setting(0.01, check=POSITIVE, help="local SGD learning rate")
    batch_size: int = setting(10, check=COUNT, help="mini-batch size; a batch larger than a device's data is "
                                                    "all of it (full-batch steps)")
    selection: str = setting("uniform", choices=("uniform", "weighted"),
                             help="uniform: K devices without replacement, averaged by their sizes (the "
                                  "reference code); weighted: K draws by size, plain mean (the paper's text)")
    second_subset: str = setting("independent", choices=("independent", "same"),
                                 help="FedDANE's solvers drawn independently of its gradient devices "
                                      "(Algorithm 2) or the same devices (the reference code)")
    # the method's settings (fedsim.methods), every one filled in
    options: dict = setting(factory=dict, help=_options_help())
    rng: str = setting("fedsim", choices=("fedsim", "authors"),
                       help="whose selection and mini-batch draws: fedsim's (seed, round, device) or the "
                            "authors' code's (fedsim.core.authors)")
    init: str | None = setting(None, help="initial model, an .npz with kernel and bias ({seed}: the run's "
                                          "seed); default: fedsim's seeded draw")
    theory: bool = setting(False, help="log the convergence theorems' constants every round: the Hessian's top "
                                       "eigenvalue L, the local solutions' inexactness gamma, ||grad f||^2 and "
                                       "Theorem 1's rho (MCLR only)")
    model: str | None = setting(None, choices=MODEL_NAMES,
                                help="the model (fedsim.models; default: the paper's for the dataset: MCLR, or the "
                                     "LSTM of Shakespeare and Sent140)")
    # the metrics of a sample are another measurement: a setting, though training is the same
    eval_devices: int | None = setting(None, check=COUNT, help="compute the metrics on a seeded sample of this "
                                                               "many devices (default: all)")
    eval_every: int = setting(1, check=COUNT, help="compute the metrics every this many rounds and at the last "
                                                   "(default: every round)")
    dissimilarity: bool | None = setting(None, help="compute the two gradient dissimilarities with the metrics: "
                                                    "every evaluated device's full local gradient, about twice the "
                                                    "cost of its loss on a CNN (default: the model's, on for the "
                                                    "paper's MCLR and LSTMs, whose diagnostics they are, off for "
                                                    "the CNNs; --no-dissimilarity leaves their columns empty)")
    engine: str = setting("auto", role=NUMERICS, choices=ENGINE_NAMES,
                          help="local SGD; auto: the compiled kernel for MCLR on the CPU, the batched torch engine "
                               "otherwise (metrics and FedDANE's local gradients take the compiled pass for MCLR "
                               "on the CPU whatever the engine)")
    device: str = setting("cpu", role=NUMERICS, choices=("cpu", "cuda", "auto"),
                          help="where the numerics run (auto: a GPU where there is one)")
    dtype: str = setting("float32", role=NUMERICS, choices=DTYPE_NAMES, help="floating-point type of the numerics")
    keep_subnormals: bool = setting(False, role=NUMERICS,
                                    help="keep IEEE subnormal floats (default: flushed to zero in every thread "
                                         "that computes, as TensorFlow's CPU threads do: near-diverging runs fill "
                                         "with them, and Intel cores compute them ~100x slower; fedsim.core.machine)")
    threads: int = setting(1, role=EXECUTION, check=COUNT,
                           help="torch threads for the data copies at load time (the numerics run on one; a streamed "
                                "run reads the next round's rows on one more)")
    load: str = setting("auto", role=EXECUTION, choices=("auto", "memory", "stream"),
                        help="train split held in memory, or each round's devices read from the file "
                             "(auto: stream above 1 GiB)")

    def __post_init__(self):
        """A variant name becomes its method and options; the options get their defaults (an unknown
        method is left for validate to name)."""
        if self.method in ENTRIES:
            method, options = resolve(self.method, self.options)
            object.__setattr__(self, "method", method)
            object.__setattr__(self, "options", options)

    def evaluates(self, round_: int) -> bool:
        """Whether the run computes its metrics at round `round_` (0, eval_every, 2 eval_every, ... and
        the last; and a round whose model is not finite, where it ends)."""
        return round_ % self.eval_every == 0 or round_ == self.rounds

    def validate(self) -> None:
        """Raise ValueError naming the first bad field, before any expensive work."""
        if self.method not in REGISTRY:
            raise ValueError(unknown_method(self.method))
        method = get_method(self.method)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not allowed(f, value):
                raise ValueError(f"bad run setting {f.name}={value!r}")
        if method.mu == "none" and self.mu != 0:
            raise ValueError(f"bad run setting mu={self.mu!r}: {variant_of(dataclasses.asdict(self))} has no "
                             "proximal term")
        problem = rng_problem(self.rng, self.selection, self.second_subset, [self.method])
        if problem:
            name, needed, why = problem
            raise ValueError(f"bad run setting {name}={getattr(self, name)!r}: must be {needed} with "
                             f"rng=authors ({why})")
        self._validate_files()

    def _validate_files(self) -> None:
        """What this machine must hold: the dataset and init files. (Whether it has the GPU that
        device=cuda asks for is torch's to say: fedsim.core.train.check_machine, since this module
        imports no torch, not even here.)"""
        if not Path(self.data).is_file():
            raise ValueError(f"dataset file not found: {self.data}")
        if self.init is not None and not init_file(self.init, self.seed).is_file():
            raise ValueError(f"init file not found: {init_file(self.init, self.seed)}")


def init_file(path: str, seed: int) -> Path:
    """An init path, where `{seed}` stands for the run's seed (one file per seed, as the authors'
    --seed gave one initial model per seed: fedsim.core.authors reads it)."""
    return Path(str(path).replace("{seed}", str(seed)))


def allowed(f: dataclasses.Field, value) -> bool:
    """Whether `value` is among the field's choices and within its check; None where None is the default."""
    if value is None and f.default is None:
        return True
    choices, check = f.metadata["choices"], f.metadata["check"]
    return (not choices or value in choices) and (check is None or check.ok(value))


def role(f: dataclasses.Field) -> str:
    return f.metadata["role"]


def column(f: dataclasses.Field) -> str:
    return f.metadata["column"] or f.name


def setting_columns(config_class=RunConfig) -> list[str]:
    """runs.csv's setting columns: the RESULT fields, in field order, by their column names."""
    return [column(f) for f in dataclasses.fields(config_class) if role(f) == RESULT]


def fingerprint(config: RunConfig) -> str:
    """The settings a checkpoint must share with the run resuming it: all but the EXECUTION ones, and
    the model only where one is named, eval_every only where it is not 1, dissimilarity only where
    it is off and keep_subnormals only where on (what every run did before those settings existed, so
    their checkpoints still resume)."""
    unset = {"model"} if config.model is None else set()
    unset |= {"eval_every"} if config.eval_every == 1 else set()
    unset |= set() if config.dissimilarity is False else {"dissimilarity"}
    unset |= set() if config.keep_subnormals else {"keep_subnormals"}
    kept = {f.name for f in dataclasses.fields(config) if role(f) != EXECUTION} - unset
    return json.dumps({k: v for k, v in dataclasses.asdict(config).items() if k in kept}, sort_keys=True)


def clients_per_round_problem(k: int, num_devices: int, selection: str = "uniform") -> str | None:
    """What is wrong with K devices per round on a dataset of `num_devices`, or None: uniform
    selection draws without replacement, so K <= the devices (weighted selection: any K)."""
    if selection == "uniform" and k > num_devices:
        return f"{k} is more than the {num_devices} devices (uniform selection draws without replacement)"
    return None


def check_clients_per_round(k: int, num_devices: int, selection: str = "uniform") -> None:
    problem = clients_per_round_problem(k, num_devices, selection)
    if problem:
        raise ValueError(f"bad run setting clients_per_round={k}: {problem}")


# The tuning criterion's default share of the last rounds (fedsim.outputs.summary's tail loss). Not a run
# setting: here because the summary, the CLI and the config's schema all read it, and this module
# sits below them (tests/test_layers.py).
TAIL_FRACTION = 0.1

def rng_problem(rng: str, selection: str, second_subset: str, methods) -> tuple[str, str, str] | None:
    """What rng=authors rules out, for runs of `methods` (method or variant names): the authors' code
    selects uniformly, and draws FedDANE's second subset (a method whose gradients are `sampled`)
    with its first one's seed. (setting, the value it must have, why) of the first setting that
    breaks the rule, or None. RunConfig.validate and the workflow's config check both ask here."""
    if rng != "authors":
        return None
    if selection != "uniform":
        return "selection", "uniform", "their code's"
    if second_subset != "same" and any(ENTRIES[m].method.gradients == "sampled" for m in methods):
        return "second_subset", "same", "their FedDANE draws its second subset with the first one's seed"
    return None


def participation_problem(method: str, k: int, num_devices: int, selection: str = "uniform") -> str | None:
    """What is wrong with K devices per round for a method that needs every device each round, or None."""
    if not ENTRIES[method].method.full_participation:
        return None
    if selection != "uniform":
        return f"{method} needs every device each round, which selection={selection!r} does not give (use uniform)"
    if k != num_devices:
        return f"{method} needs every device each round: K = {num_devices}, not {k}"
    return None


def check_participation(config: RunConfig, num_devices: int) -> None:
    problem = participation_problem(config.method, config.clients_per_round, num_devices, config.selection)
    if problem:
        raise ValueError(f"bad run setting clients_per_round={config.clients_per_round}: {problem}")


# The methods whose mu is `fixed` (fedsim.methods: FedProx): a proximal term is what they are, and
# its weight is the dataset's (the FedProx paper chose one per dataset), so none is a default.
NEEDS_MU = tuple(name for name, entry in ENTRIES.items() if entry.method.mu == "fixed")


def given_config(values: dict, flag: Callable[[str], str]) -> RunConfig:
    """The RunConfig of the settings a user gave (`fedsim train`'s options, fedsim.run's keywords), mu
    None where none was given: a method of NEEDS_MU is then refused in one line rather than run at
    mu = 0, which is FedAvg; the others take RunConfig's 0. `flag` spells a setting's name there."""
    if values.get("mu") is None:
        method = values.get("method")
        if method in NEEDS_MU:
            raise ValueError(f"{flag('method')} {method} needs {flag('mu')}, the weight of its proximal term: it "
                             "has no default (the FedProx paper picks one per dataset, config/config.yaml's "
                             "fedprox_mu; mu = 0 is FedAvg)")
        values = {name: value for name, value in values.items() if name != "mu"}
    return RunConfig(**values)
