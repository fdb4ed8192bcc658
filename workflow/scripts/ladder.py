"""Snakemake adapter of rule ladder: see capgap.stages.ladder."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap import stages

stages.ladder(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
