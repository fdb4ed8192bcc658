"""Snakemake adapter of rule hardness: see capgap.stages.hardness."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap import stages

stages.hardness(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
