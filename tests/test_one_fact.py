"""One fact, one place: each fact below has ONE owner in fedsim's code, the other places derive
from it, and where a copy cannot derive (YAML a person reads, a parser that must not import
matplotlib) the test of that fact ties the copy to its owner, so that it fails when they drift."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from pathlib import Path

import pytest
import yaml

from fedsim import cli
from fedsim.data import download, synthetic
from fedsim.core import settings
from fedsim.outputs import summary
from fedsim.planning import experiments
from fedsim.planning.configcheck import RUN_SETTINGS, check_config, load_schema, schema_at
from fedsim.planning.experiments import ConfigError
from fedsim.planning.progress import PROGRESS_SECONDS
from fedsim.core.settings import RunConfig

REPO = Path(__file__).resolve().parents[1]
SCHEMA_FILE = REPO / "workflow" / "schemas" / "config.schema.yaml"


def raw_schema() -> dict:
    """The schema file as written, before load_schema fills in what fedsim declares."""
    return yaml.safe_load(SCHEMA_FILE.read_text())


def default_config() -> dict:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def command(name: str) -> argparse.ArgumentParser:
    """The parser of one `fedsim` command."""
    [commands] = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return commands.choices[name]


def test_run_settings_in_the_schema_are_runconfigs():
    """The config keys that are run settings (simulator.selection, second_subset, rng, init, device,
    threads; datasets.*.load, model; experiments.*.theory): their allowed values and defaults are
    fedsim.core.settings.RunConfig's fields', filled into the schema by fedsim.planning.configcheck.load_schema
    (RUN_SETTINGS), so the schema file states neither, and no other key named like a field states
    its own. config/config.yaml's `simulator:` section, written out for the reader, holds the
    defaults, and simulator.progress_seconds's default is fedsim.planning.progress.PROGRESS_SECONDS."""
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    raw, schema = raw_schema(), load_schema(SCHEMA_FILE)
    for where, names in RUN_SETTINGS.items():
        written, loaded = schema_at(raw, where), schema_at(schema, where)
        for name in names:
            f = fields[name]
            assert not {"enum", "default"} & set(written[name]), f"{'/'.join(where)}/{name}: a copy of RunConfig's"
            choices = list(f.metadata["choices"]) + ([None] if f.default is None else [])  # None: its default
            assert loaded[name].get("enum") == (choices if f.metadata["choices"] else None), name
            assert loaded[name]["default"] == f.default, name
        for name in set(written) & set(fields) - set(names):  # eval_devices, rounds, seed (the generator's)
            assert not {"enum", "default"} & set(written[name]), (
                f"{'/'.join(where)}/{name}: states its own values or default (list it in RUN_SETTINGS)")
    simulator = schema["properties"]["simulator"]["properties"]
    assert default_config()["simulator"] == {key: entry["default"] for key, entry in simulator.items()}
    assert simulator["progress_seconds"]["default"] == PROGRESS_SECONDS


def test_synthetic_defaults_are_the_generators():
    """The synthetic generator's defaults (devices, features, classes, train_fraction, seed) are
    fedsim.data.synthetic.DEFAULTS: the generator's keyword defaults, `fedsim generate-synthetic`'s
    option defaults (fedsim.cli), the synthetic kind's shared keys and so the schema's `synthetic`
    section (load_schema), whose keys a dataset entry may override; config/config.yaml's `synthetic:`
    section, written out for the reader, equals it."""
    from fedsim.kinds import KINDS

    defaults = synthetic.DEFAULTS
    assert "synthetic" not in raw_schema()["properties"]
    loaded = load_schema(SCHEMA_FILE)["properties"]["synthetic"]["properties"]
    assert {key: entry["default"] for key, entry in loaded.items()} == defaults
    assert {key: rule["default"] for key, rule in KINDS["synthetic"].shared_keys.items()} == defaults
    entry = load_schema(SCHEMA_FILE)["properties"]["datasets"]["additionalProperties"]
    assert set(defaults) <= set(entry["properties"])
    parser = command("generate-synthetic")
    assert {key: parser.get_default(key) for key in defaults} == defaults
    names = {"devices": "num_devices", "features": "num_features", "classes": "num_classes",
             "train_fraction": "train_fraction", "seed": "seed"}
    for function in (synthetic.synthetic_stream, synthetic.generate_synthetic):
        parameters = inspect.signature(function).parameters
        assert {key: parameters[names[key]].default for key in defaults} == defaults, function.__name__
    assert default_config()["synthetic"] == defaults


