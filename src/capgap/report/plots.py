"""The figure-only sections: held-out recall@k of every method, and the fine-tuning curves."""

from __future__ import annotations

from .. import figures
from .context import ReportContext, ReportOutputs
from .format import _figure


def draw(ctx: ReportContext, outputs: ReportOutputs) -> dict[str, bool]:
    """The recall@k curves and the fine-tuning curves (placeholders where their stage did not run)."""
    return {
        "recall_png": figures.plot_recall_curves(ctx.df, outputs.recall_png),
        "curves_png": figures.plot_curves(ctx.inputs.curves, outputs.curves_png),
    }


def render(ctx: ReportContext) -> list[str]:
    """ "Recall@k" and "Fine-tuning curves", each a figure or a line saying its stage did not run."""
    return _figure(
        ctx.figs,
        "recall_png",
        "Recall@k",
        "held-out recall@k per method",
        "any retrieval",
        f"Held-out recall@k for every method at k = {', '.join(map(str, ctx.ks))}.",
    ) + _figure(
        ctx.figs,
        "curves_png",
        "Fine-tuning curves",
        "fine-tuning curves",
        "fine-tuning",
        "Recall@2 of the query encoder on train and held-out queries during fine-tuning.",
    )
