# Capacity under index compression: the probe and the pre-trained encoder on compressed variants
# (the pre-trained query embeddings are rule pretrained's: the queries are encoded once).


rule compress:
    input:
        data=rules.data.output[0],
        fingerprint=rules.index.output.fingerprint,
        embeddings=rules.index.output.embeddings,
        queries=rules.pretrained.output.queries,
    output:
        metrics="results/{dataset}/{encoder}/compress/metrics.csv",
    log:
        "logs/compress/{dataset}/{encoder}.log",
    benchmark:
        "benchmarks/rules/compress/{dataset}/{encoder}.tsv"
    conda:
        "../../envs/compress.yaml"
    params:
        encoder_name=lambda wc: wc.encoder,
        encoder=lambda wc: canonical(config["encoders"][wc.encoder]),
        compress=settings(config, "compress", drop=("datasets",)),
        probe=settings(config, "probe", drop=("shards",)),
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
    script:
        "../scripts/compress.py"
