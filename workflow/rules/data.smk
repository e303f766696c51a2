# Datasets: one HDF5 file per dataset under results/datasets/.


rule generate_synthetic:
    """Generate one synthetic dataset of the FedProx paper (IID or (alpha, beta))."""
    input:
        code=code_fingerprint("synthetic"),
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


rule import_json:
    """Import a dataset given as LEAF-format JSON (the authors' released data/ folders)."""
    input:
        unpack(lambda wildcards: dataset_inputs(wildcards.dataset)),
        code=code_fingerprint("leaf.leafjson"),
    output:
        dataset_path(),
    params:
        args=lambda wildcards: json_args(wildcards.dataset),
    wildcard_constraints:
        dataset=alternatives(datasets_of_kind("json")),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=4096,
        runtime=20,
    log:
        log_path("import_json", "{dataset}"),
    benchmark:
        benchmark_path("import_json", "{dataset}")
    shell:
        "python -m fedsim.warm import-json --name {wildcards.dataset} --train {input.train}"
        " --test {input.test} {params.args} --out {output} > {log} 2>&1"


rule import_arrays:
    """Import a user's .npz of arrays (x, y; optional device, test): a dataset, or a pool to partition."""
    input:
        unpack(lambda wildcards: dataset_inputs(wildcards.dataset)),
        code=code_fingerprint("arrays"),
    output:
        dataset_path(),
    params:
        args=lambda wildcards: arrays_args(wildcards.dataset),
    wildcard_constraints:
        dataset=alternatives(datasets_of_kind("arrays")),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=8192,
        runtime=20,
    log:
        log_path("import_arrays", "{dataset}"),
    benchmark:
        benchmark_path("import_arrays", "{dataset}")
    shell:
        "python -m fedsim.warm import-arrays --name {wildcards.dataset} --npz {input.raw} {params.args}"
        " --out {output} > {log} 2>&1"


rule partition_dirichlet:
    """A Dirichlet label partition of another dataset's train and test rows into N devices
    (per class over the devices, or per device over the classes)."""
    input:
        unpack(lambda wildcards: dataset_inputs(wildcards.dataset)),
        code=code_fingerprint("partition"),
    output:
        dataset_path(),
    params:
        args=lambda wildcards: dirichlet_args(wildcards.dataset),
    wildcard_constraints:
        dataset=alternatives(datasets_of_kind("dirichlet")),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=8192,
        runtime=30,
    log:
        log_path("partition_dirichlet", "{dataset}"),
    benchmark:
        benchmark_path("partition_dirichlet", "{dataset}")
    shell:
        "python -m fedsim.warm partition-dirichlet --name {wildcards.dataset} --pool {input.pool}"
        " {params.args} --out {output} > {log} 2>&1"


rule build_dataset:
    """A dataset of a kind declared in a file of its own (a plugin's kinds/: fedsim.planning.kinds), by its build."""
    input:
        files=lambda wildcards: dataset_inputs(wildcards.dataset).get("raw", []),
        code=lambda wildcards: code_fingerprint("planning.kinds") + kind_code(wildcards.dataset),
    output:
        dataset_path(),
    params:
        entry=lambda wildcards: declared_entry(wildcards.dataset),
    wildcard_constraints:
        dataset=alternatives([name for name, entry in config["datasets"].items() if kinds.KINDS[entry["kind"]].build]),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=8192,
        runtime=30,
    log:
        log_path("build_dataset", "{dataset}"),
    benchmark:
        benchmark_path("build_dataset", "{dataset}")
    shell:
        "python -m fedsim.warm build-dataset --name {wildcards.dataset} --entry {params.entry:q}"
        " --files {input.files} --out {output} > {log} 2>&1"
