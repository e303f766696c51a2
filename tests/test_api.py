"""fedsim from Python (fedsim.api): a run as `python -m fedsim train` trains it, bit for bit, with its
checks and one-line errors before torch; `import fedsim` stays torch-free; the README's example runs."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import fedsim
from fedsim import api, cli
from fedsim.data.format import FederatedDataset

from helpers.workflow import REPO, env

# Time, not results: what a run's record may hold differently from one run to the next.
CLOCK = ("wall_seconds", "local_sgd_seconds", "evaluation_seconds")


@pytest.fixture
def data(tiny_data):
    return tiny_data(6)


def train_argv(data, settings: dict, out) -> list[str]:
    """`fedsim train`'s arguments for fedsim.run's keywords."""
    argv = ["train", "--data", data, "--metrics", str(out / "metrics.csv"), "--info", str(out / "run.json")]
    for name, value in settings.items():
        if name == "options":
            argv += [arg for key, v in value.items() for arg in ("--option", f"{key}={v}")]
        elif value is True:
            argv.append("--" + name.replace("_", "-"))
        else:
            argv += ["--" + name.replace("_", "-"), str(value)]
    return argv


def without_clock(record: dict) -> str:
    """The record as run.json's text, less its times (text: 1 and 1.0 differ there, not as Python numbers)."""
    kept = {**record, "result": {k: v for k, v in record["result"].items() if k not in CLOCK}}
    return json.dumps(kept, indent=2, sort_keys=True)


SHORT = dict(rounds=3, clients_per_round=3, epochs=2)


@pytest.mark.parametrize("settings", [
    dict(method="fedavg"),
    dict(method="fedprox", mu=1),  # an int mu, as `--mu 1` reads it: 1.0
    dict(method="feddane_decayed", mu=0.1, options={"tau": 5}, seed=3),  # a variant, an option
    dict(method="scaffold", engine="batched", dtype="float64", lr=0.05, batch_size=4),
], ids=lambda s: s["method"])
def test_a_run_from_python_is_the_command_lines_bit_for_bit(data, tmp_path, settings):
    settings = {**SHORT, **settings}
    assert cli.main(train_argv(data, settings, tmp_path / "cli")) == 0
    metrics, record = fedsim.run(data, **settings, out=tmp_path / "api")

    for name in ("metrics.csv", "run.json"):
        assert (tmp_path / "api" / name).exists()
    assert (tmp_path / "api" / "metrics.csv").read_bytes() == (tmp_path / "cli" / "metrics.csv").read_bytes()
    written = json.loads((tmp_path / "cli" / "run.json").read_text())
    assert without_clock({**record, "metrics_file": "metrics.csv"}) == without_clock(written)
    assert without_clock(json.loads((tmp_path / "api" / "run.json").read_text())) == without_clock(written)
    # the frame returned is the file's: every value, every dtype's rounding
    assert metrics.to_csv(index=False) == (tmp_path / "cli" / "metrics.csv").read_text()
    assert list(metrics["round"]) == list(range(settings["rounds"] + 1))


def test_without_out_nothing_is_written(data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    metrics, record = fedsim.run(data, "fedavg", rounds=1, clients_per_round=2, epochs=1)
    assert len(metrics) == 2 and record["result"]["rounds_completed"] == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("method, settings, line", [
    ("fedprox", {}, "method fedprox needs mu, the weight of its proximal term: it has no default"),
    ("fedavg", dict(rounds="5"), "bad run setting rounds='5': expected an integer >= 0"),
    ("fedavg", dict(epochs=2.0), "bad run setting epochs=2.0: expected an integer >= 1"),
    ("fedavg", dict(lr=0), "bad run setting lr=0: expected a finite number > 0"),
    ("fedavg", dict(rounds=None), "bad run setting rounds=None: expected an integer >= 0"),
    ("fedavg", dict(theory="yes"), "bad run setting theory='yes': expected True or False"),
    ("fedavg", dict(rounds_=3), "unknown run setting 'rounds_'; the settings: data, method, mu,"),
    ("fedavg", dict(mu=0.1), "bad run setting mu=0.1: fedavg has no proximal term"),
    ("fedavg", dict(engine="fast"), "bad run setting engine='fast'"),
    ("fedavg", dict(options={"tau": 5}), "bad method option 'tau': fedavg takes none"),
    ("feddane_decayed", dict(options={"tau": -1}), "bad method option tau=-1"),
    ("fedsgd", {}, "unknown method 'fedsgd'; choose one of dane,"),
    # every name the CLI takes, variants too, and the method a label names
    ("fedadam", {}, "unknown method 'fedadam' (FedAdam is fedopt); choose one of dane, done, fedavg, feddane, "
                    "feddane_authors,"),
    ("fedadagrad", dict(mu=1), "bad run setting mu=1.0: fedadagrad has no proximal term"),
    ("fedavg", dict(clients_per_round=7), "bad run setting clients_per_round=7: 7 is more than the 6 devices"),
])
def test_bad_settings_are_one_line_naming_them(data, tmp_path, method, settings, line):
    with pytest.raises(ValueError) as refused:
        fedsim.run(data, method, out=tmp_path / "out", **settings)
    assert str(refused.value).startswith(line), str(refused.value)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "out").exists()


