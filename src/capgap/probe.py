"""The capacity probe: a per-query ranking SVM solved by Joachims' cutting-plane method.

For one query with gold set G and non-gold set N over the frozen index D ``(n_docs, dim)``,
the probe optimises a query vector w directly (arXiv 2610.02749, "The empirical half"):

    min_w  1/2 |w|^2 + C * xi
    s.t.   for every c in {0,1}^P:  (1/|P|) sum_{(i,j) in P} c_ij w.(d_i - d_j)
                                        >= (1/|P|) sum c_ij - xi,        xi >= 0,

with P = G x N the gold/non-gold pairs: the 1-slack structural form of the ranking SVM
(Joachims, "Training Linear SVMs in Linear Time", KDD 2006, Sec. 4 and Alg. 2). At the optimum
xi = (1/|P|) sum_pairs max(0, 1 - w.(d_i - d_j)), so the objective is

    1/2 |w|^2 + (C/|P|) * sum_pairs hinge,

i.e. **C is per pair-averaged loss, exactly dlib's ``svm_rank_trainer`` scaling** (dlib
multiplies C by 1/number-of-pairs). Equation 12 of Joachims' 2002 ranking-SVM paper uses
C' = C/|P| per pair.

Cutting plane. The most violated constraint at w has c_ij = 1 iff s_j > s_i - 1 with
s = D.w. It is found without the |G|x|N| pairs: sort the gold scores, and for each document
j count n_j = #{i in G : s_i < s_j + 1} by binary search (``searchsorted``); the count
m_i = #{j in N : s_j > s_i - 1} of each gold document follows from a histogram of the n_j.
The constraint is then one weighted sum over documents, a = D^T coef / |P| with coef_i = m_i
(gold) and coef_j = -n_j (non-gold), b = sum m_i / |P|. Per iteration and batch of B queries
the cost is one (n_docs x dim).(dim x B) product for the scores, one (dim x n_docs).(n_docs x B)
product for the new constraints, and O(n_docs log |G|) counting per query.

The restricted QP over the working set W is solved in its dual,
    max_alpha  b^T alpha - 1/2 alpha^T K alpha,  alpha >= 0,  sum alpha <= C,  K = A^T A,
    w = A alpha,
with ``quadprog`` (Goldfarb-Idnani dual active set: exact for small dense strictly convex QPs;
|W| is the iteration count, so each solve is tens of microseconds; a 1e-10 relative ridge
keeps K positive definite when cutting planes are linearly dependent).

Stopping (Joachims' criterion): the most violated constraint is violated by at most eps more
than the working set's slack, H(w) = b - w.a <= xi_W + eps. Then primal - dual <= C * eps.
``eps`` is in the units of the pair-averaged hinge loss (default 1e-3).

Certificate. A query is *certified* when a witness w ranks every gold document strictly above
every non-gold one (checked in float64: then the hard-margin problem
{w, t : w.d_i >= t + 1 (i in G), w.d_j <= t (j in N)} is feasible after scaling w).
Zero slack implies it. ``lp_feasible`` decides the hard-margin problem exactly as an LP with
|G| + |N| constraints (scipy's HiGHS); the probe runs it for queries the cutting plane does not
certify when the corpus is small enough. Recall@k of the probe uses pessimistic ties (a
non-gold document with the same score ranks first), so it stays a lower bound on capacity.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

log = logging.getLogger(__name__)
PRUNE_AFTER = 50  # iterations a cutting plane may stay inactive (alpha = 0) before it is dropped
BLOCK = 512  # rows of the index per temporary copy (NaN check, float64 casts)


@dataclass
class ProbeResult:
    """One query's probe outcome.

    ``w``: ``(dim,) float64`` the optimised query vector; ``objective``: primal value at w;
    ``dual``: the dual bound (objective - dual = gap >= 0); ``slack``: pair-averaged hinge loss
    at w (xi); ``iterations``; ``converged`` (False: iteration cap hit); ``margin``: min gold
    score - max non-gold score at w (float64; > 0 means certified); ``certified``;
    ``lp_feasible`` (None when the LP was not run); ``gold_ranks``: pessimistic 1-based rank of
    each gold document; ``duplicate_conflict``: a gold document has an identical non-gold copy
    (no w can separate them).
    """

    w: np.ndarray
    objective: float
    dual: float
    slack: float
    iterations: int
    converged: bool
    margin: float
    certified: bool
    gold_ranks: np.ndarray
    lp_feasible: bool | None = None
    duplicate_conflict: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def gap(self) -> float:
        return self.objective - self.dual

    def recall_at(self, k: int) -> float:
        """|top-k ∩ gold| / |gold| with pessimistic ties."""
        return float(np.mean(self.gold_ranks <= k))


def _most_violated(s: np.ndarray, gold: np.ndarray, n_pairs: int, out: np.ndarray | None = None,
                   excl: np.ndarray | None = None) -> tuple[np.ndarray, float, float]:
    """The most violated 1-slack constraint at scores ``s = D.w`` ``(n_docs,)``.

    Returns ``(coef (n_docs,) float32, b, H)``: the constraint is ``w.a >= b - xi`` with
    ``a = D^T coef``, and ``H = b - w.a`` is its violation at the current w (= the
    pair-averaged hinge loss). Counting as in the module docstring: for |G| <= 16 one
    comparison pass per gold document, else a binary search per document. ``out``: an
    ``(n_docs,) float32`` buffer to write the coefficients into. ``excl``: row indices that are
    neither gold nor non-gold (they get coefficient 0 and count in no pair).
    """
    sg_raw = s[gold]
    order = np.argsort(sg_raw, kind="stable")
    sg = sg_raw[order]
    s1 = s + s.dtype.type(1)
    if len(gold) <= 16:
        cnt = np.zeros(len(s), dtype=np.int32)
        for v in sg:
            cnt += s1 > v  # gold documents with s_i < s_j + 1
    else:
        cnt = np.searchsorted(sg, s1, side="left").astype(np.int32)
    cnt[gold] = 0
    if excl is not None and len(excl):
        cnt[excl] = 0
    hist = np.bincount(cnt, minlength=len(gold) + 1)
    tail = np.cumsum(hist[::-1])[::-1]  # tail[t] = #{j : n_j >= t}
    m_sorted = tail[1 : len(gold) + 1]  # m at sorted gold position p = #{j : n_j >= p + 1}
    coef = np.empty(len(s), dtype=np.float32) if out is None else out
    np.negative(cnt, out=coef, casting="unsafe")
    coef[gold[order]] = m_sorted
    coef *= np.float32(1.0 / n_pairs)
    b = float(m_sorted.sum()) / n_pairs
    H = b - float((coef * s).sum(dtype=np.float64))
    return coef, b, H


def _solve_dual(K: np.ndarray, b: np.ndarray, C: float) -> np.ndarray:
    """max b.alpha - 1/2 alpha K alpha, alpha >= 0, sum alpha <= C (quadprog)."""
    import quadprog

    n = len(b)
    ridge = 1e-10 * max(1.0, float(np.trace(K)) / n)
    G = K + ridge * np.eye(n)
    Cmat = np.hstack([np.eye(n), -np.ones((n, 1))])
    bvec = np.concatenate([np.zeros(n), [-C]])
    try:
        alpha = quadprog.solve_qp(G, b.astype(np.float64), Cmat, bvec, 0)[0]
    except ValueError:  # numerically inconsistent: retry with a stronger ridge
        alpha = quadprog.solve_qp(K + 1e-6 * max(1.0, float(np.trace(K)) / n) * np.eye(n), b.astype(np.float64), Cmat, bvec, 0)[0]
    return np.maximum(alpha, 0.0)


def _set_alpha(st: dict, alpha: np.ndarray) -> None:
    """Adopt dual variables: w = A alpha and the working set's slack xi_W at that w."""
    st["alpha"] = alpha
    st["w"] = st["A"] @ alpha
    st["xiW"] = max(0.0, float(np.max(st["b"] - st["A"].T @ st["w"])))


