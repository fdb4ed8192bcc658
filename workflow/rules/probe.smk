# The capacity probe: a per-query ranking SVM (cutting plane) on the frozen index.


rule probe:
    input:
        data="results/{dataset}/data",
        fingerprint="results/{dataset}/{encoder}/index/fingerprint.json",
        embeddings="results/{dataset}/{encoder}/index/embeddings.npy",
    output:
        metrics="results/{dataset}/{encoder}/probe/metrics.csv",
        per_query="results/{dataset}/{encoder}/probe/per_query.jsonl",
        run="results/{dataset}/{encoder}/probe/run.trec",
    log:
        "logs/probe/{dataset}/{encoder}.log",
    benchmark:
        "benchmarks/rules/probe/{dataset}/{encoder}.tsv"
    conda:
        "../../envs/probe.yaml"
    threads: rule_threads("probe")
    resources:
        mem_mb=rule_resource("probe", "mem_mb"),
        runtime=rule_resource("probe", "runtime"),
        gpu=rule_resource("probe", "gpu"),
    params:
        encoder_name=lambda wc: wc.encoder,
        probe=canonical({k: v for k, v in config["probe"].items() if k != "enabled"}),
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
    script:
        "../scripts/probe.py"
