# Tables: the planned runs, FedDANE's tuned mu, and one row per training run.


rule plan:
    """The runs table before tuning as CSV (fedsim.planning.jobs.planned_runs_csv): what the DAG will train, with
    every setting that shapes a run's result and the run's folder. Rewritten when the table changes
    (its digest is a param), so `snakemake results/summary/planned_runs.csv` shows a config's
    runs before any training."""
    output:
        summary_path("planned_runs.csv"),
    params:
        digest=hashlib.sha256(planned_runs_csv().encode()).hexdigest(),
    localrule: True
    threads: 1
    resources:
        mem_mb=256,
        runtime=1,
    log:
        log_path("plan", "planned_runs"),
    run:
        write_plan(output[0], log[0])


checkpoint tune:
    """Pick each tuned method's mu by its mean training loss over the last rounds, per setting.
    A checkpoint: the runs of experiments with `mu_from` are known only once it has run."""
    input:
        runs=info_paths(tuning_runs()),
        metrics=metrics_paths(tuning_runs()),
        code=code_fingerprint("outputs.summary"),
    output:
        report(
            summary_path(CHOSEN_SETTINGS),
            caption="../report/chosen_settings.rst",
            category="Tables",
        ),
    params:
        methods=" ".join(tuned_methods()),
        fraction=lookup(dpath="tuning/fraction", within=config),
        caption=tuning_caption,  # the report's (common.smk)
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=1024,
        runtime=10,
    log:
        log_path("tune", "chosen_settings"),
    benchmark:
        benchmark_path("tune", "chosen_settings")
    shell:
        "python -m fedsim.warm tune --methods {params.methods} --fraction {params.fraction}"
        " --out {output} {input.runs} > {log} 2>&1"


rule summarise:
    """One row per training run (settings, final metrics, divergence) in one table."""
    input:
        # the runs known before tuning: in the DAG from the start, so they need not wait
        known=info_paths(all_runs()),
        runs=infos_of(summary_runs),
        metrics=metrics_of(summary_runs),
        code=code_fingerprint("outputs.summary"),
    output:
        report(
            summary_path("runs.csv"),
            caption="../report/runs.rst",
            category="Tables",
        ),
    params:
        fraction=lookup(dpath="tuning/fraction", within=config),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=1024,
        runtime=10,
    log:
        log_path("summarise", "runs"),
    benchmark:
        benchmark_path("summarise", "runs")
    shell:
        "python -m fedsim.warm summarise --fraction {params.fraction} --out {output} {input.runs} > {log} 2>&1"


rule findings:
    """A figure in numbers: per setting and curve, the tail means over the seeds, their min and
    max, the ranking by tail loss, whether every seed alone ranks the same and whether a tuned
    value sits at its grid's edge."""
    input:
        tuned=tuned_inputs,
        runs=infos_of(figure_runs),
        metrics=metrics_of(figure_runs),
        code=code_fingerprint("outputs.summary"),
    output:
        report(
            summary_path("findings_{experiment}.csv"),
            caption="../report/findings.rst",
            category="Tables",
            labels={"table": "findings", "figure": "{experiment}"},
        ),
    params:
        fraction=lookup(dpath="tuning/fraction", within=config),
        # the successors' figure holds every K of a dataset in one panel (full-participation methods)
        panels=lambda w: "--across-k" if config["experiments"][w.experiment]["figure"] == "successors" else "",
        tuned=lambda wildcards, input: f"--tuned {input.tuned}" if input.tuned else "",
    wildcard_constraints:
        experiment=alternatives(figure_experiments()),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=1024,
        runtime=10,
    log:
        log_path("findings", "{experiment}"),
    benchmark:
        benchmark_path("findings", "{experiment}")
    shell:
        "python -m fedsim.warm findings --fraction {params.fraction} {params.panels} {params.tuned} --out {output}"
        " {input.runs}"
        " > {log} 2>&1"


rule tables:
    """The findings as the docs' Markdown tables (fedsim.outputs.tables), naming the commit that rendered them and
    the config: rerunning both reproduces them."""
    input:
        findings=summary_path("findings_{experiment}.csv"),
        code=code_fingerprint("outputs.summary"),
    output:
        summary_path("tables_{experiment}.md"),
    params:
        config=lambda wildcards: shlex.quote(config_text()),
    wildcard_constraints:
        experiment=alternatives(figure_experiments()),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=512,
        runtime=5,
    log:
        log_path("tables", "{experiment}"),
    benchmark:
        benchmark_path("tables", "{experiment}")
    shell:
        "python -m fedsim.warm tables --findings {input.findings} --config {params.config} --out {output} > {log} 2>&1"
