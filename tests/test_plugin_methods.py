"""A method of a user's own, one file in the methods/ folder of a folder FEDSIM_PLUGINS names, reaches the
CLI, the config's schema, tuning and the figures with no edit of fedsim, and an edit of its file reruns
its runs only: the file of docs/methods.md, "Your own method, outside fedsim", read from the page."""

import csv
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.workflow import SRC, copy_workflow, default_config, job_counts, write_config

DOC = (Path(__file__).resolve().parents[1] / "docs" / "methods.md").read_text()
NAME = "scaledavg"


def documented():
    return re.search(rf"`\$FEDSIM_PLUGINS/methods/{NAME}\.py`:\n\n```python\n(.*?)```", DOC, re.S).group(1)


def plugin_env(folder):
    return {**os.environ, "PYTHONPATH": str(SRC), "FEDSIM_PLUGINS": str(folder), "FEDSIM_WARM_IDLE": "10"}


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plugins")
    (folder / "methods").mkdir()
    (folder / "methods" / f"{NAME}.py").write_text(documented())
    (folder / "methods" / "_shared.py").write_text("raise RuntimeError('a _ module is no method')\n")
    return plugin_env(folder)


def run(env, *args, cwd=None):
    proc = subprocess.run([sys.executable, *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    return proc.returncode, proc.stdout


def test_the_cli_trains_it_and_the_schema_knows_it(plugins, tmp_path):
    code, out = run(plugins, "-m", "fedsim", "generate-synthetic", "--name", "s", "--devices", "4",
                    "--out", str(tmp_path / "s.h5"))
    assert code == 0, out
    code, out = run(plugins, "-m", "fedsim", "train", "--data", str(tmp_path / "s.h5"), "--method", NAME,
                    "--option", "scale=0.5", "--rounds", "1", "--clients-per-round", "2",
                    "--metrics", str(tmp_path / "m.csv"), "--info", str(tmp_path / "run.json"))
    assert code == 0 and f"{NAME} scale=0.5" in out, out
    assert (tmp_path / "m.csv").read_text().count("\n") == 3  # the header, rounds 0 and 1
    code, out = run(plugins, "-c", textwrap.dedent(f"""
        from fedsim.methods import PLUGIN_METHOD_FILES, REGISTRY
        from fedsim.planning.configcheck import load_schema
        from fedsim.outputs.styles import LEGEND
        schema = load_schema("workflow/schemas/config.schema.yaml")
        assert "{NAME}" in str(schema), "not in the schema"
        assert REGISTRY["{NAME}"].tuned_setting == "scale" and PLUGIN_METHOD_FILES["{NAME}"].name == "{NAME}.py"
        assert LEGEND[-1] == "{NAME}", LEGEND
        """), cwd=SRC.parent)
    assert code == 0, out


def test_a_fixed_method_does_not_resume_the_checkpoint_its_bug_left(tmp_path):
    """A plugin method that fails at round 7 leaves the checkpoint of round 5; with the file fixed, the rerun
    starts over (the checkpoint holds the code's digest, fedsim.core.sources) and gives the fixed code's run,
    not the buggy rounds 1-5 continued."""
    folder = tmp_path / "plugins"
    (folder / "methods").mkdir(parents=True)
    method = folder / "methods" / f"{NAME}.py"
    fixed = documented()
    step = 'return ctx.params + ctx.options["scale"] * (average - ctx.params), state'
    assert step in fixed
    buggy = step.replace('ctx.options["scale"]', "0.25")  # rounds 1-5 unlike the fixed code's
    method.write_text(fixed.replace(step, f'if ctx.round == 6:\n        raise RuntimeError("the bug")\n    {buggy}'))
    env = plugin_env(folder)
    data = tmp_path / "s.h5"
    assert run(env, "-m", "fedsim", "generate-synthetic", "--name", "s", "--devices", "4", "--out", str(data))[0] == 0
    train = ["-m", "fedsim", "train", "--data", str(data), "--method", NAME, "--option", "scale=0.5", "--rounds", "9",
             "--clients-per-round", "2", "--checkpoint-every", "5", "--checkpoint-seconds", "0"]
    code, out = run(env, *train, "--checkpoint", str(tmp_path / "ck.pt"), "--metrics", str(tmp_path / "m.csv"),
                    "--info", str(tmp_path / "r.json"))
    assert code != 0 and "the bug" in out and (tmp_path / "ck.pt").exists(), out
    method.write_text(fixed)
    code, out = run(env, *train, "--checkpoint", str(tmp_path / "ck.pt"), "--metrics", str(tmp_path / "m.csv"),
                    "--info", str(tmp_path / "r.json"))
    assert code == 0 and "saved by other code" in out and "resumed" not in out, out
    code, out = run(env, *train, "--metrics", str(tmp_path / "clean.csv"), "--info", str(tmp_path / "clean.json"))
    assert code == 0, out
    assert (tmp_path / "m.csv").read_bytes() == (tmp_path / "clean.csv").read_bytes()


def one_line(env):
    """What `fedsim train --help` says under a broken plugin folder: its exit code and its one line."""
    code, out = run(env, "-m", "fedsim", "train", "--help")
    assert code == 2 and len(out.strip().splitlines()) == 1 and out.startswith("fedsim: error: "), out
    return out.strip()


def test_a_broken_plugin_file_is_named_in_one_line(tmp_path):
    """A syntax error, an exception at import, an option named mu (the proximal term's): one line naming
    the file and what is wrong, from `fedsim` and from the warm launcher's cold path (which its jobs take
    where no server could start: one importing the broken file cannot)."""
    (tmp_path / "methods").mkdir()
    method = tmp_path / "methods" / f"{NAME}.py"
    broken = documented().replace("def server_update(", "def server_update((")
    at = next(n for n, text in enumerate(broken.splitlines(), 1) if "server_update((" in text)
    for text, said in ((broken, f"line {at}: SyntaxError"),
                       ("raise KeyError('beta')\n", "KeyError: 'beta'"),
                       (documented().replace('"scale"', '"mu"'), "an option named 'mu' is the proximal term's")):
        method.write_text(text)
        line = one_line(plugin_env(tmp_path))
        assert str(method) in line and said in line, line
    code, out = run({**plugin_env(tmp_path), "FEDSIM_WARM": "0"}, "-m", "fedsim.warm", "train", "--help")
    assert code == 2 and out.strip().splitlines() == [line], out


@pytest.mark.parametrize("returned, said", [("average[:-1]", "shape (60, 10)"), ("average.double()", "torch.float64"),
                                             ("average.numpy()", "returned ndarray")])
def test_a_server_update_returning_no_model_is_named_in_one_line(tmp_path, returned, said):
    """A wrong shape trained on silently on the compiled kernel; another dtype or an array failed deep in
    numba or torch. Now one line naming the plugin's file, on every engine."""
    (tmp_path / "methods").mkdir()
    method = tmp_path / "methods" / f"{NAME}.py"
    step = 'return ctx.params + ctx.options["scale"] * (average - ctx.params), state'
    method.write_text(documented().replace(step, f"return {returned}, state"))
    env = plugin_env(tmp_path)
    data = tmp_path / "s.h5"
    assert run(env, "-m", "fedsim", "generate-synthetic", "--name", "s", "--devices", "4", "--out", str(data))[0] == 0
    for engine in ("auto", "batched"):
        code, out = run(env, "-m", "fedsim", "train", "--data", str(data), "--method", NAME, "--rounds", "2",
                        "--clients-per-round", "2", "--engine", engine, "--metrics", str(tmp_path / "m.csv"),
                        "--info", str(tmp_path / "r.json"))
        *started, line = out.strip().splitlines()  # the progress line, then the error's
        assert code == 2 and len(started) <= 1 and "Traceback" not in out, out
        assert line.startswith(f"fedsim train: error: {method}: server_update returned") and said in line, out
        assert "shape (61, 10)" in line, out
        assert not (tmp_path / "m.csv").exists()


def test_a_broken_plugin_model_or_method_is_one_line_from_train_and_from_the_workflow(tmp_path):
    """`fedsim train` imports the models' registry after its parser; the workflow imports the registries as
    it parses: either way the broken file is named in one line, not in a traceback."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine.py").write_text("raise KeyError('width')\n")
    model = tmp_path / "models" / "mine.py"
    code, out = run(plugin_env(tmp_path), "-m", "fedsim", "train", "--data", "s.h5", "--method", "fedavg")
    assert code == 2 and len(out.strip().splitlines()) == 1 and out.startswith(f"fedsim: error: {model}: "), out
    workdir = copy_workflow(tmp_path / "wf")
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n"], cwd=workdir, env=plugin_env(tmp_path),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"Plugin error: {model}: "), proc.stderr


def test_a_plugin_folder_that_is_none_is_named(tmp_path):
    """A misspelt folder, or the methods/ folder itself: its methods were missed without a word, and their
    runs refused as of unknown methods."""
    (tmp_path / "methods").mkdir()
    (tmp_path / "methods" / f"{NAME}.py").write_text(documented())
    assert one_line(plugin_env(tmp_path / "mehtods")) == \
        f"fedsim: error: FEDSIM_PLUGINS names {tmp_path / 'mehtods'}, which is not a folder"
    line = one_line(plugin_env(tmp_path / "methods"))
    assert line.endswith(f"names {tmp_path / 'methods'}, which holds no methods, models, kinds folder: name the "
                         "folder that holds them"), line


def test_a_plugins_non_finite_step_is_not_blamed_on_the_lr_alone(tmp_path):
    (tmp_path / "methods").mkdir()
    method = tmp_path / "methods" / f"{NAME}.py"
    step = 'return ctx.params + ctx.options["scale"] * (average - ctx.params), state'
    method.write_text(documented().replace(step, 'return average * float("nan"), state'))
    env, data = plugin_env(tmp_path), tmp_path / "s.h5"
    assert run(env, "-m", "fedsim", "generate-synthetic", "--name", "s", "--devices", "4", "--out", str(data))[0] == 0
    code, out = run(env, "-m", "fedsim", "train", "--data", str(data), "--method", NAME, "--rounds", "2",
                    "--clients-per-round", "2", "--metrics", str(tmp_path / "m.csv"), "--info", str(tmp_path / "r.json"))
    assert code == 0 and f"diverged at round 1 (the lr, 0.01, may be too large, or {method} may compute" in out, out


def test_a_runs_record_names_its_plugins_version_by_content(tmp_path):
    """run.json's code_sha256: another version of the plugin file is other code; the same file in another
    folder is the same code."""
    data = tmp_path / "s.h5"
    texts = {"a": documented(), "b": documented(), "c": documented() + "\n# edited\n"}
    digests = {}
    for folder, text in texts.items():
        (tmp_path / folder / "methods").mkdir(parents=True)
        (tmp_path / folder / "methods" / f"{NAME}.py").write_text(text)
        env = plugin_env(tmp_path / folder)
        if not data.exists():
            assert run(env, "-m", "fedsim", "generate-synthetic", "--name", "s", "--devices", "4", "--out", str(data))[0] == 0
        code, out = run(env, "-m", "fedsim", "train", "--data", str(data), "--method", NAME, "--rounds", "1",
                        "--clients-per-round", "2", "--metrics", str(tmp_path / f"{folder}.csv"),
                        "--info", str(tmp_path / f"{folder}.json"))
        assert code == 0, out
        digests[folder] = json.loads((tmp_path / f"{folder}.json").read_text())["code_sha256"]
    assert digests["a"] == digests["b"] != digests["c"] and len(digests["a"]) == 64


def test_a_name_taken_is_refused_in_one_line_naming_both_files(tmp_path):
    for folder, name in ((tmp_path / "a", "fedprox"), (tmp_path / "b", NAME)):
        (folder / "methods").mkdir(parents=True)
        (folder / "methods" / f"{name}.py").write_text(documented().replace(f'name="{NAME}"', f'name="{name}"'))
    # a built-in's name: refused, naming the plugin's file and fedsim's
    line = one_line(plugin_env(tmp_path / "a"))
    assert str(tmp_path / "a" / "methods" / "fedprox.py") in line, line
    assert "fedsim/methods/fedprox.py" in line and "declared already" in line, out
    # another plugin folder's name
    (tmp_path / "c" / "methods").mkdir(parents=True)
    (tmp_path / "c" / "methods" / f"{NAME}.py").write_text(documented())
    line = one_line(plugin_env(f"{tmp_path / 'b'}{os.pathsep}{tmp_path / 'c'}"))
    assert str(tmp_path / "b" / "methods" / f"{NAME}.py") in line and str(tmp_path / "c" / "methods" / f"{NAME}.py") in line
    # a file whose METHOD is named otherwise
    (tmp_path / "d" / "methods").mkdir(parents=True)
    (tmp_path / "d" / "methods" / "other.py").write_text(documented())
    assert "METHOD = Method(name='other'" in one_line(plugin_env(tmp_path / "d"))


def plugin_config():
    cfg = default_config()
    cfg["synthetic"]["devices"] = 4
    cfg["seeds"] = [0]
    cfg["datasets"] = {"synthetic_iid": dict(cfg["datasets"]["synthetic_iid"], rounds=2)}
    cfg["experiments"] = {"mine": {"figure": "figure1", "datasets": ["synthetic_iid"], "methods": ["fedavg", NAME],
                                   "clients_per_round": 2, "epochs": 1}}
    return cfg


@pytest.mark.workflow
def test_it_is_tuned_and_drawn_by_the_workflow_and_its_edit_reruns_its_runs_only(plugins, tmp_path):
    workdir = copy_workflow(tmp_path / "wf", with_src=True)
    write_config(workdir, plugin_config())
    code, out = run(plugins, "-m", "snakemake", "--cores", "2", cwd=workdir)
    assert code == 0, out
    results = workdir / "results"
    runs = results / "runs" / "synthetic_iid"
    assert {p.name for p in (runs / NAME).iterdir()} >= {"scale0.5_K2_E1_seed0", "scale1_K2_E1_seed0"}
    for run_dir in (runs / NAME).iterdir():
        assert (run_dir / "metrics.csv").read_text().count("\n") == 4  # the header, rounds 0, 1 and 2
    with open(results / "summary" / "chosen_settings.csv", newline="") as handle:
        tuned = [row for row in csv.DictReader(handle) if row["method"] == NAME]
    assert len(tuned) == 1 and float(tuned[0]["chosen"]) in (0.5, 1.0), tuned
    assert (results / "figures" / "mine.png").stat().st_size > 0  # Figure 1's kind of figure, named as its experiment
    assert "Scaled FedAvg" in (results / "summary" / "tables_mine.md").read_text()
    # an edit of its file reruns its two runs, not FedAvg's
    path = Path(plugins["FEDSIM_PLUGINS"]) / "methods" / f"{NAME}.py"
    original = path.read_text()
    try:
        path.write_text(original + "\n# edited by the plugin methods test\n")
        code, out = run(plugins, "-m", "snakemake", "--dry-run", "--cores", "1", cwd=workdir)
    finally:
        path.write_text(original)
    assert code == 0, out
    assert job_counts(out).get("train") == 2, out
    trained = re.findall(r"rule train:\n(?:[^\n]*\n)*?\s+output: ([^,\n]+)", out)
    assert sorted(Path(p).parent.parent.name for p in trained) == [NAME, NAME], out
    assert f"Updated input files: results/code/methods.{NAME}.txt" in out, out
