"""What every batch shares, built once per ``probe()`` call (``SolveContext``): the validated
queries, the index's statistics, duplicate groups and each gold document's identical copies,
the problems (queries sharing one w) and the members each problem's cutting plane optimises."""

from __future__ import annotations

import numpy as np

from ..retrieval import duplicate_groups, merge_groups, tie_index
from . import constants as const
from .config import SolveSettings
from .state import SolveContext


def _queries(n, gold_sets, excluded_sets, grades):
    """Validated per-query gold rows (sorted, unique), grades aligned with them, exclusions."""
    golds, grs, excls = [], [], []
    for q, g in enumerate(gold_sets):
        g_in = np.asarray(g, dtype=np.int64)
        if len(g_in) == 0:
            raise ValueError(f"query {q}: empty gold set")
        if g_in.min() < 0 or g_in.max() >= n:
            raise ValueError(f"query {q}: gold index out of range [0, {n})")
        g, first = np.unique(g_in, return_index=True)
        gr = np.ones(len(g)) if grades is None else np.asarray(grades[q], dtype=np.float64)[first]
        e = np.unique(np.asarray(excluded_sets[q] if excluded_sets is not None else [], dtype=np.int64))
        if len(e) and (e.min() < 0 or e.max() >= n):
            raise ValueError(f"query {q}: excluded index out of range [0, {n})")
        if len(np.intersect1d(e, g)):
            raise ValueError(f"query {q}: documents {np.intersect1d(e, g)[:3].tolist()} are both gold and excluded")
        golds.append(g)
        grs.append(gr)
        excls.append(e)
    return golds, grs, excls


def _environment(
    docs: np.ndarray,
    golds,
    grs,
    excls,
    tie_groups,
    duplicates,
    settings: SolveSettings,
    prove: bool = True,
    solves: bool = True,
    by_construction: bool = True,
) -> SolveContext:
    """The ``SolveContext`` of validated queries (``_queries``) over the index ``docs`` ``(n_docs, dim)
    float32``; ``settings``: C, C_max, eps, max_iter, lp_check_max_docs, depth, solve and pairs
    (the others are not the environment's); ``prove``: ``SolveContext.prove``. ``solves=False``: no
    batch will run on it (the shards' gather), so no column-major copy (``transposed``).
    ``by_construction=False``: no affine-independence test (``SolveContext.affine`` False): an SVD
    of the ``(n_docs, dim + 1)`` float64 rows, seconds on screening's 2,050 candidates at 2,560
    dimensions, for a reason (``ProbeResult.by_construction``) the screened result does not keep."""
    n, dim = docs.shape
    B = const.BLOCK
    dmax = max([1.0] + [float(np.abs(docs[b0 : b0 + B]).max()) for b0 in range(0, n, B)])
    norms = np.concatenate([np.sqrt((docs[b0 : b0 + B].astype(np.float64) ** 2).sum(1)) for b0 in range(0, n, B)])
    rmax = float(norms.max()) if n else 0.0
    dups = merge_groups(n, duplicate_groups(docs), _duplicate_rows(n, duplicates))
    colsum = sum(docs[b0 : b0 + B].sum(0, dtype=np.float64) for b0 in range(0, n, B)) if n else np.zeros(dim)
    rep = np.arange(n)  # each row's duplicate-group representative (its scores are the group's)
    for g in dups:
        rep[g] = g[0]
    twins, opt_excl = _twins(golds, excls, dups)
    problems = _problems(tie_groups, len(golds))
    affine = bool(
        by_construction
        and n <= dim + 1
        and np.linalg.matrix_rank(np.hstack([docs.astype(np.float64), np.ones((n, 1))])) == n
    )
    golds_opt, excl_opt, opt_members = _grade_levels(problems, golds, grs, opt_excl, settings.pairs)
    return SolveContext(
        docs=docs,
        golds=golds_opt,
        grades=grs,
        excls=excls,
        twins=twins,
        opt_excl=excl_opt,
        problems=problems,
        opt_members=opt_members,
        dups=dups,
        rep=rep,
        colsum=colsum,
        dmax=dmax,
        rmax=rmax,
        norms=norms,
        affine=affine,
        DT=transposed(docs) if solves else None,
        tie=tie_index(dups),
        C=settings.C,
        C_max=settings.C_max,
        eps=settings.eps,
        max_iter=settings.max_iter,
        lp_check_max_docs=settings.lp_check_max_docs,
        depth=settings.depth,
        solve=settings.solve,
        prove=bool(prove),
    )


