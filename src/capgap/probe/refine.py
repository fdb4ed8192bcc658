"""Tightening the ``duplicate`` outcome's R-precision: copy-free gold above the copies' gold.

A query certified up to identical copies (``outcome="duplicate"``) has a w that ranks every
gold document above every other document except the gold documents' identical non-gold
copies, which tie with their gold document under every w and, by the pessimistic tie rule,
rank just above it. Which copies then fall inside the top |G| depends on w: the copies of the
highest-scored gold documents all do, those of the lowest-scored ones need not. A duplicate
group with copies (m identical gold rows, c copies) puts all c copies in the top |G| as soon as
any of its gold does. The best any ranking reaches at k = |G| (``rprec_upper_bound``) is
therefore the best, over the sets X of such groups, of min(copy-free gold + X's gold,
|G| - X's copies): X ranked above everything else, every other gold document below (a 0/1
knapsack on the gold count; an earlier closed form charged each gold document its own c + 1
ranks, below the truth where identical gold rows share copies).

A w that ranks the copy-free gold documents and X's groups above every other document, the
other gold documents included (``copy_top``), reaches that bound; the bound needs no order
inside the top, but recall@k below |G| does. Where a query's w stays below the bound,
``finish`` seeks one such w directly (``proofs.order_witness``, in the worker that solved the
query, seeded by its scores), each next order asked only where the one before is not found:
the copy-free gold documents, then each of X's groups on its own (fewest copies first), then
the other gold documents, then the rest (the order the SVM's w nearly has, with recall@k below
|G| at its best too); the top as one level above the other gold documents above the rest; the
top above the other gold documents and the rest taken together. It is kept when its
recall@|G| is higher (``extra["refined"] = ORDERED``; objective, slack and dual stay the SVM's).
``refine_duplicates`` takes the queries still below the bound to a second, graded solve
(``pairs="graded"``): the copy-free gold documents one grade level above the gold documents
with copies, those above every other document (the copies set aside, as always), so the
cutting plane seeks the order the bound needs. Its w is kept only when its recall@|G|, with
the query's own grades and the same tie rule, is higher; its result says so in
``extra["refined"] = REFINED`` (objective, slack and dual are then the graded problem's).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..retrieval import rank_gold, rank_top
from .planes import _scores64
from .result import ProbeResult
from .state import SolveContext

REFINED = "copy-free gold documents ranked above the gold documents with identical copies (graded pairs)"
ORDERED = (
    "the copy-free gold documents, then the copied gold that fits in the top |G| (fewest copies first), "
    "above the other gold documents and the rest (proofs.order_witness)"
)


def copy_counts(gold: np.ndarray, twins: np.ndarray, dups) -> np.ndarray:
    """``(|gold|,) int64``: each gold document's identical non-gold copies (``twins``: the
    query's copies, rows) in its duplicate group (``dups``: groups of row indices)."""
    tw = set(int(t) for t in twins)
    group_of = {int(i): g for g in dups for i in g}
    return np.array([len(tw.intersection(int(j) for j in group_of.get(int(i), ()))) for i in gold], dtype=np.int64)


def _copy_groups(copies: np.ndarray, group: np.ndarray) -> tuple[int, list[tuple[object, int, int]]]:
    """``(free, [(group id, m, c), ...])``: the number of copy-free gold documents, and for each
    duplicate group with copies its m gold documents and c identical non-gold copies."""
    free = int(np.count_nonzero(copies == 0))
    groups: dict = {}
    for g, c in zip(group[copies > 0].tolist(), copies[copies > 0].tolist()):
        m, _ = groups.get(g, (0, c))
        groups[g] = (m + 1, int(c))
    return free, [(g, m, c) for g, (m, c) in groups.items()]


def _best_blocks(free: int, blocks: list[tuple[int, int]]) -> tuple[int, np.ndarray]:
    """``(gold, chosen)``: the most gold documents any order puts in the top |G| (|G| = ``free``
    + the blocks' gold) and the blocks ``(m, c)`` it ranks there, ``(len(blocks),) bool``
    (``rprec_upper_bound``). Exact over every subset X of the blocks ranked above everything
    else: min(free + sum_X m, |G| - sum_X c), by a 0/1 knapsack on the gold count that keeps the
    fewest copies per count (ties to the earlier blocks), the smallest optimal count taken."""
    n_blocks = len(blocks)
    total = free + sum(m for m, _ in blocks)
    span = total - free
    eps = 1.0 / (n_blocks * n_blocks + 1)  # tie-break by block order, never more than one copy in all
    fewest = np.full(span + 1, np.inf)
    fewest[0] = 0.0
    take = np.zeros((n_blocks, span + 1), dtype=bool)
    for b, (m, c) in enumerate(blocks):
        with_b = np.full(span + 1, np.inf)
        with_b[m:] = fewest[: span + 1 - m] + c + eps * b
        take[b] = with_b < fewest
        fewest = np.minimum(fewest, with_b)
    copies = np.floor(fewest)  # the true copy count (the tie-break stays below 1)
    gold = np.where(np.isfinite(fewest), np.minimum(free + np.arange(span + 1), total - copies), -1)
    j = int(np.argmax(gold))  # the first (smallest gold count) of the optimal ones
    chosen = np.zeros(n_blocks, dtype=bool)
    for b in range(n_blocks - 1, -1, -1):
        if take[b, j]:
            chosen[b] = True
            j -= blocks[b][0]
    return int(gold.max()), chosen


