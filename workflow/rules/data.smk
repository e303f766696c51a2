# Datasets: one HDF5 file per dataset under results/datasets/.


rule generate_synthetic:
    """Generate one synthetic dataset of the FedProx paper (IID or (alpha, beta))."""
    input:
        code=package_code(DATA_CODE),
    output:
        dataset_path(),
    params:
        args=lambda wildcards: synthetic_args(wildcards.dataset),
    wildcard_constraints:
        dataset=alternatives(datasets_of_kind("synthetic")),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=1024,
        runtime=10,
    log:
        log_path("generate_synthetic", "{dataset}"),
    benchmark:
        benchmark_path("generate_synthetic", "{dataset}")
    shell:
        "python -m fedsim.warm generate-synthetic --name {wildcards.dataset} {params.args} "
        "--out {output} > {log} 2>&1"