def _row_keys(D: np.ndarray) -> dict[int, list[int]]:
    """Groups of rows that are exactly equal (by hash, then confirmed element-wise)."""
    buckets: dict[int, list[int]] = {}
    for i in range(D.shape[0]):
        buckets.setdefault(hash(D[i].tobytes()), []).append(i)
    groups: dict[int, list[int]] = {}
    for key, rows in buckets.items():
        if len(rows) > 1:
            for i in rows:  # confirm: hash collisions are not duplicates
                same = [j for j in rows if np.array_equal(D[i], D[j])]
                if len(same) > 1:
                    groups[min(same)] = same
    return groups


def _pessimistic_ranks(s: np.ndarray, gold: np.ndarray, excl: np.ndarray | None = None) -> np.ndarray:
    """1-based rank of each gold doc: non-gold ties rank first, gold ties by index; excluded
    documents (``excl``) are not ranked at all."""
    sg = s[gold]
    idx = np.arange(len(gold))
    has_excl = excl is not None and len(excl) > 0
    if len(gold) <= 16 and not has_excl:
        at_least = np.array([np.count_nonzero(s >= v) for v in sg])  # all documents
        gold_at_least = (sg[None, :] >= sg[:, None]).sum(1)
        above_ng = at_least - gold_at_least
    else:
        mask = np.ones(len(s), dtype=bool)
        mask[gold] = False
        if has_excl:
            mask[excl] = False
        ng = np.sort(s[mask])
        above_ng = len(ng) - np.searchsorted(ng, sg, side="left")  # non-gold with score >= s_i
    above_gold = ((sg[None, :] > sg[:, None]) | ((sg[None, :] == sg[:, None]) & (idx[None, :] < idx[:, None]))).sum(1)
    return (above_ng + above_gold + 1).astype(np.int64)


