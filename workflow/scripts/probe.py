"""Snakemake adapter of rule probe: see capgap.probe.stage.probe_stage."""

from capgap.logs import log_to

log_to(snakemake.log[0])
from capgap.probe.stage import probe_stage

probe_stage(snakemake.input, snakemake.output, snakemake.params, threads=snakemake.threads)
