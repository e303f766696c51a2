# Figures: one per experiment that names a `figure` (the package's plotting command).


rule figure:
    """Plot one experiment (training loss vs rounds), FedDANE at its tuned mu."""
    input:
        unpack(figure_inputs),
    output:
        pdf=figure_path(ext="pdf"),
        png=report(
            figure_path(ext="png"),
            caption="../report/figure.rst",
            category="Figures",
            labels={"figure": "{experiment}"},
        ),
    params:
        command=lambda wildcards: config["experiments"][wildcards.experiment]["figure"],
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
        "python -m fedsim {params.command} --tuned {input.tuned} --out {output.pdf}"
        " {input.runs} > {log} 2>&1"
