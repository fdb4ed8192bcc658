"""Snakemake adapter of rule hardness: see capgap.hardness.hardness_stage."""

from capgap.logs import log_to

log_to(snakemake.log[0])
from capgap.hardness import hardness_stage

hardness_stage(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
