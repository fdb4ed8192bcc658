"""Snakemake adapter of rule colbert: see capgap.colbert.stage.colbert_stage."""

from capgap.logs import log_to

log_to(snakemake.log[0])
from capgap.colbert.stage import colbert_stage

colbert_stage(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
