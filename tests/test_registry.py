"""The method registry: one file per method is all the rest of fedsim needs, and the paper's
methods keep their results (tests/reference, made before the registry existed)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedsim.methods import ENTRIES, REGISTRY, LABELS, Method, resolve, variant_of
from fedsim.core.train import RunConfig, run

sys.path.insert(0, str(Path(__file__).parent / "reference"))
import make_method_reference as reference  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture
def data(tiny_data):
    return tiny_data(8)


@pytest.mark.parametrize("engine", reference.ENGINES)
@pytest.mark.parametrize("case", reference.CASES)
def test_the_papers_methods_keep_their_results(data, case, engine):
    """float64 metrics of short runs equal those the code before the registry wrote (to 1e-12: the
    same arithmetic; the margin is for another CPU's vector width in the kernel's sums)."""
    metrics, _ = run(reference.case_config(data, case, engine))
    expected = pd.read_csv(Path(reference.HERE) / f"{case}-{engine}.csv")
    assert set(expected.columns) <= set(metrics.columns)  # later columns (the costs) added, none lost
    np.testing.assert_allclose(metrics[expected.columns].to_numpy(dtype=float), expected.to_numpy(dtype=float), rtol=1e-12, atol=0)


def test_every_method_module_declares_a_method_named_after_its_file():
    folder = SRC / "fedsim" / "methods"
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    assert set(REGISTRY) == modules
    for method in REGISTRY.values():
        assert isinstance(method, Method) and method.label
        assert method.exchanges >= 1
    assert len(set(LABELS.values())) == len(LABELS)  # every curve its own legend entry


def test_the_registry_is_read_without_torch():
    """The workflow reads it at every snakemake call, and the summary and figure jobs need no model:
    importing torch there would cost seconds."""
    code = ("import sys, fedsim.methods, fedsim.cli, fedsim.planning.experiments, fedsim.planning.configcheck, fedsim.planning.jobs, fedsim.planning.cost, "
            "fedsim.outputs.summary, fedsim.outputs.figures; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(SRC)}, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_variants_resolve_to_their_method_and_back():
    for name, entry in ENTRIES.items():
        method, options = resolve(name)
        assert method == entry.method.name and set(options) == set(entry.method.options)
        assert variant_of({"method": method, "options": options}) == name
        assert variant_of({"method": name, "options": json.dumps(options)}) == name  # a runs.csv row


def test_an_unknown_name_is_refused_with_the_method_its_label_names():
    with pytest.raises(ValueError, match=r"^unknown method 'FedAdam' \(FedAdam is fedopt\); choose one of dane, "):
        resolve("FedAdam")
    with pytest.raises(ValueError, match=r"^unknown method 'fedsgd'; choose one of dane, "):
        resolve("fedsgd")


def test_a_variant_name_becomes_method_and_options_in_the_run_config():
    config = RunConfig(data="d.h5", method="feddane_authors")
    assert config.method == "feddane" and config.options == {"correction": "authors"}
    assert RunConfig(data="d.h5", method="feddane").options == {"correction": "exact"}


@pytest.mark.parametrize("options, message", [
    ({"decay": 1}, "bad method option 'decay': feddane takes correction"),
    ({"correction": "bias"}, "correction='bias': expected one of exact, authors"),
])
def test_bad_method_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        RunConfig(data="d.h5", method="feddane", options=options)


def test_the_cli_offers_every_method_and_variant():
    from fedsim.cli import build_parser

    train = build_parser()._subparsers._group_actions[0].choices["train"]
    method = next(a for a in train._actions if a.dest == "method")
    assert list(method.choices) == list(ENTRIES)


@pytest.mark.parametrize("text, value", [("False", False), ("false", False), ("0", False), ("True", True),
                                         ("1", True)])
def test_a_yes_no_option_reads_command_line_text(text, value):
    """--option adaptive=False must mean False (bool("False") is True)."""
    assert RunConfig(data="d.h5", method="sdane", options={"adaptive": text}).options["adaptive"] is value


def test_a_yes_no_option_refuses_other_text():
    with pytest.raises(ValueError, match="adaptive='maybe'"):
        RunConfig(data="d.h5", method="sdane", options={"adaptive": "maybe"})
