"""The Snakemake workflow under test: a temporary copy of Snakefile, workflow/ and config/ (so the
repository's results/ and .snakemake/ are never touched), Snakemake run on it in a subprocess with
PYTHONPATH pointing at the repository's src/ (no `pip install -e .` needed), and the workflow's
config check run in this process, for the many malformed configs that need no Snakemake process.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
CONFIG = Path("config") / "config.yaml"  # the workflow's own config file, relative to its folder


def env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    env["FEDSIM_WARM_IDLE"] = "10"  # the jobs' warm server (fedsim.warm) ends soon after the test's run
    return env


def snakemake(workdir, *args, timeout=600):
    """Run snakemake in `workdir`; returns (exit code, stdout + stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=workdir,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    return proc.returncode, proc.stdout


def job_counts(output):
    """The 'Job stats' table of a (dry) run as {rule: count}."""
    counts = {}
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Job stats:")
    for line in lines[start + 3 :]:
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if not match:
            break
        counts[match[1]] = int(match[2])
    return counts


def copy_workflow(dest, with_src=False):
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "Snakefile", dest / "Snakefile")
    for folder in ("workflow", "config"):
        shutil.copytree(REPO / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__"))
    if with_src:
        # A checkout with code of its own: the rules' code fingerprints hash it, and Snakemake and
        # the jobs import it before the repository's src/ (workflow/rules/checkout.smk). Its numba
        # cache comes along (tests/conftest.py fills it): numba keys it on each source file's time
        # and size, which the copy keeps, so the copy's jobs load the kernels instead of compiling
        # them; a file a test then edits is compiled anew. Python's own bytecode is left behind, and
        # the files other processes are still writing there (numba's NAME.tmp.UUID, Python's
        # NAME.pyc.ID), which may be renamed away between the listing and the copy.
        shutil.copytree(SRC, dest / "src", ignore=shutil.ignore_patterns("*.pyc", "*.tmp.*", "*.pyc.*"))
    return dest


def default_config():
    """The repository's config/config.yaml, a fresh copy to edit."""
    return copy.deepcopy(_read_default_config())


@functools.cache
def _read_default_config():
    with open(REPO / CONFIG) as handle:
        return yaml.safe_load(handle)


def write_config(workdir, cfg):
    (workdir / CONFIG).parent.mkdir(parents=True, exist_ok=True)
    with open(workdir / CONFIG, "w") as handle:
        yaml.safe_dump(cfg, handle, sort_keys=False)


# ---------------------------------------------------------------------------------------
# The config check without a Snakemake process
# ---------------------------------------------------------------------------------------


def config_error(workdir):
    """The `Config error ...` line that `snakemake` in `workdir` would stop with, or None where the
    config passes. The same steps as the Snakefile before any rule, in this process (a Snakemake
    process costs seconds): the YAML syntax check of config/config.yaml (workflow/rules/yaml_files.smk),
    Snakemake's own loading of it (the `configfile:` directive), then workflow/rules/common.smk's
    check_config and selected_experiments, with the workflow folder as the working directory."""
    from snakemake.common.configfile import load_configfile
    from snakemake.utils import update_config

    from fedsim.planning.configcheck import check_config
    from fedsim.planning.experiments import ConfigError, selected_experiments

    workdir = Path(workdir).resolve()
    with contextlib.chdir(workdir):
        try:
            _yaml_files_smk()["check_yaml_syntax"](str(CONFIG))
        except SystemExit as stop:  # the Snakefile stops with the message as its exit status
            return str(stop.code)
        config = {}
        update_config(config, load_configfile(str(CONFIG)))
        try:
            check_config(config, copy.deepcopy(_schema()), str(workdir), [str(CONFIG)])
            selected_experiments(config)
        except ConfigError as err:
            return str(err)
    return None


@functools.cache
def _schema():
    """common.smk's SCHEMA (parsing it costs more than a check: read once)."""
    from fedsim.planning.configcheck import load_schema

    return load_schema(REPO / "workflow" / "schemas" / "config.schema.yaml")


@functools.cache
def _yaml_files_smk():
    """workflow/rules/yaml_files.smk's definitions (it is plain Python: imports and a function, no rules)."""
    path = REPO / "workflow" / "rules" / "yaml_files.smk"
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace


# ---------------------------------------------------------------------------------------
# A built report's words
# ---------------------------------------------------------------------------------------


def report_text(report_html):
    """(front page, {file's path: caption}) of a `snakemake --report` HTML file, as plain text (tags
    dropped, entities read): the report holds both as JavaScript values after its scripts (`var
    workflow_desc = "..."`, `var results = {...}`), JSON but for the string's line continuations."""
    import html
    import json

    source = Path(report_html).read_text().replace("\\\n", "")
    decoder = json.JSONDecoder()

    def value(name):
        return decoder.raw_decode(source, source.rindex(f"var {name} = ") + len(f"var {name} = "))[0]

    def plain(text):
        return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", text))).strip()

    return plain(value("workflow_desc")), {path: plain(entry["caption"]) for path, entry in value("results").items()}
