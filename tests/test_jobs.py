"""fedsim.planning.jobs' code fingerprints: one file per entry set, listing the code a job runs with the
sha256 of each file, rewritten only when that content changes (torch-free, Snakemake-free)."""

import hashlib
import os
from pathlib import Path

from fedsim import methods
from fedsim.planning import jobs


def make_package(root):
    pkg = root / "src" / "pkg"
    (pkg / "methods").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engine.py").write_text("X = 1\n")
    (pkg / "unused.py").write_text("Y = 2\n")
    (pkg / "train.py").write_text("from .engine import X\n")
    (pkg / "methods" / "__init__.py").write_text("")
    (pkg / "methods" / "a.py").write_text("def f():\n    from ..engine import X\n")
    return pkg


def test_fingerprint_lists_the_code_with_its_hashes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pkg = make_package(tmp_path)
    [path] = jobs.code_fingerprint(pkg, "out/code", "train", "methods.a")
    assert path == os.path.join("out/code", "train+methods.a.txt")
    files = jobs.package_code(pkg, "train", "methods.a")
    assert "src/pkg/unused.py" not in files and "src/pkg/methods/a.py" in files
    lines = Path(path).read_text().splitlines()
    assert lines == [f"{hashlib.sha256(Path(f).read_bytes()).hexdigest()}  {f}" for f in files]


def test_fingerprint_is_rewritten_only_when_the_code_changes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pkg = make_package(tmp_path)
    [path] = jobs.code_fingerprint(pkg, "code", "train")
    os.utime(path, (1, 1))
    for file in pkg.rglob("*.py"):
        file.touch()  # a checkout: new mtimes, same content
    (pkg / "unused.py").write_text("Y = 3\n")  # code the job does not run
    jobs.code_fingerprint(pkg, "code", "train")
    assert os.stat(path).st_mtime == 1
    (pkg / "engine.py").write_text("X = 2\n")
    jobs.code_fingerprint(pkg, "code", "train")
    assert os.stat(path).st_mtime > 1
    assert hashlib.sha256(b"X = 2\n").hexdigest() in Path(path).read_text()
    assert not list(Path("code").glob("*.tmp"))


def test_no_package_no_fingerprint(tmp_path):
    assert jobs.code_fingerprint(tmp_path / "missing", tmp_path / "code", "train") == []
    assert not (tmp_path / "code").exists()


def test_a_module_created_later_joins_the_code_of_its_importers(tmp_path, monkeypatch):
    """Parses are remembered per file version, but whether a name is a module is checked anew."""
    monkeypatch.chdir(tmp_path)
    pkg = make_package(tmp_path)
    (pkg / "methods" / "a.py").write_text("from .. import extra\n")
    assert "src/pkg/extra.py" not in jobs.package_code(pkg, "methods.a")
    (pkg / "extra.py").write_text("Z = 1\n")
    assert "src/pkg/extra.py" in jobs.package_code(pkg, "methods.a")
    (pkg / "extra.py").write_text("from .engine import X\n")  # its own imports follow its edits
    assert "src/pkg/engine.py" in jobs.package_code(pkg, "methods.a")


def test_a_runs_model_is_fingerprinted_with_what_it_imports_and_a_plugins_by_its_file(tmp_path, monkeypatch):
    """A fedsim model: its module, the modules it imports and its packages, not another model's nor
    train's; a user's own model (FEDSIM_PLUGINS): its file, wherever it is; rewritten only on an edit."""
    package = Path(jobs.__file__).resolve().parents[1]
    monkeypatch.chdir(package.parents[1])
    [path] = jobs.model_fingerprint(package, tmp_path / "code", "lenet5")
    assert Path(path).name == "models.lenet5.txt"
    listed = [line.split("  ")[1] for line in Path(path).read_text().splitlines()]
    assert {"src/fedsim/models/lenet5.py", "src/fedsim/models/cnn.py", "src/fedsim/models/__init__.py"} <= set(listed)
    assert not {"src/fedsim/models/mclr.py", "src/fedsim/core/train.py"} & set(listed)
    # a JSON import's model is its built file's: each model a file kind defaults to
    [path] = jobs.model_fingerprint(package, tmp_path / "code", None)
    listed = [line.split("  ")[1] for line in Path(path).read_text().splitlines()]
    assert {f"src/fedsim/models/{m}.py" for m in ("mclr", "char_lstm", "sent140_lstm")} <= set(listed)
    assert len(listed) == len(set(listed)) and "src/fedsim/models/lenet5.py" not in listed
    own = tmp_path / "plugins" / "models" / "mine.py"
    own.parent.mkdir(parents=True)
    own.write_text('SPEC = ModelSpec(name="mine", label="Mine", samples=("features",), sample_seconds=1e-6)\n')
    monkeypatch.setenv("FEDSIM_PLUGINS", str(tmp_path / "plugins"))
    [path] = jobs.model_fingerprint(package, tmp_path / "code", "mine")
    assert Path(path).read_text() == f"{hashlib.sha256(own.read_bytes()).hexdigest()}  {own}\n"
    os.utime(path, (1, 1))
    jobs.model_fingerprint(package, tmp_path / "code", "mine")
    assert os.stat(path).st_mtime == 1
    own.write_text(own.read_text() + "# edited\n")
    jobs.model_fingerprint(package, tmp_path / "code", "mine")
    assert os.stat(path).st_mtime > 1