def test_fedprox_takes_the_mu_it_is_given():
    """The command line's rule (settings.given_config), not a second copy of it: mu given is mu run."""
    assert api._config("d.h5", "fedprox", {"mu": 0.5}).mu == 0.5
    assert api._config("d.h5", "fedprox", {"mu": 0}).mu == 0.0  # said in so many words: FedAvg's problem
    assert api._config("d.h5", "feddane", {}).mu == 0.0


def test_checks_come_before_torch_and_import_fedsim_loads_none(tmp_path):
    """`import fedsim` is what the workflow does at every snakemake call: no torch; a refused run is
    refused before torch is imported (seconds on this machine)."""
    code = ("import sys, fedsim\n"
            "assert 'torch' not in sys.modules, 'import fedsim loaded torch'\n"
            "try:\n"
            "    fedsim.run('missing.h5', 'fedavg', rounds=2)\n"
            "except ValueError as err:\n"
            "    print(err)\n"
            "print('torch' in sys.modules)\n"
            "print(fedsim.run is sys.modules['fedsim.api'].run)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["dataset file not found: missing.h5", "False", "True"]
    with pytest.raises(AttributeError, match="module 'fedsim' has no attribute 'fit'"):
        fedsim.fit  # noqa: B018: only fedsim.api's names are lazy


def test_generate_synthetic_is_the_commands_dataset(tmp_path):
    options = dict(alpha=0.5, beta=1, devices=5, features=7, classes=3, train_fraction=0.8, seed=4)
    path = fedsim.generate_synthetic(tmp_path / "s.h5", **options)
    assert path == str(tmp_path / "s.h5")
    argv = ["generate-synthetic", "--name", "s", "--out", str(tmp_path / "cli.h5")]
    argv += [arg for key, value in options.items() for arg in ("--" + key.replace("_", "-"), str(value))]
    assert cli.main(argv) == 0
    with FederatedDataset(path) as made, FederatedDataset(tmp_path / "cli.h5") as command:
        assert made.name == command.name == "s"
        assert made.num_devices == 5 and made.attrs.get("provenance") == command.attrs.get("provenance")
        for split in ("train", "test"):
            ours, theirs = made.load(split), command.load(split)
            for array in ("x", "y", "offsets"):
                assert (getattr(ours, array) == getattr(theirs, array)).all(), (split, array)


@pytest.mark.parametrize("options, line", [
    (dict(alpha="1"), "bad alpha='1': expected a finite number >= 0"),
    (dict(devices=0), "bad devices=0: expected an integer >= 1"),
    (dict(features=2.5), "bad features=2.5: expected an integer >= 1"),
    (dict(seed=-3), "bad seed=-3: expected an integer >= 0"),
    (dict(train_fraction=1.5), "bad train_fraction=1.5: expected a finite number in (0, 1)"),
    (dict(classes=1), "bad classes=1: expected an integer >= 2"),
    (dict(iid="no"), "bad iid='no': expected True or False"),
])
def test_generate_synthetic_refuses_in_one_line(tmp_path, options, line):
    with pytest.raises(ValueError, match=re.escape(line)):
        fedsim.generate_synthetic(tmp_path / "s.h5", **options)
    assert not (tmp_path / "s.h5").exists()


def test_generate_synthetics_keywords_are_the_commands_options():
    """Each keyword of fedsim.generate_synthetic is an option of `fedsim generate-synthetic`, with its default."""
    args = vars(cli.build_parser().parse_args(["generate-synthetic", "--name", "s", "--out", "s.h5"]))
    defaults = {name: value for name, value in args.items() if name not in ("command", "func", "name", "out")}
    ours = {name: p.default for name, p in inspect.signature(api.generate_synthetic).parameters.items()
            if name not in ("out", "name", "overwrite")}  # overwrite: Python's own (the command's file is Snakemake's)
    assert ours == defaults


def test_generate_synthetic_keeps_a_file_of_other_data(tmp_path):
    """The same call again returns the file as it is; one asking for other data is refused in one line
    naming what differs, the file untouched; overwrite=True replaces it."""
    path = fedsim.generate_synthetic(tmp_path / "s.h5", alpha=0.5, beta=0.5)
    before = (tmp_path / "s.h5").read_bytes()
    assert fedsim.generate_synthetic(tmp_path / "s.h5", alpha=0.5, beta=0.5) == path
    with pytest.raises(ValueError) as refused:
        fedsim.generate_synthetic(tmp_path / "s.h5", alpha=1, beta=1)
    assert str(refused.value) == (f"bad out={path!r}: it exists and holds alpha 0.5 (not 1.0), beta 0.5 (not 1.0); "
                                  "name another file, remove it or pass overwrite=True")
    assert (tmp_path / "s.h5").read_bytes() == before
    fedsim.generate_synthetic(tmp_path / "s.h5", alpha=1, beta=1, overwrite=True)
    assert (tmp_path / "s.h5").read_bytes() != before


def readme_block(heading: str, language: str, index: int = 0) -> str:
    """The ```language block number `index` (0: the first) of README.md's section `heading`."""
    text = (REPO / "README.md").read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)[index]


