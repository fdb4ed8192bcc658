"""The cutting plane's numeric primitives: the most violated 1-slack constraint, the
pair-averaged hinge, the restricted dual QP, and the index products (float32 scores and
planes, exact float64 scores near the gold documents).

Shapes: the index ``docs`` ``(n_docs, dim) float32``; scores ``s`` ``(n_docs,)``; a problem's
state (``state.Problem``) holds its members' rows (indices into ``golds``/``opt_excl``).
"""

from __future__ import annotations

import numpy as np

from ..retrieval import tie_duplicates
from . import constants as const
from .state import Problem


def _most_violated(
    s: np.ndarray, gold: np.ndarray, n_pairs: int, out: np.ndarray | None = None, excl: np.ndarray | None = None
) -> tuple[np.ndarray, float, float]:
    """The most violated 1-slack constraint at scores ``s = D.w`` ``(n_docs,)``.

    Returns ``(coef (n_docs,) float32, b, H)``: the constraint is ``w.a >= b - xi`` with
    ``a = D^T coef``, and ``H = b - w.a`` is its violation at the current w (= the
    pair-averaged hinge loss). Found without the |G| x |N| pairs: for each document j, n_j =
    #{i in G : s_i < s_j + 1} (for |G| <= 16 one comparison pass per gold document, else a
    binary search per document); each gold document's m_i = #{j in N : s_j > s_i - 1} follows
    from a histogram of the n_j; then coef_i = m_i (gold), coef_j = -n_j (non-gold), scaled by
    1/|P|, and b = sum m_i / |P|. ``out``: an
    ``(n_docs,) float32`` buffer to write the coefficients into. ``excl``: row indices that are
    neither gold nor non-gold (they get coefficient 0 and count in no pair).
    """
    sg_raw = s[gold]
    order = np.argsort(sg_raw, kind="stable")
    sg = sg_raw[order]
    s1 = s + s.dtype.type(1)
    cnt = np.zeros(len(s), dtype=np.int32)
    cand = np.flatnonzero(s1 > sg[0])  # only these are in a violated pair (n_j > 0)
    if len(gold) <= 16:
        sc = s1[cand]
        c = np.zeros(len(cand), dtype=np.int32)
        for v in sg:
            c += sc > v  # gold documents with s_i < s_j + 1
        cnt[cand] = c
    else:
        cnt[cand] = np.searchsorted(sg, s1[cand], side="left")
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


def _hinge(s: np.ndarray, gold: np.ndarray, n_pairs: int, excl: np.ndarray) -> float:
    """The pair-averaged hinge (1/n_pairs) sum_{i in G, j in N} max(0, 1 - s_i + s_j) at scores
    ``s`` ``(n_docs,) float64`` (= ``_most_violated``'s H), in float64. Only documents scoring
    above min gold - 1 can be in a violated pair: for up to 16 gold documents one pass each over
    them, else they are sorted and each gold document's violated pairs are one binary search and
    one prefix sum. When every pair is violated (the score range is below 1) it is 1 - mean gold
    + mean non-gold, with no sort."""
    sg = s[gold]
    if sg.max() - s.min() < 1.0:  # every pair violated: the hinge is linear, a difference of means
        n_ng = len(s) - len(gold) - len(excl)
        total = (
            len(gold) * n_ng
            + len(gold) * (float(s.sum()) - float(sg.sum()) - float(s[excl].sum()))
            - n_ng * float(sg.sum())
        )
        return max(0.0, total / n_pairs)
    ng = s > sg.min() - 1.0
    ng[gold] = False
    ng[excl] = False
    sj = s[ng]
    if len(gold) <= 16:  # one pass per gold document over the candidates
        total = 0.0
        for v in sg.tolist():
            hit = sj[sj > v - 1.0]
            total += len(hit) * (1.0 - v) + float(hit.sum())
        return max(0.0, total / n_pairs)
    sj = np.sort(sj)
    csum = np.concatenate([[0.0], np.cumsum(sj)])
    first = np.searchsorted(sj, sg - 1.0, side="right")  # s_j > s_i - 1
    cnt = len(sj) - first
    total = float(np.sum(cnt * (1.0 - sg) + (csum[-1] - csum[first])))
    return max(0.0, total / n_pairs)


