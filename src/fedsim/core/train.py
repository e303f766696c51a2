"""One federated training run: a pure function of (RunConfig, dataset file, seed).

Protocol (the reference code's, with the paper's text as options):
- selection `uniform`: K devices uniformly without replacement, models averaged with
  weights n_k (reference code); `weighted`: K draws with replacement with probability
  p_k = n_k / n, plain mean (the paper's text);
- the selection of round t depends only on (seed, t), so every method sees the same
  devices in the same round (a paired comparison, as the reference's re-seeding gives);
- FedDANE's solving subset S'_t is drawn independently of S_t (`second_subset:
  independent`, Algorithm 2 of the paper) or equals it (`same`, the reference code);
- a method's own settings are its `options` (fedsim.methods: each method declares them; FedDANE's
  `correction` is the paper's g_t - grad F_k(w^{t-1}) or what the authors' code computed);
  `method` may name a variant (feddane_authors), which the config turns into method + options;
- a method's state (SCAFFOLD's control variates, ...) is checkpointed with the model
  (fedsim.core.checkpoint: the file, when it is written, whose settings it holds);
- `rng: authors` replaces fedsim's draws by the authors' (selection seeded by the round, their
  compounding mini-batch shuffle: fedsim.core.authors); `init` loads an initial model from a file;
- metrics row t describes the global model after t rounds (row 0: the initial model);
- a non-finite training loss or weight ends the run at that round: the run is recorded as
  diverged there, with every metric so far, and why (`diverged_reason`): at round 0, before any
  training, the data (or the initial model) are at fault, not the method (DIVERGED_REASONS);
- `theory: true` adds Theorem 1's constants to every round's metrics (fedsim.core.theory measures them).

The settings themselves (RunConfig: each field's meaning, range and role) are declared in
fedsim.core.settings; train re-exports RunConfig.

Threads: the numerics (local SGD, gradients, metrics) always run on one torch thread. torch's
CPU kernels round differently with the thread count (MKL GEMMs, softmax over a non-last
dimension: measured), and these small per-step ops are slower on two threads than on one.
`threads` serves the data copies at load time, which are exact at any thread count.

How a run reads its dataset (the train split held or streamed round by round, the next round's
rows read ahead on a second thread, the metrics on a seeded sample of devices: `load`,
`eval_devices`) is fedsim.core.loading's; the loop below sees only RunData.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time

import numpy as np
import pandas as pd
import torch

from .. import __version__
from ..data.arrays import pool_refusal
from .checkpoint import Checkpoint
from .sources import run_code_digest
from ..data.format import FederatedDataset
from . import authors, shuffle
from .machine import environment, flushing, subnormals
from .engine import (ACCELERATORS, ENGINES, Clients, SGDSettings, accelerator_for, device_grads, local_samples,
                     local_steps)
from .loading import RunData, compute_device, torch_threads
from ..methods import ENTRIES, RoundContext, get_method, server_step, traffic, variant_of
from .metrics import COLUMNS, evaluate
from .. import models
from .records import COUNT_COLUMNS, read_run, write_run  # noqa: F401 (the run's files; fedsim.core.train.read_run as before)
from .settings import RunConfig, check_clients_per_round, check_participation, init_file
from .stopping import StopSignals, Stopped, hold_at_round_boundary
from .theory import THEORY_COLUMNS, LocalHessians, measure_theory

SELECTION_STREAM, SECOND_SUBSET_STREAM, INIT_STREAM, EVAL_STREAM = 10, 11, 12, 13
DTYPES = {"float32": torch.float32, "float64": torch.float64}
NUMPY_TYPES = {torch.float32: np.float32, torch.float64: np.float64}  # the same dtypes as numpy's scalar types
ON_CPU = ("epochs_done", "counts")  # run state that stays on the CPU whatever the device
DRAW_AHEAD = 16  # rounds whose devices are drawn together (every round of a method asking all devices shares one array)


def select_devices(seed: int, round_: int, stream: int, k: int, sizes: np.ndarray, selection: str) -> np.ndarray:
    rng = np.random.default_rng([seed, round_, stream])
    n = len(sizes)
    check_clients_per_round(k, n, selection)
    if selection == "weighted":
        return rng.choice(n, size=k, replace=True, p=sizes / sizes.sum())
    return np.sort(rng.choice(n, size=k, replace=False))


def check_machine(config: RunConfig) -> None:
    """Raise ValueError where this machine lacks what the run asks for: a GPU for device=cuda
    (RunConfig.validate checks the rest without torch)."""
    if config.device == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"bad run setting device='cuda': torch {torch.__version__} sees no CUDA device "
                         "(use cpu, or auto: a GPU where there is one)")


def eval_sample(count: int | None, num_devices: int, seed: int) -> np.ndarray | None:
    """The devices the metrics are computed on: a seeded sample, sorted; None for all."""
    if count is None or count >= num_devices:
        return None
    return np.sort(np.random.default_rng([seed, EVAL_STREAM]).choice(num_devices, size=count, replace=False))


def check_model(config: RunConfig, model, dtype: torch.dtype) -> None:
    """Raise ValueError where the run's settings do not fit the dataset's model."""
    if config.engine in ACCELERATORS and accelerator_for(model, compute_device(config.device).type) is None:
        takers = [m.label for m in models.REGISTRY.values() if config.engine in m.accelerators]
        raise ValueError(f"bad run setting engine={config.engine!r}: it runs {', '.join(takers)} models on the "
                         f"{ACCELERATORS[config.engine].device.upper()} (use auto or batched)")
    variant = variant_of(dataclasses.asdict(config))
    if ENTRIES[variant].mclr_only and not model.linear_softmax:
        raise ValueError(f"bad run setting method={variant!r} (options {config.options}): defined for the MCLR "
                         "models only")
    if config.init is not None:
        initial_params(config, model, dtype)
    if config.theory and not model.linear_softmax:
        raise ValueError("bad run setting theory=True: the theorems' constants are measured for the MCLR models only")
    if config.theory and get_method(config.method).local_solver is not None:
        raise ValueError(f"bad run setting theory=True: {config.method} solves no local problem the theorems describe")
    if config.theory and config.eval_every != 1:
        raise ValueError(f"bad run setting eval_every={config.eval_every}: theory=True measures every round")
    if config.theory and config.dissimilarity is False:
        raise ValueError("bad run setting dissimilarity=False: theory=True needs B's dissimilarity every round")


def run_data(config: RunConfig, dataset: FederatedDataset) -> RunData:
    """The run's view of its dataset (fedsim.core.loading), its model checked against the settings
    first: the loads may be long."""
    dtype = DTYPES[config.dtype]
    model = models.for_dataset(dataset, dtype, compute_device(config.device), config.model)
    check_model(config, model, dtype)
    return RunData(config, dataset, model, dtype, eval_sample(config.eval_devices, dataset.num_devices, config.seed))


def run(config: RunConfig, on_round=None, checkpoint: Checkpoint | None = None,
        stop: StopSignals | None = None, on_resume=None) -> tuple[pd.DataFrame, dict]:
    """Train; return the per-round metrics and the run's record (config, result, provenance).

    `on_round(row)`, if given, is called with each round's metrics as they are computed
    (progress, timing). With a `checkpoint`, the run continues from the saved round when
    there is one (`on_resume(round)`, if given, is called with that round before any other), and saves
    its state as `checkpoint.due` says. With a (graceful) `stop`, a signal
    it caught ends the run at the next round boundary: the state saved there, where there is a
    checkpoint, then Stopped raised (fedsim.core.stopping).
    """
    config.validate()
    check_machine(config)
    run_code_digest(config.method)  # now, of the code about to run: the record and checkpoint say which it was
    started = time.perf_counter()
    with torch_threads(1), subnormals(not config.keep_subnormals), FederatedDataset(config.data) as dataset:
        flushed = flushing()
        refused = pool_refusal(config.data, dataset.attrs.get("provenance") or {})
        if refused:  # one device: it would train as one, silently
            raise ValueError(refused)
        check_clients_per_round(config.clients_per_round, dataset.num_devices, config.selection)
        check_participation(config, dataset.num_devices)
        if config.eval_devices is not None and config.eval_devices > dataset.num_devices:
            raise ValueError(f"bad run setting eval_devices={config.eval_devices}: {config.data} has "
                             f"{dataset.num_devices} devices")
        data = run_data(config, dataset)
        if config.dissimilarity is None:  # the model's default, in the checkpoint's fingerprint and run.json
            config = dataclasses.replace(config, dissimilarity=data.model.dissimilarity)
        clock = {"local_sgd": 0.0, "evaluation": 0.0}
        try:
            rows, diverged_round, resumed, initial_finite = _train(config, data, on_round, on_resume, checkpoint,
                                                                   stop, clock)
        finally:
            data.close()  # before the file closes
        dataset_record = {"name": dataset.name, "kind": dataset.kind, "devices": dataset.num_devices,
                          "provenance": dataset.attrs.get("provenance")}

    metrics = pd.DataFrame(rows, columns=["round", "communication_rounds", *COUNT_COLUMNS, *COLUMNS,
                                          *(THEORY_COLUMNS if config.theory else [])])
    last = metrics.iloc[-1]
    record = {
        "config": dataclasses.asdict(config),
        "dataset": dataset_record,
        "data_access": data.record(),
        "init": _init_record(config),
        # which mini-batch stream drew the plans: fedsim's (fedsim.core.shuffle) or the authors'
        "shuffle_stream": shuffle.stream_of(config.rng),
        "fedsim_version": __version__,
        "code_sha256": run_code_digest(config.method),  # its own files: an edited checkout or a plugin's version
        "torch_version": torch.__version__,
        "environment": environment(flushed),  # what else made these bits: libraries, CPU, subnormals
        "result": {
            "rounds_completed": int(last["round"]),
            "final_train_loss": float(last["train_loss"]),
            "final_train_acc": float(last["train_acc"]),
            "final_test_acc": float(last["test_acc"]),
            "diverged_round": diverged_round,
            "diverged_reason": diverged_reason(diverged_round, initial_finite),
            "wall_seconds": round(time.perf_counter() - started, 3),
            # where the wall time went (the rest: loading, selection, plans, server updates, writing)
            "local_sgd_seconds": round(clock["local_sgd"], 3),
            "evaluation_seconds": round(clock["evaluation"], 3),
            "resumed_from_round": resumed,
            **{column: int(last[column]) for column in COUNT_COLUMNS},
        },
    }
    return metrics, record


# result.diverged_reason: why a run stopped on a non-finite loss or weight (null: it did not)
DIVERGED_REASONS = {
    "data": "round 0: the initial model's weights are finite, its train loss is not: the data hold a non-finite "
            "value (or the initial model overflows on them)",
    "initial_model": "round 0: the initial model's weights are not finite (its init file)",
    "training": "a later round: the training left the reals (the lr may be too large)",
}


def diverged_reason(diverged_round: int | None, initial_finite: bool) -> str | None:
    """The key of DIVERGED_REASONS for a run that stopped at `diverged_round` (None: it did not)."""
    if diverged_round is None:
        return None
    if diverged_round > 0:
        return "training"
    return "data" if initial_finite else "initial_model"


def _init_record(config: RunConfig) -> dict:
    if config.init is None:
        return {"source": "fedsim", "seed": config.seed}
    path = init_file(config.init, config.seed)
    return {"source": "file", "file": str(path), "sha256": authors.file_sha256(path)}


def _train(config: RunConfig, data: RunData, on_round, on_resume, checkpoint, stop,
           clock: dict) -> tuple[list[dict], int | None, int | None, bool]:
    """The rounds: metrics rows from the initial model on, the round it diverged (or None), the
    round it resumed from (or None), and whether the initial model's weights were finite (True on a
    resumed run). Adds the seconds spent in local SGD and in evaluation to `clock`."""
    method, local_sgd = get_method(config.method), ENGINES[config.engine]
    run = RunState(config, data, method)
    start = run.resume(config, checkpoint, on_resume)
    settings = sgd_settings(config, run.state)
    draws, devices = RoundDraws(config, method.gradients, data.sizes), RoundDevices(data, run.counts)
    for t in range(start, config.rounds + 1):
        stopping = at_round_boundary(stop, t, start)
        if checkpoint is not None and (checkpoint.due(t, start) or stopping and t > start):
            run.save(config, checkpoint, t)
        if stopping:
            raise Stopped(stop.signal, t, config.rounds)
        finite = all_finite(run.params)
        if config.evaluates(t) or not finite:
            run.rows.append(evaluate_round(config, data, run, t, method.exchanges, clock))
            if on_round is not None:
                on_round(run.rows[-1])
            if not (finite and math.isfinite(run.rows[-1]["train_loss"])):
                return run.rows, t, (start or None), finite or t > 0
        if t == config.rounds:
            return run.rows, None, (start or None), True
        # round t: its devices, their rows, local training, the server's update
        gradient_devices, solvers = draws[t]
        devices.read(t, gradient_devices, solvers, run.params, draws)
        ctx = RoundContext(round=t, params=run.params, solvers=solvers, gradient_devices=gradient_devices,
                           device_grads=devices.device_grads, model=data.model,
                           weights=round_weights(data.sizes, solvers, config.selection, data.dtype, data.device),
                           mu=config.mu, seed=config.seed, options=config.options, lr=config.lr, sizes=data.sizes,
                           local_steps=functools.partial(steps_of, data.sizes, settings),
                           grads_at=devices.grads_at, hessians=devices.hessians)
        method_state = run.method_state()
        problem, local_models = local_training(method, local_sgd, ctx, method_state, devices.train, settings,
                                               run.counts, clock)
        if config.theory:
            run.add_theory(data, problem, local_models, devices.train, solvers)
        run.params, method_state = server_step(method, ctx, method_state, local_models)
        run.end_round(method, ctx, method_state, solvers, config.epochs)
    return run.rows, None, (start or None), True


class RunState:
    """What a run carries from round to round, all of it checkpointed: the global model, the metrics
    rows so far, what the run has cost so far (`counts`: per-sample gradients the devices computed,
    vectors sent each way) and `state`: the method's (its own names, under "method.") and, for the
    authors' shuffle, which compounds over each device's local epochs, their count."""

    def __init__(self, config: RunConfig, data: RunData, method):
        self.params = initial_params(config, data.model, data.dtype).to(data.device)
        self.counts = dict.fromkeys(COUNT_COLUMNS, 0)
        self.state = {f"method.{k}": v for k, v in method.init(self.params, data.dataset.num_devices).items()}
        if config.rng == "authors":
            self.state["epochs_done"] = torch.zeros(data.dataset.num_devices, dtype=torch.int64)
        if config.theory:  # the power iteration's start: the last round's top eigenvector
            self.state["theory_vector"] = torch.ones_like(self.params)
        self.state["counts"] = torch.zeros(len(self.counts), dtype=torch.int64)
        self.rows = []

    def resume(self, config: RunConfig, checkpoint: Checkpoint | None, on_resume) -> int:
        """The round to start from: the checkpoint's, its state then loaded (`on_resume` told), else 0."""
        saved = checkpoint.load(config, self.params, self.state) if checkpoint is not None else None
        if saved is None:
            return 0
        start, self.params, self.rows, state = saved
        self.state = {k: v if k in ON_CPU else v.to(self.params.device) for k, v in state.items()}
        self.counts.update(zip(self.counts, self.state["counts"].tolist()))
        if on_resume is not None:
            on_resume(start)
        return start

    def save(self, config: RunConfig, checkpoint: Checkpoint, t: int) -> None:
        self.state["counts"] = torch.tensor(list(self.counts.values()), dtype=torch.int64)
        checkpoint.save(config, t, self.params, self.rows, self.state)

    def method_state(self) -> dict:
        return {k[len("method."):]: v for k, v in self.state.items() if k.startswith("method.")}

    def add_theory(self, data: RunData, problem, local_models, train: Clients, solvers: np.ndarray) -> None:
        """Theorem 1's constants of the round just trained, added to its metrics row (theory evaluates
        every round: the last row is this round's)."""
        constants, self.state["theory_vector"] = measure_theory(data.model, self.params, problem, local_models, train,
                                                                solvers, data.eval_train, self.rows[-1],
                                                                self.state["theory_vector"])
        self.rows[-1].update(constants)

    def end_round(self, method, ctx: RoundContext, method_state: dict, solvers: np.ndarray, epochs: int) -> None:
        """After the server's update: the round's traffic counted, the method's state kept, and the
        solvers' epochs counted (for the authors' shuffle)."""
        down, up = traffic(method, ctx)
        self.counts["vectors_down"] += down
        self.counts["vectors_up"] += up
        self.state.update({f"method.{k}": v for k, v in method_state.items()})
        if "epochs_done" in self.state:  # uniform selection: no device twice in a round
            self.state["epochs_done"][torch.from_numpy(solvers)] += epochs


