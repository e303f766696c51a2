# LEAF datasets (FEMNIST, Shakespeare) built from local raw files, and the table of every
# dataset of the config (devices, samples per device), as in the papers' dataset table.


rule prepare_shakespeare:
    """LEAF's Shakespeare from a local copy of the Gutenberg e-book (`raw`) or a `mirror`
    folder, fetched like a download (hashed copy), then LEAF's non-IID sampling."""
    input:
        raw=lambda wildcards: leaf_raw_inputs(wildcards.dataset),
        code=package_code(LEAF_CODE + ("leaf/shakespeare.py", "leaf/niid.py")),
    output:
        dataset_path(),
    params:
        args=lambda wildcards: shakespeare_args(wildcards.dataset),
    wildcard_constraints:
        dataset=alternatives(datasets_of_kind("shakespeare")),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=4096,
        runtime=15,
    log:
        log_path("prepare_shakespeare", "{dataset}"),
    benchmark:
        benchmark_path("prepare_shakespeare", "{dataset}")
    shell:
        "python -m fedsim.warm prepare-shakespeare --name {wildcards.dataset} {params.args} "
        "--out {output} > {log} 2>&1"


rule prepare_femnist:
    """FedProx's FEMNIST (letters a-j, 200 devices) from a pool of LEAF JSON files."""
    input:
        json=lambda wildcards: leaf_raw_inputs(wildcards.dataset),
        code=package_code(LEAF_CODE + ("leaf/femnist.py",)),
    output:
        dataset_path(),
    params:
        variant=lambda wildcards: dataset_cfg(wildcards.dataset)["variant"],
        seed=lambda wildcards: dataset_cfg(wildcards.dataset)["seed"],
    wildcard_constraints:
        dataset=alternatives(datasets_of_kind("femnist")),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=4096,
        runtime=15,
    log:
        log_path("prepare_femnist", "{dataset}"),
    benchmark:
        benchmark_path("prepare_femnist", "{dataset}")
    shell:
        "python -m fedsim.warm prepare-femnist --name {wildcards.dataset} --json {input.json} "
        "--variant {params.variant} --seed {params.seed} --out {output} > {log} 2>&1"


rule datasets_table:
    """results/summary/datasets.csv: devices and samples per device of every dataset."""
    input:
        datasets=[dataset_path(name) for name in config["datasets"]],
        code=package_code(("leaf/stats.py", "data.py")),
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