def lp_feasible(D: np.ndarray, gold: Sequence[int], time_limit: float = 60.0, excluded: Sequence[int] = ()) -> bool | None:
    """Exact hard-margin check: is {w, t : w.d_i >= t + 1 (i in G), w.d_j <= t (j in N)} feasible?

    An LP with |G| + |N| constraints and dim + 1 free variables, solved by scipy's HiGHS.
    ``D``: ``(n_docs, dim)`` float. Returns True/False, or None if HiGHS hit ``time_limit``
    (seconds) or failed numerically. ``excluded``: rows left out of the problem (neither gold
    nor non-gold).
    """
    from scipy.optimize import linprog

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
        return True
    # variables x = (w, t); constraints A_ub x <= b_ub
    A_gold = np.hstack([-D[mask], np.ones((mask.sum(), 1))])  # -w.d_i + t <= -1
    A_ng = np.hstack([D[~mask], -np.ones(((~mask).sum(), 1))])  # w.d_j - t <= 0
    A = np.vstack([A_gold, A_ng])
    b = np.concatenate([-np.ones(mask.sum()), np.zeros((~mask).sum())])
    res = linprog(np.zeros(D.shape[1] + 1), A_ub=A, b_ub=b, bounds=[(None, None)] * (D.shape[1] + 1), method="highs", options={"time_limit": time_limit})
    if res.status == 0:
        return True
    if res.status == 2:
        return False
    return None


def probe(
    D: np.ndarray,
    gold_sets: Sequence[Sequence[int]],
    C: float = 1000.0,
    eps: float = 1e-3,
    max_iter: int = 2000,
    batch_size: int | None = None,
    lp_check_max_docs: int = 0,
    C_max: float | None = None,
    threads: int | None = None,
    progress: bool = False,
    excluded_sets: Sequence[Sequence[int]] | None = None,
) -> list[ProbeResult]:
    """Run the capacity probe for every query.

    ``D``: ``(n_docs, dim) float32`` frozen index (rows = documents; may be a memory map).
    ``gold_sets[q]``: row indices of query q's gold documents (non-empty). ``C``: see module
    docstring (dlib scaling). ``eps``: stopping tolerance on the pair-averaged hinge. ``max_iter``:
    iteration cap per query (a warning names how many queries hit it). ``batch_size``: queries
    per matrix product (default ``max(16, dim // 4)``: keeps the two ``(n_docs, batch)`` float32
    work matrices under half the index size). ``lp_check_max_docs``: run the exact LP for queries
    the cutting plane leaves uncertified when ``n_docs`` is at most this (0: never).
    ``C_max``: when a query converges without strict separation, C is raised 10x at a time up
    to ``C_max`` and the cutting plane continues on the same working set, approaching the
    hard-margin problem (None: no escalation, the plain soft-margin problem with ``C``).
    ``excluded_sets[q]``: rows that are neither gold nor non-gold for query q (BRIGHT's
    ``excluded_ids``; BEIR's self-retrieval rule): they enter no pair, no rank and no
    certificate, exactly as if they were not in the index for that query.

    Returns one ``ProbeResult`` per query, in order. Raises ``ValueError`` for NaN/Inf in ``D``,
    an empty gold set, an index out of range, or a document both gold and excluded.
    """
    D = np.asarray(D)
    if D.ndim != 2:
        raise ValueError(f"index must be 2-d, got shape {D.shape}")
    for b0 in range(0, D.shape[0], BLOCK):  # blockwise: no full-size temporary
        if not np.isfinite(D[b0 : b0 + BLOCK]).all():
            raise ValueError("index contains NaN or Inf")
    from threadpoolctl import threadpool_limits

    with threadpool_limits(int(threads) if threads else None):
        return _probe(D, gold_sets, C, eps, max_iter, batch_size, lp_check_max_docs, C if C_max is None else max(C, C_max), progress,
                      excluded_sets)


