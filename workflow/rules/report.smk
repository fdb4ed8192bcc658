# Aggregate every result table into reports/: results.csv (the single source), report.md and
# the self-contained report.html, figures, summary.json, metrics.json (dvc metrics) and
# plots/recall_at_k.csv (dvc plots).


onsuccess:
    report_unavailable()


rule all_results:
    # Every experiment, no report: the target of the DVC 'experiments' stage. The data status of
    # every dataset (available or not) is part of it, so the report stage adds nothing to results/.
    input:
        result_tables,
        status_files,


rule report:
    input:
        tables=result_tables,
        data=status_files,
        curves=curve_files,
        hardness=hardness_summary,
        per_query=probe_per_query_files,
        fingerprints=fingerprint_files,
        runs=pretrained_run_files,
    output:
        csv="reports/results.csv",
        md="reports/report.md",
        html=report(
            "reports/report.html",
            caption="../report/report_html.rst",
            category="Report",
        ),
        summary="reports/summary.json",
        metrics="reports/metrics.json",
        recall_csv="reports/plots/recall_at_k.csv",
        recall_png=report(
            "reports/figures/recall_at_k.png",
            caption="../report/recall_at_k.rst",
            category="Retrieval",
        ),
        gap_png=report(
            "reports/figures/capacity_gap.png",
            caption="../report/capacity_gap.rst",
            category="Capacity",
        ),
        scatter_png=report(
            "reports/figures/train_vs_heldout.png",
            caption="../report/train_vs_heldout.rst",
            category="Fine-tuning",
        ),
        slack_png=report(
            "reports/figures/probe_slack.png",
            caption="../report/probe_slack.rst",
            category="Capacity",
        ),
        curves_png=report(
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
    log:
        "logs/report/report.log",
    benchmark:
        "benchmarks/rules/report/report.tsv"
    conda:
        "../../envs/report.yaml"
    threads: rule_threads("report")
    resources:
        mem_mb=rule_resource("report", "mem_mb"),
        runtime=rule_resource("report", "runtime"),
        gpu=rule_resource("report", "gpu"),
    params:
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
        config=canonical(config),
        models={name: enc["model"] for name, enc in config["encoders"].items()},
        colbert_model=config.get("colbert", {}).get(
            "model", "sentence-transformers/all-MiniLM-L6-v2"
        ),
    script:
        "../scripts/report.py"
