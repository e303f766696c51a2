#!/usr/bin/env bash
# The checks that need a GPU, as two commands that each fit one call of a lent GPU machine (at most 600 s a
# command, 15 minutes in all with the machine's start): every step runs under its own `timeout`, a
# command's timeouts add up to 540 s, and each step prints its result line (`== NAME: ok, N s`, `FAILED`,
# `TIMED OUT`, `skipped: why`) as soon as it ends, so that a command cut short still reports what it did.
#
#     bash benchmarks/gpu_checks.sh 1 LOG_DIR                # machine, CUDA tests, LSTM rounds, cost calibration
#     bash benchmarks/gpu_checks.sh 2 LOG_DIR [SENT140_H5]   # machine, CNN rounds, Sent140 FedAvg end to end
#     GPU_CHECKS_DRY=1 bash benchmarks/gpu_checks.sh 1|2 LOG_DIR [SENT140_H5]   # the same steps on the CPU, tiny
#
# Command 1: the CUDA tests (tests/test_cuda.py: graphed LSTM rounds against eager, captures kept across
# rounds, a graphed run resumed, CUDA against CPU; tests/test_engine.py), the paper-sized LSTM rounds
# graphed against eager with the GPU's busy share (Sent140 at E = 20, Shakespeare at E = 1, then one
# graphed Shakespeare round at E = 20, the issue's bound 60 s: last, the step most likely to be cut),
# and the cost calibration on this GPU (LOG_DIR/cost_calibration.json: copy it to
# <results_dir>/benchmarks/ and `snakemake -n --configfile config/paper.yaml` prints the LSTM panels' cost
# on that GPU).
# Command 2: a CNN round (benchmarks/cnn_round.py, LEAF's CNN and LeNet-5, K = 10): the stacked rule
# against one device at a time against a hand-written nn.Module loop; then Sent140 FedAvg end to end
# through `python -m fedsim train` at the paper's Figure 1 setting (config/paper.yaml: lr 0.3, B = 10,
# K = 10, E = 20, metrics on 100 devices) for as many of its 800 rounds as fit: at its time limit the run
# stops at a round boundary (SIGTERM: fedsim saves its checkpoint there) and LOG_DIR/sent140_fedavg_metrics.csv
# is written from the checkpoint's rows (by the run itself, had it finished).
#
# SENT140_H5 (command 2): the Sent140 dataset file, relative to this checkout or absolute; without it
# the end-to-end step is skipped and says why. It cannot be built on the GPU machine or in this
# workplace: `fedsim prepare-sent140` needs Sentiment140's trainingandtestdata.zip (81 MB) and GloVe
# 6B (glove.6B.zip, 862 MB), neither of which is in ../shared/data, and the GPU machine reaches no
# network. A smaller GloVe does not help: the raw zip alone is over the 64 MiB a call carries, the
# 50-d GloVe text is about 170 MB (roughly 70 MB gzipped), and it changes the model (the paper's LSTM
# reads 300-d vectors). What a person must provide: the built file, made where both downloads are at hand,
#     python -m fedsim prepare-sent140 --raw trainingandtestdata.zip --glove glove.6B.zip \
#         --fraction 0.3 --min-samples 30 --train-fraction 0.8 --out sent140.h5
# (or the workflow's sent140 dataset of config/paper.yaml): it holds only the GloVe rows its tweets use
# (each 300 float32s) and 25 ids a tweet, so it should stay under the 64 MiB a call carries: check its
# size; put it in an ignored folder of the checkout (resources/raw/, say), carry that folder, and pass
# its path.
#
# Dry mode (GPU_CHECKS_DRY=1, tests/test_gpu_checks.py): every step of the command on the CPU with tiny
# sizes (2 devices of ~4 samples, 1 epoch, 1 repeat; the CUDA tests only collected; the calibration at
# one step and a tenth of its gradient rows; the end-to-end run on whatever Sent140-format file is given,
# 2 devices a round, stopped at its round-2 boundary as the time limit would stop it), so that a typo
# fails here and not on the GPU.
#
# Runs from a checkout with the machine's own torch (no install: src/ and tests/ go on PYTHONPATH;
# snakemake and jsonschema are not needed by these steps). Writes LOG_DIR/gpu_checks_<command>.log too.
# The exit status is the number of steps that failed or timed out (0: all ok or skipped).
set -uo pipefail
usage="usage: [GPU_CHECKS_DRY=1] bash benchmarks/gpu_checks.sh 1|2 LOG_DIR [SENT140_H5]"
part=${1:-}
log_dir=${2:-}
sent140=${3:-}
if [[ $part != [12] || -z $log_dir ]]; then echo "$usage" >&2; exit 2; fi
cd "$(dirname "$0")/.."
mkdir -p "$log_dir"
export PYTHONPATH=$PWD/src:$PWD/tests PYTHONUNBUFFERED=1
exec > >(tee "$log_dir/gpu_checks_$part.log") 2>&1

dry=${GPU_CHECKS_DRY:-0}
device=cuda
small=()  # appended to a benchmark's arguments in dry mode: its last --device, --clients, ... win
if [ "$dry" = 1 ]; then
    device=cpu
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

