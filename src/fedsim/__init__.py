"""fedsim: a compact, fast federated-learning simulator (FedAvg, FedProx, FedDANE).

From Python (fedsim.api): `fedsim.run(data, method, **settings)` trains one run as `python -m fedsim
train` does and returns its per-round metrics (a pandas DataFrame) and its record, with progress
lines (`progress_seconds=`), a callback per round (`on_round=`) and a checkpoint to resume from
(`checkpoint=`); `fedsim.generate_synthetic(out, alpha=..., beta=...)` writes a dataset to train on,
`fedsim.import_arrays(npz, out)` a user's arrays, `fedsim.partition_dirichlet(pool, out, devices=...,
alpha=...)` a pool's rows dealt to devices.
"""

import importlib

__version__ = "0.1.0"

# What fedsim.api offers at the package's top. Reached on first use: the workflow imports this
# package at every snakemake call, and fedsim.api's run needs torch. By name (importlib), not by an
# import statement, so that the jobs' code fingerprints (fedsim.planning.jobs, read from the imports) and the
# layers (tests/test_layers.py) do not take fedsim.api for code every module of the package runs.
_API = ("run", "generate_synthetic", "import_arrays", "partition_dirichlet")


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module(f"{__name__}.api"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_API])
