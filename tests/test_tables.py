"""The docs' tables from a figure's findings (fedsim.outputs.tables): what each cell says, and the line naming
the commit and config they came from."""

import math
import subprocess

from fedsim import cli
from fedsim.outputs.tables import checkout_commit, read_findings, render

from helpers.run_records import fake_run


def rendered(tmp_path, runs, tuned=None, across_k=True):
    out = tmp_path / "findings.csv"
    args = ["findings", "--fraction", "0.5", *(["--across-k"] if across_k else []), "--out", str(out), *runs]
    assert cli.main(args + (["--tuned", str(tuned)] if tuned else [])) == 0
    tables = tmp_path / "tables.md"
    assert cli.main(["tables", "--findings", str(out), "--commit", "abc1234", "--config", "config/x.yaml",
                     "--source", "results/summary/findings_x.csv", "--out", str(tables)]) == 0
    return tables.read_text()


def rows_of(text):
    return {cells[1]: cells for line in text.splitlines() if line.startswith("| ") and not line.startswith("| rank")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}


def test_a_table_ranks_each_method_with_its_seeds_range_and_what_it_cost(tmp_path):
    """Two seeds: a range per cell and `*` where the seeds rank a method differently; a diverged seed
    says so; a full-participation method names its K; the first line names the commit and config."""
    runs = [fake_run(tmp_path, method="fedavg", seed=s, losses=[3, 2, 1.0 + s]) for s in (0, 1)]
    runs += [fake_run(tmp_path, method="scaffold", seed=s, losses=[3, 2, 1.5 - s]) for s in (0, 1)]
    runs += [fake_run(tmp_path, method="fedprox", mu=1, seed=s, losses=[3, 2, 9 if s else math.inf]) for s in (0, 1)]
    runs += [fake_run(tmp_path, method="dane", K=30, seed=s, losses=[3, 2, 0.1]) for s in (0, 1)]
    text = rendered(tmp_path, runs)
    assert text.splitlines()[0] == ("Rendered by `python -m fedsim tables` from `results/summary/findings_x.csv` "
                                    "(commit abc1234; config: config/x.yaml).")
    assert "**synthetic_0_0** (K = 10, E = 20, 2 rounds, 2 seeds):" in text
    assert text.count("`*`: the seeds alone rank this curve differently") == 1
    rows = rows_of(text)
    assert rows["DANE (K = 30)"][:5] == ["1", "DANE (K = 30)", "mu 0", "0.100 (0.100)", "0.800 (0.800)"]
    assert rows["SCAFFOLD"][:4] == ["2", "SCAFFOLD", "-", "1.000 (0.500-1.500) *"]
    assert rows["FedAvg"][:4] == ["3", "FedAvg", "-", "1.500 (1.000-2.000) *"]
    assert rows["FedProx"][2:5] == ["mu 1 (fixed)", "diverged (1 of 2 seeds)", "-"]
    assert rows["FedAvg"][5:] == ["-", "-", "-"]  # records from before the costs were counted
    counted = read_findings(tmp_path / "findings.csv").assign(vectors_down=1000, vectors_up=1500,
                                                               gradient_evaluations=[2.5e6, 4e5, 3e5, 2e5])
    rows = rows_of(render(counted, "f.csv", "abc1234", "c.yaml"))
    assert "gradients / run (M)" in render(counted, "f.csv", "abc1234", "c.yaml")
    assert [cells[6:] for cells in rows.values()] == [["2,500", "2.50"], ["2,500", "0.40"], ["2,500", "0.30"],
                                                      ["2,500", "0.20"]]


