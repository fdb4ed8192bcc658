"""The probe as the DAG reports it: per-query records (``per_query.jsonl``), the summary
rows of results.csv, ``evaluate`` (every query of a dataset's frozen index) and the margins of
near-miss twins (``twin_margins``)."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Mapping, Sequence

import numpy as np

from ..data import SPLITS, TwinPairs
from ..evaluate import Judged, eval_depth, interleave_rows, rows_from_ranks, split_members, twin_rows
from ..retrieval import document_groups, text_key
from ..trec import Run
from .config import ProbeConfig
from .result import OUTCOMES, ProbeResult
from .solver import probe

log = logging.getLogger("capgap.probe")  # the package's one logger


def per_query_records(
    results: Sequence[ProbeResult],
    query_ids: Sequence[str],
    gold: Sequence[np.ndarray],
    doc_ids: Sequence[str],
    split_of: Mapping[str, str],
    ks: Sequence[int],
    unfindable: Sequence[int] | None = None,
) -> list[dict]:
    """One JSON-ready record per query (the probe's ``per_query.jsonl``): id, split, gold-set
    size, recall@k for each k in ``ks`` (pessimistic ties), certificate and its cause, slack
    (pair-averaged hinge), margin (unnormalised score units; ``inf`` -> ``null`` in strict JSON:
    no non-gold document), objective, duality gap, iterations, convergence, |w|, the final C and
    escalations, ``outcome`` and ``decided_by`` (``ProbeResult``), the inseparability proof's
    ``hull_distance_bound`` (null: no proof was needed or found), and each gold document's rank
    by id. ``gold[i]``: ``(g,) int64`` rows of query i's gold documents (into ``doc_ids``),
    aligned with ``results[i].gold_ranks``. ``unfindable[i]``: how many more gold documents
    query i has that no method can find (``capgap.data.gold_rule``: absent, empty or excluded);
    they count in ``n_gold`` and in recall's denominator, as in every method's rows
    (``Judged.full_ranks``), and are listed as ``n_unfindable``."""
    out = []
    unfindable = unfindable if unfindable is not None else [0] * len(results)
    for q, g, r, u in zip(query_ids, gold, results, unfindable):
        scale = len(g) / (len(g) + u)
        out.append(
            {
                "query_id": q,
                "split": split_of.get(q, ""),
                "n_gold": len(g) + u,
                "n_unfindable": int(u),
                **{f"recall@{k}": r.recall_at(k) * scale for k in ks},
                "certified": r.certified,
                "cause": r.cause,
                "outcome": r.outcome,
                "decided_by": r.decided_by,
                "by_construction": r.by_construction,
                "tied": r.tied,
                "lp_feasible": r.lp_feasible,
                "duplicate_conflict": r.duplicate_conflict,
                "slack": r.slack,
                "margin": r.margin,
                "objective": r.objective,
                "gap": r.gap,
                "iterations": r.iterations,
                "converged": r.converged,
                "stopped": r.stopped,
                "w_norm": float(np.linalg.norm(r.w)),
                "C_final": r.extra.get("C_final"),
                "escalations": r.extra.get("escalations"),
                "hull_distance_bound": r.extra.get("hull"),
                "gold_ranks": {doc_ids[d]: int(x) for d, x in zip(g, r.gold_ranks)},
            }
        )
    return out


def summary_rows(
    results: Sequence[ProbeResult], query_ids: Sequence[str], split_ids: Mapping[str, Sequence[str]], base: Mapping
) -> list[dict]:
    """The probe's own results.csv rows (``k`` empty) per split of ``split_ids`` (name -> query
    ids; empty splits skipped): ``certified`` (fraction), ``uncertified_duplicate`` /
    ``uncertified_tied`` / ``uncertified_geometry`` (fractions by cause), ``queries_<outcome>``
    for each of ``OUTCOMES`` (counts: certified, certified up to identical copies, proven not
    separable, crossing text-tied, undecided; ``ProbeResult.outcome``), ``tied_queries`` (count
    of queries sharing their text), ``certified_by_construction`` (fraction), ``slack_median``
    (pair-averaged hinge at each query's final w: the witness's for queries stopped at their
    certificate), ``iterations_median`` / ``iterations_p90`` / ``iterations_max`` (cutting-plane
    iterations per query), ``stopped_at_certificate`` (fraction stopped by ``solve="certificate"``),
    ``proven_inseparable`` (fraction whose escalation stopped at an inseparability proof),
    ``not_converged`` (fraction that hit ``max_iter``). ``base``: the
    dataset / encoder / method columns."""
    by_q = dict(zip(query_ids, results))
    rows = []
    for split, ids in split_ids.items():
        if not ids:
            continue
        b = {**base, "split": split, "k": ""}
        res = [by_q[q] for q in ids]
        rows.append({**b, "metric": "certified", "value": float(np.mean([r.certified for r in res]))})
        for cause in ("duplicate", "tied", "geometry"):
            rows.append(
                {**b, "metric": f"uncertified_{cause}", "value": float(np.mean([r.cause == cause for r in res]))}
            )
        for outcome in OUTCOMES:  # every query decided: how many ended each way (counts)
            rows.append({**b, "metric": f"queries_{outcome}", "value": int(sum(r.outcome == outcome for r in res))})
        rows.append({**b, "metric": "tied_queries", "value": int(sum(r.tied > 1 for r in res))})
        rows.append(
            {
                **b,
                "metric": "certified_by_construction",
                "value": float(np.mean([r.by_construction is not None for r in res])),
            }
        )
        rows.append({**b, "metric": "slack_median", "value": float(np.median([r.slack for r in res]))})
        its = [r.iterations for r in res]
        rows.append({**b, "metric": "iterations_median", "value": float(np.median(its))})
        rows.append({**b, "metric": "iterations_p90", "value": float(np.percentile(its, 90))})
        rows.append({**b, "metric": "iterations_max", "value": int(max(its))})
        rows.append(
            {
                **b,
                "metric": "stopped_at_certificate",
                "value": float(np.mean([r.stopped == "certificate" for r in res])),
            }
        )
        rows.append(
            {**b, "metric": "proven_inseparable", "value": float(np.mean([r.stopped == "inseparable" for r in res]))}
        )
        rows.append({**b, "metric": "not_converged", "value": float(np.mean([not r.converged for r in res]))})
    return rows


def evaluate(
    rs,
    index,
    cfg: ProbeConfig,
    encoder_name: str,
    ks: Sequence[int],
    ndcg_k: int,
    threads: int | None = 1,
    return_w: bool = False,
) -> tuple:
    """The capacity probe on every query of a dataset's frozen index, as the DAG reports it.

    ``rs``: a ``capgap.data.RetrievalSet``; ``index``: its ``capgap.index.FrozenIndex``
    (``embeddings`` ``(n_docs, dim) float32``, rows in corpus order). Queries with identical
    text (``retrieval.text_key``) share one w; documents with identical text are twins
    (``retrieval.document_groups``). Returns ``(rows, records, run)``: recall@k / nDCG per split
    from the same ranks as every method, each split followed by ``summary_rows``; one
    ``per_query_records`` record per query; and the run of every query's w (tag
    ``{encoder_name}-probe``, depth ``eval_depth(ks, ndcg_k)``). A set with near-miss twins
    (``rs.twins``) is solved to the optimum whatever ``cfg.solve`` says: its twin margins
    (``twin_margins``) are the optimum's. ``return_w``: also return, fourth, every query's w as
    ``(n_queries, dim) float32`` in ``rs.queries`` order (the ladder's nearest-train transfer,
    ``capgap.ladder``).
    """
    kwargs = probe_arguments(rs, index, cfg, ks, ndcg_k)
    t = time.perf_counter()
    results = probe(index.embeddings, threads=threads, progress=True, **kwargs)
    log.info("probe: %d queries in %.1f s", len(results), time.perf_counter() - t)
    return evaluate_results(rs, index, results, encoder_name, ks, ndcg_k, return_w)


def probe_arguments(rs, index, cfg: ProbeConfig, ks: Sequence[int], ndcg_k: int) -> dict:
    """The keyword arguments ``evaluate`` gives ``probe()`` besides the index, ``threads`` and
    ``progress``: every query's gold, excluded rows and grades, the text-tie labels, the run
    depth, the identical-text document groups and ``cfg``'s settings (``solve="optimum"`` on a
    set with near-miss twins: ``evaluate``). ``capgap.probe.shards`` splits the same call."""
    j = Judged.of(rs, list(rs.queries.ids), index.doc_ids)
    if rs.twins and cfg.solve != "optimum":
        # the twin margin (twin_margins) is a property of the SVM optimum, not of any witness
        log.info("probe: %s has near-miss twins: every query runs to the optimum (solve=optimum)", rs.name)
        cfg = replace(cfg, solve="optimum")
    return dict(
        gold_sets=j.gold,
        excluded_sets=j.excluded,
        grades=j.grades,
        tie_groups=[text_key(x) for x in rs.queries.texts],
        depth=eval_depth(ks, ndcg_k),
        duplicates=document_groups(rs.corpus),
        **cfg.kwargs(),
    )


def evaluate_results(
    rs, index, results: Sequence[ProbeResult], encoder_name: str, ks: Sequence[int], ndcg_k: int, return_w: bool = False
) -> tuple:
    """``evaluate``'s return value from the probe's ``results`` (one per query of ``rs.queries``,
    in order): rows, per-query records, run (and every w, ``return_w``)."""
    qids = list(rs.queries.ids)
    j = Judged.of(rs, qids, index.doc_ids)
    splits = split_members(rs)
    split_of = {q: s for s in SPLITS for q in splits[s]}
    records = per_query_records(
        results, qids, j.gold, index.doc_ids, split_of, ks, [len(u) for u in j.unfindable] if j.unfindable else None
    )
    run = Run(
        qids,
        np.stack([r.top_rows for r in results]),
        np.stack([r.top_scores for r in results]),
        index.doc_ids,
        f"{encoder_name}-probe",
    )
    rows = rows_from_ranks(rs, j, [r.gold_ranks for r in results], ks, ndcg_k, encoder=encoder_name, method="probe")
    base = {"dataset": rs.name, "encoder": encoder_name, "method": "probe"}
    extra = summary_rows(results, qids, splits, base)
    if rs.twins:
        extra = interleave_rows(extra, twin_margins(rs, index, results, qids, records, splits, base))
    if return_w:
        return (
            interleave_rows(rows, extra),
            records,
            run,
            np.stack([np.asarray(r.w, dtype=np.float32) for r in results]),
        )
    return interleave_rows(rows, extra), records, run


def twin_margins(
    rs,
    index,
    results: Sequence[ProbeResult],
    query_ids: Sequence[str],
    records: list[dict],
    splits: Mapping[str, Sequence[str]],
    base: Mapping,
) -> list[dict]:
    """The probe's margin between each gold document and its near-miss twins
    (``capgap.nearmiss``): with the query's witness scaled to unit norm, ``w/|w| . (gold -
    twin)`` in float64, i.e. how far the twin lies behind the gold document along the best
    direction the probe found (the geometric margin of that pair; > 0: separated). Adds
    ``twin_margin: {twin id: margin}`` to each of ``records`` (aligned with ``query_ids``) and
    returns ``capgap.evaluate.twin_rows`` of the margins (``twin_gap:<type>`` is the median
    margin, ``twin_win`` the fraction separated)."""
    pairs = TwinPairs.of(rs, query_ids, index.doc_ids)
    D = index.embeddings
    W = np.stack([np.asarray(r.w, dtype=np.float64) for r in results])
    W /= np.maximum(np.linalg.norm(W, axis=1, keepdims=True), 1e-300)
    Wp = W[pairs.query]  # (n_pairs, dim): each pair's unit witness
    g = np.einsum("ij,ij->i", np.asarray(D[pairs.gold], dtype=np.float64), Wp)
    t = np.einsum("ij,ij->i", np.asarray(D[pairs.twin], dtype=np.float64), Wp)
    for qi, tr, m in zip(pairs.query, pairs.twin, g - t):
        records[qi].setdefault("twin_margin", {})[index.doc_ids[tr]] = float(m)
    return twin_rows(pairs, g, t, query_ids, splits, base)
