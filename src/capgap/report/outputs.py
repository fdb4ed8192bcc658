"""The machine-readable outputs beside report.md: ``summary.json`` (every number),
``metrics.json`` (headline numbers for ``dvc metrics``) and ``plots/recall_at_k.csv`` (``dvc plots``)."""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from .. import figures
from ..evaluate import EVAL_DEFAULTS
from ..figures import HARDNESS_PREFIX
from .results import uncompressed


def headline_metrics(table: pd.DataFrame, hdf: pd.DataFrame) -> dict:
    """Headline numbers for ``dvc metrics`` (``reports/metrics.json``): per dataset and
    encoder at the stated k -- capacity, certified, pre-trained, fine-tuned train/held-out, gap
    -- plus BM25 and ColBERT held-out (keys ``capacity@2``, ...; ``capacity@rprec``, ... where the
    stated row is R-precision, see ``summary_table``); per parity P the perfect, best trained
    and random held-out recall. Values not measured are left out."""
    out: dict = {}

    def put(d: dict, key: str, v) -> None:
        if v == v and v is not None:
            d[key] = round(float(v), 6)

    for r in table[table["stated"]].itertuples(index=False):
        e = out.setdefault(r.dataset, {}).setdefault(r.encoder, {})
        for name in ("capacity", "pretrained", "finetuned_train", "finetuned_heldout", "gap"):
            put(e, f"{name}@{r.k}", getattr(r, name))
        put(e, "certified", r.certified)
        put(out[r.dataset].setdefault("bm25", {}), f"heldout@{r.k}", r.bm25)
        put(out[r.dataset].setdefault("colbert", {}), f"heldout@{r.k}", r.colbert)
        out[r.dataset] = {k: v for k, v in out[r.dataset].items() if v}
    rec = hdf[(hdf["metric"] == "recall") & (hdf["split"] == "heldout")]
    for ds, g in rec.groupby("dataset", sort=False):
        p = out.setdefault("parity", {}).setdefault(ds.removeprefix(HARDNESS_PREFIX).join(("P", "")), {})
        for m in ("perfect", "random"):
            put(p, m, g[g["method"] == m]["value"].max() if (g["method"] == m).any() else None)
        tr = g[(g["method"] == "trained") & ~g["encoder"].str.contains(r"-m\d+$")]
        put(p, "best_trained", tr["value"].max() if len(tr) else None)
    return out


def recall_plot_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Held-out recall@k of every method as a long table for ``dvc plots`` (columns
    ``run, dataset, method, encoder, k, recall``; ``run`` = "dataset / method (encoder)")."""
    d = df[(df["metric"] == "recall") & (df["split"] == "heldout")]
    rows = [
        {
            "run": f"{r.dataset} / {figures._label(r.method, r.encoder)}",
            "dataset": r.dataset,
            "method": r.method,
            "encoder": r.encoder,
            "k": int(r.k),
            "recall": round(float(r.value), 6),
        }
        for r in d.itertuples(index=False)
    ]
    return pd.DataFrame(rows, columns=["run", "dataset", "method", "encoder", "k", "recall"])


def summary(df: pd.DataFrame, ks: Sequence[int], ndcg_k: int = EVAL_DEFAULTS["ndcg_k"]) -> dict:
    """Every number as a nested dict (``summary.json``): dataset -> method[/encoder] -> split -> metric@k -> value
    (just ``metric`` for metrics without a cut-off: certified, slack_median, ...). Rows of
    compressed index variants (``compression`` not empty) are left out: they are the
    compression section's (``compression_table``), and so are empty values (nan)."""
    out: dict = {}
    df = uncompressed(df)
    for r in df[(df["metric"] != "n_queries") & df["value"].notna()].itertuples(index=False):
        key = f"{r.method}/{r.encoder}" if r.encoder else r.method
        name = r.metric if pd.isna(r.k) or r.k == "" else f"{r.metric}@{r.k}"  # certified, slack_median: no k
        out.setdefault(r.dataset, {}).setdefault(key, {}).setdefault(r.split, {})[name] = round(float(r.value), 6)
    return out
