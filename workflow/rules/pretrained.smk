# Recall@k / nDCG of the pre-trained encoder's own query embeddings on the frozen index.


rule pretrained:
    input:
        data=rules.data.output[0],
        fingerprint=rules.index.output.fingerprint,
        embeddings=rules.index.output.embeddings,
    output:
        metrics="results/{dataset}/{encoder}/pretrained/metrics.csv",
        run="results/{dataset}/{encoder}/pretrained/run.trec",
        queries="results/{dataset}/{encoder}/pretrained/queries.npz",
    log:
        "logs/pretrained/{dataset}/{encoder}.log",
    benchmark:
        "benchmarks/rules/pretrained/{dataset}/{encoder}.tsv"
    conda:
        "../../envs/index.yaml"
    params:
        encoder_name=lambda wc: wc.encoder,
        encoder=lambda wc: canonical(config["encoders"][wc.encoder]),
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
    script:
        "../scripts/pretrained.py"
