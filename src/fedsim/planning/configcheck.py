"""The workflow config checked before any job: the schema (with its defaults filled in), then what a
schema cannot say (cross-references, K against devices, sizes). Every mistake is one ConfigError,
whose text is one line naming the key path and the problem.

Why not snakemake.utils.validate: it reports the first error its validator meets (we report the
most relevant one, jsonschema's best_match), and JSON Schema counts 2.0 as an integer, so K: 2.0
would pass beside K: 2; here integers are ints only.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
from pathlib import Path

import jsonschema
import yaml

from ..data.download import SOURCES
from ..kinds import KINDS, kind_of
from .experiments import (ConfigError, Setting, as_list, dataset_sources, experiment_ks, lr_grid, method_kind,
                          method_setting, method_values, mu_source, n_devices, selected_experiments,
                          settings as experiment_settings, tunes, used_datasets)
from ..methods import ENTRIES, REGISTRY, unknown_method
from ..core.settings import TAIL_FRACTION, RunConfig, rng_problem
from .kinds import entry_model, fit_problem, resolved_entry, trains_linear_softmax

# Ceilings on what one config may ask for, unless `allow_large: true` (config/README.md).
MAX_ROUNDS = 100_000
MAX_RUNS = 10_000
MAX_DATASET_GB = 8.0


# The schema's keys that are one run setting each (fedsim.core.settings.RunConfig's field of that name), by
# the schema path of the properties that hold them: their allowed values and defaults are RunConfig's,
# filled in by load_schema, so the schema states neither.
RUN_SETTINGS = {
    ("properties", "simulator", "properties"): ("selection", "second_subset", "rng", "init", "device", "keep_subnormals",
                                               "threads"),
    ("properties", "datasets", "additionalProperties", "properties"): ("load", "model"),
    ("properties", "experiments", "additionalProperties", "properties"): ("theory",),
}


def schema_at(schema: dict, path) -> dict:
    for key in path:
        schema = schema[key]
    return schema


def load_schema(path) -> dict:
    """The config schema, with what fedsim declares filled in: the method list from its registry
    (methods and variants), the dataset kinds and their keys (fedsim.kinds, a plugin's among them), the run
    settings' allowed values and defaults from RunConfig (RUN_SETTINGS), the tuning criterion's tail
    fraction (fedsim.core.settings.TAIL_FRACTION) and the raw sources' names (fedsim.data.download.SOURCES)."""
    schema = yaml.safe_load(Path(path).read_text())
    schema["definitions"]["method"]["enum"] = list(ENTRIES)
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    for where, names in RUN_SETTINGS.items():
        properties = schema_at(schema, where)
        for name in names:
            f = fields[name]
            if f.metadata["choices"]:
                properties[name]["enum"] = list(f.metadata["choices"]) + ([None] if f.default is None else [])
            if f.default is not dataclasses.MISSING:
                properties[name]["default"] = f.default
    _add_kinds(schema)
    schema["properties"]["tuning"]["properties"]["fraction"]["default"] = TAIL_FRACTION
    schema["properties"]["sources"]["properties"] = {name: {"$ref": "#/definitions/source"} for name in SOURCES}
    return schema


def _add_kinds(schema: dict) -> None:
    """The dataset kinds (fedsim.kinds) as the schema's `kind` values, and each kind's keys: the entry's
    properties name every kind's keys, each kind's `if kind: ... then:` block holds its rules, required
    keys and defaults; a kind's shared section (Kind.shared) is a top-level property. A key two kinds
    declare has one JSON type: a clash names both kinds and the types."""
    entry = schema["properties"]["datasets"]["additionalProperties"]
    entry["properties"]["kind"]["enum"] = list(KINDS)
    common, declared = set(entry["properties"]), {}  # declared: key -> (the first kind declaring it, its types)
    for name, kind in KINDS.items():
        keys = {**{key: _without_default(rule) for key, rule in kind.shared_keys.items()}, **kind.keys}
        for key, rule in keys.items():
            if key in common:
                raise ValueError(f"kind {name} declares the key {key!r}, which every dataset entry has: rename it")
            types = _json_types(rule)
            first, first_types = declared.setdefault(key, (name, types))
            if first_types != types:
                raise ValueError(f"kinds {first} and {name} both declare the key {key!r}, of types "
                                 f"{' or '.join(first_types)} and {' or '.join(types)}: rename one")
            entry["properties"].setdefault(key, {})  # its rules: its kind's block
        entry["allOf"].append({"if": {"properties": {"kind": {"const": name}}, "required": ["kind"]},
                               "then": {"required": list(kind.required), "properties": keys}})
        if kind.shared:
            schema["properties"][kind.shared] = {
                "description": f"settings every dataset of kind {name} shares (an entry may set its own)",
                "type": "object", "additionalProperties": False, "default": {}, "properties": kind.shared_keys}


def _without_default(rule: dict) -> dict:
    return {k: v for k, v in rule.items() if k != "default"}


def _json_types(rule: dict) -> tuple[str, ...]:
    """The JSON types a key's rule admits (a $ref: its definition's name), to compare two kinds' keys."""
    if "$ref" in rule:
        return (rule["$ref"].rsplit("/", 1)[-1],)
    if "type" in rule:
        return tuple(sorted(as_list(rule["type"])))
    alternatives = rule.get("oneOf") or rule.get("anyOf") or []
    return tuple(sorted({t for sub in alternatives for t in _json_types(sub)})) or ("any",)


def check_config(cfg: dict, schema: dict, project_dir, files=()) -> None:
    """Fill defaults into `cfg` and check it; raise ConfigError on the first mistake. `files`: the
    YAML files it was read from (their duplicate keys are refused); `project_dir`: where the
    workflow lives (results_dir must not be it)."""
    for name in files:
        check_duplicate_keys(name)
    bad = _non_finite(cfg)
    if bad is not None:
        raise ConfigError(bad, f"{_value_at(cfg, bad)} is not a finite number")
    _check_kinds_known(cfg)
    validator = _with_defaults(jsonschema.Draft7Validator)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(cfg))
    if error is not None:
        raise ConfigError(*_explain(error, cfg, validator))
    _check_results_dir(cfg, project_dir)
    for name, entry in cfg["datasets"].items():
        check = KINDS[entry["kind"]].check
        problem = check(resolved_entry(cfg, name)) if check else None
        if problem:
            raise ConfigError(["datasets", name, problem[0]], problem[1])
    built_from = {cfg["datasets"].get(d, {}).get("pool") for d in used_datasets(cfg)}
    for name, entry in cfg["datasets"].items():
        if KINDS[entry["kind"]].describe and (name in used_datasets(cfg) or name in built_from):
            _check_own_files(cfg, name, entry)
    for name, entry in cfg["datasets"].items():  # after the files: a pool's samples are read from its file
        if KINDS[entry["kind"]].pools:
            _check_pool(cfg, name, entry)
    for name in used_datasets(cfg):  # after the pools: a partition's samples are its pool's
        if name in cfg["datasets"]:  # (an unknown one: the experiment's check names it)
            _check_model(cfg, name)
    for name, exp in cfg["experiments"].items():
        _check_experiment(cfg, name, exp)
    for name in _selected_datasets(cfg):  # after the experiments, whose selection (mu_from) it follows
        _check_files_exist(cfg, name)
    _check_shared_tuning(cfg)
    _check_rng(cfg)
    _check_init_files(cfg)
    _check_method_options(cfg)
    _check_datasets_used(cfg)
    if not cfg["allow_large"]:
        _check_sizes(cfg)



