"""The cost model's constants measured on this machine (`python -m fedsim cost --calibrate`).

fedsim.planning.cost is the planning arithmetic, torch-free because the workflow imports it at every
snakemake call; measuring its constants runs the real LSTMs through the batched engine, so it
lives here, imported only by the command that asks for it (and benchmarks/lstm_round.py).
"""

from __future__ import annotations

import json
import time

import numpy as np
import torch

from ..kinds import KINDS
from .cost import DEFAULTS, GRAD_BATCH, GRAD_BATCHES
from ..core.engine import Clients, SGDSettings, local_sgd_batched
from ..models.char_lstm import CharLSTM
from ..models.sent140_lstm import Sent140LSTM
from ..methods import LocalProblem


def calibrate(kinds=tuple(DEFAULTS), steps: int = 4, repeats: int = 2, log=print, device: str = "cpu") -> dict:
    """Measure the constants on this machine, one torch thread: a few batched SGD steps of the real
    models at 1 and 4 devices (step_s, row_s from the two), a chunked evaluation (eval_row_s) and
    full local gradients (grad_row_s), on random inputs in each dataset's format. On the CPU, CPU
    time, the best of `repeats`: on an idle machine the same as the wall clock, and on a shared one
    still what a job costs a core (the wall clock there depends on the neighbours). On CUDA, the
    wall clock to the GPU's last kernel, after one untimed call (the step's CUDA graph captured, the
    libraries' handles made). The result names the device it was measured on (`device`)."""
    torch.set_num_threads(1)
    on = torch.device(device)
    batch = 10
    out = {}
    for kind in kinds:
        rng = np.random.default_rng(0)
        if KINDS[kind].default_model == "char_lstm":
            model, vocab, eval_n = CharLSTM(), 80, 410  # one evaluation chunk
        else:
            vocab, eval_n = 5000, 3000
            model = Sent140LSTM(torch.from_numpy(rng.normal(size=(vocab + 1, 300)).astype(np.float32)).to(on))
        params = model.init(torch.Generator().manual_seed(0)).to(on)

        def data(devices, size):
            n = devices * size
            x = torch.from_numpy(rng.integers(0, vocab, (n, model.seq_len)).astype(np.int32))
            y = torch.from_numpy(rng.integers(0, model.num_classes, n))
            return Clients.from_arrays(x.to(on), y.to(on), np.arange(devices + 1) * size)

        def best(fn):  # CPU seconds (one thread): what a core-hour counts, and steady on a shared machine
            if on.type == "cuda":
                return best_wall(fn)
            times = []
            for _ in range(repeats):
                start = time.process_time()
                fn()
                times.append(time.process_time() - start)
            return min(times)

        def best_wall(fn):
            fn()
            times = []
            for _ in range(repeats):
                torch.cuda.synchronize(on)
                start = time.perf_counter()
                fn()
                torch.cuda.synchronize(on)
                times.append(time.perf_counter() - start)
            return min(times)

        settings = SGDSettings(lr=0.1, epochs=1, batch_size=batch, seed=0)
        problem = LocalProblem(mu=0.0, correction=None)
        timed = {}
        for k in (1, 4):
            clients = data(k, steps * batch)
            timed[k] = best(lambda: local_sgd_batched(model, params, problem, clients, np.arange(k), settings, 0))
        row_s = max(0.0, (timed[4] - timed[1]) / (steps * 3 * batch))
        step_s = max(0.0, timed[1] / steps - row_s * batch)
        clients = data(1, eval_n)
        eval_row_s = best(lambda: model.stats(params, clients.x[:-1], clients.y[:-1])) / eval_n
        clients = data(4, GRAD_BATCH * GRAD_BATCHES)
        grad_row_s = best(lambda: model.device_grads(params, clients.x[:-1], clients.y[:-1], clients.offsets)) / (
            4 * GRAD_BATCH * GRAD_BATCHES)
        out[kind] = {"step_s": step_s, "row_s": row_s, "eval_row_s": eval_row_s, "grad_row_s": grad_row_s}
        log(f"{kind}: {json.dumps({k: float(f'{v:.4g}') for k, v in out[kind].items()})} "
            f"(1 device: {timed[1] / steps:.4f} s/step, 4 devices: {timed[4] / steps:.4f} s/step)")
    out["device"] = f"cuda ({torch.cuda.get_device_name(on)})" if on.type == "cuda" else "cpu"
    return out