def test_arrays_defaults_are_the_importers():
    """An .npz import's split defaults (train_fraction, seed: LEAF's split of each device's rows, where the
    file marks no test rows) are fedsim.data.arrays.DEFAULTS: import_arrays' keyword defaults, the
    `arrays` kind's keys and so the schema's (load_schema), `fedsim import-arrays`' option defaults
    (fedsim.cli, from the kind's keys) and fedsim.import_arrays' (fedsim.api), not another command's."""
    from fedsim import api
    from fedsim.data import arrays
    from fedsim.kinds import KINDS

    defaults = arrays.DEFAULTS
    assert set(defaults) == {"train_fraction", "seed"}
    assert {key: KINDS["arrays"].keys[key]["default"] for key in defaults} == defaults
    entry = load_schema(SCHEMA_FILE)["properties"]["datasets"]["additionalProperties"]
    [rule] = [rule["then"] for rule in entry["allOf"] if rule["if"]["properties"]["kind"]["const"] == "arrays"]
    assert {key: rule["properties"][key]["default"] for key in defaults} == defaults
    assert {key: command("import-arrays").get_default(key) for key in defaults} == defaults
    for function in (arrays.import_arrays, api.import_arrays):
        parameters = inspect.signature(function).parameters
        assert {key: parameters[key].default for key in defaults} == defaults, function.__module__


def test_train_fraction_range_is_keys():
    """The range of a train_fraction (each device's share of train rows; 1 would leave every test split
    empty) is fedsim.data.keys.TRAIN_FRACTION, (0, 1): every kind's train_fraction key takes it (and so the
    schema and each kind's own command), the synthetic generator checks by it, and the Python API's
    writers check by the kinds' keys (tests/test_api.py: the same refusals as the commands)."""
    from fedsim.data.keys import TRAIN_FRACTION
    from fedsim.kinds import KINDS

    rules = {name: {**kind.shared_keys, **kind.keys}.get("train_fraction") for name, kind in KINDS.items()}
    rules = {name: rule for name, rule in rules.items() if rule is not None}
    assert {"synthetic", "arrays", "dirichlet", "shakespeare", "sent140", "femnist62"} <= set(rules)
    for name, rule in rules.items():
        assert {key: value for key, value in rule.items() if key not in ("default", "description")} == TRAIN_FRACTION
        parser = command(KINDS[name].command.name)
        [option] = [a for a in parser._actions if a.dest == "train_fraction"]
        assert option.type("0.5") == 0.5, name
        for outside in ("0", "1", "1.0", "nan"):
            with pytest.raises(argparse.ArgumentTypeError, match=r"is not a finite number in \(0, 1\)"):
                option.type(outside)
    for outside in (0, 1.0):
        with pytest.raises(ValueError, match=r"^train_fraction: expected a finite number in \(0, 1\)"):
            synthetic.synthetic_stream(alpha=0, beta=0, iid=True, train_fraction=outside)


def test_tail_fraction_is_settings():
    """The tuning criterion's tail fraction of rounds (0.1) is fedsim.core.settings.TAIL_FRACTION: the
    default of summarise() and findings(), of the --fraction of `fedsim summarise`, `findings`,
    `tune` and `tuning-figure` (fedsim.cli) and of the schema's tuning.fraction (load_schema);
    config/config.yaml's `tuning: fraction`, written out for the reader, equals it."""
    fraction = settings.TAIL_FRACTION
    assert summary.TAIL_FRACTION is fraction  # summarise() and findings() read it from there
    assert "default" not in raw_schema()["properties"]["tuning"]["properties"]["fraction"]
    assert load_schema(SCHEMA_FILE)["properties"]["tuning"]["properties"]["fraction"]["default"] == fraction
    for name in ("summarise", "findings", "tune", "tuning-figure"):
        assert command(name).get_default("fraction") == fraction, name
    for function in (summary.summarise, summary.findings):
        assert inspect.signature(function).parameters["fraction"].default == fraction, function.__name__
    assert default_config()["tuning"]["fraction"] == fraction