def built_samples(path) -> int | None:
    """A built dataset file's samples (train and test), read from its offsets; None before it is built
    (or where it cannot be read: its build says so)."""
    from .cost import file_sizes

    try:
        sizes = file_sizes(path)
    except (OSError, KeyError, ValueError):
        return None
    return int(sizes.train.sum() + sizes.test.sum())


def pool_samples(cfg: dict, name, path) -> int | None:
    """A pool's samples where known before its partition's build: its built file's (at `path`), else
    an `arrays` pool's .npz rows (its header); else None. Each counts every row, repeated ones too (the
    partition drops those): fewer samples fail every check of fedsim.data.partition.check_settings that
    these fail, so a refusal from either is sure."""
    samples = built_samples(path)
    entry = cfg["datasets"][name]
    if samples is None and KINDS[entry["kind"]].describe:
        try:
            samples = KINDS[entry["kind"]].describe(entry)["rows"]
        except ValueError:
            return None  # the config check names the file's problem
    return samples


def check_partition_pools(cfg: dict, pool_samples) -> None:
    """Each Dirichlet partition some experiment runs against its pool's sample count, where
    `pool_samples(name)` knows it (the pool's file is built; else None: built_samples of its path):
    what no draw can satisfy (fedsim.data.partition.check_settings) is a ConfigError before any job, not a
    failed build."""
    for name in used_datasets(cfg):
        entry = cfg["datasets"][name]
        kind = KINDS[entry["kind"]]
        samples = pool_samples(entry["pool"]) if kind.pools and kind.check_pool else None
        if samples is None:
            continue
        try:
            kind.check_pool(entry, samples)
        except ValueError as err:
            raise ConfigError(["datasets", name], f"{err} (the pool {entry['pool']})") from None


