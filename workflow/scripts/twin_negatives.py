"""Snakemake adapter of rule twin_negatives: see capgap.stages.twin_negatives."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap import stages

stages.twin_negatives(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
