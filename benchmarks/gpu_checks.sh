#!/usr/bin/env bash
# The checks that need a GPU, as two commands that together fit a session's 15 minutes of a lent GPU
# machine, its start included: command 1 (at most 550 s) first, command 2 (about 200 s) at once after it,
# while the machine is still warm. Every step runs under its own `timeout`, and each step prints its
# result line (`== NAME: ok, N s`, `FAILED`, `TIMED OUT`, `skipped: why`) as soon as it ends, so that a
# command cut short still reports what it did.
#
#     bash benchmarks/gpu_checks.sh 1 LOG_DIR [SHAKESPEARE_RAW]   # CUDA tests, LSTM rounds, calibration, Shakespeare curve
#     bash benchmarks/gpu_checks.sh 2 LOG_DIR [SENT140_H5]        # CNN rounds, Sent140 FedAvg end to end
#     GPU_CHECKS_DRY=1 bash benchmarks/gpu_checks.sh 1|2 LOG_DIR [...]   # the same steps on the CPU, tiny
#
# Command 1: the CUDA tests (tests/test_cuda.py: graphed LSTM rounds against eager, captures kept across
# rounds, a graphed run resumed, CUDA against CPU, the CNNs stacked against the CPU), the paper-sized LSTM
# rounds graphed against eager (Sent140 at E = 20 with the GPU's busy share, Shakespeare at E = 1), the
# cost calibration on this GPU (LOG_DIR/cost_calibration.json: copy it to <results_dir>/benchmarks/ and
# `snakemake -n --configfile config/paper.yaml` prints the LSTM panels' cost on that GPU), the first
# Shakespeare curve (LEAF's Shakespeare built there from SHAKESPEARE_RAW, the Gutenberg 1994 text, then
# FedAvg at config/paper.yaml's setting, K = 10, E = 1, for as many of its 40 rounds as fit:
# LOG_DIR/shakespeare_fedavg_metrics.csv), and last Shakespeare's busy share on a smaller round (profiling
# a paper-sized one outran 110 s).
# Command 2: a CNN round (benchmarks/cnn_round.py, LEAF's CNN and LeNet-5, K = 10): the stacked rule
# against one device at a time against a hand-written nn.Module loop; then Sent140 FedAvg end to end
# through `python -m fedsim train` at the paper's Figure 1 setting (lr 0.3, B = 10, K = 10, E = 20,
# metrics on 100 devices) for as many of its 800 rounds as fit (GPU_CHECKS_E2E_SECONDS of training,
# default 50).
#
# A training step stops at its time limit at a round boundary (SIGTERM: fedsim saves its checkpoint there)
# and its metrics CSV is written from the checkpoint's rows (by the run itself, had it finished).
#
# SHAKESPEARE_RAW (command 1): gutenberg-100-1994.txt.gz (or LEAF's 1994-01-100.zip). The GPU machine
# gets only the checkout: copy the file into a folder the checkout ignores (.gpu_data/, listed in
# .git/info/exclude) and carry that folder. Without it the curve step is skipped and says why.
# SENT140_H5 (command 2): a real Sent140 dataset file, relative to this checkout or absolute. A real one
# cannot be built on the GPU machine or in this workplace (`fedsim prepare-sent140` needs Sentiment140's
# 81 MB zip and GloVe 6B's 862 MB, neither in ../shared/data): it is made where both are at hand,
#     python -m fedsim prepare-sent140 --raw trainingandtestdata.zip --glove glove.6B.zip \
#         --fraction 0.3 --min-samples 30 --train-fraction 0.8 --out sent140.h5
# and it holds only the GloVe rows its tweets use, so it should stay under the 64 MiB a call carries.
# Without it, the step builds a STAND-IN of the same shapes there (benchmarks/sent140_standin.py: 772
# devices, sample counts from the paper's table, 25 ids a tweet, a 400,000 x 300 random embedding): its
# time is real and its curve is not, and the step's header, result line and log say so.
#
# Dry mode (GPU_CHECKS_DRY=1, tests/test_gpu_checks.py): every step of the command on the CPU, each under
# ten times its limit (a hang guard: a slow CI machine fails no step), with tiny sizes (2 devices of ~4 samples, 1 epoch, 1 repeat; the CUDA tests only collected; the calibration at
# one step and a tenth of its gradient rows; the stand-in with a 4,000-word embedding; the training runs
# on 2 devices a round, stopped at their round-2 boundary as the time limit would stop them), so that a
# typo fails here and not on the GPU.
#
# Runs from a checkout with the machine's own torch (no install: src/ and tests/ go on PYTHONPATH;
# snakemake and jsonschema are not needed by these steps). Writes LOG_DIR/gpu_checks_<command>.log too;
# data it builds go to a temporary folder, removed at the end.
# The exit status is the number of steps that failed or timed out (0: all ok or skipped).
set -uo pipefail
usage="usage: [GPU_CHECKS_DRY=1] bash benchmarks/gpu_checks.sh 1 LOG_DIR [SHAKESPEARE_RAW] | 2 LOG_DIR [SENT140_H5]"
part=${1:-}
log_dir=${2:-}
input=${3:-}
if [[ $part != [12] || -z $log_dir ]]; then echo "$usage" >&2; exit 2; fi
[ -n "$input" ] && input=$(realpath -m "$input")  # before the cd below: relative to where it was called
mkdir -p "$log_dir"
log_dir=$(realpath "$log_dir")
cd "$(dirname "$0")/.."
work=$(mktemp -d)  # the datasets built here: gigabytes on the GPU, not to come back in LOG_DIR
trap 'rm -rf "$work"' EXIT
export PYTHONPATH=$PWD/src:$PWD/tests PYTHONUNBUFFERED=1
exec > >(tee "$log_dir/gpu_checks_$part.log") 2>&1

