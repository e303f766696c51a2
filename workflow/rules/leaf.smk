# Raw sources fetched (network, mirror or local copy; checksummed) for the kinds built from them (the
# LEAF datasets), and the table of every dataset of the experiments (devices, samples per device), as
# in the papers' dataset table.


rule download:
    """One raw source file, from its local copy, mirror folder or base URL; kept only once its
    checksums passed (see `sources` in the config)."""
    input:
        lambda wildcards: fetch_inputs(wildcards.source),
    output:
        raw_path(),
    params:
        args=lambda wildcards: fetch_args(wildcards.source, wildcards.file),
    wildcard_constraints:
        source=alternatives(config["sources"]),
        file=r"[^/]+",
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=512,
        runtime=120,
    log:
        log_path("download", "{source}/{file}"),
    benchmark:
        benchmark_path("download", "{source}/{file}")
    shell:
        "python -m fedsim.warm fetch {wildcards.source} --out {output} {params.args} > {log} 2>&1"


rule datasets_table:
    """results/summary/datasets.csv: devices and samples per device of every dataset."""
    input:
        datasets=[dataset_path(name) for name in used_datasets()],
        code=code_fingerprint("data.leaf.stats"),
    output:
        summary_path("datasets.csv"),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=2048,
        runtime=10,
    log:
        log_path("datasets_table", "datasets"),
    benchmark:
        benchmark_path("datasets_table", "datasets")
    shell:
        "python -m fedsim.warm datasets-table --out {output} {input.datasets} > {log} 2>&1"
