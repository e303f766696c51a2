"""Code the test files share; no tests here. A test file imports it as `from helpers.workflow import
snakemake` (pytest puts tests/ on sys.path, as it does for tiny.py, methods_common.py and
slurm_cluster.py beside this folder). No test file imports another test_*.py file.

- workflow.py:     run Snakemake on a temporary copy of the workflow; the config check in-process
- leaf_files.py:   small raw LEAF inputs in their real formats (Gutenberg, Sentiment140, GloVe, NIST, LEAF JSON)
- http_server.py:  a loopback HTTP server (the `server` fixture) that serves files, or cuts them short
- tiny_lstm.py:    tiny LSTM models, devices and LEAF-format dataset files
- run_records.py:  hand-made run records (metrics.csv + run.json) without training
- hdf5_damage.py:  damage a dataset file behind HDF5's back
"""