class SolverFailed(ValueError):
    """The restricted dual QP could not be solved (quadprog refused it even with a stronger ridge):
    the problem stops at its best point and its query ends ``undecided`` unless that point is a
    certificate (``ProbeResult.stopped == "solver"``, ``cause == "solver"``)."""


def _solve_dual(K: np.ndarray, b: np.ndarray, C: float) -> np.ndarray:
    """max b.alpha - 1/2 alpha K alpha, alpha >= 0, sum alpha <= C (quadprog). Raises
    ``SolverFailed`` when quadprog refuses the problem (numerically inconsistent constraints)
    with both ridges, or returns a non-finite solution."""
    # third-party, imported where used: the report and diagnose paths import capgap.probe without solving
    import quadprog

    n = len(b)
    Cmat, eye = _QP_CONSTRAINTS.get(n) or _qp_constraints(n)
    bvec = np.zeros(n + 1)
    bvec[-1] = -C
    scale = max(1.0, float(K.diagonal().sum()) / n)
    try:
        alpha = quadprog.solve_qp(K + (1e-10 * scale) * eye, b.astype(np.float64), Cmat, bvec, 0)[0]
    except ValueError:  # numerically inconsistent: retry with a stronger ridge
        try:
            alpha = quadprog.solve_qp(K + (1e-6 * scale) * eye, b.astype(np.float64), Cmat, bvec, 0)[0]
        except ValueError as e:
            raise SolverFailed(f"the dual QP over {n} cutting planes failed: {e}") from e
    if not np.isfinite(alpha).all():
        raise SolverFailed(f"the dual QP over {n} cutting planes returned a non-finite solution")
    return np.maximum(alpha, 0.0)


