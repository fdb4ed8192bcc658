"""Turn rankings into tidy result rows: one row per (split, metric, k) number.

Rows have the columns of ``reports/results.csv``: ``dataset, encoder, method, split, metric,
k, value, compression``. ``compression`` names the index variant a row was measured on
(``capgap.compress``: ``sq8``, ``pq-48x8``, ...; ``float32`` for the compress job's own
uncompressed reference) and is empty for every other row (the frozen index as built). Splits:
``train``, ``heldout`` and ``all``. Metrics:
``recall`` at every configured k and ``ndcg`` at ``ndcg_k`` (default 10), each the mean over
the split's queries; plus ``n_queries`` (k empty) so readers know what a mean is over; then
the metrics for gold sets of varying size (recorded on every set): ``rprec`` (R-precision:
recall at k = the query's own |gold|, k empty) and ``recall_cap`` (capped recall |top-k ∩
gold| / min(k, |gold|)) at every configured k, after the split's other rows, so the first rows
of a split are the same with or without them. A set with near-miss twins adds ``twin_pairs``,
``twin_win``, ``twin_tie``, ``twin_gap`` and its quartiles per twin type (``twin_rows``; e.g.
``twin_win:role_swap``, k empty).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .config import section_defaults
from .data import SPLITS, RetrievalSet
from .data.edits import TYPES as TWIN_TYPES
from .data.twins import TwinPairs
from .io import atomic_open
from .metrics import ndcg_from_ranks, recall_cap_from_ranks, recall_from_ranks, rprec_from_ranks
from .retrieval import dense_scores, document_groups, rank_queries
from .trec import Run, write_run  # noqa: F401  (write_run re-exported: run files live in capgap.trec)

EVAL_DEFAULTS = section_defaults("eval")  # the schema holds every default (capgap.config)
COLUMNS = ("dataset", "encoder", "method", "split", "metric", "k", "value", "compression")
EVAL_SPLITS = SPLITS + ("all",)


def eval_depth(ks: Sequence[int], ndcg_k: int) -> int:
    """How deep a written ranking must be so every reported cut-off can be read from it:
    ``max(max(ks), ndcg_k)``. (capgap's own metrics come from full-ranking gold ranks; R-precision
    of a query with more gold documents than this depth cannot be re-read from the run file.)"""
    return max(max(int(k) for k in ks), int(ndcg_k))


@dataclass(frozen=True)
class Judged:
    """What a ranking is judged against, per query, in index row terms.

    ``query_ids``: tuple of str; ``gold[q]``: ``(g,) int64`` row indices (into ``doc_ids``, the
    index order) of query q's documents with grade > 0, ascending; ``grades[q]``: ``(g,)
    float64`` their grades; ``excluded[q]``: ``(e,) int64`` rows removed from q's ranking;
    ``unfindable[q]``: ``(u,) float64`` grades of q's gold documents that no method can find
    (``capgap.data.gold_rule``: absent, empty or excluded; no row), empty when none (the
    default: no list at all). They count in every metric as gold never retrieved
    (``full_ranks``), the benchmarks' own rule (BRIGHT's run.py, BEIR, MTEB via pytrec_eval).
    """

    query_ids: tuple
    gold: list
    grades: list
    excluded: list
    unfindable: list = field(default_factory=list)

    def full_ranks(self, ranks: Sequence[np.ndarray]) -> tuple[list, list]:
        """``(ranks, grades)`` over each query's full gold set: ``ranks[i]`` (aligned with
        ``gold[i]``) and ``grades[i]`` followed by ``inf`` ranks and the grades of its
        unfindable gold. What every metric is computed from."""
        if not self.unfindable:
            return list(ranks), list(self.grades)
        r = [
            np.concatenate([np.asarray(x, dtype=np.float64), np.full(len(u), np.inf)])
            for x, u in zip(ranks, self.unfindable)
        ]
        g = [np.concatenate([np.asarray(x, dtype=np.float64), u]) for x, u in zip(self.grades, self.unfindable)]
        return r, g

    @classmethod
    def of(cls, rs: RetrievalSet, query_ids: Sequence[str], doc_ids: Sequence[str]) -> "Judged":
        """Build from a retrieval set. Raises ``KeyError`` for a gold document not in ``doc_ids``."""
        pos = {d: i for i, d in enumerate(doc_ids)}
        gold, grades, excluded, unfindable = [], [], [], []
        for q in query_ids:
            unfindable.append(np.array([g for _, g, _ in rs.unfindable.get(q, ())], dtype=np.float64))
            rel = rs.qrels.gold(q)
            rows = np.array(sorted(pos[d] for d in rel), dtype=np.int64)
            gold.append(rows)
            grades.append(np.array([rel[doc_ids[r]] for r in rows], dtype=np.float64))
            excluded.append(np.array(sorted(pos[d] for d in rs.excluded.get(q, ())), dtype=np.int64))
        return cls(tuple(query_ids), gold, grades, excluded, unfindable if any(len(u) for u in unfindable) else [])


def rows_from_ranks(
    rs: RetrievalSet,
    judged: Judged,
    ranks: Sequence[np.ndarray],
    ks: Sequence[int],
    ndcg_k: int = EVAL_DEFAULTS["ndcg_k"],
    dataset: str | None = None,
    encoder: str = "",
    method: str = "",
) -> list[dict]:
    """Result rows of every split from the gold documents' ranks.

    Per split, in this order: n_queries, recall@k for each k in ``ks``, nDCG@``ndcg_k``, then
    R-precision (``rprec``, k empty) and capped recall (``recall_cap``) at each k in ``ks``
    (these two last, so the first rows of a split are the same with or without them).
    recall@k = |gold ranked <= k| / |gold|, nDCG@k with linear gains, R-precision = |gold
    ranked <= |gold|| / |gold| (trec_eval ``recall_k`` / ``ndcg_cut_k`` / ``Rprec`` on the full
    ranking) and capped recall@k = |gold ranked <= k| / min(k, |gold|) (BEIR ``R_cap@k``),
    where gold is the full gold set: ``judged``'s unfindable gold counts as never retrieved
    (``Judged.full_ranks``).

    Parameters
    ----------
    rs : RetrievalSet
        The set whose splits the rows cover.
    judged : Judged
        The judged queries, their gold documents and grades.
    ranks : sequence of numpy.ndarray
        ``ranks[i]``: ``(g,) float`` 1-based ranks of query ``judged.query_ids[i]``'s gold
        documents in its full ranking (``capgap.retrieval.rank_gold``: pessimistic ties,
        ``inf`` = not retrieved), aligned with ``judged.gold[i]``.
    ks : sequence of int
        Recall cut-offs.
    ndcg_k : int
        nDCG cut-off.
    dataset : str, optional
        Default ``rs.name``.
    encoder, method : str
        Written into every row.

    Returns
    -------
    list of dict
        Rows ``dataset, encoder, method, split, metric, k, value`` (``capgap.evaluate`` module
        docstring).

    Raises
    ------
    KeyError
        A query of a split is not in ``judged``.
    """
    dataset = rs.name if dataset is None else dataset
    at = {q: i for i, q in enumerate(judged.query_ids)}
    ranks, grades = judged.full_ranks(ranks)  # unfindable gold: in the denominators, never found
    rows = []
    for split in EVAL_SPLITS:
        qids = list(rs.queries.ids) if split == "all" else list(rs.split.ids(split))
        base = {"dataset": dataset, "encoder": encoder, "method": method, "split": split}
        rows.append({**base, "metric": "n_queries", "k": "", "value": len(qids)})
        if not qids:
            continue
        r = [np.asarray(ranks[at[q]], dtype=np.float64) for q in qids]
        g = [grades[at[q]] for q in qids]
        for k in ks:
            rows.append({**base, "metric": "recall", "k": int(k), "value": float(recall_from_ranks(r, int(k)).mean())})
        rows.append(
            {**base, "metric": "ndcg", "k": int(ndcg_k), "value": float(ndcg_from_ranks(r, g, int(ndcg_k)).mean())}
        )
        rows.append({**base, "metric": "rprec", "k": "", "value": float(rprec_from_ranks(r).mean())})
        for k in ks:
            rows.append(
                {**base, "metric": "recall_cap", "k": int(k), "value": float(recall_cap_from_ranks(r, int(k)).mean())}
            )
    return rows


def write_rows(path: str | Path, rows: list[dict]) -> None:
    """Atomically write rows as CSV with the ``COLUMNS`` header."""
    with atomic_open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in COLUMNS})


def write_outputs(outputs, rows: list[dict], run=None) -> list[dict]:
    """A rule's results: ``run`` (a ``capgap.trec.Run``, if given) to ``outputs.run``, then the
    rows to ``outputs.metrics`` (``write_rows``). Returns the rows."""
    if run is not None:
        run.write(outputs.run)
    write_rows(outputs.metrics, rows)
    return rows


def interleave_rows(rows: list[dict], extra: list[dict]) -> list[dict]:
    """``rows`` with each split's ``extra`` rows placed right after that split's own rows."""
    out = []
    for split in EVAL_SPLITS:
        out += [r for r in rows if r["split"] == split] + [r for r in extra if r["split"] == split]
    return out


def write_curve(path: str | Path, curve: list[dict]) -> None:
    """Atomically write a training curve (one dict per evaluation step) as CSV: columns
    ``step``, ``loss``, then the rest sorted."""
    cols = sorted({k for row in curve for k in row}, key=lambda c: (c != "step", c != "loss", c)) or ["step", "loss"]
    with atomic_open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        w.writerows(curve)


def evaluate_encoder(
    rs: RetrievalSet,
    encoder,
    index,
    ks: Sequence[int],
    ndcg_k: int,
    encoder_name: str,
    method: str,
    threads: int | None = 1,
    queries: np.ndarray | None = None,
) -> tuple[list[dict], Run]:
    """A single-vector query encoder on its frozen index: encode every query, then
    ``evaluate_queries`` on ``index.embeddings``.

    ``encoder``: a ``capgap.encoders.Encoder`` (pre-trained or with a LoRA adapter); ``index``:
    its ``capgap.index.FrozenIndex`` (``embeddings`` ``(n_docs, dim) float32``, inner product).
    ``queries``: ``(n_queries, dim) float32`` this encoder's embeddings of every query of ``rs``
    in order, when already computed by this very call's encoding (``TrainResult.queries``: the
    fine-tuning's last curve point); None: encoded here.
    """
    q = queries
    if q is None:
        q = encoder.encode_queries(list(rs.queries.texts), progress=True, ids=rs.queries.ids, what=f"{rs.name} queries")
    elif q.shape != (len(rs.queries.ids), index.embeddings.shape[1]):
        raise ValueError(
            f"evaluate_encoder: queries {q.shape}, expected {(len(rs.queries.ids), index.embeddings.shape[1])}"
        )
    return evaluate_queries(rs, q, index.embeddings, index.doc_ids, ks, ndcg_k, encoder_name, method, threads)


def evaluate_queries(
    rs: RetrievalSet,
    queries: np.ndarray,
    documents: np.ndarray,
    doc_ids: Sequence[str],
    ks: Sequence[int],
    ndcg_k: int,
    encoder_name: str,
    method: str,
    threads: int | None = 1,
) -> tuple[list[dict], Run]:
    """Query vectors against a document matrix by inner product: rank the whole matrix exactly
    (``capgap.retrieval.rank_queries`` with ``dense_scores``: the evaluation tie rule, identical
    texts and bit-identical rows tied) and evaluate every split.

    ``queries``: ``(n_queries, dim) float32``, one row per ``rs.queries`` id in order;
    ``documents``: ``(n_docs, dim) float32`` in the order of ``doc_ids`` (= the corpus order).
    Returns the result rows (``rows_from_ranks``, method ``method``) and the run of depth
    ``eval_depth(ks, ndcg_k)``, tagged ``{encoder_name}-{method}``.
    """
    return evaluate_scores(
        rs,
        dense_scores(queries, documents, threads),
        doc_ids,
        document_groups(rs.corpus, documents),
        ks,
        ndcg_k,
        encoder_name,
        method,
        f"{encoder_name}-{method}",
    )


def evaluate_scores(
    rs: RetrievalSet,
    score_block,
    doc_ids: Sequence[str],
    groups: Sequence[np.ndarray],
    ks: Sequence[int],
    ndcg_k: int,
    encoder: str,
    method: str,
    tag: str,
    block: int | None = None,
) -> tuple[list[dict], Run]:
    """Any method's scores, ranked and evaluated the one way (``capgap.retrieval``'s tie rule):
    ``rank_queries(score_block, ...)`` over every query of ``rs`` against ``doc_ids`` (``groups``:
    documents that must tie, ``retrieval.document_groups``; ``block``: queries per score block),
    then ``rows_from_ranks`` (columns ``encoder``, ``method``) and the run of depth
    ``eval_depth(ks, ndcg_k)`` tagged ``tag``.

    ``score_block(a, b)``: scores of queries ``a:b`` as ``(b - a, n_docs)`` float, or with a
    ``(b - a, n_docs) bool`` mask of retrieved documents (``rank_queries``).

    A set with near-miss twins (``rs.twins``) also gets, per split, the twin rows of
    ``twin_rows`` from the same scores (``twin_win:<type>``, ...): a ``PairScores`` of its
    ``capgap.data.TwinPairs`` observes the score blocks (``rank_queries``' ``observe`` hook)."""
    qids = list(rs.queries.ids)
    j = Judged.of(rs, qids, doc_ids)
    pairs = TwinPairs.of(rs, qids, doc_ids) if rs.twins else None
    seen = None if pairs is None else PairScores(pairs.query, pairs.gold, pairs.twin)
    ranks, top, top_s = rank_queries(
        score_block,
        len(qids),
        j.gold,
        j.grades,
        j.excluded,
        eval_depth(ks, ndcg_k),
        len(doc_ids),
        groups,
        block=block,
        observe=None if seen is None else seen.observe,
    )
    rows = rows_from_ranks(rs, j, ranks, ks, ndcg_k, encoder=encoder, method=method)
    if pairs is not None:
        base = {"dataset": rs.name, "encoder": encoder, "method": method}
        gold_scores, twin_scores = seen.scores()
        rows = interleave_rows(rows, twin_rows(pairs, gold_scores, twin_scores, qids, split_members(rs), base))
    return rows, Run(qids, top, top_s, doc_ids, tag)


class PairScores:
    """Collects score(query, a) and score(query, b) of fixed (query, document a, document b)
    triples while a method's score blocks go by: ``observe`` is the observer hook of
    ``capgap.retrieval.rank_queries`` (evaluate_scores: a near-miss set's gold documents and
    their twins). ``query``: ``(n,) int64`` positions into the ranked queries; ``a`` / ``b``:
    ``(n,) int64`` document rows."""

    def __init__(self, query: np.ndarray, a: np.ndarray, b: np.ndarray):
        self.query, self.a, self.b = query, a, b
        self.score_a = np.full(len(query), np.nan)
        self.score_b = np.full(len(query), np.nan)

    def observe(self, start: int, S: np.ndarray, retrieved: np.ndarray | None = None) -> None:
        """Record the scores of queries ``start:start+len(S)`` (``S``: ``(b - a, n_docs)`` float;
        a document not ``retrieved`` scores ``-inf``)."""
        sel = np.flatnonzero((self.query >= start) & (self.query < start + len(S)))
        if not len(sel):
            return
        r = self.query[sel] - start
        a = np.asarray(S[r, self.a[sel]], dtype=np.float64)
        b = np.asarray(S[r, self.b[sel]], dtype=np.float64)
        if retrieved is not None:
            a = np.where(retrieved[r, self.a[sel]], a, -np.inf)
            b = np.where(retrieved[r, self.b[sel]], b, -np.inf)
        self.score_a[sel], self.score_b[sel] = a, b

    def scores(self) -> tuple[np.ndarray, np.ndarray]:
        """``(score_a, score_b)``, each ``(n,) float64``. Raises ``RuntimeError`` when some triple
        was never scored (its query's block never went by)."""
        if np.isnan(self.score_a).any() or np.isnan(self.score_b).any():
            raise RuntimeError("PairScores.scores: some triples were never scored")
        return self.score_a, self.score_b


def split_members(rs: RetrievalSet) -> dict[str, list[str]]:
    """Query ids of every evaluation split (``EVAL_SPLITS``: train, heldout, all) of ``rs``."""
    return {"train": list(rs.split.train), "heldout": list(rs.split.heldout), "all": list(rs.queries.ids)}


def twin_rows(
    pairs: TwinPairs,
    gold_scores: np.ndarray,
    twin_scores: np.ndarray,
    query_ids: Sequence[str],
    split_ids: Mapping[str, Sequence[str]],
    base: Mapping,
) -> list[dict]:
    """Result rows (``k`` empty) per split of ``split_ids`` (name -> query ids) and twin type
    present: ``twin_pairs``, ``twin_win``, ``twin_tie``, ``twin_gap``, ``twin_gap_p25``,
    ``twin_gap_p75`` with the type after a colon (``capgap.nearmiss``'s docstring). ``gold_scores`` /
    ``twin_scores``: ``(len(pairs),) float64``, aligned with ``pairs``; ``-inf`` = not
    retrieved (a gap with an infinity is left out of the quantiles, not of win/tie). ``base``:
    the dataset / encoder / method columns. No rows when there are no pairs."""
    if not len(pairs):
        return []
    at = {q: i for i, q in enumerate(query_ids)}
    gold_scores = np.asarray(gold_scores, dtype=np.float64)
    twin_scores = np.asarray(twin_scores, dtype=np.float64)
    out = []
    for split, ids in split_ids.items():
        members = np.zeros(len(query_ids), dtype=bool)
        members[[at[q] for q in ids if q in at]] = True
        for k, kind in enumerate(TWIN_TYPES):
            sel = members[pairs.query] & (pairs.kind == k)
            if not sel.any():
                continue
            g, t = gold_scores[sel], twin_scores[sel]
            gap = g - t
            finite = gap[np.isfinite(gap)]
            b = {**base, "split": split, "k": ""}
            out.append({**b, "metric": f"twin_pairs:{kind}", "value": int(sel.sum())})
            out.append({**b, "metric": f"twin_win:{kind}", "value": float(np.mean(g > t))})
            out.append({**b, "metric": f"twin_tie:{kind}", "value": float(np.mean(g == t))})
            for name, qn in (("twin_gap", 50), ("twin_gap_p25", 25), ("twin_gap_p75", 75)):
                out.append(
                    {**b, "metric": f"{name}:{kind}", "value": float(np.percentile(finite, qn)) if len(finite) else ""}
                )
    return out
