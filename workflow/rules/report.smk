# Aggregate every result table into reports/: results.csv (the single source), report.md and
# the self-contained report.html, figures, summary.json, metrics.json (dvc metrics) and
# plots/recall_at_k.csv (dvc plots). Its outputs are listed here only: rule all takes them, and
# tests/workflow/test_workflow.py checks that dvc.yaml's report stage tracks exactly these.


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
        html=reported("reports/report.html", "Report"),
        summary="reports/summary.json",
        metrics="reports/metrics.json",
        recall_csv="reports/plots/recall_at_k.csv",
        recall_png=reported("reports/figures/recall_at_k.png", "Retrieval"),
        gap_png=reported("reports/figures/capacity_gap.png", "Capacity"),
        scatter_png=reported("reports/figures/train_vs_heldout.png", "Fine-tuning"),
        slack_png=reported("reports/figures/probe_slack.png", "Capacity"),
        curves_png=reported("reports/figures/finetune_curves.png", "Fine-tuning"),
        hardness_p=reported("reports/figures/hardness_vs_P.png", "Hardness"),
        hardness_m=reported("reports/figures/hardness_vs_m.png", "Hardness"),
        compression_png=reported("reports/figures/compression.png", "Compression"),
        # not flagged for Snakemake's --report: it would need workflow/report/near_miss.rst
        near_miss_png=reported("reports/figures/near_miss.png", "Near-miss"),
        ladder_png=reported("reports/figures/ladder.png", "Ladder"),
    log:
        "logs/report/report.log",
    benchmark:
        "benchmarks/rules/report/report.tsv"
    conda:
        "../../envs/report.yaml"
    params:
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
        config=canonical(config),
        models={name: enc["model"] for name, enc in config["encoders"].items()},
        colbert_model=config["colbert"]["model"],
    script:
        "../scripts/report.py"