def test_the_readmes_python_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(readme_block("From Python", "python"), "README.md", "exec"), namespace)
    frames = [v for v in namespace.values() if isinstance(v, pd.DataFrame)]
    records = [v for v in namespace.values() if isinstance(v, dict) and "result" in v]
    assert frames and records, "the example shows no metrics and no record"
    metrics, record = frames[0], records[0]
    assert list(metrics["round"]) == list(range(record["config"]["rounds"] + 1))
    assert capsys.readouterr().out  # it shows something


def test_the_readmes_own_data_example_runs(tmp_path, monkeypatch, capsys):
    """The README's second Python block: an .npz imported as a pool, partitioned, trained with
    progress and a checkpoint, in at most ten lines."""
    block = readme_block("From Python", "python", 1)
    assert len(block.strip().splitlines()) <= 10
    assert all(name in block for name in ("fedsim.import_arrays", "fedsim.partition_dirichlet", "progress_seconds",
                                          "checkpoint="))
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(block, "README.md", "exec"), namespace)
    metrics, record = namespace["metrics"], namespace["record"]
    assert list(metrics["round"]) == list(range(21)) and record["result"]["diverged_round"] is None
    assert record["dataset"]["devices"] == 20 and record["dataset"]["provenance"]["generator"] == "fedsim.partition"
    assert metrics["train_loss"].iloc[-1] < metrics["train_loss"].iloc[0]
    assert capsys.readouterr().out.startswith("fedavg mu=0 on mine_dir0.5: starting, 20 rounds, train loss ")
    assert not (tmp_path / "mine.pt").exists()  # a run that completes removes its checkpoint


RESUMED = dict(method="fedavg", rounds=6, clients_per_round=3, epochs=2)


