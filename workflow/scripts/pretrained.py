"""Snakemake adapter of rule pretrained: see capgap.stages.pretrained."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap import stages

stages.pretrained(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
