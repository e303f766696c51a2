# Datasets: one HDF5 file per dataset under results/datasets/, each built by its kind (fedsim.kinds).


rule build_dataset:
    """A dataset entry, built by its kind's build (fedsim/kinds/<kind>.py, or a plugin's) from the files
    its kind declares: raw sources, files its entry names, another dataset it pools."""
    input:
        unpack(lambda wildcards: dataset_inputs(wildcards.dataset)),
        code=lambda wildcards: kind_code(wildcards.dataset),
    output:
        dataset_path(),
    params:
        entry=lambda wildcards: build_entry(wildcards.dataset),
        files=lambda wildcards: build_files(dataset_inputs(wildcards.dataset)),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=lambda wildcards: dataset_kind(wildcards.dataset).mem_mb,
        runtime=lambda wildcards: dataset_kind(wildcards.dataset).runtime,
    log:
        log_path("build_dataset", "{dataset}"),
    benchmark:
        benchmark_path("build_dataset", "{dataset}")
    shell:
        "python -m fedsim.warm build-dataset --name {wildcards.dataset} --entry {params.entry:q} {params.files}"
        " --out {output} > {log} 2>&1"
