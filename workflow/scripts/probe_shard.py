"""Snakemake adapter of rule probe_shard: see capgap.probe.stage.probe_shard_stage."""

from capgap.logs import log_to

log_to(snakemake.log[0])
from capgap.probe.stage import probe_shard_stage

probe_shard_stage(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
