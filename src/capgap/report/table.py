"""The paper-layout summary table (one row per dataset x single-vector encoder x cut-off) and
the cut-offs it reads at; the glance bullets, the gap figure, metrics.json and the compression
section read from it."""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from .. import paper
from .format import _value


def report_ks(info: paper.DatasetInfo | None, ks: Sequence[int]) -> list[int]:
    """The cut-offs of the summary table for one dataset: the gold-set size where it is fixed,
    then 10 and 100 -- those among the evaluated ``ks`` and below the corpus size (k >= the
    number of documents retrieves everything: recall 1 for every method). The first is the
    *stated* k."""
    want = ([info.gold_k] if info and info.gold_k else []) + [10, 100]
    out = [k for k in dict.fromkeys(want) if k in ks and (info is None or k < info.n_docs)]
    below = [k for k in ks if info is None or k < info.n_docs]
    return out or [max(below or [min(ks)])]  # else the largest evaluated k that does not retrieve everything


CAUSES = {"duplicate": "duplicate documents", "tied": "tied queries", "geometry": "geometry"}
SUMMARY_COLUMNS = [
    "dataset",
    "encoder",
    "k",
    "stated",
    "capacity",
    "certified",
    *(f"uncertified_{c}" for c in CAUSES),
    "by_construction",
    "pretrained",
    "finetuned_train",
    "finetuned_heldout",
    "gap",
    "gap_of",
    "bm25",
    "colbert",
    "colbert_train",
    "gold_note",
]
RPREC = paper.RPREC  # the summary table's k of its R-precision rows (results.csv metric rprec)


def _k_text(k) -> str:
    """A summary row's cut-off for display: "2", or "R-precision"."""
    return "R-precision" if k == RPREC else str(k)


def summary_table(df: pd.DataFrame, infos: Mapping[str, paper.DatasetInfo], ks: Sequence[int]) -> pd.DataFrame:
    """The paper-layout summary: one row per dataset x single-vector encoder x cut-off.

    Cut-offs: ``report_ks``; on a dataset whose gold-set sizes vary (``paper.reads_rprec``:
    known to vary, and results.csv has its ``rprec`` rows) an R-precision row (``k`` = RPREC,
    every recall value its ``rprec``: recall at each query's own gold-set size) comes first and
    is the stated one, ``gold_note`` saying by how much ("gold sets vary 1–475"; "" on every
    other row). Every value is a held-out recall@k from results.csv (nan when that stage was not
    run or the row was not recorded), except ``certified`` (fraction of held-out queries the probe
    certifies), ``uncertified_duplicate`` / ``uncertified_tied`` / ``uncertified_geometry``
    (fractions of held-out queries left uncertified, by cause), ``by_construction`` (fraction of
    *all* queries certified by construction) and ``finetuned_train``/``colbert_train``. ``gap`` =
    capacity − fine-tuned held-out (or − pre-trained held-out where fine-tuning did not run;
    ``gap_of`` says which)."""

    def val(d, e, m, split, metric="recall", k=None):
        if metric == "recall" and k == RPREC:
            metric, k = "rprec", None
        v = _value(df, d, e, m, split, metric, k)
        return float("nan") if v == "–" else v

    rows = []
    for d in df["dataset"].unique():
        encs = [
            e
            for e in df[(df["dataset"] == d) & df["method"].isin(["probe", "pretrained", "finetuned"])][
                "encoder"
            ].unique()
        ] or [""]
        rprec = paper.reads_rprec(infos.get(d), df, d)
        for e in encs:
            for i, k in enumerate(([RPREC] if rprec else []) + report_ks(infos.get(d), ks)):
                cap = val(d, e, "probe", "heldout", k=k)
                ft, pt = val(d, e, "finetuned", "heldout", k=k), val(d, e, "pretrained", "heldout", k=k)
                ref, of = (ft, "fine-tuned") if ft == ft else (pt, "pre-trained")
                rows.append(
                    {
                        "dataset": d,
                        "encoder": e or "–",
                        "k": k,
                        "stated": i == 0,
                        "capacity": cap,
                        "certified": val(d, e, "probe", "heldout", "certified"),
                        **{f"uncertified_{c}": val(d, e, "probe", "heldout", f"uncertified_{c}") for c in CAUSES},
                        "by_construction": val(d, e, "probe", "all", "certified_by_construction"),
                        "pretrained": pt,
                        "finetuned_train": val(d, e, "finetuned", "train", k=k),
                        "finetuned_heldout": ft,
                        "gap": cap - ref,
                        "gap_of": of if cap == cap and ref == ref else "",
                        "bm25": val(d, "", "bm25", "heldout", k=k),
                        "colbert": val(d, "", "colbert", "heldout", k=k),
                        "colbert_train": val(d, "", "colbert", "train", k=k),
                        "gold_note": infos[d].gold_varies_text() if k == RPREC else "",
                    }
                )
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
