# Near-miss twins as InfoNCE negatives or not: the fine-tuned query encoder without them, and
# both adapters zero-shot on the transfer data sets (capgap.nearmiss.twin_negative_rows).


rule twin_negatives:
    input:
        data=rules.data.output[0],
        fingerprint=rules.index.output.fingerprint,
        embeddings=rules.index.output.embeddings,
        adapter=rules.finetune.output.adapter,
        targets=lambda wc: expand(
            rules.data.output[0], dataset=transfer_targets(wc.dataset, wc.encoder)
        ),
        target_indexes=lambda wc: expand(
            rules.index.output.fingerprint,
            dataset=transfer_targets(wc.dataset, wc.encoder),
            encoder=wc.encoder,
        ),
        target_embeddings=lambda wc: expand(
            rules.index.output.embeddings,
            dataset=transfer_targets(wc.dataset, wc.encoder),
            encoder=wc.encoder,
        ),
    output:
        metrics="results/{dataset}/{encoder}/twin_negatives/metrics.csv",
        curve="results/{dataset}/{encoder}/twin_negatives/curve.csv",
        adapter=directory("results/{dataset}/{encoder}/twin_negatives/adapter"),
    log:
        "logs/twin_negatives/{dataset}/{encoder}.log",
    benchmark:
        "benchmarks/rules/twin_negatives/{dataset}/{encoder}.tsv"
    conda:
        "../../envs/finetune.yaml"
    params:
        encoder_name=lambda wc: wc.encoder,
        encoder=lambda wc: canonical(config["encoders"][wc.encoder]),
        finetune=lambda wc: finetune_params(config, wc.encoder),
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
        # not an output: Snakemake must not delete it when a killed job is rerun
        checkpoint=lambda wc: f"results/{wc.dataset}/{wc.encoder}/twin_negatives_checkpoint.pt",
    script:
        "../scripts/twin_negatives.py"
