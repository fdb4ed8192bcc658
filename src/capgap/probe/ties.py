"""The tie rule of text-tied queries: queries with identical text share one w (any text
encoder maps them to one vector); members whose gold sets cross (``_crossing``) cannot all be
ranked perfectly by it, and their tie is broken towards the best shared ranking
(``_break_ties``)."""

from __future__ import annotations

import numpy as np

from ..retrieval import rank_gold
from .planes import _scores64
from .state import Problem, SolveContext


def _crossing(members, golds, excls) -> set[int]:
    """Members of a text-tied group whose gold sets cross another member's: a document gold for
    one and non-gold for the other, and the reverse, so no shared w ranks both perfectly."""
    out = set()
    for a in members:
        for b in members:
            if a < b:
                ga, gb = set(golds[a].tolist()), set(golds[b].tolist())
                x = ga - gb - set(excls[b].tolist())
                y = gb - ga - set(excls[a].tolist())
                if x and y:
                    out |= {a, b}
    return out


def _group_score(problem: Problem, env: SolveContext, s: np.ndarray) -> float:
    """Sum over a group's members of the mean reciprocal (pessimistic) rank of their gold."""
    total = 0.0
    for q in problem.members:
        valid = np.ones(len(s), dtype=bool)
        valid[env.excls[q]] = False
        total += float(np.mean(1.0 / rank_gold(s, env.golds[q], env.grades[q], valid)))
    return total


def _break_ties(problem: Problem, env: SolveContext, w: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A text-tied group with crossing gold sets: the SVM optimum is symmetric between the
    members, so their gold documents tie and, ranked pessimistically, none counts. Any vector is
    an achievable query, so try w nudged towards each member's gold centroid (by 1e-6, 1e-3 and
    1e-1 of |w|) and keep the one whose members' gold documents rank best (sum of mean
    reciprocal ranks); w itself when nothing is better."""
    best = (_group_score(problem, env, s), w, s)
    scale = max(float(np.linalg.norm(w)), 1e-12)
    for q in problem.members:
        u = env.docs[env.golds[q]].astype(np.float64).mean(0)
        un = float(np.linalg.norm(u))
        if un == 0:
            continue
        for tau in (1e-6, 1e-3, 1e-1):
            w2 = w + tau * scale * u / un
            s2 = _scores64(env.docs, w2, env.dups)
            score = _group_score(problem, env, s2)
            if score > best[0] + 1e-12:
                best = (score, w2, s2)
    return best[1], best[2]
