"""What the probe's results prove about one scoring matrix, per query: the L2 query a probe
vector stands for (``l2``), a sign-constrained exact LP where the probe's vector is no L2
query, and whether "no query vector puts the gold documents in the top k" is proven
(``index_limit_proof``), so that a query is called index-limited only with a proof and
"undetermined" without one.

Under ``l2`` the documents are scored as ``x = (d, -|d|^2/2)`` (``prepare._scoring_matrix``): a
query point q ranks them as ``(q, 1).x``, so the L2 rankings are those of ``(w, c).x`` with
``c > 0`` (the query ``w / c``), and ``c = 0`` is their limit (``t w`` as ``t`` grows: strict
orders kept). A gold set is L2-separable exactly when the hard-margin LP over ``x`` with
``c >= 0`` is feasible: a witness with ``c = 0`` keeps a positive margin when ``c`` is raised
a little (``_l2_witness``), so a feasible LP always yields a query point; an infeasible one
proves that no query point (nor the limit) ranks the gold set first.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..probe.planes import _scores64
from ..probe.proofs import _lp_generated, lp_feasible
from ..retrieval import rank_gold

PROOFS = ("missing", "copies", "inseparable", "l2-inseparable")  # per_query.tsv ``proof``: why a query is index-limited


def representatives(n: int, groups: Sequence[np.ndarray]) -> np.ndarray:
    """``(n,) int64``: each row's duplicate-group representative (the group's first row; itself
    when it has no identical copy). ``groups``: ``capgap.retrieval.duplicate_groups``."""
    rep = np.arange(n, dtype=np.int64)
    for g in groups:
        rep[g] = g[0]
    return rep


def l2_feasible(
    Ds: np.ndarray, gold: np.ndarray, w0: np.ndarray, groups, lp_max_docs: int
) -> tuple[bool | None, np.ndarray | None]:
    """Is there an L2 query point (or the limit of one) ranking every gold document strictly
    above every other document?

    Parameters
    ----------
    Ds : numpy.ndarray
        ``(n_docs, dim + 1)`` float32, rows ``(d, -|d|^2/2)``.
    gold : numpy.ndarray
        ``(g,)`` int64 gold rows, ascending.
    w0 : numpy.ndarray
        ``(dim + 1,)`` the probe's vector: its highest-scoring non-gold rows seed the constraint
        generation on a corpus above ``lp_max_docs``.
    groups : sequence of numpy.ndarray
        Bit-identical rows (``duplicate_groups(Ds)``), scored alike.
    lp_max_docs : int
        The probe's ``lp_check_max_docs``: the whole LP up to this many documents, constraint
        generation beyond (``capgap.probe.proofs._lp_generated``); 0: no LP.

    Returns
    -------
    (feasible, w)
        ``feasible``: True (``w`` ``(dim + 1,) float64``, last coordinate ``> 0``: the query
        point ``w[:-1] / w[-1]``, checked in float64 to rank every gold document first), False
        (proven: no ``c >= 0`` separates, ``capgap.probe.lp_feasible`` with ``last_nonneg``) or
        None (undecided: no LP, the LP stopped, or its witness failed the exact check); ``w``
        None unless True.
    """
    n = Ds.shape[0]
    if lp_max_docs <= 0 or len(gold) == n:
        return (True, None) if len(gold) == n else (None, None)
    if n <= lp_max_docs:
        ok, w = lp_feasible(Ds, gold, return_witness=True, last_nonneg=True)
    else:
        ng = np.ones(n, dtype=bool)
        ng[gold] = False
        ok, w, _ = _lp_generated(
            Ds,
            representatives(n, groups),
            gold,
            ng,
            _scores64(Ds, w0, groups),
            groups,
            10 * lp_max_docs,
            last_nonneg=True,
        )
    if ok is not True:
        return ok, None
    w = _l2_witness(Ds, gold, w, groups)
    return (True, w) if w is not None else (None, None)


def _l2_witness(Ds: np.ndarray, gold: np.ndarray, w: np.ndarray, groups) -> np.ndarray | None:
    """The LP's witness ``w`` ``(dim + 1,)`` (last coordinate ``c >= 0``) over the augmented
    documents ``Ds`` ``(n_docs, dim + 1)`` (as ``l2_feasible``'s) as an L2 query: where
    ``c`` is not clearly positive it is raised by ``e = m / (2 spread)``, ``m`` the witness's
    exact margin and ``spread`` the range of the rows' last coordinate, which moves any score
    difference by at most ``m / 2``. Returns the vector when its float64 scores rank every gold
    document strictly first, else None."""
    w = np.asarray(w, dtype=np.float64).copy()
    s = _scores64(Ds, w, groups)
    ng = np.ones(len(s), dtype=bool)
    ng[gold] = False
    m = float(s[gold].min() - s[ng].max())
    if not m > 0:
        return None
    last = np.asarray(Ds[:, -1], dtype=np.float64)
    spread = float(last.max() - last.min())
    if w[-1] <= 0 or w[-1] * max(spread, 1e-300) < 1e-6 * m:
        w[-1] += m / (2 * spread) if spread > 0 else 1.0
    s = _scores64(Ds, w, groups)
    return w if w[-1] > 0 and s[gold].min() > s[ng].max() else None


def certified_ranks(Ds: np.ndarray, gold: np.ndarray, grades: np.ndarray, w: np.ndarray, groups) -> np.ndarray:
    """``(g,) float64`` pessimistic gold ranks (``capgap.retrieval.rank_gold``) under the float64
    scores of ``w`` ``(dim',)`` on ``Ds`` ``(n_docs, dim')``, duplicates tied."""
    return rank_gold(_scores64(Ds, w, groups), gold, grades)


def copies_cost(gold: np.ndarray, groups, n_docs: int, need: int) -> int:
    """The fewest documents that must rank at or above ``need`` gold documents: a gold document
    ties with its identical non-gold copies under every query and, by the pessimistic tie rule,
    ranks below them. Per duplicate group with ``a`` gold and ``b`` non-gold rows, taking ``x``
    of its gold documents costs ``x + b``; the cheapest ``need`` gold documents over the groups
    (a small knapsack). Returns the cost (``need`` when no gold document has a copy)."""
    gold_set = set(int(i) for i in gold)
    seen: set[int] = set()
    parts = []  # (a, b) per group holding gold
    for g in groups:
        a = sum(int(i) in gold_set for i in g)
        if a:
            parts.append((a, len(g) - a))
            seen.update(int(i) for i in g)
    parts += [(1, 0)] * len(gold_set - seen)
    inf = n_docs + need + 1
    best = [0] + [inf] * need
    for a, b in parts:
        new = list(best)
        for j in range(need + 1):
            if best[j] >= inf:
                continue
            for x in range(1, min(a, need - j) + 1):
                new[j + x] = min(new[j + x], best[j] + x + b)
        best = new
    return best[need]


def index_limit_proof(
    n_gold: int, gold: np.ndarray, kk: int, groups, n_docs: int, inseparable: bool, l2_inseparable: bool
) -> str | None:
    """Why no query vector can put the gold documents in the top ``kk`` (capped recall 1 needs
    ``min(kk, n_gold)`` of them at rank ``<= kk``), or None when nothing proves it.

    ``"missing"``: fewer gold rows than needed (gold documents set apart, never ranked);
    ``"copies"``: their identical non-gold copies take too many places (``copies_cost`` > kk);
    ``"inseparable"`` / ``"l2-inseparable"``: the whole gold set is needed in the top ``kk`` =
    its size, i.e. strictly above every other document, and an exact proof says no query
    vector (``inseparable``: the probe's hull or LP proof) or no L2 query point
    (``l2_inseparable``: ``l2_feasible`` False) does that. For ``kk`` other than the gold set's
    size inseparability proves nothing (another subset, or a few non-gold documents among
    them, may still fit)."""
    need = min(kk, n_gold)
    if len(gold) < need:
        return "missing"
    if copies_cost(gold, groups, n_docs, need) > kk:
        return "copies"
    if need == len(gold) == kk:
        if inseparable:
            return "inseparable"
        if l2_inseparable:
            return "l2-inseparable"
    return None