def test_a_run_ended_by_its_callback_resumes_to_the_same_bytes(data, tmp_path, capsys):
    """on_round sees every row; an error it raises ends the run, the state of the last checkpoint kept;
    the same call again resumes there and ends with the metrics of a run never stopped."""
    whole, _ = fedsim.run(data, **RESUMED)
    seen, raised = [], []

    def on_round(row):
        seen.append(row["round"])
        if row["round"] == 3 and not raised:
            raised.append(True)
            raise RuntimeError("stop here")

    keywords = dict(**RESUMED, on_round=on_round, checkpoint=tmp_path / "run.pt", checkpoint_every=1,
                    checkpoint_seconds=0, progress_seconds=0)
    with pytest.raises(RuntimeError, match="stop here"):
        fedsim.run(data, **keywords, out=tmp_path / "out")
    assert seen == [0, 1, 2, 3] and (tmp_path / "run.pt").exists() and not (tmp_path / "out").exists()
    capsys.readouterr()
    metrics, record = fedsim.run(data, **keywords, out=tmp_path / "out")
    assert seen == [0, 1, 2, 3, 3, 4, 5, 6]  # round 3's state was saved before its metrics: computed again
    assert record["result"]["resumed_from_round"] == 3
    assert metrics.to_csv(index=False) == whole.to_csv(index=False)
    assert (tmp_path / "out" / "metrics.csv").read_text() == whole.to_csv(index=False)
    assert "resumed from its checkpoint at round 3, 6 rounds" in capsys.readouterr().out
    assert not (tmp_path / "run.pt").exists()


def test_ctrl_c_stops_a_run_at_a_round_boundary_and_it_resumes_to_the_same_bytes(data, tmp_path):
    """With a checkpoint, Ctrl-C (SIGINT) during round 2 stops the run at round 3's boundary, its state
    saved there whatever checkpoint_every says, then KeyboardInterrupt names what was kept."""
    import os
    import signal

    whole, _ = fedsim.run(data, **RESUMED)
    sent = []

    def interrupt(row):
        if row["round"] == 2 and not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)

    keywords = dict(**RESUMED, on_round=interrupt, checkpoint=tmp_path / "run.pt")
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt) as stopped:
        fedsim.run(data, **keywords)
    assert str(stopped.value) == (f"stopped at round 3 of 6 by SIGINT; the state of round 3 is in {tmp_path / 'run.pt'}; "
                                  "call fedsim.run again with the same arguments to resume")
    assert signal.getsignal(signal.SIGINT) is handler  # restored
    metrics, record = fedsim.run(data, **keywords)
    assert record["result"]["resumed_from_round"] == 3
    assert metrics.to_csv(index=False) == whole.to_csv(index=False)


@pytest.mark.parametrize("keywords, line", [
    (dict(progress_seconds=-1), "bad progress_seconds=-1: expected a finite number >= 0"),
    (dict(progress_seconds="10"), "bad progress_seconds='10': expected a finite number >= 0"),
    (dict(on_round=5), "bad on_round=5: expected a function of a metrics row, or None"),
    (dict(checkpoint=3), "bad checkpoint=3: expected a path"),
    (dict(checkpoint=".", checkpoint_every=0), "bad checkpoint='.': a folder, not a file"),
    (dict(checkpoint="c.pt", checkpoint_every=0), "bad checkpoint_every=0: expected an integer >= 1"),
    (dict(checkpoint="c.pt", checkpoint_seconds=None), "bad checkpoint_seconds=None: expected a finite number >= 0"),
])
def test_bad_progress_and_checkpoint_keywords_are_one_line(data, tmp_path, monkeypatch, keywords, line):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as refused:
        fedsim.run(data, "fedavg", rounds=1, **keywords)
    assert str(refused.value) == line
    assert list(tmp_path.iterdir()) == []


def test_runs_keywords_besides_the_settings_are_trains_options():
    """fedsim.run's own keywords are `fedsim train`'s options besides the settings, with their defaults
    (progress_seconds: None, silent, where the command prints every 30 s)."""
    args = vars(cli.build_parser().parse_args(["train", "--data", "d.h5", "--method", "fedavg", "--metrics", "m.csv",
                                               "--info", "r.json"]))
    ours = {name: p.default for name, p in inspect.signature(api.run).parameters.items()
            if p.kind is p.KEYWORD_ONLY and name not in ("out", "on_round", "progress_seconds")}
    assert ours == {name: args[name] for name in ("checkpoint", "checkpoint_every", "checkpoint_seconds")}
    assert inspect.signature(api.run).parameters["progress_seconds"].default is None
    assert "progress_seconds" in args


