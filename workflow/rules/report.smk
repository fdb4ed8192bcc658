# Aggregate every result table into reports/: results.csv, report.md, figure, summary.json.


onsuccess:
    report_unavailable()


rule all_results:
    # Every experiment, no report: the target of the DVC 'experiments' stage.
    input:
        result_tables,


rule report:
    input:
        tables=result_tables,
        data=status_files,
        curves=curve_files,
    output:
        csv="reports/results.csv",
        md="reports/report.md",
        summary="reports/summary.json",
        figure=report(
            "reports/figures/recall_at_k.png",
            caption="../report/recall_at_k.rst",
            category="Retrieval",
        ),
        curves=report(
            "reports/figures/finetune_curves.png",
            caption="../report/finetune_curves.rst",
            category="Fine-tuning",
        ),
    params:
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
    log:
        "logs/report/report.log",
    benchmark:
        "benchmarks/rules/report/report.tsv"
    threads: 1
    resources:
        mem_mb=2000,
    conda:
        "../../envs/capgap.yaml"
    script:
        "../scripts/report.py"
