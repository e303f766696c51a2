#!/usr/bin/env bash
# The checks that need a GPU, as one script (issue 40: the LSTM steps as CUDA graphs), each bounded in
# time so that the whole fits a 15-minute lease with the machine's start (about 10 minutes of steps):
# the CUDA tests (graphed against eager rounds, a resume), the paper-sized LSTM rounds graphed against
# eager with the GPU's busy share, a short Shakespeare run end to end through `python -m fedsim
# train`, and the cost calibration on this GPU.
#
#     bash benchmarks/gpu_checks.sh [LOG_DIR] [SHAKESPEARE_RAW]
#
# Runs from a checkout with the machine's own torch (no install: src/ and tests/ go on PYTHONPATH;
# snakemake and jsonschema are not needed by these files). Writes LOG_DIR/gpu_checks.log and
# LOG_DIR/cost_calibration.json (copy it to <results_dir>/benchmarks/ here and `snakemake -n
# --configfile config/paper.yaml` prints the paper's LSTM panels' cost on that GPU).
# SHAKESPEARE_RAW: the 1994 e-book (zip, 100.txt or .gz) for the end-to-end run; skipped without it.
# From the device tool: copy ../shared/data/shakespeare/gutenberg-100-1994.txt.gz into resources/raw/,
# carry resources/raw, and pass resources/raw/gutenberg-100-1994.txt.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
log_dir=${1:-.}
raw=${2:-}
mkdir -p "$log_dir"
export PYTHONPATH=$PWD/src:$PWD/tests PYTHONUNBUFFERED=1
exec > >(tee "$log_dir/gpu_checks.log") 2>&1

step() { echo; echo "== $* ($(date -u +%H:%M:%S))"; }

step machine
nvidia-smi -L
python3 -c "import torch, numba, numpy, h5py; print('python', __import__('sys').version.split()[0], '| torch',
torch.__version__, '| numba', numba.__version__, '| numpy', numpy.__version__, '| h5py', h5py.__version__,
'| cuda', torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
nproc

step "CUDA tests: graphed LSTM rounds against eager (float32, float64), a graphed run resumed, CUDA against CPU"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_engine.py

step "Sent140 round at the paper's size (K=10, E=20): graphed (batched) against eager, the GPU's busy share"
timeout 120 python3 benchmarks/lstm_round.py --device cuda --datasets sent140 --engines batched eager --repeats 2 --busy

step "Shakespeare at the paper's sizes, E=1: graphed against eager (the eager round ~40 s), busy share"
timeout 150 python3 benchmarks/lstm_round.py --device cuda --datasets shakespeare --epochs 1 --engines batched eager \
    --busy

step "Shakespeare round at the paper's size (K=10, E=20), graphed: the issue's bound is 60 s"
timeout 150 python3 benchmarks/lstm_round.py --device cuda --datasets shakespeare --engines batched

if [ -n "$raw" ]; then
    step "a Shakespeare run end to end on CUDA: the paper's Figure 1 setting, 2 rounds (seconds a round vs the benchmark's)"
    timeout 120 python3 -m fedsim prepare-shakespeare --raw "$raw" --out "$log_dir/shakespeare.h5"
    timeout 240 python3 -m fedsim train --data "$log_dir/shakespeare.h5" --method feddane --mu 0.001 \
        --clients-per-round 10 --epochs 20 --batch-size 10 --lr 0.8 --rounds 2 --device cuda --eval-devices 25 \
        --metrics "$log_dir/e2e_metrics.csv" --info "$log_dir/e2e_run.json"
    python3 -c "import json, sys; r = json.load(open(sys.argv[1]))['result']; print('end to end:',
{k: r[k] for k in ('wall_seconds', 'local_sgd_seconds', 'evaluation_seconds')}, 'local SGD s/round',
r['local_sgd_seconds'] / 2)" "$log_dir/e2e_run.json"
    rm -f "$log_dir/shakespeare.h5"
fi

step "cost calibration on this GPU (the workflow's estimate: <results_dir>/benchmarks/cost_calibration.json)"
timeout 150 python3 -m fedsim cost --calibrate --device cuda --out "$log_dir/cost_calibration.json"

step done
