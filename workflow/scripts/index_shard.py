"""Snakemake adapter of rule index_shard: see capgap.stages.index_shard."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap import stages

stages.index_shard(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