def rprec_upper_bound(copies: np.ndarray, group: np.ndarray | None = None) -> float:
    """The highest recall@|G| any ranking reaches when gold document i has ``copies[i]``
    ``(|G|,) int`` identical non-gold copies (pessimistic ties: the copies rank above their gold
    documents), gold documents with the same ``group[i]`` ``(|G|,)`` (default: each its own)
    being identical rows that share them. Any ranking puts some set X of the duplicate groups
    with copies (m_g gold, c_g copies) at least partly in the top |G|: all of X's copies rank
    there, so at most min(free + sum_X m, |G| - sum_X c) gold documents do, which X ranked
    above everything else reaches; the bound is its maximum over X (a 0/1 knapsack). Assumes no
    other non-gold document ranks inside the top |G| (the ``duplicate`` outcome's separation)."""
    copies = np.asarray(copies, dtype=np.int64)
    if not len(copies):
        return 0.0
    free, groups = _copy_groups(copies, np.arange(len(copies)) if group is None else np.asarray(group))
    return _best_blocks(free, [(m, c) for _, m, c in groups])[0] / len(copies)


def copy_top(
    gold: np.ndarray, copies: np.ndarray, rep: np.ndarray, s: np.ndarray
) -> tuple[list[np.ndarray], np.ndarray]:
    """``(top, below)``: the gold rows ``gold`` a w must rank above every other document to
    reach ``rprec_upper_bound`` (the copy-free ones and the duplicate groups, by ``rep``
    ``(n_docs,)``, of the best set X), as levels top first, and the other gold rows, which must
    rank below them so their copies stay out of the top |G|. Among equally good sets, the one
    with the fewest gold documents, preferring groups with fewer copies and, among equal
    counts, a higher score ``s`` ``(n_docs,)`` (the order the w that gave ``s`` prefers). The
    levels: the copy-free gold documents, then each group of X on its own, in that order. The
    bound needs no order inside the top (every copy of X ranks in the top |G| whatever the
    order, and nothing else does); this one also gives recall@k below |G| its best: the
    copy-free gold first (one rank each), then the groups costing the fewest copies."""
    group = rep[gold]
    free, groups = _copy_groups(copies, group)
    groups.sort(key=lambda g: (g[2], -float(s[g[0]]), g[0]))
    _, chosen = _best_blocks(free, [(m, c) for _, m, c in groups])
    keep = [g for (g, _, _), ok in zip(groups, chosen) if ok]
    top = ([gold[copies == 0]] if free else []) + [gold[(copies > 0) & (group == g)] for g in keep]
    return top, gold[(copies > 0) & ~np.isin(group, keep)]


def refine_duplicates(env: SolveContext, results: list[ProbeResult], grades, solve_again) -> list[ProbeResult]:
    """``results`` with each single query of outcome ``duplicate`` whose recall@|G| is below
    ``rprec_upper_bound`` re-solved by ``solve_again(rows, levels)`` (the probe on those
    queries with grade levels: 2 copy-free gold, 1 gold with copies, ``pairs="graded"``) and
    replaced where the new w's recall@|G| is higher (module docstring). ``grades[q]``: the
    query's own grades, for its ranks."""
    todo, levels = [], []
    for q, r in enumerate(results):
        if r.outcome != "duplicate" or r.tied != 1:
            continue
        gold = env.golds[q]
        copies = copy_counts(gold, env.twins[q], env.dups)
        if r.recall_at(len(gold)) + 1e-12 < rprec_upper_bound(copies, env.rep[gold]):
            todo.append(q)
            levels.append(np.where(copies > 0, 1.0, 2.0))
    if not todo:
        return results
    out = list(results)
    for q, r2 in zip(todo, solve_again(todo, levels)):
        gold = env.golds[q]
        valid = np.ones(env.docs.shape[0], dtype=bool)
        valid[env.excls[q]] = False
        s = _scores64(env.docs, r2.w, env.dups)
        ranks = rank_gold(s, gold, grades[q], valid)
        if float(np.mean(ranks <= len(gold))) <= results[q].recall_at(len(gold)):
            continue
        top_rows, top_scores = rank_top(s, env.depth, gold, grades[q], valid) if env.depth else (None, None)
        out[q] = replace(
            r2,
            gold_ranks=ranks,
            top_rows=top_rows,
            top_scores=top_scores,
            cause="duplicate",
            outcome="duplicate",
            decided_by=results[q].decided_by,
            extra={**r2.extra, "refined": REFINED},
        )
    return out