def test_raw_sources_are_downloads():
    """The LEAF raw sources (their names, base URLs, file names and checksums) are
    fedsim.data.download.SOURCES: the schema's `sources` keys (load_schema), the names `fedsim fetch`
    lists, and the sources the dataset kinds need (fedsim.planning.experiments.dataset_sources) come from
    it or are among it; config/config.yaml's `sources:`, written out for the reader (and passed to
    each download), equals it."""
    sources = download.SOURCES
    config = default_config()["sources"]
    assert list(config) == list(sources)
    for name, entry in config.items():
        source = sources[name]
        assert (entry["base_url"], entry["file"]) == (source.base_url, source.filename), name
        assert (entry.get("sha256"), entry.get("md5")) == (source.sha256, source.md5), name
    assert raw_schema()["properties"]["sources"]["properties"] == {}
    assert list(load_schema(SCHEMA_FILE)["properties"]["sources"]["properties"]) == list(sources)
    [named] = [a for a in command("fetch")._actions if a.dest == "source"]
    assert all(name in named.help for name in sources)
    kinds = load_schema(SCHEMA_FILE)["properties"]["datasets"]["additionalProperties"]["properties"]["kind"]["enum"]
    needed = {s for kind in kinds for s in experiments.dataset_sources({"datasets": {"d": {"kind": kind}}}, "d")}
    assert needed == set(sources)


def _config(method: str, **simulator) -> dict:
    dataset = {"kind": "synthetic", "iid": True, "alpha": 0, "beta": 0, "lr": 0.01, "batch_size": 10,
               "rounds": 2, "fedprox_mu": 1}
    return {"datasets": {"d": dataset}, "simulator": simulator,
            "experiments": {"e": {"datasets": ["d"], "methods": [method], "clients_per_round": 2, "epochs": 1}}}


def _config_refuses(method: str, **simulator) -> str | None:
    """The simulator key the workflow's config check refuses, or None."""
    try:
        check_config(_config(method, **simulator), load_schema(SCHEMA_FILE), REPO)
    except ConfigError as err:
        assert err.path.startswith("simulator."), err
        return err.path.removeprefix("simulator.")
    return None


def _run_refuses(method: str, **simulator) -> str | None:
    """The setting RunConfig.validate refuses, or None (past the rules, it misses the dataset file)."""
    with pytest.raises(ValueError) as err:
        RunConfig(data=str(REPO / "no-such-dataset.h5"), method=method, **simulator).validate()
    text = str(err.value)
    if text.startswith("dataset file not found"):
        return None
    assert text.startswith("bad run setting ") and "rng=authors" in text, text
    return text.removeprefix("bad run setting ").split("=")[0]


@pytest.mark.parametrize("method", ["fedavg", "feddane", "feddane_authors"])
def test_rng_authors_rule_is_settings(method):
    """When rng must not be "authors" (or rather: what rng=authors needs: uniform selection and,
    for a method that samples its gradient devices, second_subset same) is
    fedsim.core.settings.rng_problem: RunConfig.validate (a run) and fedsim.planning.configcheck._check_rng (the
    workflow's config, before any job) both ask it, and refuse the same settings by the same key."""
    for rng in ("fedsim", "authors"):
        for selection in ("uniform", "weighted"):
            for second_subset in ("independent", "same"):
                simulator = dict(rng=rng, selection=selection, second_subset=second_subset)
                refused = _run_refuses(method, **simulator)
                assert refused == _config_refuses(method, **simulator), simulator
                expected = settings.rng_problem(rng, selection, second_subset, [method])
                assert refused == (expected[0] if expected else None), simulator
    assert _run_refuses(method, rng="authors", selection="weighted") == "selection"


def test_figure_names_are_figures():
    """The figures an experiment's `figure` may name are fedsim.outputs.figures.FIGURES (the plotting
    functions): the schema's definitions.figure enum and the commands of fedsim.cli that draw
    them (FIGURE_HELP: one `fedsim <name>` per curve figure, dispatched through
    figures.CURVE_FIGURES; `theory` is `fedsim theory-figure`) name the same figures. The schema
    and the CLI cannot import matplotlib to read them, so they are tied here."""
    from fedsim.outputs import figures

    assert raw_schema()["definitions"]["figure"]["enum"] == list(figures.FIGURES)
    assert list(cli.FIGURE_HELP) == list(figures.CURVE_FIGURES)
    assert set(figures.FIGURES) - set(figures.CURVE_FIGURES) == {"theory"}
    for name in figures.CURVE_FIGURES:
        assert command(name).get_default("func") is cli._figure, name
    assert command("theory-figure").get_default("func") is cli._theory_figure


