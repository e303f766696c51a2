"""Per-dataset statistics as in the papers' dataset tables (LEAF's stats.py: np.mean, np.std)."""

import numpy as np
import pandas as pd

from ..atomic import write_csv
from ..format import FederatedDataset
from ..paper_table import PAPER_TABLE  # the paper's figures, for comparison

PAPER_COLUMNS = ["paper_devices", "paper_samples", "paper_mean", "paper_stdev"]
COLUMNS = ["dataset", "kind", "devices", "samples", "train_samples", "test_samples", "mean", "stdev", "min", "max",
           *PAPER_COLUMNS]



def dataset_stats(path):
    """Devices, samples (train + test) and samples per device (mean, population stdev) of one file."""
    with FederatedDataset(path) as ds:
        n = ds.train_sizes + ds.test_sizes
        return dict(dataset=ds.name, kind=ds.kind, devices=ds.num_devices, samples=int(n.sum()),
                    train_samples=int(ds.train_sizes.sum()), test_samples=int(ds.test_sizes.sum()),
                    mean=float(n.mean()) if len(n) else 0.0, stdev=float(np.std(n)) if len(n) else 0.0,
                    min=int(n.min()) if len(n) else 0, max=int(n.max()) if len(n) else 0)


def paper_row(path):
    """The paper's Table 1 figures for a file its builder marked as the paper's construction (the
    provenance's paper_table), else {}: a dataset's kind or name says nothing of how it was made
    (LEAF's own 62-class FEMNIST is kind femnist too)."""
    with FederatedDataset(path) as ds:
        return PAPER_TABLE.get(ds.attrs["provenance"].get("paper_table"), {})


def datasets_table(paths):
    """One row per file; the paper's figures beside those built as the paper built them (empty for the others)."""
    rows = []
    for path in paths:
        row = dataset_stats(path)
        rows.append({**row, **{f"paper_{k}": v for k, v in paper_row(path).items()}})
    return pd.DataFrame(rows, columns=COLUMNS).astype({c: "Int64" for c in PAPER_COLUMNS})


def write_datasets_csv(paths, out_path):
    """results/summary/datasets.csv: one row per dataset file, written atomically."""
    table = datasets_table(paths)
    write_csv(out_path, table)
    return table