dry=${GPU_CHECKS_DRY:-0}
device=cuda
small=()  # appended to a benchmark's arguments in dry mode: its last --device, --clients, ... win
scale=1  # dry: every time limit x 10, a guard against a hang only (a slow or loaded CPU fails no step)
if [ "$dry" = 1 ]; then
    device=cpu
    scale=10
    small=(--device cpu --clients 2 --samples 4 --epochs 1 --repeats 1)
fi
failed=0

begin() {  # begin NAME SECONDS
    echo
    echo "== $1 (at most $2 s, $(date -u +%H:%M:%S))"
}

report() {  # report NAME STATUS SECONDS LIMIT: the step's result line
    case $2 in
        0) echo "== $1: ok, $3 s" ;;
        124 | 137) echo "== $1: TIMED OUT at $4 s"; failed=$((failed + 1)) ;;
        *) echo "== $1: FAILED (exit $2), $3 s"; failed=$((failed + 1)) ;;
    esac
}

skip() {  # skip NAME SECONDS WHY
    begin "$1" "$2"
    echo "== $1: skipped: $3"
}

check() {  # check NAME SECONDS COMMAND...: COMMAND under `timeout SECONDS`, then its result line
    local name=$1 limit=$2 start=$SECONDS status
    shift 2
    begin "$name" "$limit"
    timeout $((limit * scale)) "$@"
    status=$?
    report "$name" "$status" $((SECONDS - start)) "$limit"
}

machine() {
    check "machine" 15 python3 - << 'EOF'
import os, shutil, subprocess, sys

import h5py, numba, numpy, torch

if shutil.which("nvidia-smi"):
    subprocess.run(["nvidia-smi", "-L"], check=False)
print(f"python {sys.version.split()[0]} | torch {torch.__version__} | numba {numba.__version__} | numpy "
      f"{numpy.__version__} | h5py {h5py.__version__} | CUDA {torch.cuda.is_available()} "
      f"{torch.cuda.get_device_name() if torch.cuda.is_available() else ''} | {os.cpu_count()} CPU cores")
EOF
}

