"""Snakemake adapter of rule probe_shard: see capgap.stages.probe_shard."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from capgap import stages

stages.probe_shard(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
