"""A finished run on disk: its metrics.csv and its run.json (configuration, versions, result).

No torch: the summary and the figures read runs through this alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..data.atomic import write_csv, write_json

# metrics.csv's cumulative costs, columns after round and communication_rounds (and totals in the
# run's result): per-sample gradient evaluations on the devices (local SGD steps and full local
# gradients), and model-sized vectors sent server -> devices and back, one per device and vector
COUNT_COLUMNS = ("gradient_evaluations", "vectors_down", "vectors_up")


def write_run(metrics: pd.DataFrame, record: dict, metrics_path, info_path) -> None:
    """Metrics first, the record last: a run.json present means the run is complete."""
    write_csv(metrics_path, metrics)
    write_json(info_path, {**record, "metrics_file": Path(metrics_path).name})


def read_run(info_path) -> tuple[pd.DataFrame, dict]:
    """(metrics, record) of the run whose run.json is `info_path`."""
    info_path = Path(info_path)
    record = json.loads(info_path.read_text())
    return pd.read_csv(info_path.parent / record["metrics_file"]), record