command_1() {  # 15 + 100 + 55 + 80 + 60 + 180 + 60 = 550 s
    machine
    local collect=()
    [ "$dry" = 1 ] && collect=(--collect-only -n 0)
    check "CUDA tests: graphed LSTM rounds against eager, captures kept, a graphed run resumed, CUDA against CPU" \
        100 python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_cuda.py "${collect[@]}"
    check "Sent140 round at the paper's size (K=10, E=20): graphed (batched) against eager, the GPU's busy share" \
        55 python3 benchmarks/lstm_round.py --device cuda --datasets sent140 --engines batched eager --repeats 2 \
        --busy "${small[@]}"
    check "Shakespeare at the paper's sizes, E=1: graphed against eager (a paper round at E=20: 20x the graphed one)" \
        80 python3 benchmarks/lstm_round.py --device cuda --datasets shakespeare --epochs 1 --engines batched eager \
        "${small[@]}"
    local fedsim=(python3 -m fedsim) steps=()
    if [ "$dry" = 1 ]; then  # the same command, its full gradients over 20 rows a device instead of 200
        local shrunk="import sys; from fedsim import cli; from fedsim.planning import calibration; calibration.GRAD_BATCH = 5; sys.exit(cli.main())"
        fedsim=(python3 -c "$shrunk")
        steps=(--steps 1)
    fi
    check "cost calibration on this GPU (the workflow's estimate: <results_dir>/benchmarks/cost_calibration.json)" \
        60 "${fedsim[@]}" cost --calibrate --device "$device" --out "$log_dir/cost_calibration.json" "${steps[@]}"
    shakespeare_curve
    check "Shakespeare's GPU busy share, E=1, ~300 samples a device (a profiled paper-sized round outruns a step)" \
        60 python3 benchmarks/lstm_round.py --device cuda --datasets shakespeare --epochs 1 --samples 300 \
        --engines batched --busy "${small[@]}"
}

shakespeare_curve() {  # 20 s to build, then 130 s of FedAvg (+ 30 s to end its round and read its metrics)
    local name="Shakespeare FedAvg (config/paper.yaml: lr 0.8, B=10, K=10, E=1), as many of 40 rounds as fit"
    if [ -z "$input" ]; then
        skip "$name" 180 "no Shakespeare text given (the third argument; see this script's header)"
        return
    elif [ ! -f "$input" ]; then
        skip "$name" 180 "$input is not a file (see this script's header for what to provide)"
        return
    fi
    check "LEAF's Shakespeare built from $(basename "$input") (niid, fraction 0.2, split 0.8, seed 0)" 20 \
        python3 -m fedsim prepare-shakespeare --raw "$input" --out "$work/shakespeare.h5"
    [ -f "$work/shakespeare.h5" ] || return
    train_end_to_end "$name" shakespeare_fedavg "$work/shakespeare.h5" 130 40 \
        --lr 0.8 --epochs 1 --eval-devices 25
}

command_2() {  # 15 + 45 + 35 + 25 + GPU_CHECKS_E2E_SECONDS + 30 = 200 s at the default 50
    machine
    cnn_round cnn 45
    cnn_round lenet5 35
    sent140_end_to_end
}

cnn_round() {  # cnn_round MODEL SECONDS
    check "$1 round (K=10, E=1): stacked against one device at a time against a hand-written nn.Module loop" "$2" \
        python3 benchmarks/cnn_round.py --device cuda --model "$1" --clients 10 --engines stacked single torch \
        --repeats 2 "${small[@]}"
}

