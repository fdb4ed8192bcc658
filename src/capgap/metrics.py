"""Retrieval metrics, per query and averaged.

- recall@k as LIMIT/MTEB define it: ``|top-k ∩ gold| / |gold|``, averaged over queries
  (equals trec_eval's ``recall_k``).
- nDCG@k as BRIGHT reports it (pytrec_eval ``ndcg_cut_k``): gain = graded relevance (linear),
  discount ``1/log2(rank+1)``, ideal DCG from the query's judged grades.
Both are cross-checked against pytrec_eval in the tests.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def recall_at_k(ranked: Sequence[Sequence[str]], gold: Sequence[Mapping[str, int]], k: int) -> np.ndarray:
    """Per-query recall@k: ``(n_queries,) float64``.

    ``ranked[i]``: document ids in rank order (at least ``k`` or all documents);
    ``gold[i]``: ``{doc_id: grade}`` of query i; grades <= 0 are not relevant. Raises
    ``ValueError`` for a query with no relevant document.
    """
    out = np.empty(len(ranked), dtype=np.float64)
    for i, (r, g) in enumerate(zip(ranked, gold)):
        rel = {d for d, s in g.items() if s > 0}
        if not rel:
            raise ValueError(f"query {i} has no relevant document")
        out[i] = len(rel.intersection(r[:k])) / len(rel)
    return out


def ndcg_at_k(ranked: Sequence[Sequence[str]], gold: Sequence[Mapping[str, int]], k: int = 10) -> np.ndarray:
    """Per-query nDCG@k with linear gain (trec_eval ``ndcg_cut``): ``(n_queries,) float64``."""
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    out = np.empty(len(ranked), dtype=np.float64)
    for i, (r, g) in enumerate(zip(ranked, gold)):
        gains = np.array([max(g.get(d, 0), 0) for d in r[:k]], dtype=np.float64)
        dcg = float((gains * disc[: len(gains)]).sum())
        ideal = np.sort(np.array([s for s in g.values() if s > 0], dtype=np.float64))[::-1][:k]
        idcg = float((ideal * disc[: len(ideal)]).sum())
        out[i] = dcg / idcg if idcg > 0 else 0.0
    return out


def recall_from_ranks(gold_ranks: Sequence[np.ndarray], k: int) -> np.ndarray:
    """Per-query recall@k from the 1-based ranks of each query's gold documents."""
    return np.array([float(np.mean(np.asarray(r) <= k)) for r in gold_ranks], dtype=np.float64)


def ndcg_from_ranks(gold_ranks: Sequence[np.ndarray], grades: Sequence[np.ndarray], k: int = 10) -> np.ndarray:
    """Per-query nDCG@k from gold ranks and their grades (same gains/discounts as ``ndcg_at_k``).

    Only gold documents carry gain, so DCG needs nothing but their ranks.
    """
    out = np.empty(len(gold_ranks), dtype=np.float64)
    for q, (r, g) in enumerate(zip(gold_ranks, grades)):
        r = np.asarray(r)
        g = np.asarray(g, dtype=np.float64)
        keep = r <= k
        dcg = float((g[keep] / np.log2(r[keep] + 1)).sum())
        ideal = np.sort(g[g > 0])[::-1][:k]
        idcg = float((ideal / np.log2(np.arange(2, len(ideal) + 2))).sum())
        out[q] = dcg / idcg if idcg > 0 else 0.0
    return out
