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
        hardness=hardness_summary,
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
        hardness_p=report(
            "reports/figures/hardness_vs_P.png",
            caption="../report/hardness.rst",
            category="Hardness",
        ),
        hardness_m=report(
            "reports/figures/hardness_vs_m.png",
            caption="../report/hardness.rst",
            category="Hardness",
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
