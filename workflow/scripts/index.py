"""Snakemake adapter of rule index: see capgap.stages.index."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap import stages

stages.index(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
