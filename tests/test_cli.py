"""Bad arguments and bad files at the command line: one line naming what is wrong, exit 2,
nothing written."""

import argparse
import dataclasses
import json

import h5py
import pytest
import torch

from fedsim import cli
from fedsim.core.settings import RunConfig

from helpers.hdf5_damage import flip_byte
from tiny import tiny_dataset


@pytest.fixture
def data(tiny_data):
    return tiny_data(6)


def train_args(data, tmp_path, *extra):
    return ["train", "--data", data, "--method", "fedavg", "--rounds", "2", "--clients-per-round", "2",
            "--metrics", str(tmp_path / "out" / "m.csv"), "--info", str(tmp_path / "out" / "run.json"), *extra]


def error_lines(capsys):
    return [line for line in capsys.readouterr().err.splitlines() if "error:" in line]


@pytest.mark.parametrize("argv, named", [
    (["generate-synthetic", "--name", "s", "--alpha", "nan", "--out", "s.h5"], "--alpha: 'nan' is not a finite number"),
    (["generate-synthetic", "--name", "s", "--beta", "-1", "--out", "s.h5"], "--beta: '-1' is not a finite number >= 0"),
    (["generate-synthetic", "--name", "s", "--devices", "0", "--out", "s.h5"], "--devices: '0' is not an integer >= 1"),
    (["generate-synthetic", "--name", "s", "--features", "2.5", "--out", "s.h5"], "--features: '2.5' is not an integer"),
    (["generate-synthetic", "--name", "s", "--train-fraction", "1.5", "--out", "s.h5"], "--train-fraction"),
    (["generate-synthetic", "--name", "s", "--seed", "-3", "--out", "s.h5"], "--seed: '-3' is not an integer >= 0"),
    (["fetch", "glove", "--out", "x/", "--retries", "-1"], "--retries"),
    (["prepare-shakespeare", "--raw", "r", "--fraction", "2", "--out", "o.h5"], "--fraction"),
    (["prepare-sent140", "--raw", "r", "--glove", "g", "--min-samples", "-1", "--out", "o.h5"], "--min-samples"),
    (["import-json", "--train", "a", "--test", "b", "--name", "n", "--classes", "0", "--out", "o.h5"], "--classes"),
    (["train", "--data", "d.h5", "--method", "fedavg", "--lr", "inf", "--metrics", "m", "--info", "i"], "--lr"),
    (["train", "--data", "d.h5", "--method", "fedavg", "--lr", "0", "--metrics", "m", "--info", "i"], "--lr"),
    (["train", "--data", "d.h5", "--method", "fedprox", "--mu", "nan", "--metrics", "m", "--info", "i"], "--mu"),
    (["train", "--data", "d.h5", "--method", "fedavg", "--batch-size", "0", "--metrics", "m", "--info", "i"], "--batch-size"),
    (["train", "--data", "d.h5", "--method", "fedavg", "--epochs", "1.5", "--metrics", "m", "--info", "i"], "--epochs"),
    (["train", "--data", "d.h5", "--method", "fedavg", "--rounds", "-1", "--metrics", "m", "--info", "i"], "--rounds"),
    (["train", "--data", "d.h5", "--method", "fedavg", "--checkpoint-every", "0", "--metrics", "m", "--info", "i"],
     "--checkpoint-every: '0' is not an integer >= 1"),
    (["train", "--data", "d.h5", "--method", "fedavg", "--eval-devices", "0", "--metrics", "m", "--info", "i"], "--eval-devices"),
    (["train", "--data", "d.h5", "--method", "fedsgd", "--metrics", "m", "--info", "i"], "--method: invalid choice"),
    (["tune", "--fraction", "0", "--out", "t.csv", "r.json"], "--fraction"),
    (["figure1", "--metric", "speed", "--out", "f.pdf", "r.json"], "--metric: invalid choice"),
])
def test_bad_arguments_are_refused_by_argparse(argv, named, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2
    lines = error_lines(capsys)
    assert len(lines) == 1 and named in lines[0], lines


def test_more_eval_devices_than_the_dataset_has(data, tmp_path, capsys):
    assert cli.main(train_args(data, tmp_path, "--eval-devices", "7")) == 2
    assert error_lines(capsys) == [f"fedsim train: error: bad run setting eval_devices=7: {data} has 6 devices"]
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_cuda_without_a_gpu_is_one_line(data, tmp_path, capsys):
    assert cli.main(train_args(data, tmp_path, "--device", "cuda")) == 2
    (line,) = error_lines(capsys)
    assert "bad run setting device='cuda'" in line and "sees no CUDA device" in line


def test_an_npz_given_as_a_dataset_names_the_command_that_imports_it(tmp_path, capsys):
    import numpy as np

    arrays = tmp_path / "mine.npz"
    np.savez(arrays, x=np.zeros((4, 3), np.float32), y=np.zeros(4, np.int64))
    assert cli.main(train_args(str(arrays), tmp_path)) == 2
    assert error_lines(capsys) == [f"fedsim train: error: {arrays}: not a dataset file; `fedsim import-arrays` "
                                   "makes one of it"]


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"fedsim {cli.__version__}"


@pytest.mark.parametrize("damage, message", [
    (lambda path: h5py.File(path, "r+")["train/y"].__setitem__(0, 99), "train/y holds label 99"),
    (lambda path: h5py.File(path, "r+")["train/offsets"].__setitem__(1, -5), "train/offsets must start at 0"),
    (lambda path: flip_byte(path, "train/x"), "train data cannot be read back intact"),
])
def test_a_damaged_dataset_is_one_line_and_writes_nothing(tmp_path, capsys, damage, message):
    data = tiny_dataset(tmp_path / "tiny.h5", devices=6)
    damage(data)
    checkpoint = tmp_path / "ckpt.pt"
    assert cli.main(train_args(data, tmp_path, "--checkpoint", str(checkpoint), "--checkpoint-every", "1")) == 2
    (line,) = error_lines(capsys)
    assert line.startswith(f"fedsim train: error: {data}: ") and message in line, line
    assert not (tmp_path / "out").exists() and not checkpoint.exists()


def test_outputs_in_missing_folders_are_created_alike(tmp_path):
    """train --metrics and generate-synthetic --out both create the folders they need."""
    out = tmp_path / "new" / "deeper" / "s.h5"
    assert cli.main(["generate-synthetic", "--name", "s", "--devices", "3", "--out", str(out)]) == 0
    assert cli.main(train_args(str(out), tmp_path, "--rounds", "1")) == 0
    assert (tmp_path / "out" / "m.csv").is_file() and out.is_file()


# the flags the workflow's train rule and the users' scripts call: a renamed field must not drop one
TRAIN_FLAGS = ["--data", "--method", "--option", "--mu", "--clients-per-round", "--epochs", "--batch-size", "--lr",
               "--rounds", "--seed", "--selection", "--second-subset", "--rng", "--init", "--engine", "--device",
               "--threads", "--dtype", "--theory", "--load", "--eval-devices", "--eval-every", "--no-dissimilarity",
               "--checkpoint", "--checkpoint-every",
               "--checkpoint-seconds",
               "--metrics", "--info"]


def train_parser():
    [commands] = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return commands.choices["train"]


def test_train_has_one_option_per_run_setting_and_keeps_every_flag():
    flags = {flag: action for action in train_parser()._actions for flag in action.option_strings}
    assert set(TRAIN_FLAGS) <= set(flags)
    assert {f.name for f in dataclasses.fields(RunConfig)} <= {action.dest for action in flags.values()}
    assert all(flags[flag].help for flag in TRAIN_FLAGS)


def test_train_defaults_and_choices_are_run_configs():
    args = cli.build_parser().parse_args(["train", "--data", "d.h5", "--method", "fedavg", "--metrics", "m",
                                          "--info", "i"])
    assert cli.run_config(args) == RunConfig(data="d.h5", method="fedavg")
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    for action in train_parser()._actions:
        if action.dest in fields:
            assert tuple(action.choices or ()) == fields[action.dest].metadata["choices"], action.dest


def test_options_build_the_method_settings(data, tmp_path):
    args = train_args(data, tmp_path, "--option", "tau=5", "--option", "tau=7")
    args[args.index("fedavg")] = "feddane_decayed"
    assert cli.main(args) == 0
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert record["config"]["options"] == {"tau": 7.0}  # the last one given


def test_more_clients_per_round_than_devices_is_one_line(data, tmp_path, capsys):
    assert cli.main(train_args(data, tmp_path, "--clients-per-round", "7")) == 2
    assert error_lines(capsys) == ["fedsim train: error: bad run setting clients_per_round=7: 7 is more than the 6 "
                                   "devices (uniform selection draws without replacement)"]


def test_fedprox_without_mu_is_refused_not_run_as_fedavg(data, tmp_path, capsys):
    """mu = 0 is FedAvg's local problem: FedProx has no default mu (the FedProx paper picks one per dataset)."""
    args = train_args(data, tmp_path)
    args[args.index("fedavg")] = "fedprox"
    assert cli.main(args) == 2
    (line,) = error_lines(capsys)
    assert line.startswith("fedsim train: error: --method fedprox needs --mu, the weight of its proximal term"), line
    assert not (tmp_path / "out").exists()
    assert cli.main([*args, "--mu", "0.5"]) == 0
    assert json.loads((tmp_path / "out" / "run.json").read_text())["config"]["mu"] == 0.5


def test_the_methods_without_a_fixed_mu_still_default_to_zero():
    assert cli.NEEDS_MU == ("fedprox",)
    for method in ("fedavg", "feddane", "scaffold"):
        args = cli.build_parser().parse_args(["train", "--data", "d.h5", "--method", method, "--metrics", "m",
                                              "--info", "i"])
        assert cli.run_config(args).mu == 0.0
    mu_help = next(a.help for a in train_parser()._actions if a.dest == "mu")
    assert "required for fedprox" in mu_help


def test_every_option_of_every_command_says_what_it_is():
    """`fedsim <command> --help` explains each argument: none is listed bare."""
    [sub] = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    bare = [(name, action.dest) for name, parser in sub.choices.items() for action in parser._actions
            if not action.help and not isinstance(action, argparse._HelpAction)]
    assert not bare, bare
