"""Certificates and proofs: the exact hard-margin LP (``lp_feasible``, whole or by constraint
generation, ``_lp_generated``) and the inseparability proof (``hull_distance_bound`` of the
gold and non-gold convex hulls, by column generation in ``_prove_inseparable``; the proof's
nearest-point direction, when it separates, is a witness: ``_hull_witness``)."""

from __future__ import annotations

import logging
import time
from typing import NamedTuple, Sequence

import numpy as np

from . import constants as const
from .planes import _local_scale, _non_gold, _scores64, _separated, _threshold

log = logging.getLogger("capgap.probe")


def _backstop(time_limit: float | None) -> float:
    """The wall-clock backstop in seconds: ``time_limit``, or ``LP_TIME_LIMIT`` when None."""
    return const.LP_TIME_LIMIT if time_limit is None else float(time_limit)


def _warn_backstop(what: str, seconds: float) -> None:
    """Log that the wall-clock backstop, not the iteration cap, left ``what`` undecided."""
    log.warning(
        "%s stopped by the %.0f s wall-clock backstop: undecided, a verdict that depends on this machine's "
        "speed (constants.LP_TIME_LIMIT)",
        what,
        seconds,
    )


def lp_feasible(
    D: np.ndarray,
    gold: Sequence[int],
    time_limit: float | None = None,
    excluded: Sequence[int] = (),
    return_witness: bool = False,
    last_nonneg: bool = False,
):
    """Exact hard-margin check: is {w, t : w.d_i >= t + 1 (i in G), w.d_j <= t (j in N)} feasible?

    An LP with |G| + |N| constraints and dim + 1 free variables, solved by scipy's HiGHS.
    ``D``: ``(n_docs, dim)`` float. HiGHS's dual simplex (``highs-ds``: the iteration count,
    the cap's meaning and the witness do not depend on HiGHS's choice of solver). Returns
    True/False, or None if HiGHS stopped at its iteration cap (``LP_ITERS`` x (constraints +
    variables) simplex iterations: the same verdict on any machine and load), hit
    ``time_limit`` (seconds, default ``LP_TIME_LIMIT``: a backstop against a hung solver; a
    verdict it decides depends on the machine's speed, so it is logged as a warning) or
    failed numerically. ``excluded``: rows left out of the problem (neither gold
    nor non-gold). With ``return_witness``: ``(feasible, w)``, ``w`` the LP's ``(dim,)
    float64`` witness when feasible (else None): a query vector that ranks every gold document
    above every non-gold one by a margin of 1. ``last_nonneg``: the same problem with w's last
    coordinate held ``>= 0`` (``capgap diagnose --metric l2``: rows ``(d, -|d|^2/2)``, where only
    ``w = (v, c)`` with ``c > 0`` is an L2 query, ``v / c``, and ``c = 0`` its limit).
    """
    from scipy.optimize import linprog  # imported where used (scipy.optimize: ~0.8 s to import)

    D = np.asarray(D, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.int64)
    if len(excluded):
        keep = np.ones(len(D), dtype=bool)
        keep[np.asarray(excluded, dtype=np.int64)] = False
        new = np.cumsum(keep) - 1
        D, gold = D[keep], new[gold]
    mask = np.zeros(len(D), dtype=bool)
    mask[gold] = True
    if mask.all():
        return (True, np.zeros(D.shape[1])) if return_witness else True
    # the problem at the gold rows' scale (a positive factor: w scales inversely, the same
    # feasible set): HiGHS's absolute tolerances then mean what they say however far one
    # outlying row's norm lies from the rest (an index scaled to an outlier of norm 1e10 left its
    # ordinary rows at 1e-10, and a feasible LP was declared infeasible)
    g = float(np.abs(D[mask]).max())
    g = g if np.isfinite(g) and g > 0 else 1.0
    D = D / g
    # variables x = (w, t); constraints A_ub x <= b_ub
    A_gold = np.hstack([-D[mask], np.ones((mask.sum(), 1))])  # -w.d_i + t <= -1
    A_ng = np.hstack([D[~mask], -np.ones(((~mask).sum(), 1))])  # w.d_j - t <= 0
    A = np.vstack([A_gold, A_ng])
    b = np.concatenate([-np.ones(mask.sum()), np.zeros((~mask).sum())])
    options = {"time_limit": _backstop(time_limit), "maxiter": int(const.LP_ITERS * (A.shape[0] + A.shape[1]))}
    bounds = [(None, None)] * (D.shape[1] - 1) + [(0 if last_nonneg else None, None), (None, None)]
    res = linprog(np.zeros(D.shape[1] + 1), A_ub=A, b_ub=b, bounds=bounds, method="highs-ds", options=options)
    if res.status == 1 and "time limit" in str(res.message).lower():
        _warn_backstop(f"exact LP ({A.shape[0]} constraints, {int(res.nit)} simplex iterations)", options["time_limit"])
    ok = True if res.status == 0 else False if res.status == 2 else None
    if return_witness:
        return ok, (np.asarray(res.x[:-1], dtype=np.float64) / g if ok else None)
    return ok


