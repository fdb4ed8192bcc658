"""Snakemake adapter: see capgap.stages."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from pathlib import Path

from capgap.stages import evaluate_pretrained

evaluate_pretrained(
    snakemake.input.data,
    Path(snakemake.input.fingerprint).parent,
    snakemake.wildcards.dataset,
    snakemake.wildcards.encoder,
    snakemake.params.encoder,
    snakemake.params.ks,
    snakemake.params.ndcg_k,
    snakemake.output.metrics,
    snakemake.output.run,
    threads=snakemake.threads,
)
