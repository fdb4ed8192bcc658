"""Snakemake adapter of rule finetune_regime: see capgap.stages.finetune_regime."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap import stages

stages.finetune_regime(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
