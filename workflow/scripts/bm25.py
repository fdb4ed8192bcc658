"""Snakemake adapter of rule bm25: see capgap.stages.bm25."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap import stages

stages.bm25(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
