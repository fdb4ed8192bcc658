# The ladder's fine-tuning regimes (rung 5, config ladder.regimes; config/ladder.yaml): rule
# finetune with one regime's overrides of the finetune section, method finetuned-{regime}.


rule finetune_regime:
    input:
        data=rules.data.output[0],
        fingerprint=rules.index.output.fingerprint,
        embeddings=rules.index.output.embeddings,
    output:
        metrics="results/{dataset}/{encoder}/finetune-{regime}/metrics.csv",
        curve="results/{dataset}/{encoder}/finetune-{regime}/curve.csv",
        record="results/{dataset}/{encoder}/finetune-{regime}/regime.json",
    log:
        "logs/finetune_regime/{dataset}/{encoder}/{regime}.log",
    benchmark:
        "benchmarks/rules/finetune_regime/{dataset}/{encoder}/{regime}.tsv"
    conda:
        "../../envs/finetune.yaml"
    params:
        encoder_name=lambda wc: wc.encoder,
        encoder=lambda wc: canonical(config["encoders"][wc.encoder]),
        finetune=lambda wc: regime_params(config, wc.encoder, wc.regime),
        regime=lambda wc: wc.regime,
        ks=config["eval"]["ks"],
        ndcg_k=config["eval"]["ndcg_k"],
        # not an output: Snakemake must not delete it when a killed job is rerun
        checkpoint=lambda wc: f"results/{wc.dataset}/{wc.encoder}/finetune-{wc.regime}_checkpoint.pt",
    script:
        "../scripts/finetune_regime.py"
