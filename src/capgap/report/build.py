"""The report's assembly: the sections in order, and every output file of the report rule.

A section is a module with ``render(ctx) -> list[str]`` (its Markdown lines, each section
ending with one blank line; no lines: the section is absent) and, where it shows figures,
``draw(ctx, outputs) -> {figure key: drawn}``. A new section is one module and one line in
SECTIONS."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from ..evaluate import EVAL_DEFAULTS
from ..io import atomic_open, write_json, write_text
from . import (
    capacity,
    compression,
    datasets,
    glance,
    hardness,
    intro,
    ladder,
    late_interaction,
    learners,
    missed,
    mteb_comparison,
    near_miss,
    paper_comparison,
    per_dataset,
    plots,
    provenance,
)
from .context import FIGURES, ReportContext, ReportInputs, ReportOutputs
from .gather import gather
from .html import render_html
from .outputs import headline_metrics, recall_plot_rows, summary

# the sections of render_markdown, in report order
MARKDOWN_SECTIONS = (
    intro,
    glance,
    paper_comparison,
    mteb_comparison,
    datasets,
    capacity,
    learners,
    late_interaction,
    near_miss,
    per_dataset,
    plots,
)
# every section of report.md, in order
SECTIONS = (
    *MARKDOWN_SECTIONS,
    missed,
    compression,
    ladder,
    hardness,
    provenance,
)


def render_markdown(
    df: pd.DataFrame,
    statuses: list[dict],
    ks: Sequence[int],
    ndcg_k: int = EVAL_DEFAULTS["ndcg_k"],
    *,
    golds: Mapping[str, dict] | None = None,
    table: pd.DataFrame | None = None,
    paper_rows: Sequence[dict] = (),
    figs: Mapping[str, str | None] | None = None,
    bm25: str | None = None,
    construction: Mapping[tuple[str, str], str] | None = None,
    mteb_rows: Sequence[dict] = (),
) -> str:
    """The report's Markdown text of MARKDOWN_SECTIONS (the missed-queries, compression, hardness
    and provenance sections excluded).

    ``figs``: figure key (see FIGURES) -> path relative to the report, or None when the
    figure is a placeholder (its stage not run: the section says so). ``bm25``: the BM25
    variant's name (``bm25_variant``; None: not recorded). ``construction``: (dataset,
    encoder) -> why the probe's certificates were guaranteed (``construction_reasons``).
    ``mteb_rows``: ``capgap.mteb.compare`` (none: no MTEB section)."""
    ctx = ReportContext(
        df=df,
        statuses=statuses,
        ks=ks,
        ndcg_k=ndcg_k,
        golds=golds or {},
        table=table,
        paper_rows=paper_rows,
        figs=dict(figs or {}),
        bm25=bm25,
        construction=construction or {},
        mteb_rows=mteb_rows,
    )
    return "\n".join(line for section in MARKDOWN_SECTIONS for line in section.render(ctx))


def build_report(
    inputs: ReportInputs,
    outputs: ReportOutputs,
    ks: Sequence[int],
    ndcg_k: int = EVAL_DEFAULTS["ndcg_k"],
    *,
    config: Mapping | None = None,
    models: Mapping[str, str] | None = None,
    colbert_model: str | None = None,
) -> pd.DataFrame:
    """Render every report output from the per-job tables; return results.csv's frame.

    ``models``: encoder name -> model id (for the paper comparison and provenance);
    ``colbert_model``: the ColBERT model id when ColBERT ran. Rows of the parity task
    (datasets ``parity-P*``) go to results.csv and summary.json like every row, and to their
    own section and figures (``inputs.hardness``: the hardness rule's summary.json; empty when
    hardness is disabled). Rows of compressed index variants (rule ``compress``, column
    ``compression`` not empty) go to results.csv and to the compression section and figure
    only: every other section, figure, summary.json, metrics.json and plots/recall_at_k.csv is
    computed from the rows of the frozen index as built, as if they were absent."""
    ctx = gather(inputs, ks, ndcg_k, config=config, models=models, colbert_model=colbert_model)
    with atomic_open(outputs.csv, "w", encoding="utf-8", newline="") as fh:
        ctx.df_all.to_csv(fh, index=False, lineterminator="\n")
    base = Path(outputs.md).parent
    rel = {k: str(Path(getattr(outputs, k)).relative_to(base)) for k in FIGURES}
    drawn = {k: ok for section in SECTIONS if hasattr(section, "draw") for k, ok in section.draw(ctx, outputs).items()}
    ctx.figs = {k: (rel[k] if ok else None) for k, ok in drawn.items()}
    md = "\n".join(line for section in SECTIONS for line in section.render(ctx)) + "\n"
    write_text(outputs.md, md)
    write_text(outputs.html, render_html(md, base))
    write_json(outputs.summary, summary(ctx.df_all, ks, ndcg_k))
    write_json(outputs.metrics, headline_metrics(ctx.table, ctx.hdf))
    with atomic_open(outputs.recall_csv, "w", encoding="utf-8", newline="") as fh:
        recall_plot_rows(ctx.df).to_csv(fh, index=False, lineterminator="\n")
    return ctx.df_all