check() {  # check NAME SECONDS COMMAND...: COMMAND under `timeout SECONDS`, then its result line
    local name=$1 limit=$2 start=$SECONDS status
    shift 2
    begin "$name" "$limit"
    timeout "$limit" "$@"
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

command_1() {  # 15 + 210 + 60 + 100 + 65 + 90 = 540 s
    machine
    local collect=()
    [ "$dry" = 1 ] && collect=(--collect-only -n 0)
    check "CUDA tests: graphed LSTM rounds against eager, captures kept, a graphed run resumed, CUDA against CPU" \
        210 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_engine.py "${collect[@]}"
    check "Sent140 round at the paper's size (K=10, E=20): graphed (batched) against eager, the GPU's busy share" \
        60 python3 benchmarks/lstm_round.py --device cuda --datasets sent140 --engines batched eager --repeats 2 \
        --busy "${small[@]}"
    check "Shakespeare at the paper's sizes, E=1: graphed against eager, busy share" \
        100 python3 benchmarks/lstm_round.py --device cuda --datasets shakespeare --epochs 1 --engines batched eager \
        --busy "${small[@]}"
    local fedsim=(python3 -m fedsim) steps=()
    if [ "$dry" = 1 ]; then  # the same command, its full gradients over 20 rows a device instead of 200
        local shrunk="import sys; from fedsim import calibration, cli; calibration.GRAD_BATCH = 5; sys.exit(cli.main())"
        fedsim=(python3 -c "$shrunk")
        steps=(--steps 1)
    fi
    check "cost calibration on this GPU (the workflow's estimate: <results_dir>/benchmarks/cost_calibration.json)" \
        65 "${fedsim[@]}" cost --calibrate --device "$device" --out "$log_dir/cost_calibration.json" "${steps[@]}"
    check "Shakespeare round at the paper's size (K=10, E=20), graphed: the issue's bound is 60 s" \
        90 python3 benchmarks/lstm_round.py --device cuda --datasets shakespeare --engines batched "${small[@]}"
}

command_2() {  # 15 + 90 + 75 + 360 = 540 s
    machine
    cnn_round cnn 90
    cnn_round lenet5 75
    sent140_end_to_end
}

cnn_round() {  # cnn_round MODEL SECONDS
    check "$1 round (K=10, E=1): stacked against one device at a time against a hand-written nn.Module loop" "$2" \
        python3 benchmarks/cnn_round.py --device cuda --model "$1" --clients 10 --engines stacked single torch \
        --repeats 3 "${small[@]}"
}

sent140_end_to_end() {  # 330 s of training, up to 20 s to end its round at the signal, 10 s to read its metrics
    local name="Sent140 FedAvg end to end at Figure 1's setting, as many of 800 rounds as fit"
    if [ -z "$sent140" ]; then
        begin "$name" 360
        echo "== $name: skipped: no Sent140 dataset file given (the third argument; see this script's header)"
        return
    elif [ ! -f "$sent140" ]; then
        begin "$name" 360
        echo "== $name: skipped: $sent140 is not a file (see this script's header for what to provide)"
        return
    fi
    local run=$log_dir/sent140_fedavg clients=10 epochs=20 eval=100 hold= start=$SECONDS status
    [ "$dry" = 1 ] && { clients=2; epochs=1; eval=2; hold=$run.hold; echo 2 > "$hold"; }
    rm -f "$run.ckpt" "${run}_metrics.csv"
    begin "$name" 360
    FEDSIM_HOLD_FILE=$hold timeout -k 20 330 python3 -m fedsim train --data "$sent140" --method fedavg \
        --clients-per-round $clients --epochs $epochs --batch-size 10 --lr 0.3 --eval-devices $eval --rounds 800 \
        --device "$device" --checkpoint "$run.ckpt" --checkpoint-every 1 --checkpoint-seconds 0 \
        --progress-seconds 30 --metrics "${run}_metrics.csv" --info "${run}_run.json" &
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
        0 | 124 | 137 | 143) run_metrics "$run" $((SECONDS - start)); status=$? ;;
    esac
    rm -f "$run.ckpt"
    report "$name" $status $((SECONDS - start)) 360
}

run_metrics() {  # run_metrics RUN SECONDS: RUN_metrics.csv (from the checkpoint where the run was stopped), summed up
    timeout 10 python3 - "${1}_metrics.csv" "$1.ckpt" "$2" "$dry" << 'EOF'
import sys
from pathlib import Path

import pandas as pd
import torch

metrics, checkpoint, seconds, dry = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
if not metrics.exists():  # stopped by its time limit: the rows its last checkpoint holds
    pd.DataFrame(torch.load(checkpoint, weights_only=True)["rows"]).to_csv(metrics, index=False)
rows = pd.read_csv(metrics)
done = int(rows["round"].iloc[-1])
print(f"Sent140 FedAvg: metrics of {done} rounds in {metrics} ({seconds} s with start-up and metrics: "
      f"{seconds / max(done, 1):.2f} s a round); train loss {rows.train_loss.iloc[0]:.4f} -> "
      f"{rows.train_loss.iloc[-1]:.4f}, test accuracy {rows.test_acc.iloc[0]:.4f} -> {rows.test_acc.iloc[-1]:.4f}")
if done < 100 and not dry:
    print(f"fewer rounds than the 100 asked for: {done}")
EOF
}

echo "gpu_checks command $part on $device$([ "$dry" = 1 ] && echo ' (dry: tiny sizes)'), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
"command_$part"
echo
echo "== done: $failed step(s) failed or timed out"
exit $failed
