"""Snakemake adapter: see capgap.stages."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap.stages import prepare_dataset

prepare_dataset(snakemake.wildcards.dataset, snakemake.params.spec, snakemake.output[0])
