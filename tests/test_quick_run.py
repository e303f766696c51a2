"""README's "First five minutes": its command, read from the README, plans one dataset, one seed and
a few rounds, and the outputs the section names (a dry run in a copy of the workflow)."""

from __future__ import annotations

import re
import shlex

import pytest

from helpers.workflow import REPO, copy_workflow, job_counts, snakemake

pytestmark = pytest.mark.workflow


def readme_section(heading: str) -> str:
    text = (REPO / "README.md").read_text()
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_quick_run_plans_one_dataset_one_seed_and_few_rounds(tmp_path):
    section = readme_section("First five minutes")
    (command,) = re.findall(r"```bash\n(.*?)\n```", section, re.S)
    argv = shlex.split(command)
    assert argv[0] == "snakemake" and "--cores" in argv, command
    workdir = copy_workflow(tmp_path / "wf")
    code, out = snakemake(workdir, "--dry-run", "--printshellcmds", *argv[1:])
    assert code == 0, out
    counts = job_counts(out)
    trains = re.findall(r"python -m fedsim\.warm train [^\n]*", out)
    assert counts["build_dataset"] == 1 and counts["train"] == len(trains) <= 12, counts
    datasets = {re.search(r"--data (\S+)", job)[1] for job in trains}
    assert len(datasets) == 1, datasets
    assert {re.search(r"--seed (\d+)", job)[1] for job in trains} == {"0"}
    assert {int(re.search(r"--rounds (\d+)", job)[1]) for job in trains} == {20}
    # what the section says the run writes is what it plans
    named = re.findall(r"`(results/[^`]*)`", section)
    figures = [path for path in named if path.endswith("/figures/")]
    expected = [path for path in named if not path.endswith("/")]
    expected += [folder + name for folder in figures for name in re.findall(r"`([\w.]+\.png)`", section)]
    assert len(expected) >= 3 and all(path in out for path in expected), [p for p in expected if p not in out]


def test_ci_runs_the_readmes_test_command():
    """CI (.ci/run) runs the README's test command, both its steps, and nothing that narrows the
    suite: the command that passes on CI is the one a reader runs."""
    text = (REPO / "README.md").read_text()
    (command,) = re.findall(r"Install and run the tests:\n\n```bash\n(.*?)\n```", text, re.S)
    install, tests = command.split(" && ")
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines() if not line.lstrip().startswith("#")]
    assert install in ci, ci
    assert any(line.startswith(tests) and line[len(tests):].strip() in ("", "|| status=$?") for line in ci), ci