def test_a_methods_runs_are_fingerprinted_with_its_modules_and_a_plugins_by_its_file(tmp_path, monkeypatch):
    """A fedsim method: train's code with its own module and those it builds on; a user's own method
    (FEDSIM_PLUGINS): its file, wherever it is, beside train's code with the fedsim methods it uses."""
    package = Path(jobs.__file__).resolve().parents[1]
    monkeypatch.chdir(package.parents[1])
    paths = jobs.method_fingerprint(package, tmp_path / "code", "feddane_decayed")
    assert [Path(p).name for p in paths] == ["core.train+methods.feddane+methods.feddane_decayed.txt"]
    own = tmp_path / "plugins" / "methods" / "mine.py"
    own.parent.mkdir(parents=True)
    own.write_text("from fedsim.methods import fedavg\n")
    monkeypatch.setitem(methods.USES, "mine", {"mine", "fedavg"})
    monkeypatch.setitem(methods.PLUGIN_METHOD_FILES, "mine", own)
    paths = jobs.method_fingerprint(package, tmp_path / "code", "mine")
    assert [Path(p).name for p in paths] == ["core.train+methods.fedavg.txt", "methods.mine.txt"]
    assert Path(paths[1]).read_text() == f"{hashlib.sha256(own.read_bytes()).hexdigest()}  {own}\n"


def test_device_auto_is_the_cpu_for_mclr_and_the_gpu_for_other_models():
    """`simulator.device: auto`: MCLR's runs compute on a CPU core (its compiled kernel), the LSTMs'
    and a CNN's where a GPU is, and ask the scheduler for one."""
    cfg = {"simulator": {"device": "auto"},
           "datasets": {"s": {"kind": "synthetic"}, "f": {"kind": "femnist"}, "c": {"kind": "femnist", "model": "cnn"},
                        "t": {"kind": "shakespeare"}}}
    assert {d: jobs.train_device(cfg, d) for d in "sfct"} == {"s": "cpu", "f": "cpu", "c": "auto", "t": "auto"}
    assert {d: jobs.train_gpus(cfg, d) for d in "sfct"} == {"s": 0, "f": 0, "c": 1, "t": 1}
    cfg["simulator"]["device"] = "cpu"
    assert {jobs.train_device(cfg, d) for d in "sfct"} == {"cpu"}


def test_a_runs_metric_settings_and_model_reach_its_command_line():
    cfg = {"datasets": {"s": {"load": "auto"},
                        "c": {"load": "memory", "eval_devices": 25, "eval_every": 5, "model": "lenet5"},
                        "n": {"load": "auto", "dissimilarity": False}, "y": {"load": "auto", "dissimilarity": True}}}
    assert jobs.eval_args(cfg, "s") == "--load auto"
    assert jobs.eval_args(cfg, "c") == "--load memory --eval-devices 25 --eval-every 5"
    assert jobs.eval_args(cfg, "n") == "--load auto --no-dissimilarity"
    assert jobs.eval_args(cfg, "y") == "--load auto --dissimilarity"  # else the model's default (off for a CNN)


def test_a_run_record_is_its_train_commands_options():
    """`fedsim train`'s options come from the run's record (experiments.RunSpec) in one place, jobs.train_args:
    its fields, and its dataset entry's and the simulator's settings; --model where the record names one (None:
    the dataset kind's default), --theory where it logs the theorems' constants, a tuned option by name."""
    import yaml

    from fedsim.planning.configcheck import check_config, load_schema
    from fedsim.planning.experiments import RunSpec

    repo = Path(__file__).resolve().parents[1]
    cfg = yaml.safe_load((repo / "config" / "config.yaml").read_text())
    check_config(cfg, load_schema(repo / "workflow" / "schemas" / "config.schema.yaml"), repo)
    run = RunSpec(dataset="synthetic_1_1", method="feddane", setting="mu", value="0.1", lr="0.03", K="10", E="20",
                  rounds=20, model=None, theory=False, seed="1")
    assert jobs.train_args(cfg, run) == (
        "--method feddane --rng fedsim --mu 0.1 --clients-per-round 10 --epochs 20 --batch-size 10 --lr 0.03"
        " --rounds 20 --seed 1 --selection uniform --second-subset independent --device cpu --load auto")
    other = RunSpec(**{**vars(run), "method": "feddyn", "setting": "alpha", "model": "mymodel", "theory": True})
    assert jobs.train_args(cfg, other).endswith("--load auto --model mymodel --theory")
    assert "--option alpha=0.1" in jobs.train_args(cfg, other)
