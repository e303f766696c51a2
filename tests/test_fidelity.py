"""The golden case: fedsim under config/authors.yaml's protocol against the authors' own code.

../shared/fidelity holds their Synthetic IID files, the initial model their TensorFlow code built
(seed 0) and the per-round metrics their code logged on them (K = 10, E = 20, B = 10, lr = 0.01):
fedavg, fedprox mu 1, and their FedDANE at mu 0, 0.01, 1. The first 20 rounds are compared here;
benchmarks/authors_replay.py compares all 200.

Tolerances, from measurement (20 rounds): with the default engine (the compiled kernel) every run
agrees to 5e-7 relative. With the batched torch engine FedAvg and FedProx agree to 1.1e-7 and
1.7e-6, well inside the issue's 1e-5, and FedDANE to 2.4e-6 (mu 1), 6.1e-5 (mu 0) and 3.6e-4
(mu 0.01): float32 rounding differences (the order of a matmul's sums) that FedDANE's oscillating
iterates amplify where mu damps them least, and a vectorising compiler on another CPU may reorder
the kernel's sums too. 1e-3 keeps a 3x margin over the worst of them and still fails on any
change of behaviour (checked below): the exact
correction or fedsim's draws put FedDANE's rounds 1-3 off by more than 1e-2. The mini-batch order
is pinned by FedAvg: a shuffle that does not compound across epochs puts it 6.8e-5 off in 20 rounds.
"""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from fedsim.core import authors
from fedsim.data.leaf.leafjson import import_leaf_json
from fedsim.methods import resolve
from fedsim.core.train import RunConfig, run

ROOT = Path(__file__).resolve().parents[1]
FIDELITY = ROOT.parent / "shared" / "fidelity"
ROUNDS = 20
TOLERANCE = {"fedavg": 1e-5, "fedprox": 1e-5, "feddane_authors": 1e-3}
CASES = [("fedavg", 0.0), ("fedprox", 1.0), ("feddane_authors", 0.0), ("feddane_authors", 0.01),
         ("feddane_authors", 1.0)]


def need_fidelity():
    if not (FIDELITY / "authors-runs-synthetic-iid.csv").is_file():
        pytest.skip(f"{FIDELITY} absent: the authors' golden case lives in this workplace's shared folder")


@pytest.fixture(scope="module")
def iid(tmp_path_factory):
    need_fidelity()
    out = tmp_path_factory.mktemp("fidelity") / "synthetic_iid.h5"
    import_leaf_json(FIDELITY / "synthetic_iid-train.json.gz", FIDELITY / "synthetic_iid-test.json.gz", out,
                     name="synthetic_iid")
    return str(out)


def authors_protocol(data, method, mu, **overrides):
    """A RunConfig with config/authors.yaml's simulator settings and the Figure 1 hyper-parameters."""
    cfg = yaml.safe_load((ROOT / "config" / "authors.yaml").read_text())
    sim = cfg["simulator"]
    entry = cfg["datasets"]["synthetic_iid"]
    config = dict(data=data, method=method, mu=mu, clients_per_round=10, epochs=20, batch_size=entry["batch_size"],
                  lr=entry["lr"], rounds=ROUNDS, seed=0, selection=sim["selection"],
                  second_subset=sim["second_subset"], rng=sim["rng"], init=str(FIDELITY / "authors-init-seed{seed}.npz"))
    return RunConfig(**{**config, **overrides})


def theirs(method, mu):
    gold = pd.read_csv(FIDELITY / "authors-runs-synthetic-iid.csv")
    name = resolve(method)[0]  # their table names the method their code ran
    rows = gold[(gold["method"] == name) & np.isclose(gold["mu"], mu)].set_index("round")
    return rows.loc[:ROUNDS]


def relative_gap(metrics, gold):
    ours = metrics.set_index("round")["train_loss"]
    return (ours - gold["train_loss"]).abs() / gold["train_loss"]


@pytest.mark.parametrize("method, mu", CASES)
def test_per_round_training_loss_matches_the_authors_code(iid, method, mu):
    metrics, record = run(authors_protocol(iid, method, mu))
    gold = theirs(method, mu)
    assert len(gold) == ROUNDS + 1 and list(metrics["round"]) == list(gold.index)
    gap = relative_gap(metrics, gold)
    assert gap.max() < TOLERANCE[method], gap.idxmax()
    # accuracy: the same predictions, up to a sample or two where FedDANE's float noise decides
    n_test = 2248
    assert (metrics.set_index("round")["test_acc"] - gold["test_acc"]).abs().max() <= 2 / n_test + 1e-12
    assert record["init"]["sha256"] and record["config"]["rng"] == "authors"


@pytest.mark.parametrize("change", [dict(options={"correction": "exact"}), dict(rng="fedsim"),
                                    dict(second_subset="independent", rng="fedsim")])
def test_any_other_behaviour_misses_their_curve(iid, change):
    """The tolerance discriminates: each piece of the authors' behaviour is needed."""
    metrics, _ = run(authors_protocol(iid, "feddane_authors", 0.01, rounds=3, **change))
    assert relative_gap(metrics, theirs("feddane_authors", 0.01).loc[:3]).loc[1:].max() > 10 * TOLERANCE["feddane_authors"]


def test_a_shuffle_that_does_not_compound_misses_fedavgs_curve(iid, monkeypatch):
    monkeypatch.setattr(authors, "epoch_order", lambda n, epochs_before: np.arange(n))  # p every epoch
    metrics, _ = run(authors_protocol(iid, "fedavg", 0.0))
    assert relative_gap(metrics, theirs("fedavg", 0.0)).max() > 3 * TOLERANCE["fedavg"]