def test_leaf_dataset_defaults_are_the_commands():
    """Beyond the issue's list, the same kind of copy: a LEAF or JSON dataset entry's defaults in the
    schema (datasets.*, per kind: LEAF's sampling, FEMNIST's construction, the JSON import's order)
    are the defaults of the kind's own command (fedsim.cli's prepare-* and import-json, built from the
    kind's file), which a person running the command alone gets. The workflow passes every one of
    them, so the schema's are the ones it runs."""
    from fedsim.kinds import KINDS

    commands = {name: kind.command.name for name, kind in KINDS.items() if kind.command}
    tied = set()
    # as filled in (a Dirichlet partition's defaults are fedsim.data.partition.DEFAULTS, the command's too)
    for rule in load_schema(SCHEMA_FILE)["properties"]["datasets"]["additionalProperties"]["allOf"]:
        kind = rule["if"]["properties"]["kind"]["const"]
        for key, entry in rule["then"].get("properties", {}).items():
            if "default" not in entry:  # a constraint of the kind's, not a default (dirichlet's alpha > 0)
                continue
            assert command(commands[kind]).get_default(key) == entry["default"], (kind, key)
            tied.add(kind)
    assert tied == set(commands) - {"synthetic"}  # synthetic's defaults: its shared section's (above)


