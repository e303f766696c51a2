"""Tables over runs: the one-row-per-run summary, the tail-loss criterion and the choice of mu,
on hand-made run records (no training)."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from fedsim import cli

from fedsim.core.settings import COUNT, EXECUTION, RunConfig, setting, setting_columns
from fedsim.outputs.summary import GROUP_COLUMNS, findings, group_columns, summarise, tail_loss, tune, tuning_scores
from fedsim.core.train import read_run

from helpers.run_records import fake_run


def read_csv(path):
    return pd.read_csv(path, keep_default_na=False)  # an empty cell reads as "", as a user's reader shows it


def test_tail_loss_averages_the_last_rounds_and_penalises_divergence(tmp_path):
    metrics, _ = read_run(fake_run(tmp_path, losses=[4, 3, 2, 1, 0.5]))
    assert tail_loss(metrics, 4, 0.5) == pytest.approx((1 + 0.5) / 2)
    assert tail_loss(metrics, 4, 0.01) == 0.5  # at least the last round
    diverged, _ = read_run(fake_run(tmp_path, mu=1, losses=[4, 3, math.inf, 1, 1]))
    assert tail_loss(diverged, 4, 0.5) == math.inf


def test_tune_picks_the_lowest_seed_mean_per_setting(tmp_path):
    runs = [
        fake_run(tmp_path, mu=0, seed=0, losses=[3, 0.1]),
        fake_run(tmp_path, mu=0, seed=1, losses=[3, math.inf]),  # one diverged seed: mu = 0 loses
        fake_run(tmp_path, mu=1, seed=0, losses=[3, 0.9]),
        fake_run(tmp_path, mu=1, seed=1, losses=[3, 0.7]),
        fake_run(tmp_path, mu=0, K=5, losses=[3, 0.4]),
        fake_run(tmp_path, mu=1, K=5, losses=[3, 0.4]),  # a tie: the smaller mu wins
        fake_run(tmp_path, method="fedavg", losses=[3, 0.01]),  # another method: ignored
        fake_run(tmp_path, mu=0, losses=[3, 0.1], correction="authors"),  # the other FedDANE: tuned apart
        fake_run(tmp_path, mu=1, losses=[3, 0.2], correction="authors"),
    ]
    table = tune(runs, ["feddane", "feddane_authors"], fraction=0.5)
    exact = table[table["method"] == "feddane"].set_index("clients_per_round")
    assert exact.loc[10, "chosen"] == 1 and exact.loc[10, "score"] == pytest.approx(0.8)
    assert exact.loc[10, "candidates"] == "0;1" and exact.loc[10, "scores"] == "inf;0.8"
    assert exact.loc[5, "chosen"] == 0
    authors = table[table["method"] == "feddane_authors"]
    assert len(authors) == 1 and authors["chosen"].iloc[0] == 0
    assert authors["options"].iloc[0] == '{"correction": "authors"}'
    assert len(tune(runs, ["feddane"], fraction=0.5)) == 2  # only the method asked for


def test_the_client_lr_is_tuned_jointly_with_the_methods_setting(tmp_path):
    """Where runs differ in lr (an experiment's lr grid), the choice is the (value, lr) pair with the lowest
    tail loss, not the best value at each lr: FedAvg chooses its lr alone, FedDANE a mu and an lr together.
    The findings name both and flag an lr at its grid's edge."""
    dane = {(mu, lr): fake_run(tmp_path, mu=mu, lr=lr, losses=[3, 2, loss])
            for (mu, lr), loss in {(0.1, 0.01): 1.5, (0.1, 0.1): 0.9, (1, 0.01): 1.0, (1, 0.1): 2.0}.items()}
    avg = {lr: fake_run(tmp_path, method="fedavg", lr=lr, losses=[3, 2, loss])
           for lr, loss in ((0.01, 1.4), (0.03, 1.1), (0.1, 1.2))}
    table = tune([*dane.values(), *avg.values()], ["feddane", "fedavg"], fraction=0.5).set_index("method")
    assert table.loc["feddane", ["chosen", "lr"]].tolist() == [0.1, 0.1]
    assert table.loc["feddane", "candidates"] == "0.1;0.1;1;1" and table.loc["feddane", "lr_candidates"] == "0.01;0.1;0.01;0.1"
    assert table.loc["feddane", "scores"] == "1.5;0.9;1;2"
    assert table.loc["fedavg", ["chosen", "lr"]].tolist() == [0, 0.03]
    tuned = tmp_path / "chosen_settings.csv"
    table.reset_index().to_csv(tuned, index=False)
    out = tmp_path / "findings.csv"
    assert cli.main(["findings", "--fraction", "0.5", "--tuned", str(tuned), "--out", str(out), dane[0.1, 0.1],
                     avg[0.03]]) == 0
    rows = read_csv(out).set_index("method")
    assert rows.loc["feddane", ["tuned", "grid_edge", "lr_edge"]].tolist() == ["mu 0.1, lr 0.1", "lowest", "highest"]
    assert rows.loc["fedavg", ["tuned", "lr_edge"]].tolist() == ["lr 0.03", "inside"]
    assert rows.loc["feddane", "rank"] == 1  # methods at their own lrs share one panel
    with pytest.raises(ValueError, match="several values of its setting or lr"):
        findings([dane[0.1, 0.1], dane[0.1, 0.01]], fraction=0.5)


def test_tune_without_runs_of_the_method_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no runs of feddane, feddane_authors to tune"):
        tune([fake_run(tmp_path, method="fedavg")], ["feddane", "feddane_authors"], 0.1)


def test_tuning_scores_has_one_row_per_run(tmp_path):
    paths = [fake_run(tmp_path, mu=mu, seed=seed) for mu in (0, 0.1) for seed in (0, 1)]
    scores = tuning_scores(map(read_run, paths), ["feddane"], 0.25)
    assert len(scores) == 4 and set(scores["seed"]) == {0, 1}
    assert (scores["score"] == 0.5).all()


def test_summarise_keeps_every_seed(tmp_path):
    paths = [fake_run(tmp_path, method="fedprox", mu=1, seed=s) for s in (0, 1, 2)]
    paths.append(fake_run(tmp_path, mu=0, losses=[3, math.nan, 1]))
    table = summarise(paths)
    assert len(table) == 4
    assert sorted(table.loc[table["method"] == "fedprox", "seed"]) == [0, 1, 2]
    diverged = table.loc[table["method"] == "feddane", "diverged_round"]
    assert diverged.iloc[0] == 1 and table["diverged_round"].isna().sum() == 3


def test_runs_table_has_tail_means_beside_the_final_values(tmp_path):
    table = summarise([fake_run(tmp_path, losses=[4, 3, 2, 1, 0.5]), fake_run(tmp_path, seed=1, losses=[4, 2, math.inf])],
                      fraction=0.5)
    ok, diverged = table.iloc[0], table.iloc[1]
    assert ok["final_train_loss"] == 0.5 and ok["tail_train_loss"] == pytest.approx(0.75)
    assert ok["tail_test_acc"] == pytest.approx(np.linspace(0.1, 0.8, 5)[3:].mean())
    assert diverged["tail_train_loss"] == math.inf and math.isnan(diverged["tail_test_acc"])


def test_a_new_result_setting_becomes_a_tuning_group_column():
    """The columns come from RunConfig's fields: a setting added there cannot merge tuning groups."""
    grown = dataclasses.make_dataclass(
        "Grown", [("momentum", int, setting(0, check=COUNT, help="a new setting")),
                  ("workers", int, setting(1, check=COUNT, role=EXECUTION, help="how, not what"))],
        bases=(RunConfig,), frozen=True)
    assert "momentum" in group_columns(setting_columns(grown))
    assert "workers" not in setting_columns(grown)
    assert setting_columns(grown)[:-1] == setting_columns()


def test_runs_table_columns_keep_their_order():
    assert setting_columns()[:15] == ["dataset", "method", "mu", "clients_per_round", "epochs", "seed", "rounds",
                                      "lr", "batch_size", "selection", "second_subset", "options", "rng", "init",
                                      "theory"]
    assert not {"engine", "device", "dtype", "threads", "load", "data"} & set(setting_columns())
    assert "eval_devices" in GROUP_COLUMNS


def test_runs_evaluated_on_another_sample_tune_apart(tmp_path):
    """Metrics over a sample of devices are another measurement: eval_devices is a tuning-group key,
    and all devices (None) a key like any other ("", never NaN)."""
    runs = [fake_run(tmp_path, mu=0, losses=[3, 0.1]), fake_run(tmp_path, mu=1, losses=[3, 0.2]),
            fake_run(tmp_path, mu=0, losses=[3, 0.2], eval_devices=5),
            fake_run(tmp_path, mu=1, losses=[3, 0.1], eval_devices=5)]
    table = tune(runs, ["feddane"], fraction=0.5).set_index("eval_devices")
    assert table["chosen"].to_dict() == {"": 0, 5: 1}
    assert list(summarise(runs)["eval_devices"]) == ["", 5, "", 5]


def test_findings_give_each_curves_seed_spread_rank_and_whether_every_seed_agrees(tmp_path):
    runs = [fake_run(tmp_path, method="fedavg", seed=s, losses=[3, 2, 1.0, 0.6 + s / 10]) for s in (0, 1)]
    runs += [fake_run(tmp_path, method="fedprox", mu=1, seed=s, losses=[3, 2, 1.5, 0.5 + s]) for s in (0, 1)]
    runs += [fake_run(tmp_path, mu=0.1, seed=s, losses=[3, 2, 3.0, 4.0]) for s in (0, 1)]
    table = findings(runs, fraction=0.5).set_index("method")
    # tails (last 2 of 4 rounds): FedAvg 0.8 / 0.85, FedProx 1.0 / 1.5, FedDANE 3.5 / 3.5
    assert table.loc["fedavg", ["tail_train_loss", "tail_train_loss_min", "tail_train_loss_max"]].tolist() == \
        pytest.approx([0.825, 0.8, 0.85])
    assert table["seeds"].tolist() == [2, 2, 2] and table["diverged_seeds"].tolist() == [0, 0, 0]
    assert table["rank"].to_dict() == {"fedavg": 1, "fedprox": 2, "feddane": 3}
    assert table["rank_every_seed"].all()
    # a seed that swaps FedAvg and FedProx: their order is noise, FedDANE's last place is not
    runs.append(fake_run(tmp_path, method="fedprox", mu=1, seed=2, losses=[3, 2, 0.1, 0.1]))
    runs.append(fake_run(tmp_path, method="fedavg", seed=2, losses=[3, 2, 1.0, 1.0]))
    runs.append(fake_run(tmp_path, mu=0.1, seed=2, losses=[3, 2, 3.0, 4.0]))
    table = findings(runs, fraction=0.5).set_index("method")
    assert table["rank_every_seed"].to_dict() == {"fedavg": False, "fedprox": False, "feddane": True}


def test_findings_rank_a_run_without_a_finite_loss_after_every_finite_one(tmp_path):
    """NaN data: FedAvg's loss is NaN from round 0, FedDANE's leaves the reals at round 2; FedProx, the
    only finite curve, is first, and the two others tie behind it, never ahead."""
    nan = math.nan
    runs = [fake_run(tmp_path, method="fedavg", losses=[nan] * 5),
            fake_run(tmp_path, method="fedprox", mu=1, losses=[3, 2, 1.5, 1, 0.8]),
            fake_run(tmp_path, mu=0.01, losses=[3, 5, math.inf, math.inf, math.inf])]
    table = findings(runs, fraction=0.5)
    assert table["method"].tolist()[0] == "fedprox"
    assert table.set_index("method")["rank"].to_dict() == {"fedprox": 1, "fedavg": 2, "feddane": 2}
    assert table.set_index("method")["diverged_seeds"].to_dict() == {"fedprox": 0, "fedavg": 1, "feddane": 1}
    assert (table.set_index("method").loc[["fedavg", "feddane"], "tail_train_loss"] == math.inf).all()


def test_a_curve_whose_tail_is_nan_ranks_last():
    """The ranking itself: NaN (no tail at all) sorts after every finite tail, as inf does."""
    from fedsim.outputs.summary import panel_ranks

    stats = pd.DataFrame({"dataset": ["d"] * 4, "tail_train_loss": [math.nan, 0.5, math.inf, 0.2]})
    assert panel_ranks(stats, ["dataset"]).tolist() == [3, 2, 3, 1]


def test_findings_keep_settings_apart_and_refuse_a_method_at_several_mu(tmp_path):
    runs = [fake_run(tmp_path, method="fedavg", K=k, losses=[3, 2, 1, 1]) for k in (1, 5)]
    runs += [fake_run(tmp_path, mu=0.1, K=k, losses=[3, 2, 2, float("inf")]) for k in (1, 5)]
    table = findings(runs, fraction=0.5)
    assert table[["clients_per_round", "method", "rank"]].values.tolist() == [
        [1, "fedavg", 1], [1, "feddane", 2], [5, "fedavg", 1], [5, "feddane", 2]]
    assert table.loc[table["method"] == "feddane", "diverged_seeds"].tolist() == [1, 1]
    with pytest.raises(ValueError, match="several values of its setting"):
        findings(runs + [fake_run(tmp_path, mu=1, K=1, losses=[3, 2, 1, 1])], fraction=0.5)


def test_findings_across_k_rank_every_k_of_a_dataset_in_one_panel(tmp_path):
    """The successors' figure: a method that needs every device (K = 30) beside sampling ones (K = 10)."""
    runs = [fake_run(tmp_path, method="fedavg", K=10, losses=[3, 2, 1.0]),
            fake_run(tmp_path, method="fedprox", mu=1, K=10, losses=[3, 2, 2.0]),
            fake_run(tmp_path, method="fedavg", K=30, losses=[3, 2, 0.5])]
    apart = findings(runs, fraction=0.5)
    assert apart[["clients_per_round", "rank"]].values.tolist() == [[10, 1], [10, 2], [30, 1]]  # a first each
    together = findings(runs, fraction=0.5, across_k=True)
    assert together[["clients_per_round", "method", "rank"]].values.tolist() == [
        [30, "fedavg", 1], [10, "fedavg", 2], [10, "fedprox", 3]]


def test_findings_carry_the_figures_label_and_say_where_a_tuned_value_sits_in_its_grid(tmp_path):
    """FedAdam, not fedopt; a value chosen at the top of its grid may hide a better one beyond it. The
    grid is its setting's in chosen_settings.csv, or (a value taken from another experiment's tuning, at another
    K) the one that chose it."""
    dane = {mu: fake_run(tmp_path, mu=mu, losses=[3, 2, loss]) for mu, loss in ((0, 2.0), (0.1, 1.5), (1, 1.0))}
    adam = {lr: fake_run(tmp_path, method="fedopt", losses=[3, 2, loss], options={"server_lr": lr})
            for lr, loss in ((0.01, 1.2), (0.1, 0.9), (1, 1.1))}
    tuned = tmp_path / "chosen_settings.csv"
    assert cli.main(["tune", "--methods", "feddane", "fedopt", "--fraction", "0.5", "--out", str(tuned),
                     *dane.values(), *adam.values()]) == 0
    figure = [dane[1], adam[0.1], fake_run(tmp_path, method="fedavg", losses=[3, 2, 1.3]),
              fake_run(tmp_path, method="fedprox", mu=1, losses=[3, 2, 1.4]),
              fake_run(tmp_path, mu=1, K=5, losses=[3, 2, 1.6])]  # FedDANE at K = 5 with K = 10's mu
    out = tmp_path / "findings.csv"
    assert cli.main(["findings", "--fraction", "0.5", "--tuned", str(tuned), "--out", str(out), *figure]) == 0
    table = read_csv(out)
    rows = {(r["method"], r["clients_per_round"]): r for r in table.to_dict("records")}
    assert {key: (r["label"], r["grid_edge"]) for key, r in rows.items()} == {
        ("feddane", 10): ("FedDANE", "highest"), ("fedopt", 10): ("FedAdam", "inside"),
        ("fedavg", 10): ("FedAvg", ""), ("fedprox", 10): ("FedProx", ""), ("feddane", 5): ("FedDANE", "highest")}
    assert list(table.columns[:13]) == ["dataset", "clients_per_round", "epochs", "rounds", "method", "label",
                                        "setting", "value", "lr", "tuned", "grid_edge", "lr_edge", "seeds"]
    assert {key: r["tuned"] for key, r in rows.items()} == {
        ("feddane", 10): "mu 1", ("fedopt", 10): "server lr 0.1", ("fedavg", 10): "-", ("fedprox", 10): "mu 1 (fixed)",
        ("feddane", 5): "mu 1"}
    assert set(table["lr_edge"]) == {""}  # no lr grid: the lr was not tuned
    assert set(findings(figure, fraction=0.5)["grid_edge"]) == {""}  # no tuning given: nothing to say
