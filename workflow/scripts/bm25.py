"""Snakemake adapter: see capgap.stages."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap.stages import evaluate_bm25

evaluate_bm25(
    snakemake.input.data,
    snakemake.wildcards.dataset,
    snakemake.params.bm25,
    snakemake.params.ks,
    snakemake.params.ndcg_k,
    snakemake.output.metrics,
    snakemake.output.run,
)