def transposed(docs: np.ndarray) -> np.ndarray | None:
    """The index ``docs`` ``(n_docs, dim) float32`` as ``(dim, n_docs) float32`` C-contiguous (the
    same numbers in column-major order), or None above ``TRANSPOSED_BYTES``. The cutting
    plane's products run on it (``planes._scores32`` / ``_planes32``): OpenBLAS's
    matrix-vector kernels stream a column-major matrix 1.4-3.1x faster than the row-major one
    (benchmarks/products.py; its matrix products give the same numbers at the same speed),
    and most of a batch's iterations are matrix-vector products (its last, longest problems).
    Built blockwise, so a memory-mapped index is read once."""
    n, dim = docs.shape
    if n * dim * 4 > const.TRANSPOSED_BYTES:
        return None
    DT = np.empty((dim, n), dtype=np.float32)
    for b0 in range(0, n, 8 * const.BLOCK):
        DT[:, b0 : b0 + 8 * const.BLOCK] = docs[b0 : b0 + 8 * const.BLOCK].T
    return DT


def _duplicate_rows(n: int, duplicates) -> list[np.ndarray]:
    """``probe(duplicates=...)``'s groups as ``int64`` arrays, each row index in ``[0, n)``, else
    ``ValueError`` naming the group (a negative index would silently mean a row from the end)."""
    out = []
    for k, g in enumerate(duplicates):
        g = np.asarray(g, dtype=np.int64).ravel()
        if len(g) and (g.min() < 0 or g.max() >= n):
            raise ValueError(f"duplicates group {k}: row index out of range [0, {n}): {g.tolist()[:5]}")
        out.append(g)
    return out


def _twins(golds, excls, dups) -> tuple[list, list]:
    """Per query, ``(twins, opt_excl)``: the gold documents' identical non-gold copies (they
    always tie with a gold document: no w separates them, they add only a constant to the hinge,
    and are left out of the optimisation, not the ranks) and the rows the optimisation leaves
    out (exclusions and twins), ``int64`` arrays."""
    dup_of = {int(i): g for g in dups for i in g}
    twins, opt_excl = [], []
    for g, e in zip(golds, excls):
        t = sorted({int(j) for i in g.tolist() if i in dup_of for j in dup_of[i]} - set(g.tolist()) - set(e.tolist()))
        twins.append(np.asarray(t, dtype=np.int64))
        opt_excl.append(np.union1d(e, t).astype(np.int64))
    return twins, opt_excl


def _problems(tie_groups, n_queries: int) -> list[list[int]]:
    """The problems: lists of queries sharing one w (the same ``tie_groups`` label), in order
    of first appearance; every query alone without labels."""
    labels = list(range(n_queries)) if tie_groups is None else list(tie_groups)
    if len(labels) != n_queries:
        raise ValueError(f"{len(labels)} tie-group labels for {n_queries} queries")
    problems: dict = {}
    for q, lab in enumerate(labels):
        problems.setdefault(lab, []).append(q)
    return list(problems.values())


def _grade_levels(problems, golds, grs, opt_excl, pairs: str) -> tuple[list, list, list]:
    """The members each problem's cutting plane optimises: its queries, or (``pairs="graded"``,
    a single query with several grades) one gold set per grade level h, the documents of grade
    h against every lower level (non-gold included), higher levels set aside. Returns the gold
    sets and left-out rows of every member (the queries', then the grade levels') and each
    problem's members."""
    golds_opt, excl_opt, opt_members = list(golds), list(opt_excl), []
    for members in problems:
        levels = np.unique(grs[members[0]]) if pairs == "graded" and len(members) == 1 else np.zeros(1)
        if len(levels) < 2:
            opt_members.append(members)
            continue
        q, virtual = members[0], []
        for h in levels:
            virtual.append(len(golds_opt))
            golds_opt.append(golds[q][grs[q] == h])
            excl_opt.append(np.union1d(opt_excl[q], golds[q][grs[q] > h]).astype(np.int64))
        opt_members.append(virtual)
    return golds_opt, excl_opt, opt_members
