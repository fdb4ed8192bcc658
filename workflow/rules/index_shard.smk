# One shard of a scattered index (index.shards > 1): a contiguous run of whole chunks of the
# corpus, embedded on its own (a GPU job under profiles/gpu); rule index gathers the shards.


rule index_shard:
    input:
        data=rules.data.output[0],
    output:
        embeddings=temp("results/{dataset}/{encoder}/index_shards/{shard}.npy"),
        meta=temp("results/{dataset}/{encoder}/index_shards/{shard}.json"),
    log:
        "logs/index_shard/{dataset}/{encoder}/{shard}.log",
    benchmark:
        "benchmarks/rules/index_shard/{dataset}/{encoder}/{shard}.tsv"
    wildcard_constraints:
        shard=r"\d+-of-\d+",
    priority: 3  # long jobs first: docs/pipeline.md, Scheduling
    conda:
        "../../envs/index.yaml"
    params:
        encoder_name=lambda wc: wc.encoder,
        encoder=lambda wc: canonical(config["encoders"][wc.encoder]),
        shard=lambda wc: wc.shard,
    script:
        "../scripts/index_shard.py"
