# Lexical baseline: BM25 (bm25s by default, rank-bm25 selectable).


rule bm25:
    input:
        data="results/{dataset}/data",
    output:
        metrics="results/{dataset}/bm25/metrics.csv",
        run="results/{dataset}/bm25/run.trec",
    log:
        "logs/bm25/{dataset}.log",
    benchmark:
        "benchmarks/rules/bm25/{dataset}.tsv"
    conda:
        "../../envs/baselines.yaml"
    threads: rule_threads("bm25")
    resources:
        mem_mb=rule_resource("bm25", "mem_mb"),
        runtime=rule_resource("bm25", "runtime"),
        gpu=rule_resource("bm25", "gpu"),
    params:
        bm25=canonical({k: v for k, v in config["bm25"].items() if k != "enabled"}),
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
    script:
        "../scripts/bm25.py"
