"""Snakemake adapter of rule ladder: see capgap.ladder.stage.ladder_stage."""

from capgap.logs import log_to

log_to(snakemake.log[0])
from capgap.ladder.stage import ladder_stage

ladder_stage(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