def command_line_types(value):
    """`--config` values with the types a config file would give them. Snakemake reads a nested
    value given on its command line (`'experiments={figure1: {rounds: 20}}'`, `'seeds=[0, 1]'`) as
    text all through, where the same YAML in a file has numbers and booleans: each text is read
    again as YAML, and kept as text where YAML keeps it so."""
    if isinstance(value, dict):
        return {key: command_line_types(item) for key, item in value.items()}
    if isinstance(value, list):
        return [command_line_types(item) for item in value]
    if isinstance(value, str):
        try:
            typed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        return typed if isinstance(typed, (bool, int, float)) or typed is None else value
    return value

CONFIGFILE_FLAGS = ("--configfile", "--configfiles")


def configfiles_after_the_first(argv) -> list[str]:
    """The paths a `--configfile` flag in `argv` takes after its first: `--configfile my.yaml
    results/x/run.json` takes both (the flag takes every word up to the next option), so a target
    written after it lands here; `--configfile=my.yaml` takes that one file only."""
    after, taken = [], None  # taken: how many words the current flag took, None outside one
    for word in argv[1:]:
        if word in CONFIGFILE_FLAGS:
            taken = 0
        elif taken is None or word.startswith("-"):
            taken = None
        else:
            if taken:
                after.append(word)
            taken += 1
    return after


def target_read_as_config(argv, schema: dict, load) -> str | None:
    """One line where a word after a `--configfile`'s first file was a target, not a config file:
    Snakemake read it as a config (`load(path)`: what it made of it) and it has none of the config's
    keys; None otherwise. (A target Snakemake cannot read as JSON or YAML, an image or a file not made
    yet, stops Snakemake with its own traceback before the workflow runs: docs/workflow.md.)"""
    for path in configfiles_after_the_first(argv):
        try:
            read = load(path)
        except Exception:  # noqa: BLE001 - not readable here: Snakemake's to report, as it did
            continue
        if isinstance(read, dict) and read and not set(read) & set(schema["properties"]):
            return (f"{path} was read as a config file (it has no config key): --configfile takes every path "
                    f"after it; put targets first (snakemake TARGET --configfile FILE) or write --configfile=FILE")
    return None


# ---------------------------------------------------------------------------------------
# The schema's errors, explained in one line
# ---------------------------------------------------------------------------------------

