# Embed every document once into the frozen index of (dataset, encoder); with index.shards > 1,
# gather the index_shard jobs' embeddings into the same files instead.


rule index:
    input:
        data=rules.data.output[0],
        shards=lambda wc: shard_files(
            "index", "results/{dataset}/{encoder}/index_shards/{shard}.npy", wc
        ),
        # each shard's fingerprint and rows, read by the gather beside its .npy
        shard_meta=lambda wc: shard_files(
            "index", "results/{dataset}/{encoder}/index_shards/{shard}.json", wc
        ),
    output:
        embeddings="results/{dataset}/{encoder}/index/embeddings.npy",
        doc_ids="results/{dataset}/{encoder}/index/doc_ids.json",
        fingerprint="results/{dataset}/{encoder}/index/fingerprint.json",
    log:
        "logs/index/{dataset}/{encoder}.log",
    benchmark:
        "benchmarks/rules/index/{dataset}/{encoder}.tsv"
    priority: 3  # long jobs first: docs/pipeline.md, Scheduling
    conda:
        "../../envs/index.yaml"
    params:
        encoder_name=lambda wc: wc.encoder,
        encoder=lambda wc: canonical(config["encoders"][wc.encoder]),
    script:
        "../scripts/index.py"
