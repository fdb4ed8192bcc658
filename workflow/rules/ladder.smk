# The learnability ladder's shared rungs: query heads on the pre-trained query embeddings (fit on
# all queries and on train queries) and nearest-train transfer of the probe's w.


rule ladder:
    input:
        data=rules.data.output[0],
        fingerprint=rules.index.output.fingerprint,
        embeddings=rules.index.output.embeddings,
        w=rules.probe.output.w,
        queries=rules.pretrained.output.queries,
    output:
        metrics="results/{dataset}/{encoder}/ladder/metrics.csv",
    log:
        "logs/ladder/{dataset}/{encoder}.log",
    benchmark:
        "benchmarks/rules/ladder/{dataset}/{encoder}.tsv"
    conda:
        "../../envs/ladder.yaml"
    params:
        encoder_name=lambda wc: wc.encoder,
        ladder=settings(config, "ladder", drop=("regimes", "regime_datasets")),
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
    script:
        "../scripts/ladder.py"
