#!/usr/bin/env bash
# The checks that need a GPU, as one script: the CUDA tests, then the GPU benchmarks (the MCLR
# round's engines and the LSTM rounds), each bounded in time so that the whole fits a short lease.
#
#     bash benchmarks/gpu_checks.sh [LOG_DIR]
#
# Runs from a checkout with the machine's own torch (no install: src/ and tests/ go on PYTHONPATH;
# snakemake and jsonschema are not needed by these files). Writes LOG_DIR/gpu_checks.log.
set -uo pipefail
cd "$(dirname "$0")/.."
log_dir=${1:-.}
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

step "CUDA tests (and the vector kernel's tests on this CPU)"
timeout 180 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_simd.py tests/test_engine.py \
    tests/test_shuffle.py

step "MCLR round on CUDA: the batched engine, the per-device loop and the torch oracle"
timeout 100 python3 benchmarks/round_time.py --device cuda --rounds 3 --repeats 3

step "LSTM rounds on CUDA: Sent140 at the paper's size (K=10, E=20); Shakespeare at E=1 (the loop at ~300 samples)"
timeout 100 python3 benchmarks/lstm_round.py --device cuda --datasets sent140 --repeats 2
timeout 100 python3 benchmarks/lstm_round.py --device cuda --datasets shakespeare --epochs 1 --engines batched
timeout 120 python3 benchmarks/lstm_round.py --device cuda --datasets shakespeare --epochs 1 --samples 300

step "the same machine's CPU (all its threads), batched"
timeout 60 python3 benchmarks/lstm_round.py --device cpu --threads "$(nproc)" --datasets sent140 --engines batched
timeout 60 python3 benchmarks/lstm_round.py --device cpu --threads "$(nproc)" --datasets shakespeare --epochs 1 \
    --samples 300 --engines batched

step done
