"""The report describes the run that was made (fedsim.planning.captions, workflow/report/*.rst): a custom
experiment's captions name its own methods, tuned settings and grids, its datasets and the files where
its selection put them, and the paper's findings stand only beside the paper's own experiments. It
used to describe the paper's run whatever ran: FedDANE and the authors' code beside FedAvg and FedDyn,
the paper's finding under a figure of neither, FedDANE's mu grid for FedDyn's alpha, findings under
results/summary/ when the selection wrote them under results/only-mine/, and "partitioned (LEAF)" data."""

from __future__ import annotations

import copy

import pytest

from fedsim.planning import captions
from fedsim.planning.configcheck import check_config
from fedsim.planning.experiments import selected_experiments
from helpers.workflow import REPO, _schema, copy_workflow, default_config, report_text, snakemake, write_config

PAPERS_WORDS = ("FedDANE", "authors' code", "Paper's finding", "The paper shows")


def mine_config():
    """The docs' custom experiment (`figure: figure1`) of FedAvg and FedDyn, FedDyn's alpha tuned over one
    value, on one small synthetic set, run as a selection (its outputs under results/only-mine/)."""
    cfg = default_config()
    cfg["seeds"] = [0]
    cfg["datasets"] = {"synthetic_iid": dict(cfg["datasets"]["synthetic_iid"], rounds=3)}
    cfg["experiments"] = {"mine": {"figure": "figure1", "datasets": ["synthetic_iid"], "methods": ["fedavg", "feddyn"],
                                   "clients_per_round": 2, "epochs": 1, "grids": {"feddyn": [0.01]}}}
    cfg["only_experiments"] = ["mine"]
    return cfg


def checked(cfg):
    """A config as the workflow holds it: checked, its defaults filled in, its selection made."""
    cfg = copy.deepcopy(cfg)
    check_config(cfg, copy.deepcopy(_schema()), str(REPO), [str(REPO / "config" / "config.yaml")])
    cfg["experiments"] = selected_experiments(cfg)
    return cfg


def test_a_custom_experiments_captions_are_of_its_own_methods_grids_and_data():
    cfg = checked(mine_config())
    figure = captions.figure(cfg, "mine", "FINDINGS.csv", "TUNED.csv")
    words = " ".join(vars(figure).values())
    assert figure.methods == "FedAvg and FedDyn" and figure.findings == "FINDINGS.csv"
    assert figure.settings == "FedAvg: mu = 0; FedDyn: alpha tuned over [0.01] in each setting (the tuned values: " \
                              "TUNED.csv)."
    assert not any(word in words for word in PAPERS_WORDS), words
    # FedDyn's default, its paper's plain mean over devices, minimises another loss than the curves show
    assert "FedDyn runs its paper's plain mean over devices (weighting: paper)" in figure.notes
    aligned = mine_config()
    aligned["method_options"] = {"feddyn": {"weighting": "samples"}}
    assert "weighting" not in captions.figure(checked(aligned), "mine", "F", "T").notes
    tuning = captions.tuning(cfg)
    assert tuning.methods == "FedDyn" and tuning.grids == "alpha over [0.01]: FedDyn (mine)" and tuning.reuse == ""
    assert not any(word in " ".join(vars(tuning).values()) for word in PAPERS_WORDS)
    front = captions.front_page(cfg, "results/only-mine")
    assert front["datasets"] == "generated as in the FedProx paper: ``synthetic_iid`` (IID, 30 devices)"
    assert front["methods"] == "FedAvg and FedDyn" and front["tuning"] == tuning.grids
    assert not any(word in " ".join(front.values()) for word in PAPERS_WORDS + ("LEAF",))


def test_the_papers_experiments_keep_the_papers_findings():
    """figure1-3 of the default config are the paper's (its figure, its methods, its kinds of data): their
    captions carry its finding and what FedDANE and the authors' term are; `beyond` describes its own methods."""
    cfg = checked(default_config())
    for name in ("figure1", "figure2", "figure3"):
        figure = captions.figure(cfg, name, "F", "T")
        assert figure.finding.startswith(f"Paper's finding (Figure {name[-1]})"), figure.finding
        assert "\"FedDANE, authors' correction\" is the correction term the authors' code computed" in figure.notes
        assert figure.exchanges.endswith("as in the paper, it is plotted as one.")
    assert "the mu tuned in figure1 on the same dataset" in captions.figure(cfg, "figure2", "F", "T").settings
    beyond = captions.figure(cfg, "beyond", "F", "T")
    assert beyond.finding == "" and "authors' code" not in beyond.notes and "SCAFFOLD (Karimireddy" in beyond.notes
    assert "tau = 20 rounds" in beyond.notes
    assert captions.tuning(cfg).reuse == "Experiments figure2 and figure3 reuse the values chosen in figure1 for " \
                                         "their dataset."
    # the paper's figure of other methods, or on data of another kind, is not the paper's
    other = copy.deepcopy(cfg)
    other["experiments"]["figure1"]["methods"] = ["fedavg", "feddane"]
    assert not captions.is_papers(other, "figure1")
    other = copy.deepcopy(cfg)
    other["datasets"]["synthetic_1_1"] = {"kind": "arrays"}  # not in figure2
    assert not captions.is_papers(other, "figure1") and captions.is_papers(other, "figure2")


@pytest.mark.workflow
def test_a_custom_experiments_report_describes_its_run(tmp_path):
    """One real run of the custom experiment and its report: the captions Snakemake renders name the
    selection's files, FedDyn's alpha and its grid, and nothing of FedDANE or the paper's findings."""
    workdir = copy_workflow(tmp_path / "wf", with_src=True)
    write_config(workdir, mine_config())
    code, out = snakemake(workdir, "--cores", "2")
    assert code == 0, out
    code, out = snakemake(workdir, "--report", "report.html")
    assert code == 0, out
    front, caption = report_text(workdir / "report.html")
    figure = caption["results/only-mine/figures/mine.png"]
    assert "results/only-mine/summary/findings_mine.csv" in figure and "results/summary/" not in figure, figure
    assert "FedAvg: mu = 0; FedDyn: alpha tuned over [0.01]" in figure, figure
    for path in ("results/only-mine/figures/tuning.png", "results/only-mine/summary/chosen_settings.csv"):
        assert "alpha over [0.01]: FedDyn (mine)" in caption[path], caption[path]
        assert "[0, 0.001, 0.01, 0.1, 1]" not in caption[path], caption[path]
    for path, text in caption.items():
        assert not any(word in text for word in PAPERS_WORDS), (path, text)
    assert "LEAF" not in front and "authors' code" not in front, front
    assert "generated as in the FedProx paper: synthetic_iid" in front and "Methods: FedAvg and FedDyn." in front, front
    assert "results/only-mine" in front, front
