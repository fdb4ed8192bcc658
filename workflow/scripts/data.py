"""Snakemake adapter of rule data: see capgap.sources.data_stage."""

from capgap.logs import log_to

log_to(snakemake.log[0])
from capgap.sources import data_stage

data_stage(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
