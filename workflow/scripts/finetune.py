"""Snakemake adapter: see capgap.stages."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap.stages import run_finetune

run_finetune(
    snakemake.input.data,
    snakemake.input.fingerprint.rsplit("/", 1)[0],
    snakemake.wildcards.dataset,
    snakemake.wildcards.encoder,
    snakemake.params.encoder,
    snakemake.params.finetune,
    snakemake.params.ks,
    snakemake.params.ndcg_k,
    snakemake.output.metrics,
    snakemake.output.curve,
    snakemake.output.run,
    snakemake.output.adapter,
    snakemake.params.checkpoint,
    threads=snakemake.threads,
)
