"""What a planned run of the LSTM datasets (Shakespeare, Sent140) will cost, before it starts.

Torch-free, lazily too (the workflow imports it at every snakemake call): measuring the constants on
this machine, which runs the real models, is fedsim.planning.calibration's.

The model, per run of T rounds, K devices per round, E epochs, batch size B:

    training   T x (step_s x S_max + row_s x B x S_sum)
    gradients  T x grad_row_s x (rows of the round's full local gradients, FedDANE's first exchange)
    evaluation (T + 1) x (eval_row_s x (train + test rows of the evaluated devices)
                          + grad_row_s x (their gradient rows: the dissimilarity metrics))

S_max: the sequential steps of the round's longest device, E x ceil(n_max / B), expected over the
round's selection (K of the devices uniformly without replacement, or with probability n_k / n);
S_sum: every selected device's steps. The batched engine (fedsim.core.engine.local_sgd_stacked) runs
S_max steps, each over the devices still training, so one step costs a fixed part (step_s: the
time loop's ~160 small kernel calls) plus a part per row of the active devices' batches (row_s).
Full local gradients use at most 200 rows per device (fedsim.models._lstm). All figures are seconds on
one CPU thread (training jobs compute on one torch thread whatever `threads` says), measured by
`python -m fedsim cost --calibrate` (fedsim.planning.calibration) or the DEFAULTS below.

A training job asks the batch system for its run's estimate (the model above for the LSTM runs, seconds
per device and epoch for the MCLR ones) with a margin, or `simulator.max_runtime` where lower; under
that cap, the train rule's retries and checkpoint interval take a longer run through several jobs.

Device sizes: the built dataset file's where it exists (its offsets, read with h5py), else the
paper's Table 1 (mean and stdev of samples per device) as a lognormal over the config's `devices`,
split by its `train_fraction`: an assumption, said in the printed line.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist

import numpy as np

from .experiments import RUN_FIELDS, ConfigError
from ..kinds import KINDS, TOKEN_KINDS
from .kinds import entry_dissimilarity, entry_model, trains_linear_softmax
from ..specs import model_spec
from .jobs import train_device
from ..methods import ENTRIES
from ..core.settings import CHECKPOINT_EVERY, CHECKPOINT_SECONDS
from ..data.paper_table import PAPER_TABLE  # the paper's Table 1: devices, samples, mean and stdev a device
from ..core.steps import local_steps  # E x ceil(n_k / B), as the engine's batch plans (fedsim.planning.cost.local_steps as before)

# CPU seconds on one thread of this project's 2-core CPU (`python -m fedsim cost --calibrate`; CPU
# time, not the wall clock, so that a shared machine skews them less; when: docs/performance.md).
# step_s: fixed part of one batched SGD step; row_s: per row of a step's batches (forward +
# backward); eval_row_s: per evaluated row (forward only, in large chunks); grad_row_s: per row
# of a full local gradient (forward + backward).
DEFAULTS = {
    "shakespeare": {"step_s": 0.022, "row_s": 0.0167, "eval_row_s": 0.0054, "grad_row_s": 0.0125},
    "sent140": {"step_s": 0.0129, "row_s": 0.00118, "eval_row_s": 0.00062, "grad_row_s": 0.00083},
}
# Wall seconds on one NVIDIA H200 (`python -m fedsim cost --calibrate --device cuda`; when and how:
# docs/performance.md): a plan whose LSTM runs may go to a GPU prints what they would cost on it,
# until this machine's own GPU calibration (CALIBRATION_FILE) replaces every figure.
GPU_REFERENCE_NAME = "NVIDIA H200"
GPU_REFERENCE = {
    "shakespeare": {"step_s": 0.0111, "row_s": 7.9e-05, "eval_row_s": 0.000715, "grad_row_s": 0.000461},
    "sent140": {"step_s": 0.00588, "row_s": 0.0, "eval_row_s": 3.18e-05, "grad_row_s": 9.48e-05},
}
CALIBRATION_FILE = "cost_calibration.json"  # under <results_dir>/benchmarks/
CALIBRATION_ENV = "FEDSIM_COST_CALIBRATION"  # the workflow names that file to its jobs here
DEFAULT_TRAIN_FRACTION = 0.8  # LEAF's --tf, the builders' default
GRAD_BATCH, GRAD_BATCHES = 50, 4  # fedsim.models._lstm's (torch: not imported here; tests/test_one_fact.py ties them)
DAY_S = 86400.0


@dataclass
class Sizes:
    """Samples per device of a dataset's train and test splits, and where they come from."""

    train: np.ndarray
    test: np.ndarray
    source: str