def sgd_settings(config: RunConfig, state: dict) -> SGDSettings:
    """The local SGD's settings; the authors' shuffle reads each device's epoch count, which the rounds
    update in place (RunState.end_round)."""
    settings = SGDSettings(config.lr, config.epochs, config.batch_size, config.seed)
    if config.rng == "authors":
        settings = dataclasses.replace(settings, shuffle="authors", epochs_done=state["epochs_done"].numpy())
    return settings


def steps_of(sizes: np.ndarray, settings: SGDSettings, devices: np.ndarray) -> np.ndarray:
    """ctx.local_steps: the SGD steps `devices` take."""
    return local_steps(sizes[devices], settings)


def at_round_boundary(stop: StopSignals | None, t: int, start: int) -> bool:
    """Whether a signal came (then the run stops here, at a round boundary, its state saved)."""
    if t > start:
        hold_at_round_boundary(stop, t)
    stopping = stop is not None and stop.signal is not None
    if stopping:
        stop.finishing = True  # the state saved now is all a second signal could still drop
    return stopping


def evaluate_round(config: RunConfig, data: RunData, run: RunState, t: int, exchanges: int, clock: dict) -> dict:
    """Round t's metrics row: the global model's metrics, and what the run has cost so far (a method
    exchanging `exchanges` times a round)."""
    started = time.perf_counter()
    row = {"round": t, "communication_rounds": t * exchanges, **run.counts,
           **evaluate(data.model, run.params, data.eval_train, data.eval_test, config.dissimilarity)}
    clock["evaluation"] += time.perf_counter() - started
    return row


