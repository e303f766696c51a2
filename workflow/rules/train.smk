# Training: one job per run, its one wildcard the run's folder (fedsim.planning.experiments.run_path); the runs
# table's record of it (run_record: dataset, method, its setting's value, client lr, K, E, rounds, model, theory,
# seed) becomes `fedsim train`'s options in one place (fedsim.planning.jobs.train_args), with what its dataset
# entry and the simulator section say: batch size, selection, second subset, the method's options, rng,
# subnormals kept, the init file's path, device, load, eval_devices, eval_every, dissimilarity. They are one
# param (the init file itself an input): changing one of them reruns the runs it touches. Threads are not:
# a CPU run gives the same result whatever its thread count.
# A job killed mid-run (walltime, lost node) continues from its checkpoint when rerun or retried: the
# checkpoint is a param, not an output, so Snakemake's cleanup of a failed job keeps it. Its runtime is
# the run's cost estimate with a margin, or simulator.max_runtime where lower; then `retries` (common.smk)
# takes the run through as many jobs as it needs.


rule train:
    """Train one federated run and write its per-round metrics and run record."""
    input:
        data=lambda wildcards: dataset_path(run_record(wildcards.run).dataset),
        code=lambda w: train_code(run_record(w.run).method) + model_code(run_record(w.run).dataset),
        init=lambda wildcards: init_files(run_record(wildcards.run).seed),
    output:
        metrics=metrics_path(),
        info=info_path(),
    params:
        run=lambda wildcards: train_args(run_record(wildcards.run)),
        checkpoint=lambda wildcards: checkpoint_path(wildcards.run),
    conda:
        "../envs/fedsim.yaml"
    threads: config["simulator"]["threads"]
    retries: TRAIN_RETRIES
    resources:
        mem_mb=lambda wildcards: train_mem_mb(run_record(wildcards.run).dataset),
        runtime=lambda wildcards: train_runtime(run_record(wildcards.run)),
        gpu=lambda wildcards: train_gpus(run_record(wildcards.run).dataset),
        checkpoint_every=TRAIN_CHECKPOINT_EVERY,
        checkpoint_seconds=TRAIN_CHECKPOINT_SECONDS,
    log:
        log_path("train", "{run}"),
    benchmark:
        benchmark_path("train", "{run}")
    shell:
        "python -m fedsim.warm train --data {input.data} {params.run} --threads {threads}"
        " --checkpoint {params.checkpoint} --checkpoint-every {resources.checkpoint_every}"
        " --checkpoint-seconds {resources.checkpoint_seconds}"
        " --metrics {output.metrics} --info {output.info} > {log} 2>&1"
