"""Snakemake adapter of rule compress: see capgap.compress.compress_stage."""

from capgap.logs import log_to

log_to(snakemake.log[0])
from capgap.compress import compress_stage

compress_stage(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
