# One shard of a scattered probe (probe.shards > 1): a contiguous run of whole query batches
# (text-tied queries are one problem, in one batch) on the memory-mapped index, a CPU job; rule
# probe gathers the shards.


rule probe_shard:
    input:
        data=rules.data.output[0],
        fingerprint=rules.index.output.fingerprint,
        embeddings=rules.index.output.embeddings,
    output:
        results=temp("results/{dataset}/{encoder}/probe_shards/{shard}.pkl"),
    log:
        "logs/probe_shard/{dataset}/{encoder}/{shard}.log",
    benchmark:
        "benchmarks/rules/probe_shard/{dataset}/{encoder}/{shard}.tsv"
    wildcard_constraints:
        shard=r"\d+-of-\d+",
    priority: 2  # long jobs first: docs/pipeline.md, Scheduling
    conda:
        "../../envs/probe.yaml"
    params:
        shard=lambda wc: wc.shard,
        probe=settings(config, "probe", drop=("shards",)),
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
    script:
        "../scripts/probe_shard.py"
