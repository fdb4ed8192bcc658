"""Section "Single vector vs late interaction vs BM25": the paper's LIMIT comparison, on the datasets
with a ColBERT run."""

from __future__ import annotations

import pandas as pd

from .context import ReportContext
from .format import _md_table, _value


def _side_by_side(df: pd.DataFrame) -> list[str]:
    """The paper's LIMIT comparison: capacity, single-vector fine-tuned, ColBERT fine-tuned and
    BM25 per dataset (train and held-out recall@2 and @10); only datasets with a ColBERT run."""
    cb = df[df["method"] == "colbert"]
    if cb.empty:
        return []

    def one(d, e, m, split, metric, k=None):
        return _value(df, d, e, m, split, metric, k)

    rows = []
    for d in cb["dataset"].unique():
        encs = [e for e in df[(df["dataset"] == d) & (df["method"] == "finetuned")]["encoder"].unique()] or [""]
        for e in encs:
            for k in (2, 10):
                rows.append(
                    [
                        d,
                        e or "–",
                        k,
                        one(d, e, "probe", "heldout", "recall", k),
                        one(d, e, "finetuned", "train", "recall", k),
                        one(d, e, "finetuned", "heldout", "recall", k),
                        one(d, "", "colbert", "train", "recall", k),
                        one(d, "", "colbert", "heldout", "recall", k),
                        one(d, "", "bm25", "heldout", "recall", k),
                        one(d, "", "colbert", "all", "ann_recall", k),
                    ]
                )
    header = [
        "dataset",
        "single-vector encoder",
        "k",
        "probe held-out",
        "fine-tuned train",
        "fine-tuned held-out",
        "ColBERT train",
        "ColBERT held-out",
        "BM25 held-out",
        "ColBERT ANN recall",
    ]
    if all(r[-1] == "–" for r in rows):  # exact MaxSim everywhere: no index, no ANN recall
        header, rows = header[:-1], [r[:-1] for r in rows]
        ann = "ColBERT scored every document by exact MaxSim here (no index), so there is no ANN recall to report."
    else:
        ann = (
            "ColBERT ANN recall: the index's top-k (faiss or PLAID candidates re-scored) against exact MaxSim "
            "top-k on a query sample (it is not gold-document recall; – where exact MaxSim was used)."
        )
    return [
        "## Single vector vs late interaction vs BM25 (the paper's LIMIT comparison)",
        "",
        "Recall@k of the capacity probe (held-out queries), the LoRA fine-tuned single-vector encoder, "
        "the fine-tuned ColBERT (PyLate, both towers trained, MaxSim) and BM25. " + ann,
        "",
        _md_table(header, rows),
        "",
        "The paper's LIMIT numbers, with a verdict on each, are in \"The paper's numbers beside ours\".",
        "",
    ]


def render(ctx: ReportContext) -> list[str]:
    """The comparison table (no ColBERT run: no lines)."""
    return _side_by_side(ctx.df)
