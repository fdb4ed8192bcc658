"""Snakemake adapter: see capgap.stages."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from pathlib import Path

from capgap.stages import build_frozen_index

build_frozen_index(
    snakemake.input.data,
    snakemake.wildcards.encoder,
    snakemake.params.encoder,
    Path(snakemake.output.fingerprint).parent,
    threads=snakemake.threads,
)
