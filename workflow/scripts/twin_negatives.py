"""Snakemake adapter of rule twin_negatives: see capgap.nearmiss.twin_negatives_stage."""

from capgap.logs import log_to

log_to(snakemake.log[0])
from capgap.nearmiss import twin_negatives_stage

twin_negatives_stage(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
