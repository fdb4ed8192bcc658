"""Retrieval metrics, per query and averaged.

- recall@k as LIMIT/MTEB define it: ``|top-k ∩ gold| / |gold|``, averaged over queries
  (equals trec_eval's ``recall_k``).
- nDCG@k as BRIGHT reports it (pytrec_eval ``ndcg_cut_k``): gain = graded relevance (linear),
  discount ``1/log2(rank+1)``, ideal DCG from the query's judged grades.
- R-precision for gold sets of varying size: recall at k = |gold|, ``|top-|gold| ∩ gold| /
  |gold|`` (trec_eval's ``Rprec``; grades > 0 relevant). One number per query that needs no
  cut-off, 1 exactly when the gold set fills the top |gold|.
- capped recall@k, ``|top-k ∩ gold| / min(k, |gold|)`` (BEIR's ``R_cap@k``): recall@k that
  reaches 1 when the top k is all gold, however large the gold set.
recall, nDCG and R-precision are cross-checked against pytrec_eval in the tests; capped recall
against trec_eval's ``recall_k`` rescaled (``recall_k · |gold| / min(k, |gold|)``) and by hand.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def _gold_of(i: int, grades: Mapping[str, int]) -> set[str]:
    """Query i's gold set (grade > 0); raises ``ValueError`` when it is empty."""
    rel = {d for d, s in grades.items() if s > 0}
    if not rel:
        raise ValueError(f"query {i} has no gold document (grade > 0): recall and nDCG are undefined")
    return rel


def _per_ranking(ranked: Sequence[Sequence[str]], gold: Sequence[Mapping[str, int]], fn) -> np.ndarray:
    """``(n_queries,) float64``: ``fn(ranking, gold ids)`` per query; raises ``ValueError`` for a
    query with no gold document (``_gold_of``)."""
    out = np.empty(len(ranked), dtype=np.float64)
    for i, (r, g) in enumerate(zip(ranked, gold)):
        out[i] = fn(r, _gold_of(i, g))
    return out


def recall_at_k(ranked: Sequence[Sequence[str]], gold: Sequence[Mapping[str, int]], k: int) -> np.ndarray:
    """Per-query recall@k, ``|top-k ∩ gold| / |gold|`` (trec_eval ``recall_k``).

    Parameters
    ----------
    ranked : ``ranked[i]``, query i's document ids in rank order (at least ``k``, or all).
    gold : ``gold[i]``, ``{doc_id: grade}`` of query i; grades <= 0 are not gold.
    k : cut-off, >= 1.

    Returns
    -------
    ``(n_queries,) float64`` in [0, 1].

    Raises
    ------
    ValueError
        A query with no gold document (so does ``ndcg_at_k``).
    """
    return _per_ranking(ranked, gold, lambda r, rel: len(rel.intersection(r[:k])) / len(rel))


def rprec(ranked: Sequence[Sequence[str]], gold: Sequence[Mapping[str, int]]) -> np.ndarray:
    """Per-query R-precision, ``|top-R ∩ gold| / R`` with R = |gold| (trec_eval ``Rprec``):
    recall@k at each query's own k = R, for gold sets whose size varies.

    Parameters
    ----------
    ranked : ``ranked[i]``, query i's document ids in rank order (at least ``R``, or all).
    gold : ``gold[i]``, ``{doc_id: grade}`` of query i; grades <= 0 are not gold (and do not
        count towards R).

    Returns
    -------
    ``(n_queries,) float64`` in [0, 1].

    Raises
    ------
    ValueError
        A query with no gold document (as ``recall_at_k``; trec_eval would score it 0).
    """
    return _per_ranking(ranked, gold, lambda r, rel: len(rel.intersection(r[: len(rel)])) / len(rel))


def recall_cap_at_k(ranked: Sequence[Sequence[str]], gold: Sequence[Mapping[str, int]], k: int) -> np.ndarray:
    """Per-query capped recall@k, ``|top-k ∩ gold| / min(k, |gold|)`` (BEIR ``R_cap@k``): equal
    to recall@k where ``k >= |gold|``, and 1 where the top k holds k gold documents.

    Parameters
    ----------
    ranked : ``ranked[i]``, query i's document ids in rank order (at least ``k``, or all).
    gold : ``gold[i]``, ``{doc_id: grade}`` of query i; grades <= 0 are not gold.
    k : cut-off, >= 1.

    Returns
    -------
    ``(n_queries,) float64`` in [0, 1].

    Raises
    ------
    ValueError
        A query with no gold document (as ``recall_at_k``).
    """
    return _per_ranking(ranked, gold, lambda r, rel: len(rel.intersection(r[:k])) / min(k, len(rel)))