def test_a_figure_of_a_panel_per_k_has_a_table_per_k(tmp_path):
    """Figure 2's panels: one K each, ranked apart; each gets its own heading and ranks from 1, and no
    note on `*` where no seed disagrees."""
    runs = [fake_run(tmp_path, method=method, K=K, losses=[3, 2, loss + K / 100])
            for K in (10, 30) for method, loss in (("fedavg", 1.0), ("scaffold", 0.5))]
    text = rendered(tmp_path, runs, across_k=False)
    headings = [line for line in text.splitlines() if line.startswith("**")]
    assert headings == ["**synthetic_0_0** (K = 10, E = 20, 2 rounds, 1 seed):",
                        "**synthetic_0_0** (K = 30, E = 20, 2 rounds, 1 seed):"]
    ranks = [line.split("|")[1:3] for line in text.splitlines() if line.startswith("| ") and "rank" not in line]
    assert [[c.strip() for c in r] for r in ranks] == [["1", "SCAFFOLD"], ["2", "FedAvg"]] * 2
    assert "`*`" not in text


def test_the_tables_follow_the_figures_order_of_datasets(tmp_path):
    """IID first, then by rising heterogeneity, as the figures' panels: not the names' alphabetical order."""
    runs = [fake_run(tmp_path, method="fedavg", dataset=name, alpha=alpha, iid=iid)
            for name, alpha, iid in (("synthetic_0.5_0.5", 0.5, False), ("synthetic_0_0", 0.0, False),
                                     ("synthetic_iid", 0.0, True))]
    headings = [line.split("**")[1] for line in rendered(tmp_path, runs).splitlines() if line.startswith("**")]
    assert headings == ["synthetic_iid", "synthetic_0_0", "synthetic_0.5_0.5"]


def test_an_edge_of_a_tuning_grid_is_named(tmp_path):
    dane = {mu: fake_run(tmp_path, mu=mu, losses=[3, 2, loss]) for mu, loss in ((0.1, 1.5), (1, 1.0))}
    tuned = tmp_path / "chosen_settings.csv"
    assert cli.main(["tune", "--methods", "feddane", "--fraction", "0.5", "--out", str(tuned), *dane.values()]) == 0
    assert rows_of(rendered(tmp_path, [dane[1]], tuned))["FedDANE"][2:6] == ["mu 1", "1.000", "0.800", "mu highest"]


def test_a_grid_of_one_value_is_named_as_the_findings_name_it(tmp_path):
    """A tuning grid of one value: findings' grid_edge says `only`, and so does the table's edge cell
    (it said `-`, as for a value inside its grid)."""
    dane = fake_run(tmp_path, mu=0.01, losses=[3, 2, 1.0])
    tuned = tmp_path / "chosen_settings.csv"
    assert cli.main(["tune", "--methods", "feddane", "--fraction", "0.5", "--out", str(tuned), dane]) == 0
    row = rows_of(rendered(tmp_path, [dane], tuned))["FedDANE"]
    assert read_findings(tmp_path / "findings.csv")["grid_edge"].tolist() == ["only"]
    assert row[2:6] == ["mu 0.01", "1.000", "0.800", "mu only (one-value grid)"]


def test_the_commit_is_the_checkouts_and_says_where_it_differs(tmp_path):
    assert checkout_commit(tmp_path) == "unknown (not a git checkout)"
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    (tmp_path / "a.txt").write_text("1")
    for args in (["init", "-q"], ["add", "a.txt"], ["commit", "-qm", "a"]):
        subprocess.run(git + args, check=True)
    head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert checkout_commit(tmp_path) == head
    (tmp_path / "a.txt").write_text("2")
    assert checkout_commit(tmp_path) == f"{head} with local changes"


def test_the_tables_go_to_the_screen_without_out_or_with_a_dash(tmp_path, capsys, monkeypatch):
    """`fedsim tables --findings F` prints them; `--out -` too, and writes no file named `-`."""
    text = rendered(tmp_path, [fake_run(tmp_path, method="fedavg", seed=0, losses=[3, 2, 1.0])])
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)
    given = ["tables", "--findings", "findings.csv", "--commit", "abc1234", "--config", "config/x.yaml",
             "--source", "results/summary/findings_x.csv"]
    for out in ([], ["--out", "-"]):
        assert cli.main(given + out) == 0
        assert capsys.readouterr().out == text
    assert not (tmp_path / "-").exists()
