"""fedsim from Python: one call trains a run, others write a dataset to train it on.

    import fedsim

    data = fedsim.generate_synthetic("synthetic_1_1.h5", alpha=1, beta=1)
    metrics, record = fedsim.run(data, "feddane", mu=0.01, rounds=20)

    pool = fedsim.import_arrays("mine.npz", "pool.h5")           # x, y: a pool (one device)
    data = fedsim.partition_dirichlet(pool, "mine.h5", devices=20, alpha=0.5)
    metrics, record = fedsim.run(data, "fedavg", progress_seconds=10, checkpoint="mine.pt")

`run` is `python -m fedsim train` without the command line: the same RunConfig (fedsim.core.settings:
every keyword is one of its fields, `python -m fedsim train --help` explains each), the same checks
with the same one-line ValueErrors (a setting's own before torch is imported; those that need the
dataset's device count once it is open), the same rule for a method whose mu has no default
(FedProx: settings.given_config), and the same numbers, bit for bit (tests/test_api.py). Its own
keywords are the command's other options: progress lines (`progress_seconds`) or a callback per
metrics row (`on_round`), and a checkpoint to resume from (`checkpoint`, `checkpoint_every`,
`checkpoint_seconds`). `generate_synthetic`, `import_arrays` and `partition_dirichlet` are
`python -m fedsim generate-synthetic`, `import-arrays` and `partition-dirichlet`, their keywords
the options.

`import fedsim` reaches them lazily (fedsim/__init__.py), so it stays free of torch.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from pathlib import Path

import pandas as pd

from .data.arrays import DEFAULTS as ARRAYS
from .data.partition import DEFAULTS as PARTITION, REPEATS, SCHEMES
from .core.records import write_run
from .core.settings import (CHECKPOINT_EVERY, CHECKPOINT_SECONDS, COUNT, NON_NEGATIVE, Check, RunConfig, given_config,
                            key_check)
from .data.synthetic import DEFAULTS as SYNTHETIC, write_synthetic

SETTINGS = {f.name: f for f in dataclasses.fields(RunConfig)}


def run(data, method: str, *, out=None, on_round=None, progress_seconds=None, checkpoint=None,
        checkpoint_every: int = CHECKPOINT_EVERY, checkpoint_seconds: float = CHECKPOINT_SECONDS,
        **settings) -> tuple[pd.DataFrame, dict]:
    """Train one run; return its per-round metrics (metrics.csv's rows and columns: docs/outputs.md)
    and its record (what run.json holds, less the name of its metrics file).

    `data`: a dataset file (fedsim's HDF5 format: generate_synthetic, partition_dirichlet,
    import_arrays with device ids, or the workflow's results/datasets/); `method`: a method or
    variant name (fedsim.methods.ENTRIES); `settings`: any other field of fedsim.core.settings.RunConfig
    (mu, clients_per_round, epochs, seed, rounds, lr, batch_size, options={NAME: value}, ...), each
    at its default where left out, as with `fedsim train`; FedProx needs its mu. `out`: a folder to
    write metrics.csv and run.json to as well.

    While it runs: `progress_seconds` (None: silent) prints `fedsim train`'s progress lines, at most
    one per that many seconds; `on_round(row)` is called with each metrics row (a dict of
    metrics.csv's columns) as it is computed; what it raises ends the run.

    `checkpoint`: a file to save the run's state to, every `checkpoint_every` rounds once
    `checkpoint_seconds` have passed since the last save (`fedsim train --checkpoint`'s defaults).
    A run stopped (Ctrl-C: at the next round boundary, the state saved there first, then
    KeyboardInterrupt; or anything raised) and called again with the same arguments resumes from the
    last state saved, and ends with the same metrics, bit for bit, as a run never stopped. The file
    is removed when the run completes.
    """
    config = _config(data, method, settings)
    config.validate()  # before torch's import: a bad file is named in a second, not after ten
    if on_round is not None and not callable(on_round):
        raise ValueError(f"bad on_round={on_round!r}: expected a function of a metrics row, or None")
    if progress_seconds is not None:
        progress_seconds = _number("progress_seconds", progress_seconds, NON_NEGATIVE)
    if checkpoint is not None:
        checkpoint = _path("checkpoint", checkpoint)
        if Path(checkpoint).is_dir():
            raise ValueError(f"bad checkpoint={checkpoint!r}: a folder, not a file")
    checkpoint_every = _number("checkpoint_every", checkpoint_every, COUNT)
    checkpoint_seconds = _number("checkpoint_seconds", checkpoint_seconds, NON_NEGATIVE)
    if out is not None and Path(_path("out", out)).exists() and not Path(out).is_dir():
        raise ValueError(f"bad out={os.fspath(out)!r}: a file, not a folder")
    refused = _pool_refusal(config.data)
    if refused:  # train.run refuses it too; here before torch
        raise ValueError(refused)
    from .core.checkpoint import Checkpoint
    from .core.train import run as train

    saver = None if checkpoint is None else Checkpoint(Path(checkpoint), checkpoint_every, checkpoint_seconds)
    progress = None if progress_seconds is None else run_progress(config, progress_seconds)

    def each_row(row: dict) -> None:
        if progress is not None:
            progress(row)
        if on_round is not None:
            on_round(dict(row))

    try:
        metrics, record = _train(train, config, saver, each_row, progress)
    finally:
        if progress is not None:
            progress.close()
    if out is not None:
        write_run(metrics, record, Path(out) / "metrics.csv", Path(out) / "run.json")
    if saver is not None:
        saver.remove()  # only now: the outputs it stood in for are complete
    return metrics, record


def _train(train, config, checkpoint, on_round, progress):
    """train.run; with a checkpoint, a Ctrl-C (or SIGTERM) stops it at the next round boundary, its
    state saved there, and raises KeyboardInterrupt (Stopped for the others) saying what was kept."""
    import signal

    from .core.stopping import StopSignals, Stopped

    on_resume = None if progress is None else progress.resume
    if checkpoint is None:
        return train(config, on_round=on_round, on_resume=on_resume)
    try:
        with StopSignals(graceful=True) as stop:
            return train(config, on_round=on_round, checkpoint=checkpoint, stop=stop, on_resume=on_resume)
    except Stopped as stopped:
        if checkpoint.saved_round is None:
            stopped.kept = "nothing was kept (no round saved yet): calling it again starts over"
        else:
            stopped.kept = (f"the state of round {checkpoint.saved_round} is in {checkpoint.path}; call "
                            "fedsim.run again with the same arguments to resume")
        if stopped.signum == signal.SIGINT:
            raise KeyboardInterrupt(stopped.line()) from None
        raise


def run_progress(config: RunConfig, every: float, stream=None):
    """A run's progress lines (fedsim.planning.progress: `fedsim train`'s), with the cost model's
    estimate where it has one; to `stream` (default: stdout), at most one per `every` seconds."""
    from .data.format import FederatedDataset
    from .methods import describe_setting, variant_of
    from .planning.cost import run_round_seconds
    from .planning.progress import Progress

    config.validate()  # a missing dataset file is named before it is opened here
    with FederatedDataset(config.data) as dataset:
        name, kind = dataset.name, dataset.kind
    settings = dataclasses.asdict(config)
    label = f"{variant_of(settings)} {describe_setting(settings)} on {name}"
    return Progress(label, config.rounds, every=every, stream=stream, estimate=run_round_seconds(config, kind))


def _pool_refusal(path) -> str | None:
    """The line refusing a pool (fedsim.data.arrays.pool_refusal), from the file's attributes alone; None
    where it is no pool, or no file train.run can open (which then says why)."""
    import json

    import h5py

    from .data.arrays import pool_refusal

    try:
        with h5py.File(path, "r") as f:
            provenance = json.loads(f.attrs.get("provenance", "{}"))
    except Exception:
        return None
    return pool_refusal(path, provenance) if isinstance(provenance, dict) else None


def _config(data, method, settings: dict) -> RunConfig:
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise ValueError(f"unknown run setting {unknown[0]!r}; the settings: {', '.join(SETTINGS)}")
    if not isinstance(method, str):
        raise ValueError(f"bad run setting method={method!r}: expected a method's name")
    values = {"data": _path("run setting data", data), "method": method}
    for name, value in settings.items():
        values[name] = _setting(name, value)
    return given_config(values, flag=lambda name: name)


def _setting(name: str, value):
    """A keyword's value as RunConfig holds it (float mu for 1, as the command line reads `--mu 1`), or
    a ValueError naming it where its type is wrong; its range is RunConfig.validate's to check."""
    f = SETTINGS[name]
    if value is None and (f.default is None or name == "mu"):  # mu=None: not given (given_config)
        return value
    if f.metadata["check"] is not None:
        return _number(f"run setting {name}", value, f.metadata["check"])
    if f.default is False and not isinstance(value, bool):
        raise ValueError(f"bad run setting {name}={value!r}: expected True or False")
    if name == "options" and not isinstance(value, dict):
        raise ValueError(f"bad run setting options={value!r}: expected a dict of the method's options")
    if name == "init":
        return _path(f"run setting {name}", value)
    return value


def _number(what: str, value, check: Check):
    """`value` cast as `check` reads numbers if it is one of that kind (an integer where integers are
    meant: 2.0 rounds is refused, as `--rounds 2.0` is) and in its range, else a ValueError naming it."""
    kind = numbers.Integral if check.cast is int else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind) or not check.ok(check.cast(value)):
        raise ValueError(f"bad {what}={value!r}: expected {check.what}")
    return check.cast(value)


def _kind_keys(kind: str, given: dict) -> dict:
    """Keywords that are keys of the data kind `kind` (fedsim.kinds), checked by the kind's rules for them, as
    the kind's own command checks its options and the config check a config's keys: each cast as its rule
    reads it, or a ValueError naming it. None for a key without a default (import_arrays' classes) is left out."""
    from .kinds import kind_of

    rules = {**kind_of(kind).shared_keys, **kind_of(kind).keys}
    return {key: _number(key, value, key_check(rules[key])) for key, value in given.items()
            if value is not None or "default" in rules[key]}


def _path(what: str, value) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"bad {what}={value!r}: expected a path")
    return os.fspath(value)


def _synthetic_settings(path) -> dict | None:
    """The generator settings and name of a synthetic dataset file, or None where it is none."""
    from .data.format import FederatedDataset

    try:
        with FederatedDataset(path) as dataset:
            provenance = dict(dataset.attrs["provenance"])
            name = dataset.name
    except Exception:  # not a dataset file at all: "another file"
        return None
    if provenance.get("generator") != "fedsim.synthetic":
        return None
    keys = ("iid", "alpha", "beta", "num_devices", "num_features", "num_classes", "train_fraction", "seed")
    return {**{k: provenance.get(k) for k in keys}, "name": name}


def generate_synthetic(out, *, alpha=0.0, beta=0.0, iid: bool = False, name: str | None = None,
                       devices: int = SYNTHETIC["devices"], features: int = SYNTHETIC["features"],
                       classes: int = SYNTHETIC["classes"], train_fraction: float = SYNTHETIC["train_fraction"],
                       seed: int = SYNTHETIC["seed"], overwrite: bool = False) -> str:
    """Write Synthetic(alpha, beta) of the FedProx paper to `out` (fedsim's HDF5 dataset format) and
    return its path, for run(). The defaults are the paper's (30 devices, 60 features, 10 classes);
    `name` (the dataset's, in every run's record) defaults to the file's stem. The same data as
    `python -m fedsim generate-synthetic` with the same options (docs/data-format.md).

    Where `out` exists it is kept: returned as it is where it holds this very dataset (the same
    generator settings and name), refused in one line otherwise, unless `overwrite`."""
    checked = _kind_keys("synthetic", dict(alpha=alpha, beta=beta, devices=devices, features=features,
                                           classes=classes, train_fraction=train_fraction, seed=seed))
    if not isinstance(iid, bool):
        raise ValueError(f"bad iid={iid!r}: expected True or False")
    out = _path("out", out)
    name = Path(out).stem if name is None else str(name)
    if os.path.exists(out) and not overwrite:
        held = _synthetic_settings(out)
        wanted = dict(iid=iid, alpha=checked["alpha"], beta=checked["beta"], num_devices=checked["devices"],
                      num_features=checked["features"], num_classes=checked["classes"],
                      train_fraction=checked["train_fraction"], seed=checked["seed"], name=name)
        if held == wanted:
            return out
        differs = "another file" if held is None else ", ".join(
            f"{k} {held[k]} (not {wanted[k]})" for k in wanted if held.get(k) != wanted[k])
        raise ValueError(f"bad out={out!r}: it exists and holds {differs}; name another file, remove it or "
                         "pass overwrite=True")
    write_synthetic(out, name=name, iid=iid, alpha=checked["alpha"],
                    beta=checked["beta"], num_devices=checked["devices"], num_features=checked["features"],
                    num_classes=checked["classes"], train_fraction=checked["train_fraction"], seed=checked["seed"])
    return out


def import_arrays(npz, out, *, name: str = "arrays", train_fraction: float = ARRAYS["train_fraction"],
                  seed: int = ARRAYS["seed"], classes: int | None = None) -> str:
    """Write a user's .npz of arrays to `out` as a dataset file and return its path, as
    `python -m fedsim import-arrays` does with the same options.

    The .npz holds `x` (n x d features or n x C x H x W images), `y` (n integer labels 0 .. classes - 1)
    and optionally `device` (n integer device ids: one device per id) and `test` (n booleans: the
    test rows; without it each device's rows are split, a `train_fraction` of them to train, seeded
    by `seed`). Without `device` the file is a pool, one device: deal it to devices with
    partition_dirichlet before a run. `name` is the dataset's, in every run's record; `classes` the
    label count (default: the largest label + 1). What the file cannot be read as (a NaN or infinity
    in `x`, a label outside 0 .. classes - 1, ...) is a ValueError in one line naming the file, the
    array and the row (fedsim.data.arrays)."""
    from .data.arrays import import_arrays as write_arrays

    npz, out = _path("npz", npz), _path("out", out)
    checked = _kind_keys("arrays", dict(train_fraction=train_fraction, seed=seed, classes=classes))
    write_arrays(npz, out, name=_name(name), **checked)
    return out


def partition_dirichlet(pool, out, *, devices: int, alpha: float, scheme: str = PARTITION["scheme"],
                        min_partition_size: int = PARTITION["min_partition_size"],
                        self_balancing: bool = PARTITION["self_balancing"], max_retries: int = PARTITION["max_retries"],
                        train_fraction: float = PARTITION["train_fraction"], seed: int = PARTITION["seed"],
                        repeats: str = PARTITION["repeats"], name: str = "dirichlet") -> str:
    """Deal every train and test row of the dataset file `pool` (import_arrays' pool, or any image or
    feature dataset file) to `devices` devices by label with a Dirichlet(`alpha`) draw, write the
    result to `out` and return its path, as `python -m fedsim partition-dirichlet` does with the same
    options (fedsim.data.partition).

    `scheme`: per_class (each class over the devices, flwr-datasets' DirichletPartitioner) or
    per_device (each device over the classes, equal sizes, Hsu et al. 2019); `min_partition_size`:
    the fewest samples a device may get; `self_balancing` (per_class): a device over the mean size
    gets no more classes; `max_retries` (per_class): new draws while a device is under the minimum,
    then refused; `train_fraction`: each device's share of train rows; `seed`; `repeats`: a sample the
    pool holds more than once is dealt once (drop) or every time (keep); `name`: the dataset's.
    Settings the pool cannot meet (more devices than it allows) are a ValueError in one line."""
    from .data.partition import write_dirichlet

    pool, out = _path("pool", pool), _path("out", out)
    checked = _kind_keys("dirichlet", dict(devices=devices, alpha=alpha, min_partition_size=min_partition_size,
                                           max_retries=max_retries, train_fraction=train_fraction, seed=seed))
    for key, value, allowed in (("scheme", scheme, SCHEMES), ("repeats", repeats, REPEATS)):
        if value not in allowed:
            raise ValueError(f"bad {key}={value!r}: expected one of {', '.join(allowed)}")
    if not isinstance(self_balancing, bool):
        raise ValueError(f"bad self_balancing={self_balancing!r}: expected True or False")
    if not Path(pool).is_file():
        raise ValueError(f"{pool}: dataset file not found")
    write_dirichlet(pool, out, name=_name(name), scheme=scheme, self_balancing=self_balancing, repeats=repeats,
                    **checked)
    return out


def _name(name) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"bad name={name!r}: expected the dataset's name, a string")
    return name
