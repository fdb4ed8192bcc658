"""Snakemake adapter of rule index_shard: see capgap.index.index_shard_stage."""

from capgap.logs import log_to

log_to(snakemake.log[0])
from capgap.index import index_shard_stage

index_shard_stage(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
