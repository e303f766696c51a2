# Before Snakemake reads the config files: a YAML syntax error in one is ONE line naming the file
# and the line (Snakemake's own message names neither). Files given with --configfile are read by
# Snakemake before this Snakefile runs, so only its own config file can be checked here.

import sys
from pathlib import Path

import yaml


def check_working_directory():
    """The configs' paths (config/config.yaml, results/, ../shared/) are relative to the workflow's
    folder: a run from elsewhere (`snakemake -s path/to/Snakefile`) is refused in one line."""
    here, home = Path.cwd().resolve(), Path(workflow.basedir).resolve()
    if here != home:
        sys.exit(f"Run snakemake in the workflow's folder: cd {home} (its configs' paths are relative to it; "
                 f"this one is {here})")


def check_yaml_syntax(path):
    try:
        with open(path) as handle:
            yaml.safe_load(handle)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else path
        sys.exit(f"Config error in {where}: {err.problem or err.context} (YAML syntax)")
    except OSError:
        pass  # a missing file is Snakemake's to report
