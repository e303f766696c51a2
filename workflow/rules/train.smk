# Training: one job per (dataset, method, mu or the method's tuned option, K, E, run tag: rounds and model,
# theory tag, seed).
# A job killed mid-run (walltime, lost node) continues from its checkpoint when rerun or retried: the
# checkpoint is a param, not an output, so Snakemake's cleanup of a failed job keeps it. Its runtime is
# the run's cost estimate with a margin, or simulator.max_runtime where lower; then `retries` (common.smk)
# takes the run through as many jobs as it needs.
# lr, batch size, the dataset's rounds, selection, second subset, the method's fedsim name and
# correction term, rng, subnormals kept, the init file's path, device, eval_devices, eval_every, model and load are params (the init
# file itself an input): changing one of them reruns the runs it touches. Threads are not: a CPU run gives the same result
# whatever its thread count.


rule train:
    """Train one federated run and write its per-round metrics and run record."""
    input:
        data=dataset_path(),
        code=lambda wildcards: train_code(wildcards.method) + model_code(wildcards.dataset),
        init=lambda wildcards: init_files(wildcards.seed),
    output:
        metrics=metrics_path(),
        info=info_path(),
    params:
        lr=lambda wildcards: fmt(tag_lr(wildcards.dataset, wildcards.T)),
        batch_size=lookup(dpath="datasets/{dataset}/batch_size", within=config),
        rounds=lambda wildcards: tag_rounds(wildcards.dataset, wildcards.T),
        selection=lookup(dpath="simulator/selection", within=config),
        second_subset=lookup(dpath="simulator/second_subset", within=config),
        run_args=lambda wildcards: run_args(wildcards.method, wildcards.seed),
        setting=lambda wildcards: setting_args(wildcards.method, wildcards.mu),
        device=lambda wildcards: train_device(wildcards.dataset),
        eval_args=lambda wildcards: eval_args(wildcards.dataset),
        model=lambda wildcards: model_args(wildcards.T),
        theory=lambda wildcards: "--theory" if wildcards.theory else "",
        checkpoint=lambda w: checkpoint_path(w.dataset, w.method, w.mu, w.K, w.E, w.T, w.theory, w.seed),
    conda:
        "../envs/fedsim.yaml"
    threads: config["simulator"]["threads"]
    retries: TRAIN_RETRIES
    resources:
        mem_mb=lambda wildcards: train_mem_mb(wildcards.dataset),
        runtime=lambda w: train_runtime(w.dataset, w.method, w.K, w.E, w.T, w.theory),
        gpu=lambda wildcards: train_gpus(wildcards.dataset),
        checkpoint_every=TRAIN_CHECKPOINT_EVERY,
        checkpoint_seconds=TRAIN_CHECKPOINT_SECONDS,
    log:
        log_path("train", run_stem()),
    benchmark:
        benchmark_path("train", run_stem())
    shell:
        "python -m fedsim.warm train --data {input.data}"
        " {params.run_args} {params.setting}"
        " --clients-per-round {wildcards.K} --epochs {wildcards.E}"
        " --batch-size {params.batch_size} --lr {params.lr} --rounds {params.rounds}"
        " --seed {wildcards.seed} --selection {params.selection}"
        " --second-subset {params.second_subset}"
        " --device {params.device} --threads {threads} {params.eval_args} {params.model}"
        " {params.theory}"
        " --checkpoint {params.checkpoint} --checkpoint-every {resources.checkpoint_every}"
        " --checkpoint-seconds {resources.checkpoint_seconds}"
        " --metrics {output.metrics} --info {output.info} > {log} 2>&1"
