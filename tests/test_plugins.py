"""A model and a data kind of a user's own, one file each in a folder FEDSIM_PLUGINS names, reach the
CLI, the config's schema, the config check and a real workflow run with no edit of fedsim: the two
files of docs/architecture.md, read from the page, so a newcomer's path through it is the tested one."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from helpers.workflow import SRC, copy_workflow, default_config, job_counts, write_config

DOC = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()


def documented(name):
    """The file `name` as docs/architecture.md, "Your own model and kind, outside fedsim", gives it."""
    return re.search(rf"`\$FEDSIM_PLUGINS/{re.escape(name)}`:\n\n```python\n(.*?)```", DOC, re.S).group(1)


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plugins")
    (folder / "models").mkdir()
    (folder / "kinds").mkdir()
    for name in ("models/tinymlp.py", "kinds/blobs.py"):
        (folder / name).write_text(documented(name))
    return {**os.environ, "PYTHONPATH": str(SRC), "FEDSIM_PLUGINS": str(folder), "FEDSIM_WARM_IDLE": "10"}


def run(env, *args, cwd=None):
    proc = subprocess.run([sys.executable, *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    return proc.returncode, proc.stdout


def test_the_cli_and_the_schema_know_them(plugins):
    code, out = run(plugins, "-m", "fedsim", "train", "--help")
    assert code == 0 and "tinymlp" in out, out
    code, out = run(plugins, "-c", textwrap.dedent("""
        from fedsim.planning.configcheck import load_schema
        entry = load_schema("workflow/schemas/config.schema.yaml")["properties"]["datasets"]["additionalProperties"]
        [block] = [b["then"] for b in entry["allOf"] if b["if"]["properties"]["kind"]["const"] == "blobs"]
        assert "blobs" in entry["properties"]["kind"]["enum"] and block["properties"]["points"]["minimum"] == 2
        assert "tinymlp" in entry["properties"]["model"]["enum"]
        """), cwd=SRC.parent)
    assert code == 0, out


def blobs_config():
    cfg = default_config()
    cfg["seeds"] = [0]
    cfg["datasets"] = {"b": dict(kind="blobs", devices=4, seed=0, model="tinymlp", lr=0.1, batch_size=5, rounds=2,
                                 fedprox_mu=0)}
    cfg["experiments"] = {"mine": {"figure": "figure1", "datasets": ["b"], "methods": ["fedavg", "scaffold"],
                                   "clients_per_round": 2, "epochs": 1}}
    return cfg


def test_the_config_check_holds_them_to_each_other(plugins, tmp_path):
    """A model that does not take the kind's samples is refused at the entry; a missing required key and a
    bad value of the kind's own key are the schema's one line."""
    workdir = copy_workflow(tmp_path / "wf")
    for change, line in [
        (lambda c: c["datasets"]["b"].update(model="lenet5"),
         "Config error at datasets.b.model: lenet5 takes image samples; b's samples are features"),
        (lambda c: c["datasets"]["b"].update(points=1), "Config error at datasets.b.points: 1 is less than the minimum"),
        (lambda c: c["datasets"]["b"].pop("devices"), "Config error at datasets.b.devices: required key is missing"),
    ]:
        cfg = blobs_config()
        change(cfg)
        write_config(workdir, cfg)
        code, out = run(plugins, "-m", "snakemake", "-n", "--cores", "1", cwd=workdir)
        assert code != 0 and line in out, out


@pytest.mark.workflow
def test_a_run_of_its_own_model_on_its_own_kind_through_the_workflow(plugins, tmp_path):
    workdir = copy_workflow(tmp_path / "wf", with_src=True)
    write_config(workdir, blobs_config())
    code, out = run(plugins, "-m", "snakemake", "--cores", "2", cwd=workdir)
    assert code == 0, out
    for method in ("fedavg", "scaffold"):
        run_dir = workdir / "results" / "runs" / "b" / method / "mu0_K2_E1_tinymlp_seed0"
        assert (run_dir / "metrics.csv").read_text().count("\n") == 4  # the header, rounds 0, 1 and 2
        record = yaml.safe_load((run_dir / "run.json").read_text())
        assert record["config"]["model"] == "tinymlp" and record["dataset"]["kind"] == "features"
    # an edit of the model's file reruns its runs; of the kind's file, the build and the runs after it
    folder = Path(plugins["FEDSIM_PLUGINS"])
    for name, rerun in (("models/tinymlp.py", {"train": 2}), ("kinds/blobs.py", {"build_dataset": 1, "train": 2})):
        path = folder / name
        original = path.read_text()
        try:
            path.write_text(original + "\n# edited by the plugins test\n")
            code, out = run(plugins, "-m", "snakemake", "--dry-run", "--cores", "1", cwd=workdir)
        finally:
            path.write_text(original)
        assert code == 0, out
        counts = job_counts(out)
        assert {rule: counts.get(rule, 0) for rule in rerun} == rerun, (name, out)
        assert f"results/code/{name.replace('/', '.')[:-3]}.txt" in out, (name, out)