def npz_pool(path, n=300, features=6, classes=4, devices=False):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, features)).astype(np.float32)
    arrays = dict(x=x, y=rng.integers(0, classes, n))
    if devices:
        arrays["device"] = np.arange(n) % 5
    np.savez(path, **arrays)
    return path


def test_import_arrays_and_partition_dirichlet_write_the_commands_files(tmp_path):
    """At the package's top, with the commands' options as keywords: the same files, byte for byte."""
    npz = npz_pool(tmp_path / "mine.npz")
    pool = fedsim.import_arrays(npz, tmp_path / "pool.h5", name="mine", train_fraction=0.8, seed=2)
    assert pool == str(tmp_path / "pool.h5")
    assert cli.main(["import-arrays", "--npz", str(npz), "--name", "mine", "--train-fraction", "0.8", "--seed", "2",
                     "--out", str(tmp_path / "cli_pool.h5")]) == 0
    assert (tmp_path / "pool.h5").read_bytes() == (tmp_path / "cli_pool.h5").read_bytes()
    options = dict(devices=6, alpha=0.5, scheme="per_device", min_partition_size=5, seed=3, repeats="keep")
    made = fedsim.partition_dirichlet(pool, tmp_path / "dir.h5", **options, name="mine_dir")
    assert made == str(tmp_path / "dir.h5")
    argv = ["partition-dirichlet", "--pool", pool, "--name", "mine_dir", "--out", str(tmp_path / "cli_dir.h5")]
    argv += [arg for key, value in options.items() for arg in ("--" + key.replace("_", "-"), str(value))]
    assert cli.main(argv) == 0
    assert (tmp_path / "dir.h5").read_bytes() == (tmp_path / "cli_dir.h5").read_bytes()
    with FederatedDataset(made) as dataset:
        assert dataset.num_devices == 6 and dataset.name == "mine_dir"


@pytest.mark.parametrize("command", ["import-arrays", "partition-dirichlet"])
def test_import_arrays_and_partition_dirichlets_keywords_are_the_commands_options(command):
    required = {"import-arrays": ["--npz", "x.npz"], "partition-dirichlet": ["--pool", "p.h5", "--devices", "2",
                                                                            "--alpha", "1"]}[command]
    args = vars(cli.build_parser().parse_args([command, *required, "--out", "o.h5"]))
    function = {"import-arrays": api.import_arrays, "partition-dirichlet": api.partition_dirichlet}[command]
    ours = {name: p.default for name, p in inspect.signature(function).parameters.items()
            if name not in ("npz", "pool", "out", "devices", "alpha")}
    assert ours == {name: value for name, value in args.items()
                    if name not in ("command", "func", "npz", "pool", "out", "devices", "alpha")}
    assert all(f"`{name}`" in function.__doc__ or name in function.__doc__ for name in ours)


@pytest.mark.parametrize("call, line", [
    (lambda t: fedsim.import_arrays(t / "mine.npz", t / "o.h5", train_fraction=0), "bad train_fraction=0: expected "
                                                                                    "a finite number in (0, 1)"),
    (lambda t: fedsim.import_arrays(t / "mine.npz", t / "o.h5", classes=1), "bad classes=1: expected an integer >= 2"),
    (lambda t: fedsim.import_arrays(t / "mine.npz", t / "o.h5", seed=1.5), "bad seed=1.5: expected an integer >= 0"),
    (lambda t: fedsim.import_arrays(t / "none.npz", t / "o.h5"), "{t}/none.npz: no such file"),
    (lambda t: fedsim.import_arrays(t / "mine.npz", None), "bad out=None: expected a path"),
    (lambda t: fedsim.partition_dirichlet(t / "pool.h5", t / "o.h5", devices=0, alpha=1),
     "bad devices=0: expected an integer >= 1"),
    (lambda t: fedsim.partition_dirichlet(t / "pool.h5", t / "o.h5", devices=3, alpha=0),
     "bad alpha=0: expected a finite number > 0"),
    (lambda t: fedsim.partition_dirichlet(t / "pool.h5", t / "o.h5", devices=3, alpha=1, scheme="even"),
     "bad scheme='even': expected one of per_class, per_device"),
    (lambda t: fedsim.partition_dirichlet(t / "pool.h5", t / "o.h5", devices=3, alpha=1, self_balancing="no"),
     "bad self_balancing='no': expected True or False"),
    (lambda t: fedsim.partition_dirichlet(t / "none.h5", t / "o.h5", devices=3, alpha=1),
     "{t}/none.h5: dataset file not found"),
    # what the pool cannot meet: the command's own line (fedsim.data.partition)
    (lambda t: fedsim.partition_dirichlet(t / "pool.h5", t / "o.h5", devices=400, alpha=1),
     "devices: 400 devices, but the pool holds only 300 samples"),
])
def test_import_arrays_and_partition_dirichlet_refuse_in_one_line(tmp_path, capsys, call, line):
    npz_pool(tmp_path / "mine.npz")
    fedsim.import_arrays(tmp_path / "mine.npz", tmp_path / "pool.h5")
    with pytest.raises(ValueError) as refused:
        call(tmp_path)
    assert str(refused.value) == line.format(t=tmp_path)
    assert not (tmp_path / "o.h5").exists()
    if "400" in line:  # the command says the same
        assert cli.main(["partition-dirichlet", "--pool", str(tmp_path / "pool.h5"), "--devices", "400", "--alpha",
                         "1", "--out", str(tmp_path / "o.h5")]) == 2
        assert capsys.readouterr().err == f"fedsim partition-dirichlet: error: {line}\n"


