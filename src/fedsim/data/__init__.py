"""The datasets: the HDF5 format (`format`), the generators and builders the kinds call (`synthetic`,
`arrays`, `partition`, `leaf/`), the raw sources' downloads (`download`) and atomic file writes
(`atomic`). Light at import: the planning imports its parts at every snakemake call; the format's
names (FederatedDataset, write_dataset, ...) are reached from here as before, loading h5py only then."""

import importlib
from pathlib import Path

_HERE = Path(__file__).parent


def __getattr__(name):
    # a submodule not imported yet: the import system imports it (without loading the format)
    if name.startswith("_") or (_HERE / f"{name}.py").is_file() or (_HERE / name / "__init__.py").is_file():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    dataset_format = importlib.import_module(f"{__name__}.format")
    if not hasattr(dataset_format, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(dataset_format, name)
