"""Snakemake adapter of rule bm25: see capgap.bm25.bm25_stage."""

from capgap.logs import log_to

log_to(snakemake.log[0])
from capgap.bm25 import bm25_stage

bm25_stage(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
