"""Snakemake adapter of rule finetune: see capgap.finetune.stage.finetune_stage."""

from capgap.logs import log_to

log_to(snakemake.log[0])
from capgap.finetune.stage import finetune_stage

finetune_stage(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
