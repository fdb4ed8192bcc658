"""Screening: the probe of a large index on each query's candidate documents, checked against
the whole index and grown until the check holds.

Each cutting-plane iteration of the whole-index probe reads the whole index twice (the scores
and the new plane), so at the paper's scale (500k documents, arXiv 2610.02749, "The empirical
half") a query costs about a second of index reads, however easy it is. Most documents play
no part in the optimum: a pair (i, j) adds to the hinge only while s_j > s_i - 1. Screening
solves each query on a small working set of documents, the way SVM solvers shrink theirs
(Joachims, "Making Large-Scale SVM Learning Practical", 1999, Sec. 3.3), and checks the answer
against every document:

1. One pass over the index scores every query at the direction of its first cutting plane at
   w = 0 (the mean gold document minus the mean non-gold one); the query's candidates are its
   gold documents, their identical copies and the ``SCREEN_CANDIDATES`` highest-scoring
   non-gold documents.
2. The probe (``solver._probe``, with every proof and the exact LP) runs on the candidates
   alone, with C (and ``C_max``) multiplied and ``eps`` divided by r = (non-gold candidates) /
   (non-gold documents): the pair-averaged objective 1/2 |w|^2 + C/|P| sum hinge is then the
   whole index's objective restricted to the candidates' pairs, with the same stopping rule in
   the whole problem's units.
3. One pass over the index scores every query at its w. A document outside the candidates with
   s_j > min gold score - 1 is in a violated pair: they join the candidates and step 2 runs
   again (a query its candidates separate takes at most ``SCREEN_CANDIDATES`` of them per round,
   the highest first; one they do not separate, with more than that many outside, goes to the
   whole-index probe at once: an inseparable gold set spread over the index has most documents
   in violated pairs). When none does, w's objective on the whole index equals
   its objective on the candidates, which is at most the whole problem's optimum, so w is the
   whole index's optimum (within the same eps); a w that separates the gold set from every
   document of the index is a certificate whatever the candidates were; a proof that the gold
   set is inseparable from the candidates' non-gold documents (hull or exact LP) holds for the
   whole index, which has more of them.

Every number a query ends with is computed on the whole index at its final w: margin and
certificate (float64 near the gold scores, as ``planes._exact_near_gold``), gold ranks and top
rows under ``capgap.retrieval``'s tie rule. Objective, dual and slack are the candidates'
problem's at its SVM point, in the whole problem's units. A query not confirmed after
``SCREEN_ROUNDS`` rounds, or whose candidates would pass ``SCREEN_MAX_DOCS`` (or a quarter of the
index: an inseparable gold set spread over the index puts most documents in violated pairs), is
solved on the whole index (``solver._probe``). So screening changes how fast a query is decided,
not what is proven: the verdict, certificate and recall are the whole-index probe's; w may
differ within the solver's tolerance (another point of the same eps-optimal set, or in
certificate mode another separating w). ``extra["screen"]["exact"]``: no document outside the
candidates was in a violated pair at w (in certificate mode a certificate ends a query whatever
the pairs).

The index is read in row blocks (a memory map stays mapped, never copied whole): two passes per
round for a chunk of queries, each holding one ``(n_docs, chunk) float32`` score matrix of at
most ``SCREEN_SCORE_BYTES``. The candidates' problems run in ``workers`` forked processes (one
BLAS thread each); each is the same whatever the worker count, so the numbers are too.

Screening runs for ``probe()`` calls on more than ``SCREEN_MIN_DOCS`` documents without text-tied
queries and with gold-vs-non-gold pairs (``pairs="gold"``, or a single grade level); the rest
take the whole-index path, and so does a query with more than ``SCREEN_MAX_GOLD`` gold documents
(hundreds of gold documents spread over the index involve too many documents in the optimum for
a small candidate set).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from ..retrieval import duplicate_groups, merge_groups, rank_gold, rank_top
from . import constants as const
from .config import SolveSettings
from .planes import _compared_rows, _product_error, _threshold
from .result import ProbeResult
from .setup import _duplicate_rows, _twins

log = logging.getLogger(__name__)

_INDEX: np.ndarray | None = None  # the index, inherited by the forked workers (screened_probe)
_SETTINGS: SolveSettings | None = None  # the probe's settings for the candidates' problems
_SOLVE = None  # solver._probe, passed in by probe() (this module sits below the solver)


def screens(n_docs: int, tie_groups, pairs: str, grs) -> bool:
    """Whether ``probe()`` screens (module docstring): more than ``SCREEN_MIN_DOCS`` documents, no
    two queries sharing a tie-group label, and gold-vs-non-gold pairs (``pairs="gold"`` or every
    query's grades one level)."""
    if n_docs <= const.SCREEN_MIN_DOCS:
        return False
    if tie_groups is not None and len(set(tie_groups)) < len(tie_groups):
        return False
    return pairs == "gold" or all(len(np.unique(g)) < 2 for g in grs)


def _block_scores(D: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``D @ W``: the index ``(n_docs, dim)`` against ``W`` ``(dim, m)``, ``(n_docs, m) float32``,
    read in row blocks (float32 products)."""
    n = D.shape[0]
    W = np.ascontiguousarray(W, dtype=np.float32)
    out = np.empty((n, W.shape[1]), dtype=np.float32)
    step = const.SCREEN_BLOCK
    for b0 in range(0, n, step):
        np.matmul(np.asarray(D[b0 : b0 + step], dtype=np.float32), W, out=out[b0 : b0 + step])
    return out


def _index_stats(D: np.ndarray, duplicates) -> dict:
    """One pass over the index ``D`` ``(n_docs, dim)``: the column sum (float64), max |entry|, max
    row norm, and the duplicate groups
    (bit-identical rows merged with ``duplicates``) with their tie index."""
    n, dim = D.shape
    colsum, dmax, rmax = np.zeros(dim), 1.0, 0.0
    for b0 in range(0, n, const.SCREEN_BLOCK):  # float32 blocks, float64 sums (no float64 copy of a block)
        x = np.asarray(D[b0 : b0 + const.SCREEN_BLOCK], dtype=np.float32)
        colsum += x.sum(0, dtype=np.float64)
        dmax = max(dmax, float(np.abs(x).max()))
        # + float32 rounding
        rmax = max(rmax, float(np.sqrt(np.einsum("ij,ij->i", x, x).max(), dtype=np.float64)) * (1 + 1e-6))
    dups = merge_groups(n, duplicate_groups(D), _duplicate_rows(n, duplicates))
    return {"colsum": colsum, "dmax": dmax, "rmax": rmax, "dups": dups, "dup_of": {int(i): g for g in dups for i in g}}


def _blocks(rows: np.ndarray, step: int = 16384):
    """``rows`` in consecutive pieces of at most ``step`` (an ``(n_docs, dim)`` float64 copy of
    the rows a query's check reads would be GBs at 1M documents where w leaves its gold set
    unseparated: every document above its lowest gold one is read)."""
    return (rows[b : b + step] for b in range(0, len(rows), step))


def _rows_scores(D: np.ndarray, R: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Exact (float64) scores ``(len(R),)`` of the rows ``R`` of the index ``D`` ``(n_docs, dim)``
    at ``w`` ``(dim,)``, read in pieces."""
    w64 = np.asarray(w, dtype=np.float64)
    return np.concatenate([np.asarray(D[b], dtype=np.float64) @ w64 for b in _blocks(R)] or [np.zeros(0)])


def _init() -> None:
    """A worker process's start: one BLAS thread; the index and settings are inherited (fork)."""
    threadpool_limits(1)


def _solve_candidates(task) -> ProbeResult:
    """The probe on one query's candidates: ``task`` = (rows, gold positions among them, grades,
    duplicate groups among them, r)."""
    rows, gpos, grades, groups, r = task
    assert _INDEX is not None and _SETTINGS is not None and _SOLVE is not None
    settings = replace(
        _SETTINGS,
        C=_SETTINGS.C * r,
        eps=_SETTINGS.eps / r,
        C_max=_SETTINGS.C_max * r,
        batch_size=None,
        depth=0,
        workers=1,
        progress=False,
    )
    Dc = np.ascontiguousarray(_INDEX[rows], dtype=np.float32)
    quiet = logging.getLogger("capgap.probe")  # the iteration cap is warned once for all queries (screened_probe)
    level, quiet.level = quiet.level, logging.ERROR
    try:
        return _SOLVE(Dc, [gpos], settings, grades=[grades], duplicates=groups, by_construction=False)[0]
    finally:
        quiet.level = level


def screened_probe(D, golds, grs, excls, duplicates, settings: SolveSettings, whole, solve) -> list[ProbeResult]:
    """The probe of every query by screening (module docstring).

    ``D``: ``(n_docs, dim)`` the index (float32, or cast block by block; may be a memory map);
    ``golds`` / ``grs`` / ``excls``: ``setup._queries``' validated rows, grades and exclusions;
    ``duplicates``: ``probe(duplicates=...)``; ``settings``: ``probe()``'s, resolved (its
    ``workers`` run the candidates' problems, ``progress`` shows a bar); ``whole(queries)``: the whole-index probe
    of those queries (their ``ProbeResult`` list, in order), for what screening leaves open;
    ``solve``: ``solver._probe``, run on each query's candidates.
    Returns one ``ProbeResult`` per query, in order: ``extra["screen"]`` = ``{"rounds",
    "candidates", "exact", "whole"}`` (rounds on candidates; their count, the index's own for a
    query the whole-index probe decided, ``whole`` True), ``extra["C_final"]`` in the whole
    problem's units."""
    n = D.shape[0]
    stats = _index_stats(D, duplicates)
    twins, opt_excl = _twins(golds, excls, stats["dups"])
    dup_of = stats["dup_of"]
    results: list[ProbeResult | None] = [None] * len(golds)
    left: dict[int, int] = {}  # queries for the whole-index probe, with their rounds on candidates
    chunk = max(1, const.SCREEN_SCORE_BYTES // (4 * max(n, 1)))
    bar = tqdm(total=len(golds), desc="probe (screened)", unit="query") if settings.progress else None
    global _INDEX, _SETTINGS, _SOLVE
    _INDEX, _SETTINGS, _SOLVE = D, settings, solve  # before the fork: the workers inherit them
    workers = settings.workers
    pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"), initializer=_init) if workers > 1 else None
    try:
        for c0 in range(0, len(golds), chunk):
            qs = list(range(c0, min(c0 + chunk, len(golds))))
            done, undecided = _screen_chunk(D, qs, golds, grs, excls, twins, opt_excl, dup_of, stats, settings, pool)
            for q, res in done.items():
                results[q] = res
            left.update(undecided)
            if bar is not None:
                bar.update(len(qs))
    finally:
        if pool is not None:
            pool.shutdown()
        if bar is not None:
            bar.close()
        _INDEX, _SETTINGS, _SOLVE = None, None, None
    capped = sum(1 for res in results if res is not None and not res.converged)
    if capped:
        log.warning(
            "probe: %d of %d queries hit the iteration cap (max_iter=%d) before eps=%g on their candidates",
            capped,
            len(golds),
            settings.max_iter,
            settings.eps,
        )
    if left:
        for q, res in zip(list(left), whole(list(left))):
            res.extra["screen"] = {"rounds": left[q], "candidates": n, "exact": True, "whole": True}
            results[q] = res
    return results  # type: ignore[return-value]


def _screen_chunk(D, qs, golds, grs, excls, twins, opt_excl, dup_of, stats, settings, pool):
    """Screen the queries ``qs`` on the index ``D`` ``(n_docs, dim)`` (module docstring, steps
    1-3). Returns ``({q: ProbeResult}, {q
    left for the whole-index probe: its rounds on candidates})``."""
    n, dim = D.shape
    M = const.SCREEN_CANDIDATES
    cap = min(const.SCREEN_MAX_DOCS, n // 4)
    n_ng = {q: n - len(golds[q]) - len(opt_excl[q]) for q in qs}
    # no non-gold document (the whole-index probe's own case), or a gold set too large for a small candidate set to
    # hold the documents its optimum involves (TREC-COVID's ~500 gold spread over the index: the candidates' problem
    # went to the exact LP on thousands of constraints, minutes a query, and the whole-index probe after it)
    left = {q: 0 for q in qs if n_ng[q] <= 0 or len(golds[q]) > const.SCREEN_MAX_GOLD}
    active = [q for q in qs if q not in left]
    done, iters, rounds, rows = {}, {q: 0 for q in qs}, {q: 0 for q in qs}, {}
    if not active:
        return done, left
    W0 = np.empty((dim, len(active)))
    for j, q in enumerate(active):
        g, e = golds[q], opt_excl[q]
        gsum = np.asarray(D[g], dtype=np.float64).sum(0)
        esum = np.asarray(D[e], dtype=np.float64).sum(0) if len(e) else 0.0
        W0[:, j] = gsum / len(g) - (stats["colsum"] - gsum - esum) / n_ng[q]
    S = _block_scores(D, W0)
    for j, q in enumerate(active):
        col = S[:, j].copy()
        must = np.union1d(golds[q], twins[q])
        col[must] = -np.inf
        col[excls[q]] = -np.inf
        top = np.argpartition(-col, min(M, n - 1))[:M] if n > M else np.arange(n)
        top = top[np.isfinite(col[top])]
        rows[q] = np.union1d(must, top)
    del S, col  # the next scores take their place (one score matrix at a time)
    last: dict = {}
    while active:
        tasks = [_task(q, rows[q], golds, grs, dup_of, n_ng[q], len(twins[q])) for q in active]
        if pool is not None:
            out = list(pool.map(_solve_candidates, tasks))
        else:
            with threadpool_limits(1):  # as in a worker
                out = [_solve_candidates(t) for t in tasks]
        for q, res, t in zip(active, out, tasks):
            iters[q] += res.iterations
            rounds[q] += 1
            last[q] = (res, t[4])
        S = None  # the last round's scores freed before this round's
        S = _block_scores(D, np.stack([last[q][0].w for q in active], axis=1))
        again = []
        for j, q in enumerate(active):
            res, r = last[q]
            full, grow = _on_whole(
                D, q, res, r, S[:, j], rows[q], golds, grs, excls, twins, stats, settings, iters[q], rounds[q]
            )
            if full is not None:
                done[q] = full
                continue
            room = cap - len(rows[q])
            if res.outcome != "certified" and len(grow) > M:  # unseparated with many documents in violated pairs (an
                room = 0  # inseparable gold set spread over the index): the whole-index probe at once, no more rounds
            elif len(grow) > room and room >= M:  # separable on the candidates: the highest outside documents first
                grow = grow[:M]  # (grow is sorted by score, highest first), a round at a time
            if len(grow) and rounds[q] < const.SCREEN_ROUNDS and len(grow) <= room:
                rows[q] = np.union1d(rows[q], grow)
                again.append(q)
            else:  # the optimum involves too many documents (or rounds): the whole-index probe decides
                left[q] = rounds[q]
        active = again
    return done, left


def _task(q, rows, golds, grs, dup_of, n_ng_full, n_twins):
    """The candidates' problem of query ``q`` (``_solve_candidates``): its rows, gold positions,
    grades, the duplicate groups among the rows, and r = non-gold candidates (less the gold
    documents' identical copies, ``n_twins``, all among the rows) / non-gold documents
    ``n_ng_full`` (less the same copies)."""
    pos = {int(i): k for k, i in enumerate(rows)}
    gpos = np.array([pos[int(i)] for i in golds[q]], dtype=np.int64)
    seen, groups = set(), []
    for i in rows.tolist():
        g = dup_of.get(int(i))
        if g is not None and int(g[0]) not in seen:
            seen.add(int(g[0]))
            inside = [pos[int(k)] for k in g if int(k) in pos]
            if len(inside) > 1:
                groups.append(np.asarray(inside, dtype=np.int64))
    r = (len(rows) - len(gpos) - n_twins) / n_ng_full
    return rows, gpos, grs[q], groups, r


def _on_whole(D, q, res, r, s32, rows, golds, grs, excls, twins, stats, settings, iters, rounds):
    """Query ``q`` on the whole index at the candidates' ``res.w``, from its float32 scores ``s32``
    ``(n_docs,)``: ``(ProbeResult, [])``, or ``(None, grow)`` when the candidates must grow: no
    certificate on the whole index (in ``solve="optimum"``: no optimum confirmed) and documents
    outside ``rows`` in a violated pair (``grow``, every one of them, highest score first), or
    the candidates' problem left undecided.

    Only the documents within twice the float32 error bound of the lowest gold score (and of the
    ``depth``-th score) can outrank a gold document or enter the top rows: they are scored
    exactly (float64, duplicates tied); the others keep their float32 scores. The documents in
    a violated pair are taken from the float32 scores with the same allowance (a superset)."""
    gold, w = golds[q], res.w
    low32 = float(s32[gold].min())
    delta = _product_error(D.shape[1], max(float(np.linalg.norm(w)), 1e-30), stats["rmax"])
    near = s32 >= low32 - 2 * delta
    depth = settings.depth
    if depth:
        k = min(len(s32), depth + len(gold) + len(excls[q]))  # every document within the error of the k-th score
        near |= s32 >= float(np.partition(s32, len(s32) - k)[len(s32) - k]) - 2 * delta
    near[gold] = True
    near[twins[q]] = True
    R = np.flatnonzero(near)
    linked = [stats["dup_of"][int(i)] for i in R.tolist() if int(i) in stats["dup_of"]]
    if linked:
        R = np.union1d(R, np.concatenate(linked))
    s = _rows_scores(D, R, w)
    for g in {int(g[0]): g for g in linked}.values():
        # each group at its first member's score (retrieval.tie_duplicates)
        s[np.searchsorted(R, g)] = s[np.searchsorted(R, g[0])]
    at = lambda rows_: np.searchsorted(R, rows_)  # noqa: E731  (rows of the index -> positions in R)
    gpos = at(gold)
    valid = np.ones(len(R), dtype=bool)
    valid[at(np.intersect1d(excls[q], R))] = False
    ng = valid.copy()
    ng[gpos] = False
    rest = ng.copy()
    rest[at(twins[q])] = False
    far = s32.copy()  # the best valid non-gold score outside R (float32, below every gold score)
    far[R] = -np.inf
    far[excls[q]] = -np.inf
    top_far = float(far.max()) if len(far) else -np.inf
    low = float(s[gpos].min())
    margin = low - max(float(s[ng].max()) if ng.any() else -np.inf, top_far)
    compared = _compared_rows(s, gpos, np.flatnonzero(ng), w, stats["dmax"])
    scale = max((float(np.abs(np.asarray(D[R[c]], dtype=np.float64)).max()) for c in _blocks(compared)), default=0.0)
    thresh = _threshold(w, scale)
    certified = margin > thresh
    separated = certified or (
        len(twins[q]) > 0 and low - max(float(s[rest].max()) if rest.any() else -np.inf, top_far) > thresh
    )
    confirmed = separated and settings.solve == "certificate"  # a certificate needs no optimum
    viol = np.zeros(0, dtype=np.int64)
    if not confirmed:  # the documents outside the candidates in a violated pair (s_j > min gold - 1), from float32
        out = s32 > low32 - 1.0 - 2 * delta
        out[rows] = False
        out[gold] = False
        out[excls[q]] = False
        out[twins[q]] = False
        viol = np.flatnonzero(out)
        if len(viol) or res.outcome == "undecided":
            return None, viol[np.argsort(-s32[viol], kind="stable")]  # highest score first
    # the SVM point's objective, dual and slack (res's: w itself may be a witness that replaced it) in the whole
    # problem's units: (C r) sum hinge / (|G| r N) = C sum hinge / |P|, exact while no document outside is violated
    C_final = float(res.extra.get("C_final", settings.C * r)) / r
    if certified:
        cause, outcome, by = None, "certified", res.decided_by if res.decided_by in ("lp", "hull") else "certificate"
    elif separated:
        cause, outcome, by = "duplicate", "duplicate", res.decided_by or "certificate"
    else:
        cause, outcome, by = res.cause, res.outcome, res.decided_by
    ranks = rank_gold(s, gpos, grs[q], valid)
    top_rows, top_scores = rank_top(s, depth, gpos, grs[q], valid) if depth else (None, None)
    if top_rows is not None:
        top_rows = np.where(top_rows >= 0, R[np.maximum(top_rows, 0)], -1)
    extra = dict(
        res.extra,
        C_final=C_final,
        screen={"rounds": rounds, "candidates": int(len(rows)), "exact": not len(viol), "whole": False},
    )
    return ProbeResult(
        w,
        res.objective,
        res.dual,
        res.slack * r,
        iters,
        res.converged,
        margin,
        bool(certified),
        ranks,
        res.lp_feasible,
        bool(len(twins[q])),
        extra,
        cause,
        1,
        None,
        top_rows,
        top_scores,
        res.stopped,
        outcome,
        by,
    ), []
