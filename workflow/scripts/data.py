"""Snakemake adapter of rule data: see capgap.stages.data."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap import stages

stages.data(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