def ndcg_at_k(ranked: Sequence[Sequence[str]], gold: Sequence[Mapping[str, int]], k: int) -> np.ndarray:
    """Per-query nDCG@k with linear gain and ``1/log2(rank + 1)`` discount, the ideal DCG from
    the query's own grades (trec_eval / pytrec_eval ``ndcg_cut_k``).

    Parameters
    ----------
    ranked : ``ranked[i]``, query i's document ids in rank order.
    gold : ``gold[i]``, ``{doc_id: grade}``; grades <= 0 carry no gain.
    k : cut-off, >= 1.

    Returns
    -------
    ``(n_queries,) float64`` in [0, 1].

    Raises
    ------
    ValueError
        A query with no gold document (as ``recall_at_k``; trec_eval would score it 0).
    """
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    out = np.empty(len(ranked), dtype=np.float64)
    for i, (r, g) in enumerate(zip(ranked, gold)):
        _gold_of(i, g)
        gains = np.array([max(g.get(d, 0), 0) for d in r[:k]], dtype=np.float64)
        dcg = float((gains * disc[: len(gains)]).sum())
        ideal = np.sort(np.array([s for s in g.values() if s > 0], dtype=np.float64))[::-1][:k]
        out[i] = dcg / float((ideal * disc[: len(ideal)]).sum())
    return out


def _per_query(gold_ranks: Sequence[np.ndarray], name: str, fn) -> np.ndarray:
    """``(n_queries,) float64``: ``fn(ranks)`` of each query's gold ranks; raises ``ValueError``
    naming the metric for a query with an empty gold set."""
    out = np.empty(len(gold_ranks), dtype=np.float64)
    for i, r in enumerate(gold_ranks):
        r = np.asarray(r)
        if r.size == 0:
            raise ValueError(f"query {i} has no gold document: {name} is undefined")
        out[i] = fn(r)
    return out


def recall_from_ranks(gold_ranks: Sequence[np.ndarray], k: int) -> np.ndarray:
    """Per-query recall@k from each query's gold ranks (equal to ``recall_at_k`` on the full
    ranking).

    Parameters
    ----------
    gold_ranks : ``gold_ranks[i]``, ``(g_i,) float`` 1-based ranks of query i's gold documents
        in its full ranking (``capgap.retrieval.rank_gold``; ``inf`` = not retrieved), g_i >= 1.
    k : cut-off, >= 1.

    Returns
    -------
    ``(n_queries,) float64`` in [0, 1].

    Raises
    ------
    ValueError
        A query with an empty gold set.
    """
    return _per_query(gold_ranks, "recall", lambda r: float(np.mean(r <= k)))


def rprec_from_ranks(gold_ranks: Sequence[np.ndarray]) -> np.ndarray:
    """Per-query R-precision from each query's gold ranks: the fraction of its R = g_i gold
    documents ranked <= R (equal to ``rprec`` on the full ranking; trec_eval ``Rprec``).

    Parameters
    ----------
    gold_ranks : ``gold_ranks[i]``, ``(g_i,) float`` 1-based ranks of query i's gold documents
        (grade > 0) in its full ranking (``capgap.retrieval.rank_gold``: pessimistic ties;
        ``inf`` = not retrieved), g_i >= 1.

    Returns
    -------
    ``(n_queries,) float64`` in [0, 1].

    Raises
    ------
    ValueError
        A query with an empty gold set.
    """
    return _per_query(gold_ranks, "R-precision", lambda r: float(np.mean(r <= r.size)))


def recall_cap_from_ranks(gold_ranks: Sequence[np.ndarray], k: int) -> np.ndarray:
    """Per-query capped recall@k from each query's gold ranks, ``|gold ranked <= k| / min(k,
    g_i)`` (equal to ``recall_cap_at_k`` on the full ranking; BEIR ``R_cap@k``).

    Parameters
    ----------
    gold_ranks : ``gold_ranks[i]``, ``(g_i,) float`` 1-based ranks (``rank_gold``; ``inf`` = not
        retrieved), g_i >= 1.
    k : cut-off, >= 1.

    Returns
    -------
    ``(n_queries,) float64`` in [0, 1].

    Raises
    ------
    ValueError
        A query with an empty gold set.
    """
    return _per_query(gold_ranks, "capped recall", lambda r: float(np.count_nonzero(r <= k)) / min(k, r.size))


def ndcg_from_ranks(gold_ranks: Sequence[np.ndarray], grades: Sequence[np.ndarray], k: int) -> np.ndarray:
    """Per-query nDCG@k from gold ranks and their grades (the gains and discounts of
    ``ndcg_at_k``): only gold documents carry gain, so DCG needs nothing but their ranks.

    Parameters
    ----------
    gold_ranks : ``gold_ranks[i]``, ``(g_i,) float`` 1-based ranks (``inf`` = not retrieved).
    grades : ``grades[i]``, ``(g_i,) float`` their grades (> 0), aligned with ``gold_ranks[i]``.
    k : cut-off, >= 1.

    Returns
    -------
    ``(n_queries,) float64`` in [0, 1].

    Raises
    ------
    ValueError
        A query with no document of grade > 0 (as ``ndcg_at_k``).
    """
    out = np.empty(len(gold_ranks), dtype=np.float64)
    for q, (r, g) in enumerate(zip(gold_ranks, grades)):
        r = np.asarray(r)
        g = np.asarray(g, dtype=np.float64)
        ideal = np.sort(g[g > 0])[::-1][:k]
        if ideal.size == 0:
            raise ValueError(f"query {q} has no gold document: nDCG is undefined")
        keep = r <= k
        dcg = float((g[keep] / np.log2(r[keep] + 1)).sum())
        out[q] = dcg / float((ideal / np.log2(np.arange(2, len(ideal) + 2))).sum())
    return out
