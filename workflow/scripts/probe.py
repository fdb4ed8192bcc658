"""Snakemake adapter: see capgap.stages."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from pathlib import Path

from capgap.stages import run_probe

run_probe(
    snakemake.input.data,
    Path(snakemake.input.fingerprint).parent,
    snakemake.wildcards.dataset,
    snakemake.wildcards.encoder,
    snakemake.params.probe,
    snakemake.params.ks,
    snakemake.params.ndcg_k,
    snakemake.output.metrics,
    snakemake.output.per_query,
    threads=snakemake.threads,
    out_run=snakemake.output.run,
)
