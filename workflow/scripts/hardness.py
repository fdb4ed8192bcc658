"""Snakemake adapter: see capgap.stages."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap.stages import run_hardness

run_hardness(snakemake.params.hardness, snakemake.params.probe, snakemake.output.metrics, snakemake.output.summary)
