"""fedsim from Python: one call trains a run, another writes a dataset to train it on.

    import fedsim

    data = fedsim.generate_synthetic("synthetic_1_1.h5", alpha=1, beta=1)
    metrics, record = fedsim.run(data, "feddane", mu=0.01, rounds=20)

`run` is `python -m fedsim train` without the command line: the same RunConfig (fedsim.settings:
every keyword is one of its fields, `python -m fedsim train --help` explains each), the same checks
with the same one-line ValueErrors (a setting's own before torch is imported; those that need the
dataset's device count once it is open), the same rule for a method whose mu has no default
(FedProx: settings.given_config), and the same numbers, bit for bit (tests/test_api.py).
`generate_synthetic` is `python -m fedsim generate-synthetic`.

`import fedsim` reaches both lazily (fedsim/__init__.py), so it stays free of torch.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from pathlib import Path

import pandas as pd

from .records import write_run
from .settings import COUNT, INDEX, NON_NEGATIVE, Check, RunConfig, given_config
from .synthetic import DEFAULTS as SYNTHETIC, write_synthetic

SETTINGS = {f.name: f for f in dataclasses.fields(RunConfig)}
# generate-synthetic's options (fedsim.cli), as keywords: what each value must be
GENERATOR = {"alpha": NON_NEGATIVE, "beta": NON_NEGATIVE, "devices": COUNT, "features": COUNT, "classes": COUNT,
             "train_fraction": Check(float, lambda v: math.isfinite(v) and 0 < v <= 1, "a fraction in (0, 1]"),
             "seed": INDEX}


def run(data, method: str, *, out=None, **settings) -> tuple[pd.DataFrame, dict]:
    """Train one run; return its per-round metrics (metrics.csv's rows and columns: docs/outputs.md)
    and its record (what run.json holds, less the name of its metrics file).

    `data`: a dataset file (fedsim's HDF5 format: generate_synthetic, or the workflow's
    results/datasets/); `method`: a method or variant name (fedsim.methods.ENTRIES); `settings`: any
    other field of fedsim.settings.RunConfig (mu, clients_per_round, epochs, seed, rounds, lr,
    batch_size, options={NAME: value}, ...), each at its default where left out, as with `fedsim
    train`; FedProx needs its mu. `out`: a folder to write metrics.csv and run.json to as well.
    """
    config = _config(data, method, settings)
    config.validate()  # before torch's import: a bad file is named in a second, not after ten
    refused = _pool_refusal(config.data)
    if refused:  # train.run refuses it too; here before torch
        raise ValueError(refused)
    if out is not None and Path(_path("out", out)).exists() and not Path(out).is_dir():
        raise ValueError(f"bad out={os.fspath(out)!r}: a file, not a folder")
    from .train import run as train

    metrics, record = train(config)
    if out is not None:
        write_run(metrics, record, Path(out) / "metrics.csv", Path(out) / "run.json")
    return metrics, record


def _pool_refusal(path) -> str | None:
    """The line refusing a pool (fedsim.arrays.pool_refusal), from the file's attributes alone; None
    where it is no pool, or no file train.run can open (which then says why)."""
    import json

    import h5py

    from .arrays import pool_refusal

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


def _path(what: str, value) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"bad {what}={value!r}: expected a path")
    return os.fspath(value)


def _synthetic_settings(path) -> dict | None:
    """The generator settings and name of a synthetic dataset file, or None where it is none."""
    from .data import FederatedDataset

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
    given = dict(alpha=alpha, beta=beta, devices=devices, features=features, classes=classes,
                 train_fraction=train_fraction, seed=seed)
    checked = {key: _number(key, value, GENERATOR[key]) for key, value in given.items()}
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
