# LEAF datasets (FEMNIST, Shakespeare, Sent140): raw sources fetched (network, mirror or local
# copy; checksummed), built as the FedProx paper sampled them, and the table of every dataset of
# the experiments (devices, samples per device), as in the papers' dataset table.


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


rule prepare_shakespeare:
    """LEAF's Shakespeare from the Gutenberg e-book, then LEAF's non-IID sampling."""
    input:
        unpack(lambda wildcards: dataset_inputs(wildcards.dataset)),
        code=code_fingerprint("leaf.shakespeare"),
    output:
        dataset_path(),
    params:
        args=lambda wildcards: leaf_args(wildcards.dataset),
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
        "python -m fedsim.warm prepare-shakespeare --name {wildcards.dataset} --raw {input.raw}"
        " {params.args} --out {output} > {log} 2>&1"


rule prepare_femnist:
    """FedProx's FEMNIST (letters a-j, 200 devices) from a pool of LEAF JSON files or from
    NIST's by_class.zip."""
    input:
        unpack(lambda wildcards: dataset_inputs(wildcards.dataset)),
        code=code_fingerprint("leaf.femnist"),
    output:
        dataset_path(),
    params:
        source=lambda wildcards: "--json" if "json" in dataset_cfg(wildcards.dataset) else "--nist",
        args=lambda wildcards: leaf_args(wildcards.dataset),
    wildcard_constraints:
        dataset=alternatives(datasets_of_kind("femnist")),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=4096,
        runtime=30,
    log:
        log_path("prepare_femnist", "{dataset}"),
    benchmark:
        benchmark_path("prepare_femnist", "{dataset}")
    shell:
        "python -m fedsim.warm prepare-femnist --name {wildcards.dataset} {params.source} {input.raw}"
        " {params.args} --out {output} > {log} 2>&1"


rule prepare_femnist62:
    """LEAF's own FEMNIST (62 classes, one device per writer) from LEAF data folders (a writer
    several hold taken from one) or from NIST's by_class.zip and by_write.zip, sampled as LEAF does."""
    input:
        unpack(lambda wildcards: dataset_inputs(wildcards.dataset)),
        code=code_fingerprint("leaf.femnist62"),
    output:
        dataset_path(),
    params:
        source=lambda wildcards: "--json" if "json" in dataset_cfg(wildcards.dataset) else "--nist",
        args=lambda wildcards: leaf_args(wildcards.dataset),
    wildcard_constraints:
        dataset=alternatives(datasets_of_kind("femnist62")),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=8192,
        runtime=120,
    log:
        log_path("prepare_femnist62", "{dataset}"),
    benchmark:
        benchmark_path("prepare_femnist62", "{dataset}")
    shell:
        "python -m fedsim.warm prepare-femnist62 --name {wildcards.dataset} {params.source} {input.raw}"
        " {params.args} --out {output} > {log} 2>&1"


rule prepare_sent140:
    """LEAF's Sent140 from Sentiment140's CSVs, tokenised over GloVe (the embedding rows that
    occur are stored in the dataset file)."""
    input:
        unpack(lambda wildcards: dataset_inputs(wildcards.dataset)),
        code=code_fingerprint("leaf.sent140"),
    output:
        dataset_path(),
    params:
        args=lambda wildcards: leaf_args(wildcards.dataset),
    wildcard_constraints:
        dataset=alternatives(datasets_of_kind("sent140")),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=8192,
        runtime=60,
    log:
        log_path("prepare_sent140", "{dataset}"),
    benchmark:
        benchmark_path("prepare_sent140", "{dataset}")
    shell:
        "python -m fedsim.warm prepare-sent140 --name {wildcards.dataset} --raw {input.raw}"
        " --glove {input.glove} {params.args} --out {output} > {log} 2>&1"


rule datasets_table:
    """results/summary/datasets.csv: devices and samples per device of every dataset."""
    input:
        datasets=[dataset_path(name) for name in used_datasets()],
        code=code_fingerprint("leaf.stats"),
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
