# LoRA fine-tuning of the query side against the frozen index (InfoNCE), then train/held-out recall.


rule finetune:
    input:
        data=rules.data.output[0],
        fingerprint=rules.index.output.fingerprint,
        embeddings=rules.index.output.embeddings,
    output:
        metrics="results/{dataset}/{encoder}/finetune/metrics.csv",
        curve="results/{dataset}/{encoder}/finetune/curve.csv",
        run="results/{dataset}/{encoder}/finetune/run.trec",
        adapter=directory("results/{dataset}/{encoder}/finetune/adapter"),
    log:
        "logs/finetune/{dataset}/{encoder}.log",
    benchmark:
        "benchmarks/rules/finetune/{dataset}/{encoder}.tsv"
    priority: 1  # long jobs first: docs/pipeline.md, Scheduling
    conda:
        "../../envs/finetune.yaml"
    params:
        encoder_name=lambda wc: wc.encoder,
        encoder=lambda wc: canonical(config["encoders"][wc.encoder]),
        finetune=lambda wc: finetune_params(config, wc.encoder),
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
        # not an output: Snakemake must not delete it when a killed job is rerun
        checkpoint=lambda wc: f"results/{wc.dataset}/{wc.encoder}/finetune_checkpoint.pt",
    script:
        "../scripts/finetune.py"