def readme_defaults(section: str) -> dict:
    """The `| key | default | ...` table of config/README.md's section `section`: each key's default
    as written (backticks off, read as YAML)."""
    text = (REPO / "config" / "README.md").read_text()
    body = text.split(f"\n## `{section}`\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:-1] for line in body.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0]]
    key, default = header.index("key"), header.index("default")
    return {row[key].strip().strip("`"): yaml.safe_load(row[default].strip().strip("`")) for row in rows[2:]}


@pytest.mark.parametrize("section", ["synthetic", "simulator", "tuning"])
def test_config_readme_defaults_are_the_configs(section):
    """The defaults config/README.md lists for a section are config/config.yaml's (which the tests
    above tie to their owners): a person reading the table reads what a run uses."""
    listed = readme_defaults(section)
    assert listed and listed == {key: default_config()[section][key] for key in listed}, section
    assert set(listed) == set(default_config()[section]), section  # every key of the section listed


def test_leaf_builders_defaults_are_the_commands():
    """The LEAF builders' keyword defaults (the paper's sampling, the split, the seed, GloVe's size,
    FEMNIST's variant) are the defaults of the commands that call them (fedsim.cli's prepare-*),
    which the schema's are tied to above: someone calling a builder from Python gets the same
    dataset as the command. A builder default of None (derived inside) has no copy to tie."""
    from fedsim.data.leaf.femnist import build_femnist
    from fedsim.data.leaf.femnist62 import build_femnist62_json, build_femnist62_nist
    from fedsim.data.leaf.sent140 import build_sent140
    from fedsim.data.leaf.shakespeare import build_shakespeare
    from fedsim.data.partition import write_dirichlet

    tied = 0
    for name, builder in (("prepare-shakespeare", build_shakespeare), ("prepare-sent140", build_sent140),
                          ("prepare-femnist", build_femnist), ("prepare-femnist62", build_femnist62_nist),
                          ("prepare-femnist62", build_femnist62_json), ("partition-dirichlet", write_dirichlet)):
        parser = command(name)
        options = {action.dest for action in parser._actions}
        for key, parameter in inspect.signature(builder).parameters.items():
            if key in options and parameter.default not in (inspect.Parameter.empty, None):
                assert parser.get_default(key) == parameter.default, (name, key)
                tied += 1
    assert tied >= 28


def test_synthetic_mean_device_size_is_the_generators():
    """The mean device size the config check sizes a synthetic dataset by is the generator's size
    law's mean (fedsim.data.synthetic): a draw of many sizes lands on it."""
    import numpy as np

    from fedsim.planning import configcheck

    from fedsim.kinds import KINDS

    assert KINDS["synthetic"].size_gb({"devices": 1000, "features": 249}) == 1000 * synthetic.MEAN_SAMPLES * 250 * 4 / 1e9
    sizes = synthetic.device_sizes(np.random.default_rng(0), 2_000_000)
    assert abs(sizes.mean() - synthetic.MEAN_SAMPLES) < 0.03 * synthetic.MEAN_SAMPLES



def test_figure_metrics_are_the_styles():
    """The metrics a figure draws are fedsim.outputs.styles.METRICS: `fedsim figure1 --metric`'s choices
    derive from it, the workflow's final targets too (common.smk), and the figure rule, whose outputs are
    written out, draws each metric but the default training loss as a companion file."""
    from fedsim.outputs import styles

    assert command("figure1")._option_string_actions["--metric"].choices == list(styles.METRICS)
    rule = (REPO / "workflow" / "rules" / "figures.smk").read_text().split("rule figure:", 1)[1].split("\nrule ", 1)[0]
    for metric in styles.METRICS:
        if metric != "train_loss":
            assert f'metric="{metric}"' in rule and f"--metric {metric}" in rule, metric


def test_cost_gradient_rows_are_the_lstms():
    """The cost model prices a full local gradient of an LSTM by the rows the model reads (at most
    GRAD_BATCHES batches of GRAD_BATCH): the planner cannot import torch, so its copy is tied here."""
    import numpy as np

    from fedsim.models import _lstm
    from fedsim.planning import cost

    sizes = np.arange(0, 1000)
    assert (cost.GRAD_BATCH, cost.GRAD_BATCHES) == (_lstm.GRAD_BATCH, _lstm.GRAD_BATCHES)
    np.testing.assert_array_equal(cost.grad_rows(sizes), _lstm.LSTMModel.gradient_rows(None, sizes))


def test_size_ceilings_in_the_docs_are_the_checks():
    """The ceilings `allow_large` lifts (fedsim.planning.configcheck) as the schema's description, the config
    README and the workflow docs state them, and the mean device size config/README.md sizes a dataset by."""
    from fedsim.planning import configcheck

    stated = [f"{configcheck.MAX_ROUNDS:,}", f"{configcheck.MAX_RUNS:,}", f"{configcheck.MAX_DATASET_GB:g} GB"]
    for path in ("workflow/schemas/config.schema.yaml", "config/README.md", "docs/workflow.md"):
        text = " ".join((REPO / path).read_text().split())
        assert all(figure in text for figure in stated), (path, stated)
    assert f"about {synthetic.MEAN_SAMPLES:.0f} samples" in (REPO / "config" / "README.md").read_text()


def test_docs_methods_table_is_the_registry():
    """docs/methods.md's table of methods says of each what its Method declares: every registry name once,
    its mu (0, the dataset's fedprox_mu, tuned; or the option tuned instead), its exchanges a round, and
    the option defaults it quotes ("option `tau`, default 20")."""
    import re

    from fedsim.methods import ENTRIES

    text = (REPO / "docs" / "methods.md").read_text()
    table = text.split("## The methods", 1)[1].split("\n## ", 1)[0]
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in table.splitlines() if line.startswith("| `")]
    named = []
    for names, what, mu, exchanges in rows:
        for name in re.findall(r"`([a-z_0-9]+)`", names):
            named.append(name)
            method = ENTRIES[name].method
            expected = {"tuned": "tuned", "fixed": "the dataset's `fedprox_mu`"}.get(method.mu, "0")
            if method.tuned:
                expected = f"0 (`{method.tuned}` tuned)"
            assert (mu, int(exchanges)) == (expected, method.exchanges), name
            for option, default in re.findall(r"option `(\w+)`, default ([\d.]+)", what):
                assert method.options[option].default == float(default), (name, option)
    assert sorted(named) == sorted(ENTRIES)


def test_random_streams_are_distinct():
    """Randomness is keyed by (seed, round, device) and a stream word naming what is drawn: the stream
    words declared across fedsim (`*_STREAM = n` in the simulator, the methods and the data code) are
    all different, so no two kinds of draw ever share numbers."""
    import importlib
    import pkgutil

    import fedsim

    declared = {}
    for info in pkgutil.walk_packages(fedsim.__path__, "fedsim."):
        if info.name.split(".")[1] not in ("core", "methods", "data"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if name.endswith("_STREAM") and isinstance(value, int):
                declared.setdefault(value, set()).add(f"{info.name}.{name}")
    owners = {value: names for value, names in declared.items()
              if len({n.rsplit(".", 1)[1] for n in names}) > 1}  # the same name imported elsewhere is one stream
    assert not owners, owners
    assert len(declared) >= 6, declared  # train's four, the shuffle's, Scaffnew's steps