@dataclass
class RunCost:
    """Seconds of one run, by part."""

    train_s: float
    grads_s: float
    eval_s: float

    @property
    def total_s(self) -> float:
        return self.train_s + self.grads_s + self.eval_s


@dataclass
class DatasetCost:
    dataset: str
    runs: int
    rounds: list = field(default_factory=list)
    seconds: list = field(default_factory=list)  # per run
    parts: RunCost = None                         # summed over the runs
    sizes_source: str = ""
    device: str = "cpu"

    @property
    def total_s(self) -> float:
        return float(sum(self.seconds))

    @property
    def longest_s(self) -> float:
        return float(max(self.seconds, default=0.0))


# ---------------------------------------------------------------------------------------
# Device sizes
# ---------------------------------------------------------------------------------------

def table_sizes(kind: str, devices: int | None = None, train_fraction: float = DEFAULT_TRAIN_FRACTION) -> Sizes:
    """Sizes from the paper's Table 1: `devices` (default: the paper's) lognormal quantiles with
    the table's mean and stdev, each device split train / test by `train_fraction`."""
    paper = PAPER_TABLE[kind]
    paper_devices, mean, sd = paper["devices"], paper["mean"], paper["stdev"]
    n = devices or paper_devices
    sigma2 = math.log1p((sd / mean) ** 2)
    mu = math.log(mean) - sigma2 / 2
    q = (np.arange(n) + 0.5) / n
    z = np.array([NormalDist().inv_cdf(p) for p in q])
    total = np.maximum(2, np.round(np.exp(mu + math.sqrt(sigma2) * z))).astype(np.int64)
    train = np.maximum(1, np.round(total * train_fraction)).astype(np.int64)
    return Sizes(train, total - train, f"the paper's Table 1 (mean {mean:,}, stdev {sd:,} per device, lognormal "
                                       f"over {n} devices: an assumption until the file is built)")


def file_sizes(path) -> Sizes:
    """Sizes from a built dataset file: its train/test offsets only (h5py, no rows read)."""
    import h5py

    with h5py.File(path, "r") as f:
        train, test = (np.diff(f[f"{split}/offsets"][:]) for split in ("train", "test"))
    return Sizes(train.astype(np.int64), test.astype(np.int64), str(path))


def dataset_sizes(cfg, dataset, path=None) -> Sizes:
    """The built file's sizes where `path` exists (and can be read), else Table 1's."""
    if path is not None and Path(path).is_file():
        try:
            return file_sizes(path)
        except (OSError, KeyError):
            pass
    entry = cfg["datasets"][dataset]
    return table_sizes(entry["kind"], entry.get("devices"), entry.get("train_fraction", DEFAULT_TRAIN_FRACTION))


# ---------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------