# working-set size -> (_solve_dual's constraint matrix, identity)
_QP_CONSTRAINTS: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _qp_constraints(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``_solve_dual``'s constraint matrix (alpha >= 0 and -sum alpha >= -C, as quadprog's
    C^T x >= b) and identity for a working set of ``n`` planes, cached up to
    ``constants.QP_CACHE_MAX`` planes; beyond, built per call (the cache held two n x n
    matrices per size, cubic in the largest working set, which a stalled problem grows by one
    plane per iteration)."""
    out = (np.hstack([np.eye(n), -np.ones((n, 1))]), np.eye(n))
    if n <= const.QP_CACHE_MAX:
        _QP_CONSTRAINTS[n] = out
    return out


def _scores32(docs: np.ndarray, W: np.ndarray, DT: np.ndarray | None = None) -> np.ndarray:
    """``W @ docs.T``: ``(m, dim) float32`` query vectors against the index ``(n_docs, dim) float32``,
    ``(m, n_docs) float32``, on ``DT`` (``docs`` transposed, C-contiguous: ``setup.transposed``)
    when given. Below ``constants.GEMV_ROWS`` rows, one matrix-vector product per row:
    OpenBLAS's matrix product packs the whole index first (~2 ms on a 3,633 x 384 index, as
    much as 10 matrix-vector products), which the long tail of a batch, a few queries still
    iterating, paid at every iteration."""
    if len(W) >= const.GEMV_ROWS:
        return W @ (docs.T if DT is None else DT)
    out = np.empty((len(W), docs.shape[0]), dtype=np.float32)
    M = docs if DT is None else DT.T  # DT.T: the column-major kernel
    for i, w in enumerate(W):
        np.dot(M, w, out=out[i])
    return out


def _planes32(docs: np.ndarray, Cm: np.ndarray, DT: np.ndarray | None = None) -> np.ndarray:
    """``docs.T @ Cm.T``: the cutting planes' directions ``(dim, m) float32`` from their coefficient
    rows ``Cm`` ``(m, n_docs) float32`` (written D^T.C^T: OpenBLAS runs C.D ~10x slower here), on
    ``DT`` when given (as ``_scores32``); below ``constants.GEMV_ROWS`` rows one matrix-vector
    product per row."""
    M = docs.T if DT is None else DT
    if len(Cm) >= const.GEMV_ROWS:
        return M @ Cm.T
    out = np.empty((docs.shape[1], len(Cm)), dtype=np.float32)
    for i, c in enumerate(Cm):
        out[:, i] = c @ docs if DT is None else DT @ c
    return out


def _group_violated(s: np.ndarray, problem: Problem, golds, opt_excl, out: np.ndarray) -> tuple[float, float]:
    """The most violated 1-slack constraint over the union of a tie group's pair sets: each
    member's constraint weighted by its share of the pairs. Writes the coefficients into
    ``out``; returns ``(b, H)``."""
    members, pairs, P = problem.members, problem.pairs, problem.P
    if len(members) == 1:
        return _most_violated(s, golds[members[0]], P, out=out, excl=opt_excl[members[0]])[1:]
    out[:] = 0
    b = H = 0.0
    for q, n_pairs in zip(members, pairs):
        if n_pairs:
            c, b_q, H_q = _most_violated(s, golds[q], n_pairs, excl=opt_excl[q])
            out += c * np.float32(n_pairs / P)
            b += b_q * n_pairs / P
            H += H_q * n_pairs / P
    return b, H


def _first_plane(problem: Problem, golds, opt_excl, docs: np.ndarray, colsum: np.ndarray) -> tuple[float, np.ndarray]:
    """The most violated constraint at w = 0, ``(b, a)`` with ``a`` ``(dim,) float64``: every pair
    is violated by 1, so each member's constraint is b_q = 1 and a_q = mean gold document - mean
    non-gold document (its coefficients are n_ng / P on gold rows and -|G| / P on non-gold ones,
    ``_most_violated``), weighted by the member's share of the group's pairs. The non-gold sum
    is ``colsum`` ``(dim,) float64`` (the sum of all rows) minus the gold and excluded rows."""
    a = np.zeros(docs.shape[1])
    b = 0.0
    for q, n_pairs in zip(problem.members, problem.pairs):
        if n_pairs:
            g, e = golds[q], opt_excl[q]
            sg = docs[g].sum(0, dtype=np.float64)
            se = docs[e].sum(0, dtype=np.float64) if len(e) else 0.0
            n_ng = docs.shape[0] - len(g) - len(e)
            a += (n_pairs / problem.P) * (sg / len(g) - (colsum - sg - se) / n_ng)
            b += n_pairs / problem.P
    return b, a


def _threshold(w: np.ndarray, dmax: float) -> float:
    """The float64 certificate's threshold on the margin at ``w`` ``(dim,)``: 1e-9 max(1, |w|) max|d|,
    ``dmax`` the largest |entry| of the documents compared (``_local_scale``; ``finish``'s
    certificate and the proofs' witnesses)."""
    return 1e-9 * max(1.0, float(np.linalg.norm(w))) * dmax


def _local_scale(docs: np.ndarray, s: np.ndarray, hi: np.ndarray, lo: np.ndarray, w: np.ndarray, dmax: float) -> float:
    """The ``dmax`` of ``_threshold`` for a margin between the rows ``hi`` (the gold documents,
    ``int`` rows of ``docs``) and the rows ``lo``, at scores ``s`` (indexed like ``docs``'s rows):
    the largest |entry| of the ``hi`` rows and of the ``lo`` rows scoring within the threshold at
    the index's largest |entry| ``dmax`` of the lowest ``hi`` score. No other row can come within
    the threshold of a gold score, and the rows compared set the scale of their scores' rounding:
    an index whose row norms span many orders of magnitude (one row 1e10 times the others) has
    its ordinary rows' margins judged at their own scale, not at the outlier's, which would have
    refused every certificate and let a proof's tolerance take distinct points for one."""
    rows = _compared_rows(s, hi, lo, w, dmax)
    return float(np.abs(np.asarray(docs[rows], dtype=np.float64)).max()) if len(rows) else 0.0


def _compared_rows(s: np.ndarray, hi: np.ndarray, lo: np.ndarray, w: np.ndarray, dmax: float) -> np.ndarray:
    """The rows whose largest |entry| is ``_local_scale``'s: ``hi`` and the ``lo`` rows scoring
    within ``_threshold(w, dmax)`` of the lowest ``hi`` score (``int64`` row indices, none
    when ``hi`` is empty)."""
    hi = np.asarray(hi, dtype=np.int64)
    lo = np.asarray(lo, dtype=np.int64)
    if not len(hi):
        return hi
    low = float(s[hi].min())
    near = lo[s[lo] >= low - _threshold(w, dmax)] if len(lo) else lo
    return np.concatenate([hi, near])


def _certified32(
    s: np.ndarray,
    problem: Problem,
    golds,
    opt_excl,
    rmax: float,
    dmax: float,
    w: np.ndarray | None = None,
    err: float | None = None,
) -> bool:
    """Whether float32 scores ``s`` ``(n_docs,)`` at ``w`` (default the problem's w) separate every
    member's gold set by more than their error (``err``; default the float32 product's bound,
    ``_exact_near_gold``'s delta) plus the float64 certificate's threshold, so the final float64
    check certifies it too."""
    w = problem.w if w is None else w
    wn = max(float(np.linalg.norm(w)), 1e-30)
    if err is None:
        err = _product_error(len(w), wn, rmax)
    delta = err + 1e-9 * max(1.0, wn) * dmax  # + _threshold, |w| computed once
    return all(_separated(s, golds[q], opt_excl[q], by=delta) for q in problem.members)


def _product_error(dim: int, wn: float, rmax: float) -> float:
    """The bound on |float32 score - exact score| of one index product at a w of norm ``wn``
    (rows of norm at most ``rmax``): dim 2^-24 |w| max|d| (float32 dot and rounding of w),
    doubled for safety (``_exact_near_gold``)."""
    return 2.0 * dim * 2.0**-24 * wn * max(rmax, 1e-30)


def _non_gold(n: int, gold: np.ndarray, excl: np.ndarray) -> np.ndarray:
    """``(n,) bool``: the documents that are neither gold nor excluded."""
    mask = np.ones(n, dtype=bool)
    mask[gold] = False
    mask[excl] = False
    return mask


def _separated(s: np.ndarray, gold: np.ndarray, excl: np.ndarray, by: float = 0.0) -> bool:
    """Every gold score above every other non-excluded score by more than ``by`` (finite scores,
    ``by`` finite; true when there is no other document). The other documents' maximum is taken
    over a copy of ``s`` with the gold and excluded rows at -inf: no boolean mask, no gathered
    copy (this runs once per problem and iteration)."""
    others = s.copy()
    others[gold] = -np.inf
    others[excl] = -np.inf
    return float(s[gold].min()) - float(others.max()) > by


def _scores64(docs: np.ndarray, W: np.ndarray, dups) -> np.ndarray:
    """Exact (float64) scores of the index against ``W``: ``(dim,)`` -> ``(n_docs,)``, or
    ``(m, dim)`` -> ``(m, n_docs)``; the index is cast blockwise, duplicates are tied."""
    W = np.asarray(W, dtype=np.float64)
    out = np.empty(W.shape[:-1] + (docs.shape[0],))
    for b0 in range(0, docs.shape[0], 8 * const.BLOCK):
        out[..., b0 : b0 + 8 * const.BLOCK] = W @ docs[b0 : b0 + 8 * const.BLOCK].astype(np.float64).T
    return tie_duplicates(out, dups)


def _exact_near_gold(
    docs: np.ndarray, w: np.ndarray, s32: np.ndarray, golds, rmax: float, dups, tie: tuple | None = None
) -> np.ndarray:
    """Scores at w ``(n_docs,) float64``: exact (float64) for the gold documents and every
    document within the float32 error bound of the lowest gold score, ``s32`` elsewhere. So the
    margin's sign, every tie with a gold document and every gold rank are exact; documents
    further below only keep float32 precision. Duplicates are tied (``tie``: ``retrieval.tie_index(dups)``
    when already computed)."""
    s = s32.astype(np.float64)
    delta = _product_error(docs.shape[1], max(float(np.linalg.norm(w)), 1e-30), rmax)
    low = min(float(s32[g].min()) for g in golds)
    cand = np.flatnonzero(s32 >= low - delta)
    s[cand] = docs[cand].astype(np.float64) @ np.asarray(w, dtype=np.float64)
    return tie_duplicates(s, dups, tie)
