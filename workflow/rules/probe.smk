# The capacity probe: a per-query ranking SVM (cutting plane) on the frozen index; with
# probe.shards > 1, gather the probe_shard jobs' results into the same files instead.


rule probe:
    input:
        data=rules.data.output[0],
        fingerprint=rules.index.output.fingerprint,
        embeddings=rules.index.output.embeddings,
        shards=lambda wc: shard_files(
            "probe", "results/{dataset}/{encoder}/probe_shards/{shard}.pkl", wc
        ),
    output:
        metrics="results/{dataset}/{encoder}/probe/metrics.csv",
        per_query="results/{dataset}/{encoder}/probe/per_query.jsonl",
        run="results/{dataset}/{encoder}/probe/run.trec",
        w="results/{dataset}/{encoder}/probe/w.npz",
    log:
        "logs/probe/{dataset}/{encoder}.log",
    benchmark:
        "benchmarks/rules/probe/{dataset}/{encoder}.tsv"
    priority: 2  # long jobs first: docs/pipeline.md, Scheduling
    conda:
        "../../envs/probe.yaml"
    params:
        encoder_name=lambda wc: wc.encoder,
        probe=settings(config, "probe", drop=("shards",)),
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
    script:
        "../scripts/probe.py"
