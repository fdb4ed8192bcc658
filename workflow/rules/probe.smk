# The capacity probe: a per-query ranking SVM (cutting plane) on the frozen index.


rule probe:
    input:
        data="results/{dataset}/data",
        fingerprint="results/{dataset}/{encoder}/index/fingerprint.json",
        embeddings="results/{dataset}/{encoder}/index/embeddings.npy",
    output:
        metrics="results/{dataset}/{encoder}/probe/metrics.csv",
        per_query="results/{dataset}/{encoder}/probe/per_query.jsonl",
    params:
        probe=canonical({k: v for k, v in config["probe"].items() if k != "enabled"}),
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
    log:
        "logs/probe/{dataset}/{encoder}.log",
    benchmark:
        "benchmarks/rules/probe/{dataset}/{encoder}.tsv"
    threads: 8
    resources:
        mem_mb=8000,
    conda:
        "../../envs/capgap.yaml"
    script:
        "../scripts/probe.py"
