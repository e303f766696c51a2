"""The paper's LEAF datasets (FEMNIST, Sent140, Shakespeare): raw files -> our HDF5 format.

Modules: niid (LEAF's sampling), shakespeare, femnist, sent140, leafjson (importer for LEAF's own JSON
output), stats (datasets.csv). Raw files come from fedsim.data.download.
"""

from .femnist import build_femnist, read_json_pool, read_nist_pool
from .leafjson import import_leaf_json
from .niid import leaf_partition
from .sent140 import build_sent140
from .shakespeare import build_shakespeare
from .stats import dataset_stats, datasets_table, write_datasets_csv

__all__ = ["build_femnist", "build_sent140", "build_shakespeare", "dataset_stats", "datasets_table",
           "import_leaf_json", "leaf_partition", "read_json_pool", "read_nist_pool", "write_datasets_csv"]
