"""Snakemake adapter of rule finetune_regime: see capgap.finetune.stage.finetune_regime_stage."""

from capgap.logs import log_to

log_to(snakemake.log[0])
from capgap.finetune.stage import finetune_regime_stage

finetune_regime_stage(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