class Proof(NamedTuple):
    """What ``_prove_inseparable`` found: ``bound`` (the largest member's
    ``hull_distance_bound`` when every unseparated member is proven, else None), ``proven``
    (the members proven, in order; a failed proof may leave some) and ``witness`` (``(w,
    scores)``, margin 1: a single member's separating nearest-point direction, ``_hull_witness``;
    else None)."""

    bound: float | None
    proven: list
    witness: tuple | None


def _prove_inseparable(
    s: np.ndarray,
    members: Sequence[int],
    seek_witness: bool,
    golds,
    opt_excl,
    docs: np.ndarray,
    rep: np.ndarray,
    dmax: float,
) -> Proof:
    """The escalation gate: an inseparability proof for every member (indices into ``golds`` /
    ``opt_excl``) of a problem whose gold set the scores ``s`` ``(n_docs,)`` (at the problem's
    w, duplicates tied) do not separate.

    Per unseparated member, column generation on the nearest-point problem of the two hulls:
    start from the ``max(min(dim + 2, HULL_STEP_MAX), HULL_STEP)`` highest-scoring non-gold documents;
    ``hull_distance_bound`` of the gold documents against them gives convex weights, the bound
    |p - q| and the NNLS's direction r (~ p - q); if the bound is at most ``HULL_TOL`` times the
    gold rows' largest |entry| the member is proven (every w has min gold score - max non-gold
    score <= |w| |p - q|, below the certificate's threshold in ``_finish``, whose scale includes
    the gold rows (``planes._local_scale``), so no C certifies it). Else r separates the gold
    documents from the subset (``hull_distance_bound``). No non-gold document ranks at or above
    the lowest gold one along r (exact float64 scores): r separates, no proof. Else the next
    round's candidates: while a round finds a full step of such violators (the growth phase),
    the ones the NNLS weighted (``mu > 0``) and the ``step`` highest violators, as in
    ``order_witness`` (the NNLS's time grows with its columns, and a column it gave no weight
    rarely carries any later); in the tail, every candidate so far and the documents ranked at
    or above the subset's highest non-gold one (the violators and those inside r's margin, the
    next rounds' violators), at most ``step``: keeping the candidates keeps the bound from
    rising, and taking the margin's documents at once saves rounds of one or two violators
    each (on TREC-COVID-like gold sets separable by ~1e-4 the tail ran out of rounds and sent
    the query to the exact LP, minutes each). At most ``HULL_ROUNDS`` x ceil((dim + 2) /
    step) rounds (more than ``HULL_ROUNDS`` only where ``HULL_STEP_MAX`` caps a round below the
    basis's dim + 2 documents: a capped proof may take as many columns as an uncapped one); a
    failed proof escalates. Documents enter as their duplicate
    group's first row (``rep``), whose score every member of the group gets. A single member
    with ``seek_witness`` also looks for a separating witness along r (``Proof.witness``)."""
    dim = docs.shape[1]
    # the NNLS has dim + 2 rows: a basic solution uses at most dim + 2 documents; above HULL_STEP_MAX they join over rounds
    step = max(min(dim + 2, const.HULL_STEP_MAX), const.HULL_STEP)
    rounds = const.HULL_ROUNDS * -(-(dim + 2) // step)  # as many bases' worth of columns as uncapped rounds would take
    worst, proven, witness = 0.0, [], None
    single = len(members) == 1 and seek_witness
    for q in members:
        gold = golds[q]
        if _separated(s, gold, opt_excl[q]):
            continue  # separated (or nothing to separate from)
        ng = np.flatnonzero(_non_gold(len(s), gold, opt_excl[q]))
        n_rows = len(np.unique(rep[ng]))
        G = docs[np.unique(rep[gold])]
        # at the gold rows' scale (_local_scale)
        tol = const.HULL_TOL * float(np.abs(np.asarray(G, dtype=np.float64)).max())
        by_s = ng[np.argsort(-s[ng], kind="stable")]  # non-gold documents, highest score at w first
        cand = by_s[:step]
        bound = float("inf")
        for _ in range(rounds):
            rows = np.unique(rep[cand])
            bound, r, mu = _hull_nnls(G, docs[rows])
            if bound <= tol or r is None:
                break
            # exact scores along r, duplicates tied (its margin can be ~|r|^2, below float32's error)
            t = _scores64(docs, r, ())[rep]
            if single:
                # where r, the NNLS's nearest-point direction of the subset's hulls, separates every
                # document, the query is separable and r is its witness (scaled to margin 1)
                witness = _hull_witness(docs, r, gold, ng, rep, dmax, t)
                if witness is not None:
                    break
            if len(rows) >= n_rows:
                break
            if not (t[ng] >= t[gold].min()).any():
                break  # r ranks every non-gold document below the gold ones: separable, no proof
            new = _misranked(t, gold, ng, rep, rows, step)
            if len(new) >= step:  # growth: the weighted candidates and the violators (as order_witness)
                cand = np.concatenate([rows[mu > 0], new])
                continue
            # the tail, fewer than a step of violators left: every candidate is kept (the bound cannot rise), and the
            # documents inside r's margin on the subset (above its highest non-gold score) join with the violators
            new = _misranked(t, gold, ng, rep, rows, step, floor=float(t[rows].max()))
            if not len(new):
                break  # the violators are candidates already (the NNLS's rounding): another round repeats this one
            cand = np.concatenate([rows, new])
        if bound > tol:
            return Proof(None, proven, witness)
        worst = max(worst, bound)
        proven.append(q)
    return Proof(worst if proven else None, proven, witness)


def _hull_witness(
    docs: np.ndarray,
    r: np.ndarray,
    gold: np.ndarray,
    ng: np.ndarray,
    rep: np.ndarray,
    dmax: float,
    s: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """A separating witness from a direction ``r`` ``(dim,) float64`` (a proof's nearest-point
    direction, or an LP's w): the exact (float64) scores along r ``s`` ``(n_docs,)`` (computed
    when None), duplicates tied through ``rep``; when every gold document scores above every
    non-gold one in ``ng`` (row indices) by a margin m, returns ``(w, scores)`` with w = r / m
    and its own exact scores (not s / m, whose rounding can order near-tied gold documents
    differently from w's: an LP's vertex ties several exactly), provided they still separate
    by a margin ``_finish``'s certificate threshold accepts (~1: a feasible point of the
    hard-margin problem); else None."""
    if not len(ng):
        return None
    return _ordered(docs, r, _scores64(docs, r, ())[rep] if s is None else s, [gold], ng, rep, dmax)


def hull_distance_bound(P: np.ndarray, N: np.ndarray, return_direction: bool = False):
    """An upper bound on the distance between the convex hulls of the rows of ``P`` ``(p, dim)``
    and ``N`` ``(m, dim)`` (float32 or float64): |r| for r = sum_i lam_i P_i - sum_j mu_j N_j with
    lam, mu convex weights, found by non-negative least squares (scipy's ``nnls`` on
    [P^T, -N^T; 10 1^T, 0; 0, 10 1^T] x = [0; 10; 10], then lam, mu normalised) and r computed
    in float64. Whatever the solver's accuracy, the bound is exact for the weights it returns:
    for every w, min_i w.P_i - max_j w.N_j <= w.r <= |w| |r| (a convex combination lies between
    the minimum and the maximum). 0 (up to rounding, ~1e-15) when the hulls intersect, i.e.
    when no hyperplane separates P from N (Bennett & Bredensteiner, "Duality and Geometry in SVM
    Classifiers", ICML 2000: the hard-margin SVM is the nearest-point problem of the two hulls).
    Returns ``inf`` when the solver fails. With ``return_direction``: ``(bound, r)``, r the
    ``(dim,) float64`` direction sum_i x_i P_i - sum_j x_{p+j} N_j of the NNLS solution x before
    the normalisation (None when the solver fails): the least-squares optimality conditions
    (the penalised sums make its weights sum to 1 only up to ~|r|^2) give every row of P a score
    along it above every row of N by about |r|^2, which the normalised difference, off by a
    multiple of the hulls' points, can lose when the hulls are ~1e-4 apart (a query separable by
    a tiny margin). Its separation is checked exactly where it is used."""
    bound, r, _ = _hull_nnls(P, N)
    return (bound, r) if return_direction else bound


def _hull_nnls(P: np.ndarray, N: np.ndarray) -> tuple[float, np.ndarray | None, np.ndarray | None]:
    """``hull_distance_bound``'s NNLS: ``(bound, r, mu)``, mu ``(m,) float64`` the NNLS's weights
    of the rows of ``N`` (``(inf, None, None)`` when the solver fails)."""
    from scipy.optimize import nnls  # imported where used (scipy.optimize: ~0.8 s to import)

    P = np.asarray(P, dtype=np.float64)
    N = np.asarray(N, dtype=np.float64)
    p, dim = P.shape
    A = np.zeros((dim + 2, p + len(N)))
    A[:dim, :p], A[:dim, p:] = P.T, -N.T
    A[dim, :p] = A[dim + 1, p:] = 10.0
    b = np.zeros(dim + 2)
    b[dim:] = 10.0
    fail = (float("inf"), None, None)
    try:
        x = nnls(A, b)[0]
    except RuntimeError:  # iteration limit
        return fail
    lam, mu = x[:p], x[p:]
    if lam.sum() <= 0 or mu.sum() <= 0:
        return fail
    bound = float(np.linalg.norm(P.T @ (lam / lam.sum()) - N.T @ (mu / mu.sum())))
    return bound, P.T @ lam - N.T @ mu, mu


def _misranked(
    t: np.ndarray,
    gold: np.ndarray,
    ng: np.ndarray,
    rep: np.ndarray,
    rows: np.ndarray,
    k: int,
    floor: float | None = None,
) -> np.ndarray:
    """The column-generation step of ``_prove_inseparable`` and ``_lp_generated``: the non-gold
    documents ``ng`` (row indices) that scores ``t`` ``(n_docs,)`` rank at or above the lowest gold
    one (or at or above ``floor`` where that is lower: the documents inside a margin) and whose
    duplicate-group representative (``rep``) is not among ``rows`` yet, the ``k`` highest first."""
    low = float(t[gold].min()) if floor is None else min(float(t[gold].min()), floor)
    new = ng[(t[ng] >= low) & ~np.isin(rep[ng], rows)]
    return new[np.argsort(-t[new], kind="stable")[:k]]


def _lp_generated(
    docs: np.ndarray,
    rep: np.ndarray,
    gold: np.ndarray,
    ng: np.ndarray,
    s: np.ndarray,
    dups,
    whole_max_docs: int,
    time_limit: float | None = None,
    last_nonneg: bool = False,
):
    """The hard-margin LP (``lp_feasible``) by constraint generation, for a corpus too large to
    pass whole: the gold documents against the ``2 (dim + 2)`` non-gold documents scoring
    highest at the final w (``s`` ``(n_docs,) float64``); a feasible LP's witness is scored on
    every document, and the non-gold documents it ranks at or above the lowest gold one join
    (at most ``2 (dim + 2)`` per round, highest first) until the witness separates the whole
    gold set (``True``, exact) or a subset's LP is infeasible (``False``, exact: a subset of the
    constraints already admits no w). A corpus of at most ``whole_max_docs`` documents gets the
    whole LP after ``LP_ROUNDS_BEFORE_WHOLE`` undecided rounds; a larger one up to ``LP_ROUNDS``
    rounds. Documents enter as their duplicate group's
    first row (``rep``), whose score the group gets. ``ng``: ``(n_docs,) bool`` the non-gold
    documents. Returns ``(lp, w, scores)``: ``lp`` None when undecided (an LP at its
    iteration cap, ``lp_feasible``: deterministic, as the bounded rounds are; or past
    ``time_limit`` seconds in all, default ``LP_TIME_LIMIT``: the hung-solver backstop, warned);
    ``w`` ``(dim,) float64`` and ``scores`` (duplicates tied) when True. ``last_nonneg``: w's last
    coordinate held ``>= 0`` (``lp_feasible``)."""
    step = 2 * (docs.shape[1] + 2)
    ngr = np.flatnonzero(ng)
    cand = ngr[np.argsort(-s[ngr], kind="stable")[:step]]
    G = np.unique(rep[gold])
    t0 = time.perf_counter()
    t_end = t0 + _backstop(time_limit)

    def witness(rows):
        ok, w = lp_feasible(
            docs[np.concatenate([G, rows])],
            np.arange(len(G)),
            time_limit=max(t_end - time.perf_counter(), 1e-3),
            return_witness=True,
            last_nonneg=last_nonneg,
        )
        return ok, w, (_scores64(docs, w, dups) if ok else None)

    for _ in range(const.LP_ROUNDS_BEFORE_WHOLE if len(docs) <= whole_max_docs else const.LP_ROUNDS):
        if time.perf_counter() >= t_end:
            _warn_backstop("constraint-generated LP", t_end - t0)
            return None, None, None
        rows = np.unique(rep[cand])
        ok, w, sw = witness(rows)
        if not ok:
            return ok, None, None
        new = _misranked(sw, gold, ngr, rep, rows, step)
        if not len(new):
            return (True, w, sw) if sw[gold].min() > sw[ngr].max() else (None, None, None)
        cand = np.concatenate([cand, new])
    if len(docs) <= whole_max_docs and time.perf_counter() < t_end:
        ok, w, sw = witness(np.unique(rep[ngr]))
        if ok and sw[gold].min() > sw[ngr].max():
            return True, w, sw
        return (False, None, None) if ok is False else (None, None, None)
    return None, None, None


def order_witness(
    docs: np.ndarray, levels: Sequence[np.ndarray], rest: np.ndarray, rep: np.ndarray, dmax: float, s: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """A w that ranks the gold levels in order: every document of ``levels[0]`` above every
    document of ``levels[1]``, ..., and the last level above every document of ``rest``; or
    None when none is found.

    ``levels``: non-empty ``int64`` row arrays, top first (a ``duplicate`` query's gold
    documents that fit in the top |G| with their identical copies, ``refine.copy_top``, then the
    others); ``rest``: the rows below them (the non-gold documents, identical copies set aside);
    ``s`` ``(n_docs,)``: scores at some w whose highest ``rest`` rows seed the candidates;
    ``rep``: each row's duplicate-group representative (its score is the group's). The
    hard-margin ordinal problem with one threshold between consecutive levels (Shashua & Levin,
    "Ranking with Large Margin Principle", NIPS 2002, fixed-margin strategy): ``w.x - t_l >= 1``
    for level l's rows and ``t_(l-1) - w.x >= 1`` below the level above, i.e. ``v.z >= 1`` for v
    = (w, t) and one vector z per constraint. It is feasible exactly when the origin is outside
    the convex hull of the z, and the hull's nearest point to the origin is then the max-margin
    v (the thresholds count in its norm: a feasibility question, not Shashua & Levin's
    objective); scipy's NNLS finds it as in ``hull_distance_bound`` (one penalised convexity
    row). Column generation on ``rest``: every level's rows always, the ``max(dim + 2,
    HULL_STEP)`` highest-scoring ``rest`` rows at first; each next round keeps the ``rest`` rows
    the NNLS weighted and adds as many of those its direction ranks at or above the last level's
    lowest, highest first (as ``_prove_inseparable``: on NFCorpus, keeping only the weighted
    rows took the searches 11.0 s -> 6.9 s, the same witnesses found), up to ``HULL_ROUNDS``
    rounds. The direction's w is checked in float64 on every document: each level's lowest score
    above the next level's highest (and the last level's above ``rest``'s) by more than the
    certificate's threshold (``planes._threshold``), after scaling that margin to 1. Returns
    ``(w, scores)``, ``w`` ``(dim,) float64`` and its exact scores ``(n_docs,)`` (duplicates
    tied through ``rep``), or None (the order is infeasible, the NNLS failed, or the rounds ran
    out)."""
    from scipy.optimize import nnls  # imported where used (scipy.optimize: ~0.8 s to import)

    levels = [np.unique(rep[np.asarray(lv, dtype=np.int64)]) for lv in levels]
    rest = np.asarray(rest, dtype=np.int64)
    if not len(rest) or not levels or not all(len(lv) for lv in levels):
        return None
    dim, k = docs.shape[1], len(levels)
    step = max(dim + 2, const.HULL_STEP)

    def rows_z(rows: np.ndarray, sign: float, t: int) -> np.ndarray:
        z = np.zeros((len(rows), dim + k))
        z[:, :dim] = sign * docs[rows].astype(np.float64)
        z[:, dim + t] = -sign  # w.x - t_l (sign +1) or t_l - w.x (sign -1)
        return z

    fixed = [rows_z(lv, 1.0, level) for level, lv in enumerate(levels)] + [
        rows_z(lv, -1.0, level - 1) for level, lv in enumerate(levels) if level
    ]
    n_fixed = sum(len(z) for z in fixed)
    cand = rest[np.argsort(-s[rest], kind="stable")[:step]]
    n_rows = len(np.unique(rep[rest]))
    level_scale = float(np.abs(np.asarray(docs[np.concatenate(levels)], dtype=np.float64)).max())  # (_local_scale)
    for _ in range(const.HULL_ROUNDS):
        rows = np.unique(rep[cand])
        Z = np.vstack(fixed + [rows_z(rows, -1.0, k - 1)])
        A = np.vstack([Z.T, np.full((1, len(Z)), 10.0)])
        b = np.zeros(dim + k + 1)
        b[-1] = 10.0
        try:
            x = nnls(A, b)[0]
        except RuntimeError:  # iteration limit
            return None
        if x.sum() <= 0 or float(np.linalg.norm(Z.T @ (x / x.sum()))) <= const.HULL_TOL * level_scale:
            return None  # the origin is (numerically) in the hull: no w orders the candidates
        r = Z.T @ x  # the NNLS's own direction (hull_distance_bound: its weights as returned)
        t = _scores64(docs, r[:dim], ())[rep]
        witness = _ordered(docs, r[:dim], t, levels, rest, rep, dmax)
        if witness is not None or len(rows) >= n_rows:
            return witness
        new = rest[(t[rest] >= t[levels[-1]].min()) & ~np.isin(rep[rest], rows)]
        if not len(new):
            return None  # the candidates are ordered but the levels' own gaps are not (rounding)
        # the next round: the candidates that carry weight, and the new violators, highest first
        # (the NNLS's time grows with its columns; unweighted candidates return if violated again)
        cand = np.concatenate([rows[x[n_fixed:] > 0], new[np.argsort(-t[new], kind="stable")[:step]]])
    return None


def _ordered(
    docs: np.ndarray,
    r: np.ndarray,
    t: np.ndarray,
    levels: Sequence[np.ndarray],
    rest: np.ndarray,
    rep: np.ndarray,
    dmax: float,
) -> tuple[np.ndarray, np.ndarray] | None:
    """The exact check of a direction ``r`` ``(dim,)`` with scores ``t`` (``order_witness``;
    ``_hull_witness``: one level):
    ``(r / m, its scores)`` for the smallest gap m between consecutive levels (``rest`` last)
    when every gap is positive and stays above ``_threshold`` at w = r / m, else None."""
    groups = list(levels) + [rest]

    def gap(sc: np.ndarray) -> float:
        return min(float(sc[hi].min() - sc[lo].max()) for hi, lo in zip(groups, groups[1:]))

    m = gap(t)
    if not np.isfinite(m) or m <= 0:
        return None
    w = r / m
    sw = _scores64(docs, w, ())[rep]
    hi = np.concatenate([np.asarray(lv, dtype=np.int64) for lv in levels])
    scale = _local_scale(docs, sw, hi, np.asarray(rest, dtype=np.int64), w, dmax)
    return (w, sw) if gap(sw) > _threshold(w, scale) else None
