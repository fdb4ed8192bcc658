"""Snakemake adapter: see capgap.stages."""
from capgap.stages import log_to

log_to(snakemake.log[0])
from pathlib import Path

from capgap.report import build_report

build_report(
    snakemake.input.tables,
    [Path(d) / "status.json" for d in snakemake.input.data],
    snakemake.output.csv,
    snakemake.output.md,
    snakemake.output.figure,
    snakemake.output.summary,
    snakemake.params.ks,
    snakemake.params.ndcg_k,
    curve_paths=snakemake.input.curves,
    out_curves_png=snakemake.output.curves,
    hardness_summary=snakemake.input.hardness[0] if snakemake.input.hardness else None,
    out_hardness_p=snakemake.output.hardness_p,
    out_hardness_m=snakemake.output.hardness_m,
)