def grad_rows(sizes) -> np.ndarray:
    """Rows a device's full local gradient reads: n_k below 50, else 50 x min(n_k // 50, 4)."""
    n = np.asarray(sizes, dtype=np.int64)
    return np.where(n < GRAD_BATCH, n, GRAD_BATCH * np.minimum(n // GRAD_BATCH, GRAD_BATCHES))


def expected_max(values, k: int, selection: str = "uniform") -> float:
    """E[max of the values of k devices]: drawn uniformly without replacement (`uniform`) or with
    probability proportional to `values`' device sizes (`weighted`, with replacement: pass the
    weights as a tuple (values, weights))."""
    if selection == "weighted":
        values, weights = values
        order = np.argsort(values, kind="stable")
        v, p = np.asarray(values, float)[order], np.asarray(weights, float)[order]
        cdf = np.cumsum(p / p.sum())
        below = np.concatenate([[0.0], cdf[:-1]])
        return float(np.sum(v * (cdf ** k - below ** k)))
    v = np.sort(np.asarray(values, dtype=float))
    n, k = len(v), min(int(k), len(v))
    if k <= 0:
        return 0.0
    i = np.arange(1, n + 1)  # P(the max is the i-th smallest) = C(i - 1, k - 1) / C(n, k)
    valid = i >= k
    log_p = np.full(n, -np.inf)
    iv = i[valid]
    log_p[valid] = (_lgamma(iv) - _lgamma(k) - _lgamma(iv - k + 1)) - (_lgamma(n + 1) - _lgamma(k + 1) - _lgamma(n - k + 1))
    return float(np.sum(v * np.exp(log_p)))


def _lgamma(x):
    return np.vectorize(math.lgamma)(np.asarray(x, dtype=float)) if np.ndim(x) else math.lgamma(x)


def expected_sum(values, k: int, sizes, selection: str = "uniform") -> float:
    """E[sum of the values of the k selected devices]."""
    values = np.asarray(values, dtype=float)
    if selection == "weighted":
        p = np.asarray(sizes, float) / np.sum(sizes)
        return float(k * (p @ values))
    return float(k * values.mean())


def round_train_seconds(sizes, k, epochs, batch_size, consts, selection="uniform") -> float:
    """Expected seconds of one round's local SGD on K selected devices (of `sizes`)."""
    steps = local_steps(sizes, epochs, batch_size)
    s_max = expected_max((steps, sizes) if selection == "weighted" else steps, k, selection)
    s_sum = expected_sum(steps, k, sizes, selection)
    return consts["step_s"] * s_max + consts["row_s"] * batch_size * s_sum


def run_cost(sizes: Sizes, *, rounds, k, epochs, batch_size, consts, gradients="none", eval_devices=None,
             selection="uniform", eval_every=1, dissimilarity=True) -> RunCost:
    """Seconds of one run (see the module docstring); `gradients`: the method's full-gradient
    exchange (fedsim.methods: none, sampled = K devices, all = every device); `dissimilarity`: the
    metrics' full local gradients."""
    train = sizes.train
    n_dev = len(train)
    per_round = round_train_seconds(train, k, epochs, batch_size, consts, selection)
    g = grad_rows(train)
    g_rows = {"none": 0.0, "sampled": expected_sum(g, k, train, selection), "all": float(g.sum())}[gradients]
    share = 1.0 if eval_devices is None else min(1.0, eval_devices / n_dev)
    eval_rows = share * float(train.sum() + sizes.test.sum())
    per_eval = consts["eval_row_s"] * eval_rows + consts["grad_row_s"] * share * float(g.sum()) * dissimilarity
    return RunCost(rounds * per_round, rounds * consts["grad_row_s"] * g_rows,
                   evaluations(rounds, eval_every) * per_eval)


def evaluations(rounds: int, eval_every: int) -> int:
    """How many rounds a run computes its metrics at: 0, n, 2n, ... and the last."""
    return rounds // eval_every + 1 + (rounds % eval_every > 0)


def run_round_seconds(config, kind: str, constants=None) -> float | None:
    """The estimate of one round (training, gradients, evaluation) of a run (a RunConfig) on a dataset
    of `kind`, read from its file; None where the model has none (MCLR datasets, a GPU)."""
    if kind not in TOKEN_KINDS or config.device != "cpu":
        return None
    consts = (constants or load_constants(os.environ.get(CALIBRATION_ENV))[0])[kind]
    dissimilarity = config.dissimilarity  # None: the model's default (fedsim.specs)
    if dissimilarity is None:
        dissimilarity = model_spec(config.model or KINDS[kind].default_model).dissimilarity
    cost = run_cost(file_sizes(config.data), rounds=config.rounds, k=config.clients_per_round, epochs=config.epochs,
                    batch_size=config.batch_size, consts=consts, gradients=ENTRIES[config.method].method.gradients,
                    eval_devices=config.eval_devices, selection=config.selection, eval_every=config.eval_every,
                    dissimilarity=dissimilarity)
    return cost.total_s / max(config.rounds, 1)


# ---------------------------------------------------------------------------------------
# Constants: calibration file or defaults
# ---------------------------------------------------------------------------------------

def load_constants(path=None) -> tuple[dict, str]:
    """The per-kind constants of a calibration file where it exists, else DEFAULTS; and their source
    (a GPU calibration's says `calibrated on cuda`: report_lines reads it)."""
    if path is not None and Path(path).is_file():
        try:
            found = json.loads(Path(path).read_text())
            constants = {kind: {**DEFAULTS[kind], **found.get(kind, {})} for kind in DEFAULTS}
            return constants, f"calibrated on {found.get('device', 'cpu')} ({path})"
        except (OSError, ValueError, AttributeError):
            pass
    return DEFAULTS, "fedsim.planning.cost.DEFAULTS (measured here; `python -m fedsim cost --calibrate` for this machine)"


# ---------------------------------------------------------------------------------------
# The plan's LSTM runs
# ---------------------------------------------------------------------------------------

def lstm_run_cost(cfg, dataset, sizes: Sizes, constants, *, method, k, epochs, rounds) -> RunCost:
    """One run of the workflow on an LSTM dataset: the model above with the dataset entry's batch
    size, eval_devices, eval_every and dissimilarity, the simulator's selection and the method's
    gradient exchange."""
    entry = cfg["datasets"][dataset]
    return run_cost(sizes, rounds=rounds, k=k, epochs=epochs, batch_size=int(entry["batch_size"]),
                    consts=constants[entry["kind"]], gradients=ENTRIES[method].method.gradients,
                    eval_devices=entry.get("eval_devices"), selection=cfg["simulator"]["selection"],
                    eval_every=entry.get("eval_every", 1), dissimilarity=entry_dissimilarity(cfg, dataset))


def plan_costs(cfg, plan, dataset_path=lambda name: None, constants=None) -> list[DatasetCost]:
    """Estimated cost of the plan's runs on each LSTM dataset (runs two experiments share count once)."""
    constants = constants or DEFAULTS
    lstm = [d for d in dict.fromkeys(plan["dataset"]) if cfg["datasets"][d]["kind"] in TOKEN_KINDS]
    out = []
    for dataset in lstm:
        sizes = dataset_sizes(cfg, dataset, dataset_path(dataset))
        runs = plan[plan["dataset"] == dataset].drop_duplicates(list(RUN_FIELDS))
        cost = DatasetCost(dataset, len(runs), sizes_source=sizes.source, device=train_device(cfg, dataset))
        total = RunCost(0.0, 0.0, 0.0)
        for run in runs.itertuples(index=False):
            rc = lstm_run_cost(cfg, dataset, sizes, constants, method=run.method, k=int(run.K), epochs=int(run.E),
                               rounds=int(run.rounds))
            cost.rounds.append(int(run.rounds))
            cost.seconds.append(rc.total_s)
            total = RunCost(total.train_s + rc.train_s, total.grads_s + rc.grads_s, total.eval_s + rc.eval_s)
        cost.parts = total
        out.append(cost)
    return out


# ---------------------------------------------------------------------------------------
# A training job's request: its minutes, its retries, its checkpoints
# ---------------------------------------------------------------------------------------

# MCLR runs (synthetic, FEMNIST, JSON feature vectors) take seconds to minutes: their model is seconds
# per selected device and local epoch, evaluation included (a data kind's `mclr_device_epoch_s`,
# fedsim.planning.kinds), measured with FedDANE (the slowest of FedAvg, SCAFFOLD, FedDANE) and rounded up: on
# the default synthetic sets, and on a synthetic set with FEMNIST's 784 features for FEMNIST and JSON
# sets (the measurements: docs/performance.md).
# Any other model's run (a CNN) is priced per sample from its `sample_seconds` (fedsim.specs); rows per
# device: the built file's, else a LEAF FEMNIST writer's mean, CONV_DEVICE_ROWS.
CONV_DEVICE_ROWS = 230
THEORY_FACTOR = 3       # a run logging the theorems' constants (`theory: true`): its measured cost, rounded up
MARGIN = 1.5            # on the estimate: another machine, a busy node, a cold file cache
START_MINUTES = 2       # Python, torch and the dataset loaded, before round 0
CHECKPOINTS_PER_JOB = 10  # a capped job saves at least every tenth of its minutes
SPARE_RETRIES = 2       # a capped run's retries beyond its jobs: a lost node, a preemption, a cancel
USEFUL_SHARE = 0.8      # of a capped job's minutes, what advances its run: not its start, nor the
                        # work since its last checkpoint (at most a tenth and a round) that its cut loses


def train_seconds(cfg, dataset, *, method, k, epochs, rounds, theory, sizes_of, constants=None) -> float:
    """The estimate of one training run of the workflow on one CPU core: the LSTM model above on
    Sent140 and Shakespeare (`sizes_of(dataset)`: dataset_sizes'), conv_run_seconds for a CNN,
    the data kind's MCLR seconds per device and epoch on the others."""
    kind = cfg["datasets"][dataset]["kind"]
    if kind in TOKEN_KINDS:
        seconds = lstm_run_cost(cfg, dataset, sizes_of(dataset), constants or DEFAULTS, method=method, k=k,
                                epochs=epochs, rounds=rounds).total_s
    elif not trains_linear_softmax(cfg, dataset):
        seconds = conv_run_seconds(cfg, dataset, sizes_of, method=method, k=k, epochs=epochs, rounds=rounds)
    else:
        seconds = rounds * epochs * k * KINDS[kind].mclr_device_epoch_s
    return seconds * (THEORY_FACTOR if theory else 1)


FORWARD_SHARE = 1 / 3  # a forward pass's share of a training step (forward, input and weight gradients)


def conv_run_seconds(cfg, dataset, sizes_of, *, method, k, epochs, rounds) -> float:
    """A CNN run: k devices' epochs a round (and their full gradients where the method sends them),
    and its evaluations (every `eval_every` rounds, on `eval_devices` of the devices), at its model's
    `sample_seconds`: a metrics row costs about one training sample (its forward pass, and the full
    local gradient the dissimilarities need), a third of one without the dissimilarities (a forward
    pass is about a third of a training step's arithmetic)."""
    entry = cfg["datasets"][dataset]
    try:
        sizes = sizes_of(dataset) if sizes_of is not None else None
    except KeyError:  # a kind without a table (FEMNIST-62, a partition) before its file is built
        sizes = None
    if sizes is not None:
        devices, device_rows = len(sizes.train), float(sizes.train.mean())
        all_rows = float(sizes.train.sum() + sizes.test.sum())
    else:
        devices, device_rows = entry.get("devices", k), CONV_DEVICE_ROWS
        all_rows = devices * device_rows / DEFAULT_TRAIN_FRACTION
    gradients = {"none": 0, "sampled": k, "all": devices}[ENTRIES[method].method.gradients]
    share = min(1.0, entry.get("eval_devices", devices) / devices)
    evaluated = evaluations(rounds, entry.get("eval_every", 1))
    per_metrics_row = 1.0 if entry_dissimilarity(cfg, dataset) else FORWARD_SHARE
    rows = rounds * (k * epochs + gradients) * device_rows + evaluated * share * all_rows * per_metrics_row
    return rows * model_spec(entry_model(cfg, dataset)).sample_seconds


def requested_minutes(seconds: float) -> int:
    """Minutes a job asks for a run estimated at `seconds`, without a cap: the margin and the start."""
    return math.ceil(MARGIN * seconds / 60) + START_MINUTES


def job_minutes(seconds: float, cap: int | None) -> int:
    """A training job's `runtime` request: requested_minutes, or `cap` (max_runtime) where lower."""
    return min(requested_minutes(seconds), cap) if cap else requested_minutes(seconds)


def jobs_needed(seconds: float, cap: int) -> int:
    """Jobs of at most `cap` minutes that take a run of `seconds` to its end, each continuing from
    the last one's checkpoint and advancing it by USEFUL_SHARE of its minutes."""
    return math.ceil(requested_minutes(seconds) / (USEFUL_SHARE * cap))


def job_checkpoints(cap: int | None) -> tuple[int, int]:
    """A training job's (--checkpoint-every, --checkpoint-seconds): fedsim's defaults without a cap;
    under one, the first round boundary once the default's seconds, or a tenth of the cap where
    shorter, have passed, so that a job cut at its limit has saved (every 10 rounds would never save
    a run of 40 hour-long rounds; a model's few MB every 30 s cost nothing)."""
    seconds = math.ceil(CHECKPOINT_SECONDS)
    if cap is None:
        return CHECKPOINT_EVERY, seconds
    return 1, min(seconds, math.ceil(cap * 60 / CHECKPOINTS_PER_JOB))


def plan_seconds(cfg, plan, sizes_of, constants=None) -> list[tuple]:
    """(run, its device, its estimate in seconds) of each of the plan's runs (once where two
    experiments share it); `sizes_of(dataset)`: dataset_sizes' for the LSTM datasets."""
    return [(run, train_device(cfg, run.dataset),
             train_seconds(cfg, run.dataset, method=run.method, k=int(run.K), epochs=int(run.E), rounds=int(run.rounds),
                           theory=bool(run.theory), sizes_of=sizes_of, constants=constants))
            for run in plan.drop_duplicates(list(RUN_FIELDS)).itertuples(index=False)]


def train_retries(cfg, plan, sizes_of, constants=None) -> int | None:
    """The train rule's retries under `simulator.max_runtime`: those taking the plan's longest run
    through its jobs (jobs_needed - 1), and SPARE_RETRIES; None without a cap."""
    cap = cfg["simulator"]["max_runtime"]
    if cap is None:
        return None
    needed = max((jobs_needed(seconds, cap) for _, _, seconds in plan_seconds(cfg, plan, sizes_of, constants)),
                 default=1)
    return needed - 1 + SPARE_RETRIES


def check_max_runtime(cfg, plan, sizes_of, constants=None) -> None:
    """Raise ConfigError where a CPU run's round, with the margin, is longer than what a job of
    `simulator.max_runtime` minutes can spend on it (USEFUL_SHARE): such a run never reaches a
    checkpoint, so no number of retries takes it further."""
    cap = cfg["simulator"]["max_runtime"]
    if cap is None:
        return
    for run, device, seconds in plan_seconds(cfg, plan, sizes_of, constants):
        round_s = seconds / max(int(run.rounds), 1)
        if device == "cpu" and MARGIN * round_s > USEFUL_SHARE * cap * 60:
            raise ConfigError(["simulator", "max_runtime"],
                              f"{cap} min is too short for a round of {run.dataset}'s {run.method} run (K {run.K}, "
                              f"E {run.E}), estimated at {duration(round_s)} on a CPU core ({MARGIN:g}x that with the "
                              "margin): its jobs would never reach a checkpoint; raise max_runtime, lower the epochs, "
                              "or compute on a GPU (simulator.device: auto)")


def gpu_visible() -> bool:
    """Whether this machine shows an NVIDIA GPU (cheap: no torch, no CUDA call)."""
    gpus = Path("/proc/driver/nvidia/gpus")
    return (gpus.is_dir() and any(gpus.iterdir())) or bool(os.environ.get("FEDSIM_ASSUME_GPU"))


def duration(seconds: float) -> str:
    """3 h 20 min, 2.4 days, 45 s: a duration at a readable precision."""
    if seconds >= 2 * DAY_S:
        return f"{seconds / DAY_S:.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _reference_line(ref: DatasetCost | None) -> str:
    if ref is None:
        return ", whose speed is not calibrated"
    return (f"; on one {GPU_REFERENCE_NAME} (fedsim.planning.cost.GPU_REFERENCE) {ref.total_s / max(ref.runs, 1) / 3600:,.1f} h "
            f"per run, {ref.total_s / 3600:,.0f} GPU-hours in all (`python -m fedsim cost --calibrate --device cuda` "
            "for yours)")


def report_lines(costs: list[DatasetCost], constants_source: str, gpu=None,
                 reference: list[DatasetCost] | None = None) -> list[str]:
    """The lines the workflow prints at start: one per LSTM dataset, a WARNING per dataset whose
    runs would take more than a day each on a CPU, and where the figures come from. Empty
    without LSTM datasets. `reference`: the same plan priced with GPU_REFERENCE, for the datasets
    whose runs may go to a GPU while the figures are a CPU's."""
    if not costs:
        return []
    gpu = gpu_visible() if gpu is None else gpu
    gpu_figures = constants_source.startswith("calibrated on cuda")  # a GPU's calibration: its hours
    lines = []
    for c in costs:
        parts = c.parts
        share = f"training {parts.train_s / max(c.total_s, 1e-9):.0%}, gradients {parts.grads_s / max(c.total_s, 1e-9):.0%}, " \
                f"evaluation {parts.eval_s / max(c.total_s, 1e-9):.0%}"
        rounds = sorted(set(c.rounds))
        on_gpu = c.device in ("cuda", "auto")
        unit = "GPU-hours in all on one GPU per run" if gpu_figures else "core-hours in all on one CPU thread per run"
        lines.append(f"Cost estimate, {c.dataset}: {c.runs} runs of {'/'.join(map(str, rounds))} rounds, "
                     f"{c.total_s / max(c.runs, 1) / 3600:,.1f} h per run on average (longest {duration(c.longest_s)}; "
                     f"{share}), {c.total_s / 3600:,.0f} {unit}")
        if on_gpu and not gpu_figures:
            lines.append(f"  {c.dataset}: simulator.device is {c.device}: these are CPU figures; the runs use a GPU "
                         f"where there is one ({'one is visible here' if gpu else 'none is visible here'})"
                         + _reference_line(next((r for r in reference or [] if r.dataset == c.dataset), None)))
        if c.longest_s > DAY_S and not gpu_figures and (not on_gpu or not gpu):
            lines.append(f"WARNING: {c.dataset}: a run would take up to {duration(c.longest_s)} on a CPU core "
                         f"({c.total_s / DAY_S:,.0f} core-days for its {c.runs} runs): use a GPU "
                         "(simulator.device: auto), fewer rounds or epochs, or `eval_devices`")
    lines.append(f"  (sizes: {'; '.join(f'{c.dataset} from {c.sizes_source}' for c in costs)}; "
                 f"seconds per step and row: {constants_source})")
    return lines
