"""Snakemake adapter of rule colbert: see capgap.stages.colbert."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap import stages

stages.colbert(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
