"""Tightening the ``duplicate`` outcome's R-precision: copy-free gold above the copies' gold.

A query certified up to identical copies (``outcome="duplicate"``) has a w that ranks every
gold document above every other document except the gold documents' identical non-gold
copies, which tie with their gold document under every w and, by the pessimistic tie rule,
rank just above it. Which copies then fall inside the top |G| depends on w: the copies of the
highest-scored gold documents all do, those of the lowest-scored ones need not. The best any w
can reach at k = |G| (``rprec_upper_bound``): every copy-free gold document first, then as many
whole blocks (a gold document and its c copies, c + 1 ranks) as fit in the remaining ranks,
smallest blocks first; a block cut by rank |G| contributes its copies only.

A w that ranks the gold documents by their number of copies, fewest first, each document with
copies strictly apart from the others (``copy_levels``), above every other document reaches
that bound. Where a query's w stays below the bound, ``finish`` seeks one such w directly
(``proofs.order_witness``, in the worker that solved the query) and keeps it when its
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
from .state import _Env

REFINED = "copy-free gold documents ranked above the gold documents with identical copies (graded pairs)"
ORDERED = "gold documents ranked by their number of identical copies, fewest first, each with copies apart (proofs.order_witness)"


def copy_counts(gold: np.ndarray, twins: np.ndarray, dups) -> np.ndarray:
    """``(|gold|,) int64``: each gold document's identical non-gold copies (``twins``: the
    query's copies, rows) in its duplicate group (``dups``: groups of row indices)."""
    tw = set(int(t) for t in twins)
    group_of = {int(i): g for g in dups for i in g}
    return np.array([len(tw.intersection(int(j) for j in group_of.get(int(i), ()))) for i in gold], dtype=np.int64)


def copy_levels(gold: np.ndarray, copies: np.ndarray, rep: np.ndarray, s: np.ndarray) -> list[np.ndarray]:
    """The order ``rprec_upper_bound``'s best w ranks the gold rows ``gold`` in, as
    ``proofs.order_witness``'s levels, top first: the copy-free gold documents (``copies``
    ``(|gold|,)``, ``copy_counts``) as one level, then each gold document with copies as a level
    of its own (with any identical gold rows: one duplicate group, ``rep``), fewest copies first
    and, among equal counts, highest score ``s`` ``(n_docs,)`` first (the order the w that
    gave ``s`` prefers). Blocks of different documents must not tie: under the pessimistic tie
    rule a tie would rank both blocks' copies above both gold documents."""
    free = gold[copies == 0]
    groups: dict = {}
    for i, c in zip(gold[copies > 0].tolist(), copies[copies > 0].tolist()):
        groups.setdefault(int(rep[i]), (c, []))[1].append(i)
    order = sorted(groups, key=lambda g: (groups[g][0], -float(s[g]), g))
    return ([free] if len(free) else []) + [np.array(groups[g][1], dtype=np.int64) for g in order]


def rprec_upper_bound(copies: np.ndarray) -> float:
    """The highest recall@|G| any w reaches when gold document i has ``copies[i]`` identical
    non-gold copies (pessimistic ties: a copy ranks above its gold document). With t gold
    documents having copies, |G| - t ranks go to the copy-free ones; the t ranks left take
    whole blocks (c + 1 ranks, one gold) smallest first. Assumes no other non-gold document
    ranks inside the top |G| (the ``duplicate`` outcome's separation)."""
    n = len(copies)
    if not n:
        return 0.0
    costs = np.sort(copies[copies > 0]) + 1
    slots, found = len(costs), n - len(costs)
    for c in costs:
        if c > slots:
            break
        slots -= c
        found += 1
    return found / n


def refine_duplicates(env: _Env, results: list[ProbeResult], grades, solve_again) -> list[ProbeResult]:
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
        if r.recall_at(len(gold)) + 1e-12 < rprec_upper_bound(copies):
            todo.append(q)
            levels.append(np.where(copies > 0, 1.0, 2.0))
    if not todo:
        return results
    out = list(results)
    for q, r2 in zip(todo, solve_again(todo, levels)):
        gold = env.golds[q]
        valid = np.ones(env.Df.shape[0], dtype=bool)
        valid[env.excls[q]] = False
        s = _scores64(env.Df, r2.w, env.dups)
        ranks = rank_gold(s, gold, grades[q], valid)
        if float(np.mean(ranks <= len(gold))) <= results[q].recall_at(len(gold)):
            continue
        top_rows, top_scores = rank_top(s, env.depth, gold, grades[q], valid) if env.depth else (None, None)
        out[q] = replace(r2, gold_ranks=ranks, top_rows=top_rows, top_scores=top_scores, cause="duplicate", outcome="duplicate",
                         decided_by=results[q].decided_by, extra={**r2.extra, "refined": REFINED})
    return out
