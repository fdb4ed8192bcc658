"""Snakemake adapter of rule compress: see capgap.stages.compress."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap import stages

stages.compress(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
