"""Snakemake adapter of rule index: see capgap.index.index_stage."""

from capgap.logs import log_to

log_to(snakemake.log[0])
from capgap.index import index_stage

index_stage(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
