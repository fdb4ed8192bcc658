"""Turn rankings into tidy result rows: one row per (split, metric, k) number.

Rows have the columns of ``reports/results.csv``: ``dataset, encoder, method, split, metric,
k, value`` (DESIGN.md "Report"). Splits: ``train``, ``heldout`` and ``all``. Metrics:
``recall`` at every configured k and ``ndcg`` at ``ndcg_k`` (default 10), each the mean over
the split's queries; plus ``n_queries`` (k empty) so readers know what a mean is over.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

import numpy as np

from .data import SPLITS, RetrievalSet
from .io import atomic_open
from .metrics import ndcg_at_k, recall_at_k

COLUMNS = ("dataset", "encoder", "method", "split", "metric", "k", "value")
EVAL_SPLITS = SPLITS + ("all",)


def rankings_to_ids(indices: np.ndarray, doc_ids: Sequence[str]) -> list[list[str]]:
    """``(n_queries, k) int`` row indices -> lists of document ids (negative indices, padding
    of a query with fewer than k candidates, are skipped)."""
    ids = np.asarray(doc_ids, dtype=object)
    return [list(ids[row[row >= 0]]) for row in np.asarray(indices)]


def evaluate_rankings(
    rs: RetrievalSet,
    ranked: dict[str, list[str]],
    ks: Sequence[int],
    ndcg_k: int = 10,
    dataset: str = "",
    encoder: str = "",
    method: str = "",
) -> list[dict]:
    """Rows for every split: recall@k for each k in ``ks``, nDCG@``ndcg_k``, n_queries.

    ``ranked[query_id]``: document ids in rank order, at least ``max(ks)`` long where the
    corpus allows. Raises ``KeyError`` if a query of the set has no ranking.
    """
    rows = []
    for split in EVAL_SPLITS:
        qids = list(rs.queries.ids) if split == "all" else list(rs.split.ids(split))
        base = {"dataset": dataset, "encoder": encoder, "method": method, "split": split}
        rows.append({**base, "metric": "n_queries", "k": "", "value": len(qids)})
        if not qids:
            continue
        runs = [ranked[q] for q in qids]
        gold = [rs.qrels.judgements[q] for q in qids]
        for k in ks:
            rows.append({**base, "metric": "recall", "k": int(k), "value": float(recall_at_k(runs, gold, int(k)).mean())})
        rows.append({**base, "metric": "ndcg", "k": int(ndcg_k), "value": float(ndcg_at_k(runs, gold, int(ndcg_k)).mean())})
    return rows


def write_rows(path: str | Path, rows: list[dict]) -> None:
    """Atomically write rows as CSV with the ``COLUMNS`` header."""
    with atomic_open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in COLUMNS})


def write_run(path: str | Path, query_ids: Sequence[str], indices: np.ndarray, scores: np.ndarray, doc_ids: Sequence[str], tag: str) -> None:
    """Atomically write a TREC run file (``qid Q0 docid rank score tag``).

    Document ids containing whitespace (LIMIT's names) are written with ``_`` for spaces;
    the run file is for inspection and external evaluators, capgap's metrics use ids directly.
    """
    with atomic_open(path, "w", encoding="utf-8") as fh:
        for q, row, srow in zip(query_ids, indices, scores):
            for r, (i, s) in enumerate(((i, s) for i, s in zip(row, srow) if i >= 0), start=1):
                fh.write(f"{q.replace(' ', '_')} Q0 {doc_ids[i].replace(' ', '_')} {r} {s:.6f} {tag}\n")
