"""fedsim from Python (fedsim.api): a run as `python -m fedsim train` trains it, bit for bit, with its
checks and one-line errors before torch; `import fedsim` stays torch-free; the README's example runs."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys

import pandas as pd
import pytest

import fedsim
from fedsim import api, cli
from fedsim.data import FederatedDataset

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
    ("fedsgd", {}, "unknown method 'fedsgd'; choose one of fedavg,"),
    # every name the CLI takes, variants too, and the method a label names
    ("fedadam", {}, "unknown method 'fedadam' (FedAdam is fedopt); choose one of fedavg, fedprox, feddane, "
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
    (dict(train_fraction=1.5), "bad train_fraction=1.5: expected a fraction in (0, 1]"),
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


def readme_block(heading: str, language: str) -> str:
    """The first ```language block of README.md's section `heading`."""
    text = (REPO / "README.md").read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(rf"```{language}\n(.*?)```", section, re.S)[1]


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