sent140_end_to_end() {
    local name="Sent140 FedAvg end to end at Figure 1's setting, as many of 800 rounds as fit" data=$input
    if [ -z "$data" ]; then
        name="$name, on a STAND-IN (random values of the real shapes: its time is real, its curve is not)"
        data=$work/sent140_standin.h5
        local vocab=400000
        [ "$dry" = 1 ] && vocab=4000
        check "Sent140 stand-in built (772 devices, 25 ids a tweet, a $vocab x 300 random embedding)" 25 \
            python3 benchmarks/sent140_standin.py "$data" --vocab $vocab
        [ -f "$data" ] || return
    elif [ ! -f "$data" ]; then
        skip "$name" 90 "$data is not a file (see this script's header for what to provide)"
        return
    fi
    train_end_to_end "$name" sent140_fedavg "$data" "${GPU_CHECKS_E2E_SECONDS:-50}" 800 \
        --lr 0.3 --epochs 20 --eval-devices 100
}

train_end_to_end() {  # train_end_to_end NAME RUN DATA SECONDS ROUNDS ARGS...: FedAvg, K = 10, B = 10
    local name=$1 run=$log_dir/$2 data=$3 seconds=$4 rounds=$5 hold= start=$SECONDS status
    shift 5
    local args=("$@" --clients-per-round 10)
    [ "$dry" = 1 ] && { args+=(--clients-per-round 2 --epochs 1 --eval-devices 2); hold=$run.hold; echo 2 > "$hold"; }
    rm -f "$run.ckpt" "${run}_metrics.csv"
    begin "$name" $((seconds + 30))
    FEDSIM_HOLD_FILE=$hold timeout -k $((20 * scale)) $((seconds * scale)) python3 -m fedsim train --data "$data" --method fedavg \
        --batch-size 10 --rounds "$rounds" "${args[@]}" --device "$device" --checkpoint "$run.ckpt" \
        --checkpoint-every 1 --checkpoint-seconds 0 --progress-seconds 30 --metrics "${run}_metrics.csv" \
        --info "${run}_run.json" &
    local pid=$!
    if [ -n "$hold" ]; then  # held at round 2: stopped there once round 1's checkpoint is saved, as a time limit would
        while [ ! -e "$run.ckpt" ] && kill -0 "$pid" 2> /dev/null; do sleep 0.2; done
        kill -TERM "$pid" 2> /dev/null
    fi
    wait "$pid"
    status=$?
    [ -n "$hold" ] && rm -f "$hold"
    echo "training ended with exit status $status (0: every round; 124, 143: stopped at a round boundary by its limit)"
    case $status in  # a run stopped by its limit is this step's expected end: its metrics are in the checkpoint
        0 | 124 | 137 | 143) run_metrics "$run" $((SECONDS - start)) "$name"; status=$? ;;
    esac
    rm -f "$run.ckpt"
    report "$name" $status $((SECONDS - start)) $((seconds + 30))
}

run_metrics() {  # run_metrics RUN SECONDS NAME: RUN_metrics.csv (from the checkpoint where the run was stopped), summed up
    timeout $((10 * scale)) python3 - "${1}_metrics.csv" "$1.ckpt" "$2" "$3" << 'EOF'
import sys
from pathlib import Path

import pandas as pd
import torch

metrics, checkpoint, seconds, name = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if not metrics.exists():  # stopped by its time limit: the rows its last checkpoint holds
    pd.DataFrame(torch.load(checkpoint, weights_only=True)["rows"]).to_csv(metrics, index=False)
rows = pd.read_csv(metrics)
done = int(rows["round"].iloc[-1])
print(f"{name}: metrics of {done} rounds in {metrics} ({seconds} s with start-up and metrics: "
      f"{seconds / max(done, 1):.2f} s a round); train loss {rows.train_loss.iloc[0]:.4f} -> "
      f"{rows.train_loss.iloc[-1]:.4f}, test accuracy {rows.test_acc.iloc[0]:.4f} -> {rows.test_acc.iloc[-1]:.4f}")
EOF
}

echo "gpu_checks command $part on $device$([ "$dry" = 1 ] && echo ' (dry: tiny sizes)'), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
"command_$part"
echo
echo "== done: $failed step(s) failed or timed out"
exit $failed
