"""Snakemake adapter of rule finetune: see capgap.stages.finetune."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap import stages

stages.finetune(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