def _probe(D, gold_sets, C, eps, max_iter, batch_size, lp_check_max_docs, C_max, progress, excluded_sets=None) -> list[ProbeResult]:
    n, dim = D.shape
    golds, excls = [], []
    for q, g in enumerate(gold_sets):
        g = np.unique(np.asarray(g, dtype=np.int64))
        if len(g) == 0:
            raise ValueError(f"query {q}: empty gold set")
        if g.min() < 0 or g.max() >= n:
            raise ValueError(f"query {q}: gold index out of range [0, {n})")
        golds.append(g)
        e = np.unique(np.asarray(excluded_sets[q] if excluded_sets is not None else [], dtype=np.int64))
        if len(e) and (e.min() < 0 or e.max() >= n):
            raise ValueError(f"query {q}: excluded index out of range [0, {n})")
        if len(np.intersect1d(e, g)):
            raise ValueError(f"query {q}: documents {np.intersect1d(e, g)[:3].tolist()} are both gold and excluded")
        excls.append(e)
    Df = np.ascontiguousarray(D, dtype=np.float32)
    dmax = max([1.0] + [float(np.abs(Df[b0 : b0 + BLOCK]).max()) for b0 in range(0, n, BLOCK)])
    rmax = max([0.0] + [float(np.sqrt((Df[b0 : b0 + BLOCK].astype(np.float64) ** 2).sum(1).max())) for b0 in range(0, n, BLOCK)])
    dups = _row_keys(Df)
    dup_of = {i: set(v) for v in dups.values() for i in v}
    B = batch_size or max(16, dim // 4)
    results: list[ProbeResult | None] = [None] * len(golds)
    capped = 0
    batches = range(0, len(golds), B)
    if progress:
        from tqdm import tqdm

        batches = tqdm(batches, desc="probe", unit="batch")
    for start in batches:
        qs = list(range(start, min(start + B, len(golds))))
        state = {}
        for q in qs:
            g = golds[q]
            n_pairs = len(g) * (n - len(g) - len(excls[q]))
            state[q] = {"A": np.zeros((dim, 0)), "b": np.zeros(0), "K": np.zeros((0, 0)), "w": np.zeros(dim), "alpha": np.zeros(0), "xiW": 0.0, "it": 0, "done": n_pairs == 0, "pairs": n_pairs, "C": float(C), "escalations": 0, "age": np.zeros(0, dtype=np.int64)}
        active = [q for q in qs if not state[q]["done"]]
        S = None
        while active:
            W = np.stack([state[q]["w"] for q in active]).astype(np.float32)  # (B', dim)
            S = None  # release the previous scores before the next product
            S = W @ Df.T  # (B', n): one product, rows contiguous
            Cm = np.empty_like(S)  # coefficient rows of the new cutting planes, filled in order
            add, still = [], []
            for row, q in enumerate(active):
                st = state[q]
                b_new, H = _most_violated(S[row], golds[q], st["pairs"], out=Cm[len(add)], excl=excls[q])[1:]
                if st["it"] > 0 and H <= st["xiW"] + eps and st["C"] < C_max and H > 0:
                    # converged for this C but some pair violated: if no strict separation yet,
                    # continue towards the hard margin with a 10x larger C (the working set stays
                    # valid: cutting planes do not depend on C)
                    srow = S[row].copy()
                    srow[golds[q]] = -np.inf
                    srow[excls[q]] = -np.inf
                    if S[row][golds[q]].min() <= srow.max():
                        st["C"] = min(st["C"] * 10.0, C_max)
                        _set_alpha(st, _solve_dual(st["K"], st["b"], st["C"]))
                        st["escalations"] += 1
                        still.append(q)
                        continue
                if (st["it"] > 0 and H <= st["xiW"] + eps) or st["it"] >= max_iter:
                    st["done"] = True
                    if st["it"] >= max_iter and H > st["xiW"] + eps:
                        st["capped"] = True
                        capped += 1
                    results[q] = _finish(Df, S[row], golds[q], st, dmax, rmax, dup_of, lp_check_max_docs, excls[q])
                    continue
                add.append(q)
                st["b_new"] = b_new
                still.append(q)
            if not still:
                break
            # new cutting planes, (dim, B''); written D^T.C^T: OpenBLAS runs C.D ~10x slower here
            A_new = Df.T @ Cm[: len(add)].T if add else None
            del Cm
            for col, q in enumerate(add):
                st = state[q]
                a = A_new[:, col].astype(np.float64)
                cross = st["A"].T @ a
                K = np.empty((len(st["b"]) + 1,) * 2)
                K[:-1, :-1] = st["K"]
                K[-1, :-1] = K[:-1, -1] = cross
                K[-1, -1] = a @ a
                st["A"] = np.hstack([st["A"], a[:, None]])
                st["b"] = np.append(st["b"], st["b_new"])
                st["K"] = K
                alpha = _solve_dual(K, st["b"], st["C"])
                # drop cutting planes inactive for PRUNE_AFTER iterations (Joachims 2006, Sec. 5)
                st["age"] = np.where(alpha > 1e-12 * st["C"], 0, np.append(st["age"], 0) + 1)
                keep = st["age"] <= PRUNE_AFTER
                if not keep.all():
                    st["A"], st["b"], st["K"] = st["A"][:, keep], st["b"][keep], K[np.ix_(keep, keep)]
                    alpha, st["age"] = alpha[keep], st["age"][keep]
                _set_alpha(st, alpha)
                st["it"] += 1
            active = still
        del S
        for q in qs:
            if results[q] is None:  # no pairs (every document is gold): nothing to optimise
                results[q] = _finish(Df, np.zeros(n, dtype=np.float32), golds[q], state[q], dmax, rmax, dup_of, lp_check_max_docs, excls[q])
    if capped:
        log.warning("probe: %d of %d queries hit the iteration cap (max_iter=%d) before eps=%g", capped, len(golds), max_iter, eps)
    return results  # type: ignore[return-value]


def _finish(Df, s32, gold, st, dmax, rmax, dup_of, lp_check_max_docs, excl=None) -> ProbeResult:
    """One query's result from its float32 scores ``s32`` at the final w.

    Slack and ranks use ``s32``; the certificate is decided in float64: the gold scores and
    every non-gold score within the float32 error bound of the best non-gold one are recomputed
    exactly, so the margin's sign is exact. Runs the LP when asked. ``excl``: rows that are
    neither gold nor non-gold.
    """
    w = st["w"]
    n = Df.shape[0]
    excl = np.zeros(0, dtype=np.int64) if excl is None else excl
    mask = np.ones(n, dtype=bool)
    mask[gold] = False
    mask[excl] = False
    wn = float(np.linalg.norm(w))
    g64 = Df[gold].astype(np.float64) @ w
    if mask.any():
        slack = max(0.0, _most_violated(s32, gold, st["pairs"], excl=excl)[2])
        ng = np.where(mask, s32, -np.inf)
        # |s32 - s64| <= dim * 2^-24 * |w| * max|d| (float32 dot + rounding of w), doubled for safety
        delta = 2.0 * Df.shape[1] * 2.0**-24 * max(wn, 1e-30) * max(rmax, 1e-30)
        cand = np.flatnonzero(ng >= ng.max() - delta)
        margin = float(g64.min() - (Df[cand].astype(np.float64) @ w).max())
    else:
        slack, margin = 0.0, float("inf")
    tol = 1e-9 * max(1.0, wn) * dmax
    certified = margin > tol
    C = st["C"]
    objective = 0.5 * wn**2 + C * slack
    alpha = st["alpha"]
    dual = float(st["b"] @ alpha - 0.5 * wn**2) if len(alpha) else 0.0
    conflict = any(j in dup_of and (dup_of[j] - set(gold.tolist()) - set(excl.tolist())) for j in gold.tolist())
    lp = None
    if conflict:
        lp = False  # identical vectors on both sides: no w separates them
    elif not certified and lp_check_max_docs and n <= lp_check_max_docs:
        lp = lp_feasible(Df, gold, excluded=excl)
    if certified or lp is True:
        # every gold document above every non-gold one (by w, or by the LP's witness): gold
        # ranks are 1..|G|, ordered by the exact gold scores, ties by index
        ranks = np.empty(len(gold), dtype=np.int64)
        ranks[np.lexsort((np.arange(len(gold)), -g64))] = np.arange(1, len(gold) + 1)
        certified = True
    else:
        ranks = _pessimistic_ranks(s32, gold, excl)
    return ProbeResult(w, objective, dual, slack, st["it"], not st.get("capped", False), margin, certified, ranks, lp, conflict,
                       {"C_final": C, "escalations": st["escalations"]})
