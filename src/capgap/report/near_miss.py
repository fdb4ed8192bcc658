"""The near-miss section as one report section: the twins' tables and verdicts
(``capgap.report.twins``), the figure, then the transfer tables (``capgap.report.transfer``)."""

from __future__ import annotations

import pandas as pd

from .. import figures
from ..evaluate import EVAL_DEFAULTS
from .context import ReportContext, ReportOutputs
from .transfer import _transfer_lines, transfer_table
from .twins import TWIN_SOLVED, _learners_line, _near_miss_cell_table, near_miss_table, twin_verdict


def render_near_miss(
    df: pd.DataFrame, fig: str | None, ndcg_k: int = EVAL_DEFAULTS["ndcg_k"], k: int = 10
) -> list[str]:
    """The report's "Near-miss twins: geometry or learning?" section: what is measured, per
    near-miss dataset x encoder a table (``near_miss_table``) and one verdict sentence per twin
    type (``twin_verdict``), the figure (``fig``: its path relative to the report; None: not
    drawn) and, where ``finetuned@<source>`` rows exist, the transfer tables (``transfer_table``
    at recall@``k`` and nDCG@``ndcg_k``). No twin rows and no transfer rows: no lines."""
    table = near_miss_table(df)
    ttable = transfer_table(df, k, ndcg_k)
    if table.empty and ttable.empty:
        return []
    out = [
        "## Near-miss twins: geometry or learning?",
        "",
        "Each statement (gold document) of a near-miss data set has twins that flip its meaning with a minimal "
        "edit (negation, role swap, spatial / order flip; `capgap.nearmiss`), non-gold for its queries. twin_win = "
        "fraction of held-out (query, gold, twin) triples whose gold document scores strictly above its twin (a "
        "tie counts as a loss: the evaluation's tie rule ranks the twin first). Capacity = the probe's twin_win, "
        "with its median geometric margin (witness scaled to unit norm) in brackets; fine-tuned = LoRA query "
        "adapter with the twins as InfoNCE negatives, trained on train queries (train column) and measured on "
        "held-out combinations; fine-tuned without twins = the same training with the twins left out of the "
        f"softmax; BM25 with its tie rate in brackets. Verdict per type at {TWIN_SOLVED}: index-limited (probe "
        "below), else encoder-limited (pre-trained below), else lexically blind (BM25 below), else solved; what "
        "fine-tuning closes is read only from an adapter that converged (else marked *not a finding*). – = not "
        "measured.",
        "",
    ]
    for (d, e), cell in table.groupby(["dataset", "encoder"], sort=False):
        out += [f"**{d} / {e}**" if e else f"**{d}**", ""]
        out.append(_near_miss_cell_table(cell, bool(cell["no_twins_heldout"].notna().any())))
        out.append("")
        out += _learners_line(cell)
        out += [f"- {twin_verdict(r)}" for r in cell.to_dict("records")] + [""]
    if not table.empty:
        out += (
            [
                f"![near-miss twins: probe margin vs pre-trained score gap]({fig})",
                "",
                "Per twin type: x = the pre-trained encoder's median score gap gold − twin (cosine), y = the "
                "probe's median margin (unit witness), held-out, bars p25–p75. Right of x = 0 the encoder already "
                "prefers the gold; above y = 0 the index separates it.",
                "",
            ]
            if fig
            else ["Figure not drawn: the probe or the pre-trained encoder has no twin gaps.", ""]
        )
    return out + _transfer_lines(ttable, k, ndcg_k)


def draw(ctx: ReportContext, outputs: ReportOutputs) -> dict[str, bool]:
    """Probe margin against the pre-trained score gap per twin type (a placeholder without twin gaps)."""
    return {"near_miss_png": figures.plot_near_miss(ctx.df, outputs.near_miss_png)}


def render(ctx: ReportContext) -> list[str]:
    """The section (no twin rows and no transfer rows: no lines)."""
    return render_near_miss(ctx.df, ctx.figs.get("near_miss_png"), ctx.ndcg_k)