WRITERS = {  # each dataset writer of the API: its command, and its call and arguments with these keywords
    "generate-synthetic": (lambda t, **kw: fedsim.generate_synthetic(t / "o.h5", devices=3, **kw),
                           ["--name", "o", "--devices", "3"]),
    "import-arrays": (lambda t, **kw: fedsim.import_arrays(t / "mine.npz", t / "o.h5", **kw),
                      ["--npz", "{t}/mine.npz"]),
    "partition-dirichlet": (lambda t, **kw: fedsim.partition_dirichlet(t / "pool.h5", t / "o.h5", devices=3, alpha=1,
                                                                       **kw),
                            ["--pool", "{t}/pool.h5", "--devices", "3", "--alpha", "1"]),
}


@pytest.mark.parametrize("command", WRITERS)
@pytest.mark.parametrize("fraction", [1.0, 0, -0.5, float("nan")])
def test_writers_and_their_commands_refuse_the_same_train_fraction(tmp_path, capsys, command, fraction):
    """A train_fraction outside (0, 1) (1: every row trains, the test split is empty and test_acc reads 0)
    is refused by the Python call and by its command alike, in one line naming train_fraction, before
    anything is written; 0.5 is accepted by both, and splits every device's rows."""
    npz_pool(tmp_path / "mine.npz")
    fedsim.import_arrays(tmp_path / "mine.npz", tmp_path / "pool.h5")
    call, arguments = WRITERS[command]
    with pytest.raises(ValueError) as refused:
        call(tmp_path, train_fraction=fraction)
    assert str(refused.value) == f"bad train_fraction={fraction!r}: expected a finite number in (0, 1)"
    argv = [command, *(a.format(t=tmp_path) for a in arguments), "--out", str(tmp_path / "o.h5")]
    with pytest.raises(SystemExit) as stop:
        cli.main([*argv, "--train-fraction", str(fraction)])
    assert stop.value.code == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err == f"fedsim {command}: error: argument --train-fraction: '{fraction}' is not a finite number in (0, 1)"
    assert not (tmp_path / "o.h5").exists()
    if fraction == 1.0:  # and the value both accept, where the test split is not empty
        call(tmp_path, train_fraction=0.5)
        assert cli.main([*argv[:-1], str(tmp_path / "cli.h5"), "--train-fraction", "0.5"]) == 0
        for made in ("o.h5", "cli.h5"):
            with FederatedDataset(tmp_path / made) as dataset:
                assert dataset.test_sizes.sum() > 0 and dataset.train_sizes.sum() > 0, made


def test_the_packages_top_offers_the_datasets_writers_lazily():
    assert {"run", "generate_synthetic", "import_arrays", "partition_dirichlet"} <= set(dir(fedsim))
    assert fedsim.import_arrays is api.import_arrays and fedsim.partition_dirichlet is api.partition_dirichlet
