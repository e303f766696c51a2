# Figures: one per experiment that names a `figure` (the package's plotting command), with
# its test-accuracy companion, and the tuning figure (why FedDANE runs at its mu).


rule figure:
    """Plot one experiment (training loss, and test accuracy beside it), FedDANE at its
    tuned mu."""
    input:
        tuned=tuned_inputs,
        runs=infos_of(figure_runs),
        metrics=metrics_of(figure_runs),
        code=code_fingerprint("outputs.figures"),
    output:
        pdf=figure_path(),
        png=report(
            figure_path(ext="png"),
            caption="../report/figure.rst",
            category="Figures",
            labels={"figure": "{experiment}", "metric": "training loss"},
        ),
        acc_pdf=figure_path(metric="test_acc"),
        acc_png=report(
            figure_path(ext="png", metric="test_acc"),
            caption="../report/figure_test_acc.rst",
            category="Figures",
            labels={"figure": "{experiment}", "metric": "test accuracy"},
        ),
    params:
        command=lookup(dpath="experiments/{experiment}/figure", within=config),
        tuned=lambda wildcards, input: f"--tuned {input.tuned}" if input.tuned else "",
        x_axis=lookup(dpath="figures/x_axis", within=config),
        caption=figure_caption,  # the report's (common.smk)
    wildcard_constraints:
        experiment=alternatives(figure_experiments()),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=2048,
        runtime=10,
    log:
        log_path("figure", "{experiment}"),
    benchmark:
        benchmark_path("figure", "{experiment}")
    shell:
        "(python -m fedsim.warm {params.command} {params.tuned} --x-axis {params.x_axis}"
        " --out {output.pdf} {input.runs}"
        " && python -m fedsim.warm {params.command} {params.tuned} --x-axis {params.x_axis}"
        " --metric test_acc --out {output.acc_pdf} {input.runs}) > {log} 2>&1"


rule tuning_figure:
    """Each tuned method's tail training loss (the tuning criterion) against its setting and client lr, per dataset."""
    input:
        runs=info_paths(tuning_runs()),
        metrics=metrics_paths(tuning_runs()),
        tuned=summary_path(CHOSEN_SETTINGS),
        code=code_fingerprint("outputs.figures"),
    output:
        pdf=figure_path("tuning"),
        png=report(
            figure_path("tuning", "png"),
            caption="../report/tuning.rst",
            category="Figures",
            labels={"figure": "tuning", "metric": "training loss"},
        ),
    params:
        fraction=lookup(dpath="tuning/fraction", within=config),
        caption=tuning_caption,  # the report's (common.smk)
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=2048,
        runtime=10,
    log:
        log_path("tuning_figure", "tuning"),
    benchmark:
        benchmark_path("tuning_figure", "tuning")
    shell:
        "python -m fedsim.warm tuning-figure --tuned {input.tuned} --fraction {params.fraction}"
        " --out {output.pdf} {input.runs} > {log} 2>&1"


rule theory_figure:
    """Theorem 1 on the data: where its sufficient-decrease constant rho is positive, and whether
    the observed loss decrease follows the bound, per dataset and mu."""
    input:
        runs=infos_of(theory_runs),
        metrics=metrics_of(theory_runs),
        code=code_fingerprint("outputs.figures"),
    output:
        pdf=figure_path(),
        png=report(
            figure_path(ext="png"),
            caption="../report/theory.rst",
            category="Figures",
            labels={"figure": "{experiment}", "metric": "sufficient decrease"},
        ),
    wildcard_constraints:
        experiment=alternatives(figure_experiments(theory=True)),
    conda:
        "../envs/fedsim.yaml"
    threads: 1
    resources:
        mem_mb=2048,
        runtime=10,
    log:
        log_path("theory_figure", "{experiment}"),
    benchmark:
        benchmark_path("theory_figure", "{experiment}")
    shell:
        "python -m fedsim.warm theory-figure --out {output.pdf} {input.runs} > {log} 2>&1"
