"""Snakemake adapter: see capgap.stages."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap.stages import run_colbert

run_colbert(
    snakemake.input.data,
    snakemake.wildcards.dataset,
    snakemake.params.colbert,
    snakemake.params.ks,
    snakemake.params.ndcg_k,
    snakemake.output.metrics,
    snakemake.output.curve,
    snakemake.output.run,
    snakemake.params.work,
    snakemake.params.extensions,
    threads=snakemake.threads,
)