def _with_defaults(validator_class):
    """A validator class that also fills in the schema's `default` values, and whose integers
    are ints only: 2.0 where an integer is meant is refused, so that 2.0 and 2 can never name
    two runs (JSON Schema itself counts 2.0 as an integer)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def properties(validator, props, instance, schema):
        if validator.is_type(instance, "object"):
            for key, subschema in props.items():
                if "default" in subschema and key not in instance:
                    instance[key] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, props, instance, schema)

    types = validator_class.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool))
    return jsonschema.validators.extend(validator_class, {"properties": properties}, type_checker=types)


def _explain(error, cfg=None, validator=None):
    """(key path, one-line problem) for a jsonschema error; `cfg` and `validator` (the whole config and the
    schema's validator) let the line say more: a near name, whether a list would do."""
    path = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = set(error.schema.get("properties", {}))
        unknown = sorted(str(k) for k in error.instance if k not in known)
        return path + unknown[:1], f"unknown key (allowed here: {', '.join(sorted(known)) or 'none'})"
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [k for k in error.validator_value if k not in error.instance]
        notes = [f"so are {', '.join(missing[1:])}"] if len(missing) > 1 else []
        notes += _new_experiment_hint(path, cfg, error.validator_value)
        return path + missing[:1], "required key is missing" + (f" ({'; '.join(notes)})" if notes else "")
    if "propertyNames" in error.schema_path:
        return path + [str(error.instance)], "invalid name (use letters, digits, '_', '.', '-'; start with a letter or digit)"
    if error.validator in ("oneOf", "anyOf") and "description" in error.schema:
        problem = f"{error.instance!r} is not {error.schema['description']}"
        if (isinstance(error.instance, str) and _takes_a_list(error.schema) and path
                and (validator is None or validator.evolve(schema=error.schema).is_valid([error.instance]))):
            problem += f" (a list: write {path[-1]}=[{error.instance}] after --config, or [{error.instance}] in a file)"
        return path, problem
    if error.validator == "enum" and error.validator_value == list(ENTRIES):  # a method's name: its label says
        return path, unknown_method(error.instance)
    problem = " ".join(error.message.split())
    if error.validator == "type" and _is_number_text(error.instance):
        problem += " (YAML reads 1e-3 as text: write 0.001 or 1.0e-3)"
    return path, problem


def _new_experiment_hint(path, cfg, required) -> list[str]:
    """Where an experiment lacks a key: a name near another experiment's is likely that one misspelt."""
    if cfg is None or len(path) != 2 or path[0] != "experiments":
        return []
    others = [name for name in cfg["experiments"] if name != path[1]]
    near = difflib.get_close_matches(str(path[1]), others, n=1)
    keys = f"{', '.join(required[:-1])} and {required[-1]}" if len(required) > 1 else required[0]
    return [f"did you mean experiment {near[0]}? A new one names its {keys}" if near
            else f"a new experiment names its {keys}"]


def _takes_a_list(schema) -> bool:
    return any(option.get("type") == "array" for option in schema.get("oneOf", schema.get("anyOf", [])))


def _is_number_text(value) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return isinstance(value, str)


def _duplicate_keys(node, path=()):
    """(key path, line) of every key repeated in one YAML mapping under `node`."""
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for key, value in node.value:
            if key.value in seen:
                yield [*path, key.value], key.start_mark.line + 1
            seen.add(key.value)
            yield from _duplicate_keys(value, (*path, key.value))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            yield from _duplicate_keys(item, (*path, i))


def check_duplicate_keys(name) -> None:
    """YAML keeps the last of two equal keys in a mapping, silently: refuse them instead."""
    with open(name) as handle:
        node = yaml.compose(handle, Loader=yaml.SafeLoader)
    for path, line in _duplicate_keys(node):
        raise ConfigError(path, f"duplicate key in {name}, line {line} (YAML would keep only the last)")


def _non_finite(value, path=()):
    """The key path of the first NaN or infinite number in `value`, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return list(path)
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        found = _non_finite(child, (*path, key))
        if found is not None:
            return found
    return None


def _value_at(cfg, path):
    for key in path:
        cfg = cfg[key]
    return cfg


# ---------------------------------------------------------------------------------------
# What the schema cannot say
# ---------------------------------------------------------------------------------------

def _check_results_dir(cfg, project_dir) -> None:
    """A results folder that is a filesystem root or the project itself would mix or bury it."""
    folder = Path(cfg["results_dir"]).resolve()
    for forbidden, what in ((Path(folder.anchor), "a filesystem root"), (Path(project_dir).resolve(),
                            "the project folder"), (Path.cwd().resolve(), "the working directory")):
        if folder == forbidden:
            raise ConfigError(["results_dir"], f"{cfg['results_dir']!r} is {what}; name a folder below it")


def _check_pool(cfg, name, entry) -> None:
    """A Dirichlet partition's pool is another dataset of the config, of a kind it can pool. (Its
    alpha > 0 is the schema's; devices against the pool's samples: check_partition_pools, where they
    are known before the build (pool_samples), else the partition's build, its first job.)"""
    where, pool = ["datasets", name, "pool"], entry["pool"]
    if pool not in cfg["datasets"]:
        raise ConfigError(where, f"unknown dataset {pool!r} (defined under datasets: {', '.join(cfg['datasets'])})")
    kind = cfg["datasets"][pool]["kind"]
    if not KINDS[kind].poolable:  # token ids need their own file's vocabulary; a partition of a partition
        unpooled = [name for name, k in KINDS.items() if not k.poolable]  # is a chain the workflow does not build
        raise ConfigError(where, f"{pool} is of kind {kind}; a partition pools an image or feature dataset "
                                 f"(not {' or '.join(unpooled)})")


def _check_kinds_known(cfg) -> None:
    """Each dataset entry's kind is one fedsim.kinds knows (a user's own: FEDSIM_PLUGINS names its folder),
    said before the schema, whose first complaint would be the unknown kind's first key."""
    for name, entry in (cfg.get("datasets") or {}).items():
        kind = entry.get("kind") if isinstance(entry, dict) else None
        if isinstance(kind, str) and kind not in KINDS:
            try:
                kind_of(kind)
            except ValueError as err:
                raise ConfigError(["datasets", name, "kind"], str(err)) from None


def _selected(cfg) -> dict:
    """The experiments this run makes (only_experiments, only_datasets): the files and seeds it needs are theirs
    (a config whose other datasets' files are elsewhere still runs the selected ones); {} where the selection
    names what is not there (selected_experiments' own line then says so, after the check)."""
    try:
        return selected_experiments(cfg)
    except (ConfigError, KeyError):  # (a selection or mu_from naming what is not there: its own check says so)
        return {}


def _selected_datasets(cfg) -> list[str]:
    """The datasets the selected experiments run, and the pools they are partitioned from."""
    used = {d for exp in _selected(cfg).values() for d in exp["datasets"] if d in cfg["datasets"]}
    pools = {cfg["datasets"][d].get("pool") for d in used} & set(cfg["datasets"])
    return sorted(used | pools)


def _check_files_exist(cfg, name) -> None:
    """The files a dataset entry names for its build (a JSON import's train and test, an .npz, LEAF JSON) are
    there: one line naming the key, not Snakemake's missing-input report."""
    entry, kind = cfg["datasets"][name], KINDS[cfg["datasets"][name]["kind"]]
    for key in [*([kind.own_files] if kind.own_files in entry else []), *kind.named_files]:
        for path in [entry[key]] if isinstance(entry[key], str) else entry[key]:
            if not Path(path).exists():
                raise ConfigError(["datasets", name, key], f"{path}: no such file or folder")


def _check_init_files(cfg) -> None:
    """simulator.init's file is there for every seed an experiment runs ({seed} in it: each seed's): a run
    whose initial model is missing would otherwise stay as it was, trained from fedsim's own."""
    init = cfg["simulator"]["init"]
    if init is None:
        return
    seeds = sorted({seed for exp in _selected(cfg).values() for seed in as_list(exp.get("seeds", cfg["seeds"]))})
    for seed in seeds:
        path = init.replace("{seed}", str(seed))
        if not Path(path).is_file():
            raise ConfigError(["simulator", "init"], f"{path}: no such file" + (f" (seed {seed})" if path != init else ""))


def _check_own_files(cfg, name, entry) -> None:
    """A kind whose own files are read before the build (Kind.describe: a user's .npz) holds what its
    kind reads; one without device ids is a pool, which no experiment runs on directly."""
    kind = KINDS[entry["kind"]]
    try:
        about = kind.describe(entry)
    except ValueError as err:
        raise ConfigError(["datasets", name, kind.own_files], str(err)) from None
    if not about["devices"]:
        users = [e for e, exp in cfg["experiments"].items() if name in exp["datasets"]]
        partitions = " or ".join(k for k, declared in KINDS.items() if declared.pools)
        if users:
            raise ConfigError(["datasets", name], f"{entry[kind.own_files]} has no `device` ids: it is a pool; let "
                                                  f"experiment {users[0]} run a kind: {partitions} entry with pool: "
                                                  f"{name}")


def _check_model(cfg, name) -> None:
    """A dataset entry's model takes its samples; where the entry names a model that is not MCLR-like,
    no experiment runs an MCLR-only method or the theorems' constants on it (where the kind's own
    model is not, as on Sent140, those methods are left out of its runs: fedsim.planning.experiments)."""
    problem = fit_problem(cfg, name)
    if problem:
        raise ConfigError(["datasets", name, "model"], problem)
    model = cfg["datasets"][name].get("model")
    if model is None or trains_linear_softmax(cfg, name):
        return
    for experiment, exp in cfg["experiments"].items():
        if name not in exp["datasets"]:
            continue
        needs = [m for m in exp["methods"] if ENTRIES[m].mclr_only] + (["theory: true"] if exp.get("theory") else [])
        if needs:
            raise ConfigError(["datasets", name, "model"], f"{model} is not an MCLR model, which {', '.join(needs)} "
                                                           f"of experiment {experiment} needs")


def _check_experiment(cfg, name, exp) -> None:
    where = ["experiments", name]
    for method in exp["methods"]:
        if ENTRIES[method].method.full_participation and cfg["simulator"]["selection"] != "uniform":
            raise ConfigError(["simulator", "selection"], f"must be uniform for {method} (experiment {name}), "
                                                         "which runs every device each round")
    if name == "tuning" or name.endswith("_test_acc"):
        raise ConfigError(where, "reserved name (tuning and *_test_acc are figure file names)")
    given = [key for key in ("clients_per_round", "clients_fraction") if key in exp]
    if len(given) != 1:
        raise ConfigError(where + (given[1:] or ["clients_per_round"]), "give one of clients_per_round, clients_fraction")
    for i, dataset in enumerate(exp["datasets"]):
        if dataset not in cfg["datasets"]:
            raise ConfigError(where + ["datasets", i],
                              f"unknown dataset {dataset!r} (defined under datasets: {', '.join(cfg['datasets'])})")
        if cfg.get("only_datasets") is not None and dataset not in cfg["only_datasets"]:
            continue  # not run: its K, methods and theory are its own selection's to check
        experiment_ks(cfg, name, dataset)  # raises where K is undefined or too large
        for method in exp["methods"]:
            method_setting(cfg, method, Setting(dataset, "", "", ""))  # raises where every device is unknown
        if exp.get("theory") and not trains_linear_softmax(cfg, dataset):
            raise ConfigError(where + ["theory"], f"the theorems' constants are measured for MCLR models only, not "
                                                  f"{dataset}'s {entry_model(cfg, dataset)}")
        if exp.get("theory") and cfg["datasets"][dataset].get("eval_every", 1) != 1:
            raise ConfigError(["datasets", dataset, "eval_every"], f"must be 1 for experiment {name}, whose runs "
                                                                   "measure the theorems' constants every round")
        if exp.get("theory") and cfg["datasets"][dataset].get("dissimilarity") is False:
            raise ConfigError(["datasets", dataset, "dissimilarity"], f"must be true for experiment {name}, whose "
                                                                      "runs need B's dissimilarity every round")
    if exp.get("figure") == "theory" and not exp.get("theory"):
        raise ConfigError(where + ["theory"], "must be true for figure: theory (its runs log the constants it draws)")
    if "mu" in exp:
        for key in ("mu_from", "mu_grid", "lr_grid", "lr_grids"):
            if key in exp:
                raise ConfigError(where + [key], "not with `mu` (the experiment's mu values are fixed)")
    for key in ("lr_grid", "lr_grids"):
        if key in exp and "mu_from" in exp:
            raise ConfigError(where + [key], f"not with `mu_from` (the lr is tuned in experiment {exp['mu_from']})")
    if "mu_from" in exp:
        _check_mu_from(cfg, name, exp)
    for method, grid in exp.get("grids", {}).items():
        _check_grid(where + ["grids", method], exp, method, grid)


def _check_grid(where, exp, method, grid) -> None:
    """An experiment's own grid for a method tuned over an option, each value in the option's domain
    (mu's grid is `mu_grid`). A grid for a method the experiment does not run is checked and left
    unused: `experiments={X: {methods: [...]}}` runs a subset of a config's methods as it stands."""
    tuned = ENTRIES[method].method.tuned
    if tuned is None:
        raise ConfigError(where, f"{method} is not tuned over an option of its own"
                                 + (" (its mu grid is `mu_grid`)" if method_kind(method) == "tuned" else ""))
    for i, value in enumerate(grid):
        try:
            ENTRIES[method].method.resolve({tuned: value}, from_text=False)
        except ValueError as err:
            raise ConfigError(where + [i], str(err)) from None


def _check_mu_from(cfg, name, exp) -> None:
    """The experiment named by mu_from must tune mu in ONE setting per dataset of ours."""
    where, source = ["experiments", name, "mu_from"], exp["mu_from"]
    ref = cfg["experiments"].get(source)
    if ref is None or source == name or "mu_from" in ref or "mu" in ref:
        raise ConfigError(where, f"{source!r} is not another experiment that tunes mu itself")
    for method in (m for m in exp["methods"] if method_kind(m) == "tuned"):
        if method not in ref["methods"]:
            raise ConfigError(where, f"experiment {source} does not run {method}")
    for dataset in exp["datasets"]:
        if dataset not in ref["datasets"]:
            raise ConfigError(where, f"experiment {source} does not run dataset {dataset}")
        if len(experiment_ks(cfg, source, dataset)) > 1 or len(as_list(ref["epochs"])) > 1:
            raise ConfigError(where, f"experiment {source} tunes several K or E on {dataset}")


def _check_shared_tuning(cfg) -> None:
    """Experiments that tune a method in the same setting tune it over the same values (its setting's
    grid, its lr grid): the tuning chooses once among all their runs, and each must have run the choice."""
    seen = {}
    for name, exp in cfg["experiments"].items():
        if mu_source(cfg, name) != "grid":
            continue
        for setting in experiment_settings(cfg, name):
            for method in (m for m in exp["methods"] if tunes(cfg, m, name)):
                values = method_values(cfg, method, method_setting(cfg, method, setting), name)
                key = (method, method_setting(cfg, method, setting))
                first = seen.setdefault(key, (name, values))
                if sorted(map(str, first[1])) != sorted(map(str, values)):
                    grid = "lr_grid" if lr_grid(cfg, method, name) != lr_grid(cfg, method, first[0]) else "grids"
                    raise ConfigError(["experiments", name, grid], f"tunes {method} on {setting.dataset} over other "
                                      f"values than experiment {first[0]} does in the same setting; give both the same")


def _check_rng(cfg) -> None:
    """rng: authors's rule, over every method the experiments run (fedsim.core.settings.rng_problem)."""
    sim = cfg["simulator"]
    methods = [m for e in cfg["experiments"].values() for m in e["methods"]]
    problem = rng_problem(sim["rng"], sim["selection"], sim["second_subset"], methods)
    if problem:
        name, needed, why = problem
        raise ConfigError(["simulator", name], f"must be {needed} with rng: authors ({why})")


def _check_method_options(cfg) -> None:
    """Each method's settings against the domains its options declare (fedsim.methods.Option), as
    typed: quoted numbers in a file are text (command-line values are typed before: command_line_types)."""
    for name, options in cfg["method_options"].items():
        if name not in REGISTRY:
            raise ConfigError(["method_options", name], f"unknown method (one of {', '.join(REGISTRY)})")
        for key, value in options.items():
            try:
                REGISTRY[name].resolve({key: value}, from_text=False)
            except ValueError as err:
                raise ConfigError(["method_options", name, key], str(err)) from None


def _check_datasets_used(cfg) -> None:
    """The raw sources of the datasets some experiment runs, and their metric samples."""
    for name in used_datasets(cfg):
        for source in dataset_sources(cfg, name):
            if source not in cfg["sources"]:
                raise ConfigError(["sources", source], f"required by dataset {name} (kind {cfg['datasets'][name]['kind']})")
        devices, sample = n_devices(cfg, name), cfg["datasets"][name].get("eval_devices")
        if devices is not None and sample is not None and sample > devices:
            raise ConfigError(["datasets", name, "eval_devices"], f"{sample} is more than the dataset's {devices} devices")


def _check_sizes(cfg) -> None:
    """Refuse plans that would run for days or fill the disk, saying how big they are."""
    hint = "set allow_large: true to run it anyway"
    for name in used_datasets(cfg):
        entry = cfg["datasets"][name]
        if entry["rounds"] > MAX_ROUNDS:
            raise ConfigError(["datasets", name, "rounds"], f"{entry['rounds']} is above the ceiling of {MAX_ROUNDS} ({hint})")
        kind = KINDS[entry["kind"]]
        if kind.size_gb:
            settings = resolved_entry(cfg, name)
            gigabytes = kind.size_gb(settings)
            if gigabytes > MAX_DATASET_GB:
                key = ["datasets", name, "devices"] if "devices" in entry else [kind.shared, "devices"]
                raise ConfigError(key, f"{settings['devices']} devices would make a dataset of about "
                                  f"{gigabytes:,.0f} GB (above the ceiling of {MAX_DATASET_GB:g} GB; {hint})")
    runs = 0
    for name, exp in cfg["experiments"].items():
        if exp.get("rounds", 0) > MAX_ROUNDS:
            raise ConfigError(["experiments", name, "rounds"], f"{exp['rounds']} is above the ceiling of {MAX_ROUNDS} ({hint})")
        grid = len(exp.get("mu", exp.get("mu_grid", cfg["tuning"]["mu_grid"])))
        lrs = max([len(exp.get("lr_grid", [0])), *map(len, exp.get("lr_grids", {}).values())])
        per_setting = len(exp["methods"]) * grid * lrs * len(exp.get("seeds", cfg["seeds"]))
        runs += per_setting * len(exp["datasets"]) * len(as_list(exp.get("clients_per_round", 1))) * len(as_list(exp["epochs"]))
    if runs > MAX_RUNS:
        raise ConfigError(["experiments"], f"up to {runs:,} training runs are above the ceiling of {MAX_RUNS:,} ({hint})")
