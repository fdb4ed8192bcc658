# Lexical baseline: BM25 (bm25s by default, rank-bm25 selectable).


rule bm25:
    input:
        data=rules.data.output[0],
    output:
        metrics="results/{dataset}/bm25/metrics.csv",
        run="results/{dataset}/bm25/run.trec",
    log:
        "logs/bm25/{dataset}.log",
    benchmark:
        "benchmarks/rules/bm25/{dataset}.tsv"
    conda:
        "../../envs/baselines.yaml"
    params:
        bm25=settings(config, "bm25"),
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
    script:
        "../scripts/bm25.py"
