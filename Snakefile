# Reproduces "FedDANE: A Federated Newton-Type Method" (Li et al., 2019) with fedsim.
#   snakemake --cores 2            # the default run (config/config.yaml): Figures 1-3, synthetic
#   snakemake --report report.html # after a run: figures and tables with captions
# The rules live in workflow/rules/; every path is built in workflow/rules/common.smk.

from snakemake.utils import min_version


# This checkout's src/ first, for Snakemake and its jobs, before any fedsim import.
include: "workflow/rules/checkout.smk"


import os  # noqa: E402

from fedsim.planning import rescheduling  # noqa: E402

min_version("8.20")
# Snakemake starts one more scheduler timer per finished job; keep one (fedsim/planning/rescheduling.py).
# FEDSIM_RESCHEDULING=0 leaves Snakemake's scheduler as it is (to measure what the patch saves).
rescheduling.install(enabled=os.environ.get("FEDSIM_RESCHEDULING") != "0")


include: "workflow/rules/yaml_files.smk"


check_working_directory()
check_yaml_syntax("config/config.yaml")


configfile: "config/config.yaml"


# Helpers; validates the config against workflow/schemas/config.schema.yaml (one-line
# error naming the bad key) and fills in the schema's defaults.
include: "workflow/rules/common.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/resources.smk"
include: "workflow/rules/code.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/leaf.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/summary.smk"
include: "workflow/rules/figures.smk"


report: "workflow/report/workflow.rst"


rule all:
    """Every table and figure of the configured experiments."""
    input:
        final_targets(),
    default_target: True
