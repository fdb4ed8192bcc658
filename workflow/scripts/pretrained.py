"""Snakemake adapter of rule pretrained: see capgap.index.pretrained_stage."""

from capgap.logs import log_to

log_to(snakemake.log[0])
from capgap.index import pretrained_stage

pretrained_stage(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