def local_training(method, local_sgd, ctx: RoundContext, method_state: dict, train: Clients,
                   settings: SGDSettings, counts: dict, clock: dict):
    """(the local problem, the solvers' local models): the method's own local solver (DONE; no problem),
    else local SGD on the method's local problem, its per-sample gradients counted."""
    started = time.perf_counter()
    if method.local_solver is not None:
        problem, local_models = None, method.local_solver(ctx, method_state)
    else:
        problem = method.local_problem(ctx, method_state)
        w0 = ctx.params if problem.center is None else problem.center
        local_models = local_sgd(ctx.model, w0, problem, train, ctx.solvers, settings, ctx.round)
        anchored = 2 if problem.anchor is not None else 1  # and the same batches' gradients at the anchor
        counts["gradient_evaluations"] += anchored * local_samples(ctx.sizes[ctx.solvers], settings, problem.steps)
    clock["local_sgd"] += time.perf_counter() - started
    return problem, local_models


class RoundDraws:
    """Each round's (gradient devices, solvers) (round_devices), drawn DRAW_AHEAD rounds at a time (each
    a pure function of the seed and round): drawn one at a time, right after a round's compiled kernel
    has filled the caches with its data, the same draws run slower (docs/performance.md)."""

    def __init__(self, config: RunConfig, gradients: str, sizes: np.ndarray):
        self.config, self.gradients, self.sizes, self.drawn = config, gradients, sizes, {}

    def __getitem__(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        if t not in self.drawn:
            self.drawn = {s: round_devices(self.config, self.gradients, s, self.sizes)
                          for s in range(t, min(t + DRAW_AHEAD, self.config.rounds))}
        return self.drawn[t]

    def upcoming(self, t: int) -> np.ndarray | None:
        """Round t + 1's devices, both subsets (None after the last round)."""
        return None if t + 1 == self.config.rounds else np.concatenate(self[t + 1])


class RoundDevices:
    """The round's devices' train rows, and what a method may ask of them (RoundContext), every
    per-sample gradient counted in `counts`: full local gradients at the global model, at other
    points, and the local Hessians."""

    def __init__(self, data: RunData, counts: dict):
        self.data, self.counts, self.train = data, counts, None

    def read(self, t: int, gradient_devices: np.ndarray, solvers: np.ndarray, params: torch.Tensor,
             draws: RoundDraws) -> None:
        """Round t's rows; streamed, round t + 1's are read ahead meanwhile (RunData.round_train)."""
        self.train = None  # let go of the last round's rows first: their memory takes this round's (InputPool)
        upcoming = draws.upcoming(t) if self.data.stream else None
        self.train = self.data.round_train(np.concatenate([gradient_devices, solvers]), upcoming)
        self.params = params
        self.known, self.counted = {}, set()  # a method may ask twice (pipelined FedDANE: to solve, then to aggregate)

    def device_grads(self, devices: np.ndarray) -> torch.Tensor:
        """ctx.device_grads: full local gradients at the global model, each device's counted once."""
        key = np.asarray(devices).tobytes()
        if key not in self.known:
            self.known[key] = device_grads(self.data.model, self.params, self.train, devices)
            new = set(np.asarray(devices).tolist()) - self.counted  # a device computes its gradient once
            self.counts["gradient_evaluations"] += int(self.data.sizes[sorted(new)].sum())
            self.counted.update(new)
        return self.known[key]

    def grads_at(self, points: torch.Tensor, devices: np.ndarray) -> torch.Tensor:
        """ctx.grads_at: full local gradients at one point for all `devices`, or one point each."""
        devices = np.asarray(devices)
        self.counts["gradient_evaluations"] += int(self.data.sizes[devices].sum())
        if points.dim() == self.params.dim():
            return device_grads(self.data.model, points, self.train, devices)
        return torch.cat([device_grads(self.data.model, w, self.train, [k]) for w, k in zip(points, devices)])

    def hessians(self, devices: np.ndarray) -> LocalHessians:
        """ctx.hessians: the devices' local Hessians at the global model."""
        return LocalHessians(self.data.model, self.params, [self.train.subset([k])[0] for k in devices],
                             self.count_hessian_products)

    def count_hessian_products(self, samples: int) -> None:
        # a per-sample Hessian-vector product costs about two gradients
        self.counts["gradient_evaluations"] += 2 * samples


def all_finite(params: torch.Tensor) -> bool:
    """Whether every weight is finite: numpy's test on the CPU (a quarter of torch's three calls' cost)."""
    if params.device.type == "cpu":
        return bool(np.isfinite(params.detach().numpy()).all())
    return bool(torch.isfinite(params).all())


def server_weights(sizes: np.ndarray, devices: np.ndarray, selection: str, dtype: torch.dtype,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    """The weights the server averages `devices`' models with: n_k / sum of the round's n (uniform
    selection: the reference code's), or 1/K (weighted selection draws by size already). Sample
    counts and their sum are integers, the sum rounded once to `dtype` (torch's float sum of them
    is the same below 2^24 samples): made in numpy, a few torch calls fewer each round."""
    if selection == "weighted":
        return torch.full((len(devices),), 1.0 / len(devices), dtype=dtype, device=device)
    n = sizes[devices]
    kind = NUMPY_TYPES[dtype]
    weights = torch.from_numpy(n.astype(kind) / kind(n.sum()))
    return weights if torch.device(device).type == "cpu" else weights.to(device)


def round_weights(sizes: np.ndarray, solvers: np.ndarray, selection: str, dtype: torch.dtype,
                  device: torch.device | str = "cpu"):
    """A round's ctx.weights: the solvers' weights made now, before local SGD, and any other devices'
    when asked. Made after the compiled kernel has filled the caches with its data, the same few numpy
    and torch calls run slower (docs/performance.md)."""
    made = server_weights(sizes, solvers, selection, dtype, device)
    return lambda devices: made if devices is solvers else server_weights(sizes, devices, selection, dtype, device)


@functools.lru_cache(maxsize=4)
def every_device(n: int) -> np.ndarray:
    """0, ..., n - 1: one read-only array that every round of a method asking every device shares
    (rounds are drawn DRAW_AHEAD at a time: a copy each would hold DRAW_AHEAD x n indices)."""
    every = np.arange(n)
    every.flags.writeable = False
    return every


def round_devices(config: RunConfig, gradients: str, t: int, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(gradient devices S_t, solvers S'_t) of round t, for a method whose full gradients come from
    `gradients` (fedsim.methods.GRADIENTS). S'_t is the round's selection, and where a method asks for
    gradients from a sample S_t first, `second_subset: independent` draws S'_t independently of it.
    A method asking every device (`all`) gets the solvers a sampling FedDANE would: a paired diagnostic."""
    k, n = config.clients_per_round, len(sizes)
    if config.rng == "authors":
        selected = authors.select_devices(t, n, k)
        return (every_device(n) if gradients == "all" else selected), selected
    selected = select_devices(config.seed, t, SELECTION_STREAM, k, sizes, config.selection)
    solvers = selected
    if gradients != "none" and config.second_subset == "independent":
        solvers = select_devices(config.seed, t, SECOND_SUBSET_STREAM, k, sizes, config.selection)
    return (every_device(n) if gradients == "all" else selected), solvers


def initial_params(config: RunConfig, model, dtype: torch.dtype) -> torch.Tensor:
    """The model the run starts from: the `init` file's, else fedsim's seeded draw."""
    if config.init is not None:
        return authors.load_init(init_file(config.init, config.seed), model, dtype)
    init_seed = int(np.random.SeedSequence([config.seed, INIT_STREAM]).generate_state(1)[0])
    return model.init(torch.Generator().manual_seed(init_seed), dtype)

