"""Snakemake adapter: see capgap.report.build_report."""

from capgap.logs import log_to

log_to(snakemake.log[0])
from capgap.provenance import SHARDED_RULES, benchmark_paths
from capgap.report import ReportInputs, ReportOutputs, build_report

inputs = ReportInputs.from_named(snakemake.input)
inputs.benchmarks = benchmark_paths(
    [*snakemake.input.data, *snakemake.input.tables, *snakemake.input.fingerprints],
    shards={r: snakemake.params.config[r]["shards"] for r in SHARDED_RULES},
)
build_report(
    inputs,
    ReportOutputs.from_named(snakemake.output),
    snakemake.params.ks,
    snakemake.params.ndcg_k,
    config=snakemake.params.config,
    models=snakemake.params.models,
    colbert_model=snakemake.params.colbert_model,
)
