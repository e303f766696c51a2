"""The data kinds are one file each (fedsim/kinds/, or a plugin folder's kinds/): the schema, the
config check, the one build rule and `fedsim build-dataset` take every kind from its file, and no
code outside the kinds names one."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fedsim.kinds import KINDS, complete
from fedsim.planning.configcheck import check_config, load_schema
from fedsim.planning.experiments import ConfigError

from helpers.workflow import SRC, copy_workflow, default_config, job_counts, write_config

SCHEMA_FILE = SRC.parent / "workflow" / "schemas" / "config.schema.yaml"

KIND_NAMES = "|".join(map(re.escape, KINDS))


def test_no_code_outside_the_kinds_compares_a_kinds_name():
    """A kind's name compared to a dataset entry's or a file's kind (`kind == "sent140"`, `kind in
    ("femnist", ...)`) outside fedsim/kinds/: what the kind should declare (LEAF's JSON reader looks its
    sample formats up in a table, leafjson.FORMATS)."""
    compare = re.compile(rf"""kind\W{{0,12}}(==|!=|\bin\b)\s*[(\[{{]?\s*["']({KIND_NAMES})["']""")
    found = [f"{path.relative_to(SRC)}:{number}: {line.strip()}"
             for path in sorted((SRC / "fedsim").rglob("*.py"))
             if "kinds" not in path.parts
             for number, line in enumerate(path.read_text().splitlines(), 1) if compare.search(line)]
    workflow = Path(SRC).parent / "workflow"
    found += [f"{path.name}:{number}: {line.strip()}" for path in sorted(workflow.rglob("*.smk"))
              for number, line in enumerate(path.read_text().splitlines(), 1) if compare.search(line)]
    assert not found, "\n".join(found)


def test_every_kind_declares_what_the_planning_reads():
    for name, kind in KINDS.items():
        assert kind.build is not None and kind.words, name
        assert set(kind.required) <= set(kind.keys) | set(kind.shared_keys), name
        assert kind.own_files is None or kind.own_files in kind.keys, name
        assert set(kind.named_files) <= set(kind.keys), name


def test_the_schema_is_built_from_the_kinds():
    entry = load_schema(SCHEMA_FILE)["properties"]["datasets"]["additionalProperties"]
    assert entry["properties"]["kind"]["enum"] == list(KINDS)
    blocks = {b["if"]["properties"]["kind"]["const"]: b["then"] for b in entry["allOf"]}
    assert set(blocks) == set(KINDS)
    assert blocks["sent140"]["properties"]["glove_dim"]["default"] == 300
    assert blocks["dirichlet"]["required"] == ["pool", "alpha", "devices"]


def test_a_kinds_own_rule_holds_only_for_it():
    """alpha: at least 0 for a synthetic set, above 0 for a Dirichlet partition (each kind's block)."""
    schema = load_schema(SCHEMA_FILE)
    cfg = default_config()
    cfg["datasets"]["synthetic_0_0"].update(alpha=0, beta=0)
    check_config(json.loads(json.dumps(cfg)), schema, "/nowhere")
    cfg["datasets"]["p"] = {"kind": "dirichlet", "pool": "synthetic_0_0", "devices": 3, "alpha": 0, "lr": 0.1,
                            "batch_size": 10, "rounds": 2, "fedprox_mu": 0}
    with pytest.raises(ConfigError, match=r"^Config error at datasets\.p\.alpha: 0 is less than or equal to"):
        check_config(cfg, schema, "/nowhere")


def test_an_unknown_kind_names_the_kinds_and_the_plugins_variable(monkeypatch):
    monkeypatch.delenv("FEDSIM_PLUGINS", raising=False)
    cfg = default_config()
    cfg["datasets"]["b"] = {"kind": "blobs", "points": 3, "lr": 0.1, "batch_size": 5, "rounds": 2, "fedprox_mu": 0}
    with pytest.raises(ConfigError) as err:
        check_config(cfg, load_schema(SCHEMA_FILE), "/nowhere")
    line = str(err.value)
    assert line.startswith("Config error at datasets.b.kind: unknown kind 'blobs': the kinds are arrays, ")
    assert "kinds/blobs.py in a folder $FEDSIM_PLUGINS names (now unset)" in line and "\n" not in line


def test_build_dataset_fills_the_kinds_defaults_and_names_a_missing_key():
    assert complete({"kind": "sent140"})["glove_dim"] == 300
    assert complete({"kind": "synthetic", "iid": True, "alpha": 0, "beta": 0})["devices"] == 30
    with pytest.raises(ValueError, match="^kind dirichlet: the entry lacks pool, alpha"):
        complete({"kind": "dirichlet", "devices": 3})


def run(env, *args, cwd=None):
    proc = subprocess.run([sys.executable, *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    return proc.returncode, proc.stdout


# A kind reading a CSV of its own (x1,x2,label,device per row): its file is the entry's `csv`, so the
# workflow tracks it (own_files)
CSV_KIND = '''
"""Rows of a CSV: two features, a label and a device id each."""
from fedsim.kinds import Kind


def build(entry, files, out, name):
    import numpy as np

    from fedsim.data.format import write_dataset

    rows = np.loadtxt(files[0], delimiter=",", ndmin=2)
    order = np.argsort(rows[:, 3], kind="stable")
    x, y, device = rows[order, :2].astype(np.float32), rows[order, 2].astype(np.int64), rows[order, 3].astype(int)
    counts = np.bincount(device)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    test = np.concatenate([[0], np.cumsum(counts - counts // 2)])
    train_rows = np.concatenate([np.arange(offsets[k], offsets[k] + counts[k] // 2) for k in range(len(counts))])
    test_rows = np.setdiff1d(np.arange(len(y)), train_rows)
    write_dataset(out, name=name, kind="features", num_classes=2, clients=[f"d{k}" for k in range(len(counts))],
                  train_x=x[train_rows], train_y=y[train_rows],
                  train_offsets=np.concatenate([[0], np.cumsum(counts // 2)]), test_x=x[test_rows],
                  test_y=y[test_rows], test_offsets=test, provenance={"csv": entry["csv"]})
    return f"{len(y)} rows"


KIND = Kind("rows", "features", keys={"csv": {"type": "string"}}, required=("csv", "devices"),
            own_files="csv", build=build)
'''


def csv_rows(seed):
    rng = np.random.default_rng(seed)
    return "\n".join(f"{a:.4f},{b:.4f},{int(a > b)},{k % 3}" for k, (a, b) in enumerate(rng.normal(size=(60, 2))))


@pytest.fixture
def csv_plugin(tmp_path):
    folder = tmp_path / "plugins"
    (folder / "kinds").mkdir(parents=True)
    (folder / "kinds" / "rows.py").write_text(CSV_KIND)
    workdir = copy_workflow(tmp_path / "wf", with_src=True)
    (workdir / "mine.csv").write_text(csv_rows(0))
    cfg = default_config()
    cfg["seeds"] = [0]
    cfg["datasets"] = {"r": dict(kind="rows", csv="mine.csv", devices=3, lr=0.1, batch_size=5, rounds=2,
                                 fedprox_mu=0)}
    cfg["experiments"] = {"mine": {"figure": "figure1", "datasets": ["r"], "methods": ["fedavg"],
                                   "clients_per_round": 2, "epochs": 1}}
    write_config(workdir, cfg)
    env = {**__import__("os").environ, "PYTHONPATH": str(SRC), "FEDSIM_PLUGINS": str(folder),
           "FEDSIM_WARM_IDLE": "10"}
    return workdir, env, folder


@pytest.mark.workflow
def test_editing_a_plugin_kinds_own_file_rebuilds_its_dataset_and_reruns_its_runs(csv_plugin):
    workdir, env, _ = csv_plugin
    code, out = run(env, "-m", "snakemake", "--cores", "2", cwd=workdir)
    assert code == 0, out[-3000:]
    code, out = run(env, "-m", "snakemake", "-n", "--cores", "1", cwd=workdir)
    assert code == 0 and "Nothing to be done" in out, out[-3000:]
    (workdir / "mine.csv").write_text(csv_rows(1))  # every label reshuffled
    code, out = run(env, "-m", "snakemake", "-n", "--cores", "1", cwd=workdir)
    assert code == 0, out[-3000:]
    counts = job_counts(out)
    assert counts["build_dataset"] == 1 and counts["train"] == 1, out[-3000:]


def test_a_kind_whose_key_clashes_with_another_kinds_names_both_and_the_types(csv_plugin):
    workdir, env, folder = csv_plugin
    (folder / "kinds" / "rows.py").write_text(CSV_KIND.replace('keys={"csv": {"type": "string"}}',
                                                               'keys={"csv": {"type": "string"}, "alpha": {"type": "string"}}'))
    code, out = run(env, "-m", "snakemake", "-n", "--cores", "1", cwd=workdir)
    assert code != 0 and "Traceback" not in out, out
    assert re.search(r"Kind error: kinds \w+ and rows both declare the key 'alpha', of types number and string", out), out


def test_a_kind_file_without_its_kind_is_one_line(csv_plugin):
    workdir, env, folder = csv_plugin
    (folder / "kinds" / "rows.py").write_text(CSV_KIND.replace('KIND = Kind("rows"', 'KIND = Kind("row"'))
    code, out = run(env, "-m", "snakemake", "-n", "--cores", "1", cwd=workdir)
    assert code != 0 and "Traceback" not in out, out
    assert "Kind error: " in out and "rows.py: a kind file declares KIND = Kind('rows', ...)" in out, out


def test_a_plugin_written_to_the_earlier_docs_still_imports_kind_from_the_planning(tmp_path):
    folder = tmp_path / "plugins"
    (folder / "kinds").mkdir(parents=True)
    (folder / "kinds" / "rows.py").write_text(CSV_KIND.replace("from fedsim.kinds import Kind",
                                                               "from fedsim.planning.kinds import Kind"))
    env = {**__import__("os").environ, "PYTHONPATH": str(SRC), "FEDSIM_PLUGINS": str(folder)}
    for first in ("fedsim.kinds", "fedsim.planning.kinds", "fedsim.planning.configcheck"):
        code, out = run(env, "-c", textwrap.dedent(f"""
            import {first}
            from fedsim.kinds import KINDS
            assert KINDS["rows"].own_files == "csv"
            """))
        assert code == 0, (first, out)


@pytest.mark.parametrize("shape, model, line", [
    ((3, 4, 4), "lenet5", "lenet5 cannot take dir's 3x4x4 (C x H x W) images: a convolution's output side 0 does "
                          "not halve in 2x2 pooling"),
    ((32, 32, 3), "cnn", "cnn cannot take dir's 32x32x3 (C x H x W) images: a convolution's output side 3 does not "
                         "halve in 2x2 pooling (channels last? fedsim reads C x H x W)"),
    ((3, 32, 32), "lenet5", None),
    ((3, 4, 4), "cnn", None),    # same padding: 4 -> 2 -> 1
    ((3, 4, 4), "mclr", None),   # reads any image flattened
])
def test_images_a_model_cannot_take_are_refused_at_planning(tmp_path, shape, model, line):
    """The shape of an .npz's images (its header), a partition's too, against the model's convolutions."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "pool.npz", x=rng.random((60, *shape), dtype=np.float32), y=rng.integers(0, 3, 60))
    cfg = default_config()
    hyper = dict(lr=0.01, batch_size=5, rounds=2, fedprox_mu=0)
    cfg["datasets"] = {"pool": dict(kind="arrays", npz=str(tmp_path / "pool.npz"), **hyper),
                       "dir": dict(kind="dirichlet", pool="pool", devices=3, alpha=0.5, min_partition_size=5,
                                   model=model, **hyper)}
    cfg["experiments"] = {"mine": {"figure": "figure1", "datasets": ["dir"], "methods": ["fedavg"],
                                   "clients_per_round": 2, "epochs": 1}}
    if line is None:
        check_config(cfg, load_schema(SCHEMA_FILE), "/nowhere")
        return
    with pytest.raises(ConfigError) as err:
        check_config(cfg, load_schema(SCHEMA_FILE), "/nowhere")
    assert str(err.value) == f"Config error at datasets.dir.model: {line}"


def test_an_entry_given_by_hand_is_held_to_its_kinds_rules():
    """`fedsim build-dataset --entry` checks the keys it is given as the config check would (a range, a type),
    one line naming the key, before building; every kind's defaults pass their own rules."""
    import jsonschema

    from fedsim.kinds import KINDS, complete

    for kind in KINDS.values():
        for key, rule in {**kind.shared_keys, **kind.keys}.items():
            if "default" in rule:
                jsonschema.Draft7Validator(rule).validate(rule["default"])
    entry = {"kind": "synthetic", "devices": 4, "alpha": 0, "beta": 0, "iid": False}
    assert complete(entry)["train_fraction"] < 1
    partition = {"kind": "dirichlet", "pool": "femnist62", "alpha": 0.3, "devices": 20}  # pool: a $ref rule
    assert complete(partition)["pool"] == "femnist62"
    with pytest.raises(ValueError, match=r"^kind synthetic: bad train_fraction=1\.0: 1\.0 is greater than or equal"):
        complete({**entry, "train_fraction": 1.0})
    with pytest.raises(ValueError, match=r"^kind synthetic: bad devices='four': 'four' is not of type 'integer'"):
        complete({**entry, "devices": "four"})


def test_a_key_of_several_types_gets_no_numeric_check():
    """A plugin kind's key typed as a list (["integer", "null"]) is no one number: its command option takes it
    as given (the config schema checks it), where a crash here broke every command at import."""
    from fedsim.core.settings import key_check

    assert key_check({"type": ["integer", "null"], "minimum": 2}) is None
    assert key_check({"type": "integer", "minimum": 2}) is not None
