# Recall@k / nDCG of the pre-trained encoder's own query embeddings on the frozen index.


rule pretrained:
    input:
        data="results/{dataset}/data",
        fingerprint="results/{dataset}/{encoder}/index/fingerprint.json",
        embeddings="results/{dataset}/{encoder}/index/embeddings.npy",
    output:
        metrics="results/{dataset}/{encoder}/pretrained/metrics.csv",
        run="results/{dataset}/{encoder}/pretrained/run.trec",
    log:
        "logs/pretrained/{dataset}/{encoder}.log",
    benchmark:
        "benchmarks/rules/pretrained/{dataset}/{encoder}.tsv"
    conda:
        "../../envs/index.yaml"
    threads: rule_threads("pretrained")
    resources:
        mem_mb=rule_resource("pretrained", "mem_mb"),
        runtime=rule_resource("pretrained", "runtime"),
        gpu=rule_resource("pretrained", "gpu"),
    params:
        encoder_name=lambda wc: wc.encoder,
        encoder=lambda wc: canonical(config["encoders"][wc.encoder]),
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
    script:
        "../scripts/pretrained.py"
