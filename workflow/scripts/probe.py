"""Snakemake adapter of rule probe: see capgap.stages.probe."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap import stages

stages.probe(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
