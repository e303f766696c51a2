"""pytest tests the checkout it runs in: its src/ comes before any fedsim installed from another
checkout (pyproject.toml's `pythonpath`), as the workflow runs its own (tests/test_workflow.py)."""

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CLONE_TEST = '''
from pathlib import Path

import fedsim
from fedsim.methods import REGISTRY


def test_this_checkouts_fedsim():
    assert Path(fedsim.__file__).resolve().is_relative_to(Path(__file__).resolve().parents[1] / "src")
    assert "local_only" in REGISTRY
'''


def clone_with_a_method_of_its_own(dest: Path, pyproject: str) -> Path:
    """A second checkout: this one's pyproject.toml (as given) and src/, plus a method only it has,
    and one test that asks for it."""
    dest.mkdir()
    (dest / "pyproject.toml").write_text(pyproject)
    shutil.copytree(REPO / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (dest / "src" / "fedsim" / "methods" / "local_only.py").write_text(
        '"""FedAvg under another name: a method only this checkout has."""\n\n'
        "from . import Method, fedavg\n\n"
        'METHOD = Method(name="local_only", label="Only here", local_problem=fedavg.local_problem)\n')
    (dest / "tests").mkdir()
    (dest / "tests" / "test_clone.py").write_text(CLONE_TEST)
    return dest


def pytest_in(checkout: Path) -> subprocess.CompletedProcess:
    """`python -m pytest` in `checkout`, as a user runs it there: no PYTHONPATH (this run's points here);
    in one process (`-n 0`): the import path is under test here, not the workers."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0"], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=300)


def test_pytest_in_a_second_checkout_tests_that_checkouts_code(tmp_path):
    pyproject = (REPO / "pyproject.toml").read_text()
    done = pytest_in(clone_with_a_method_of_its_own(tmp_path / "clone", pyproject))
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
    # the setting is what does it: without it the same clone's test imports another fedsim, or none
    lines = [line for line in pyproject.splitlines() if not line.startswith("pythonpath")]
    assert len(lines) == len(pyproject.splitlines()) - 1
    done = pytest_in(clone_with_a_method_of_its_own(tmp_path / "without", "\n".join(lines) + "\n"))
    assert done.returncode != 0, done.stdout


def requirement_name(requirement: str) -> str:
    """A requirement's distribution name, normalised (PEP 503): "Jinja2>=3; extra == 'x'" -> "jinja2"."""
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9._-]+)", requirement).group(1)).lower()


def test_the_install_has_what_snakemakes_report_needs():
    """`snakemake --report` after the README's install (`pip install torch==... -e .`): every package
    Snakemake's report refuses without ("Python package X must be installed to create reports") is
    installed by Snakemake itself or by fedsim's own dependencies (not only by an extra: pytest's pulls
    pygments in, which is why the report tests in test_workflow.py pass where the README's install fails)."""
    import snakemake.report

    needed = set()
    for source in Path(snakemake.report.__file__).parent.rglob("*.py"):
        needed |= {name.lower() for name in
                   re.findall(r"Python package (\S+) must be installed to create reports", source.read_text())}
    assert "pygments" in needed  # the search finds what it looks for
    snakemakes = {requirement_name(r) for r in importlib.metadata.requires("snakemake") or () if "extra ==" not in r}
    ours = {requirement_name(r) for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]}
    assert needed <= snakemakes | ours, f"the report needs {sorted(needed - snakemakes - ours)}, which the install lacks"
