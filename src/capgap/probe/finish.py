"""A problem's results at its final w: margins and certificates in float64, the exact LP or a
proof for what the cutting plane left open, the verdict (``ProbeResult.outcome`` /
``decided_by`` / ``cause``), ranks and top rows under ``capgap.retrieval``'s tie rule."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..retrieval import rank_gold, rank_top
from . import constants as const
from .planes import _hinge, _local_scale, _scores64, _threshold
from .proofs import _lp_generated, _prove_inseparable, lp_feasible, order_witness
from .refine import ORDERED, copy_counts, copy_top, rprec_upper_bound
from .result import ProbeResult
from .state import Problem, SolveContext
from .ties import _break_ties


@dataclass
class _Verdict:
    """One member's verdict in progress: its final ``w`` ``(dim,)`` and scores ``s``
    ``(n_docs,) float64`` (the problem's, or a witness's that replaced them), ``margin``,
    ``certified``, ``separated`` (certified, or certified up to a gold document's identical
    copies), ``lp`` (``ProbeResult.lp_feasible``), ``decided_by`` and ``hull`` (the proof's bound)."""

    w: np.ndarray
    s: np.ndarray
    margin: float
    certified: bool
    separated: bool
    lp: bool | None
    decided_by: str | None
    hull: float | None


def _margin(scores: np.ndarray, gold: np.ndarray, mask: np.ndarray) -> float:
    """Min gold score - max score over ``mask`` ``(n_docs,) bool``; inf when ``mask`` is empty."""
    return float(scores[gold].min() - scores[mask].max()) if mask.any() else float("inf")


def _masks(n: int, gold: np.ndarray, excl: np.ndarray, twins: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(valid, ng, rest)`` ``(n,) bool``: the documents not excluded, the non-gold ones among
    them, and those less the gold documents' identical copies."""
    valid = np.ones(n, dtype=bool)
    valid[excl] = False
    ng = valid.copy()
    ng[gold] = False
    rest = ng.copy()
    rest[twins] = False
    return valid, ng, rest


def _finish(problem: Problem, env: SolveContext, s: np.ndarray) -> dict[int, ProbeResult]:
    """Results of one problem (a query, or a text-tied group sharing w) at its final w, whose
    scores (``_exact_near_gold``; duplicates tied) are ``s`` ``(n_docs,) float64``.

    Scores, margin, certificate and ranks are computed in float64 with duplicates tied; ranks
    and the top rows follow ``capgap.retrieval``'s pessimistic tie rule. The LP runs for an
    uncertified single query (unless its escalation stopped at an inseparability proof): whole
    when the corpus has at most ``lp_check_max_docs`` documents, else by constraint generation
    (``_lp_generated``); a feasible LP's witness replaces w.
    """
    w = problem.w
    if problem.crossing:
        w, s = _break_ties(problem, env, w, s)
    slacks = {
        q: _hinge(s, env.golds[q], n_pairs, env.opt_excl[q]) if n_pairs else 0.0
        for q, n_pairs in zip(problem.members, problem.pairs)
    }
    group_slack = sum(slacks[q] * n_pairs for q, n_pairs in zip(problem.members, problem.pairs)) / max(problem.P, 1)
    objective = 0.5 * float(np.linalg.norm(w)) ** 2 + problem.C * group_slack
    # the working set's dual at alpha (its minimiser A alpha, not the best point w the problem ended at)
    dual = (
        float(problem.b @ problem.alpha - 0.5 * float(np.linalg.norm(problem.A @ problem.alpha)) ** 2)
        if len(problem.alpha)
        else 0.0
    )
    out = {}
    for q in problem.members:
        gold, twins = env.golds[q], env.twins[q]
        valid, ng, rest = _masks(len(s), gold, env.excls[q], twins)
        v = _verdict(problem, env, q, w, s, ng, rest)
        if problem.stopped == "solver" and not v.separated:  # no proof from a problem whose QP failed
            v.decided_by, v.hull, v.lp = None, None, None
        ranks = rank_gold(v.s, gold, env.grades[q], valid)
        extra = {"C_final": problem.C, "escalations": problem.escalations, "hull": v.hull}
        ordered = _order_copies(problem, env, q, v, ranks, valid, ng, rest)
        if ordered is not None:
            ranks, extra["refined"] = ordered, ORDERED
        top_rows, top_scores = rank_top(v.s, env.depth, gold, env.grades[q], valid) if env.depth else (None, None)
        cause, outcome = _outcome(v, q in problem.crossing, len(twins) > 0, problem.stopped == "solver")
        out[q] = ProbeResult(
            v.w,
            objective,
            dual,
            slacks[q],
            problem.it,
            not problem.capped,
            v.margin,
            bool(v.certified),
            ranks,
            v.lp,
            bool(len(twins)),
            extra,
            cause,
            len(problem.members),
            _by_construction(problem, env, q, ng),
            top_rows,
            top_scores,
            problem.stopped,
            outcome,
            v.decided_by,
        )
    return out


def _verdict(
    problem: Problem, env: SolveContext, q: int, w: np.ndarray, s: np.ndarray, ng: np.ndarray, rest: np.ndarray
) -> _Verdict:
    """Member ``q``'s verdict at the problem's ``w`` and scores ``s``: its certificate (up to
    identical copies), else the in-loop proof's witness or verdict, the construction of a
    crossing text-tied group, the exact LP (a single query), and for what is still open (the LP
    off, a text-tied group, the LP undecided within its time limit, or a witness HiGHS's
    tolerance let through) one more proof, for the verdict only."""
    gold, twins = env.golds[q], env.twins[q]
    single = len(problem.members) == 1
    margin = _margin(s, gold, ng)
    thresh = _threshold(w, _local_scale(env.docs, s, gold, np.flatnonzero(ng), w, env.dmax))
    certified = margin > thresh
    separated = certified or (len(twins) > 0 and _margin(s, gold, rest) > thresh)  # up to identical copies
    # problem.lp: the gate's whole LP
    v = _Verdict(w, s, margin, certified, separated, False if len(twins) else problem.lp, None, problem.hull)
    if not separated and single and problem.witness is not None:  # the proof's or the in-loop LP's separating w
        _adopt_witness(v, problem.witness, gold, ng, env, "lp" if problem.lp else "hull")
    elif separated:
        v.decided_by = "certificate"
    elif q in problem.crossing:
        v.decided_by = "construction"
    elif v.hull is not None and q in problem.hull_members:  # the in-loop proof of this member
        v.decided_by = "hull"
    elif problem.lp is False:  # the in-loop exact LP (a single query)
        v.decided_by, v.lp = "lp", False
    elif single and env.lp_check_max_docs and not problem.graded and env.prove:  # (a graded query keeps its w)
        _exact_lp(v, env, q, ng, rest)
    if v.decided_by is None and not v.separated and env.prove:
        proof = _prove_inseparable(v.s, [q], problem.seek_witness, env.golds, env.opt_excl, env.docs, env.rep, env.dmax)
        v.hull = proof.bound
        v.decided_by = "hull" if proof.bound is not None else None
        if proof.witness is not None:  # no proof, but a separating w
            _adopt_witness(v, proof.witness, gold, ng, env)
    return v


def _order_copies(
    problem: Problem,
    env: SolveContext,
    q: int,
    v: _Verdict,
    ranks: np.ndarray,
    valid: np.ndarray,
    ng: np.ndarray,
    rest: np.ndarray,
) -> np.ndarray | None:
    """A single query separated only up to its gold documents' identical copies (the
    ``duplicate`` outcome), in certificate mode with escalation on, whose recall@|G| at the
    verdict's w (its gold ``ranks``) is below ``refine.rprec_upper_bound``: ``proofs.order_witness``
    (the gold documents of the bound's best set, ``refine.copy_top``, above the other gold
    documents, those above ``rest``: the orders the ``refine`` module docstring lists, each
    next one only where the one before is not found; seeded by the verdict's scores) replaces
    the verdict's w and scores when its recall@|G| is higher. Returns the new gold ranks when replaced, else None (the
    SVM's objective, slack and dual stay; ``refine`` module docstring). ``valid``, ``ng``,
    ``rest``: ``_masks``."""
    gold, twins = env.golds[q], env.twins[q]
    if not (
        env.prove
        and problem.early
        and problem.seek_witness
        and not problem.graded
        and len(problem.members) == 1
        and len(twins)
        and v.separated
        and not v.certified
    ):
        return None
    copies = copy_counts(gold, twins, env.dups)
    recall = float(np.mean(ranks <= len(gold)))
    if recall + 1e-12 >= rprec_upper_bound(copies, env.rep[gold]):
        return None
    top, below = copy_top(gold, copies, env.rep, v.s)
    under = [below] if len(below) else []
    rows = np.flatnonzero(rest)
    orders = [(top + under, rows)]  # the distinct orders, each next one asked for only if needed
    if len(top) > 1:
        orders.append(([np.concatenate(top)] + under, rows))
    if len(below):
        orders.append(([np.concatenate(top)], np.concatenate([rows, below])))
    for levels, others in orders:
        witness = order_witness(env.docs, levels, others, env.rep, env.dmax, v.s)
        if witness is not None:
            break
    if witness is None:
        return None
    new = rank_gold(witness[1], gold, env.grades[q], valid)
    if float(np.mean(new <= len(gold))) <= recall:
        return None
    v.w, v.s = witness
    v.margin = _margin(v.s, gold, ng)
    return new


def _adopt_witness(
    v: _Verdict, witness: tuple, gold: np.ndarray, ng: np.ndarray, env: SolveContext, by: str = "hull"
) -> None:
    """A proof's (or the in-loop LP's: ``by="lp"``) separating ``(w, scores)`` replaces the
    verdict's (``decided_by=by``)."""
    v.w, v.s = witness
    v.margin = _margin(v.s, gold, ng)
    v.certified = v.margin > _threshold(v.w, _local_scale(env.docs, v.s, gold, np.flatnonzero(ng), v.w, env.dmax))
    v.separated, v.decided_by = True, by


def _exact_lp(v: _Verdict, env: SolveContext, q: int, ng: np.ndarray, rest: np.ndarray) -> None:
    """The exact LP on what is still open: the gold set against ``rest`` (a gold document's
    identical copies set aside: they tie with it whatever w is); whole on a corpus of at most
    ``lp_check_max_docs`` documents, beyond by constraint generation. A witness that separates
    what w did not is strictly better and adopted; an infeasible LP decides the verdict."""
    docs, gold, twins = env.docs, env.golds[q], env.twins[q]
    if docs.shape[0] <= env.lp_check_max_docs:  # the whole LP; beyond, by constraint generation
        ok, w_lp = lp_feasible(docs, gold, excluded=env.opt_excl[q], return_witness=True)
        s_lp = _scores64(docs, w_lp, env.dups) if ok else None
    else:
        ok, w_lp, s_lp = _lp_generated(
            docs, env.rep, gold, rest, v.s, env.dups, const.LP_WHOLE_FACTOR * env.lp_check_max_docs
        )
    if ok and _margin(s_lp, gold, rest) > 0:  # a witness separates what w did not: strictly better, adopted
        v.w, v.s = w_lp, s_lp
        v.margin = _margin(v.s, gold, ng)
        v.certified = v.margin > 0
        v.separated = True
        v.decided_by = "lp"
    elif ok is False:
        v.decided_by = "lp"
    if not len(twins):
        v.lp = ok


def _outcome(v: _Verdict, crossing: bool, has_twins: bool, solver_failed: bool = False) -> tuple[str | None, str]:
    """``(cause, outcome)`` of a member's verdict (``ProbeResult``); ``solver_failed``: the
    problem's dual QP failed, so an unseparated member is ``("solver", "undecided")``."""
    if v.certified:
        return None, "certified"
    if v.separated:
        return "duplicate", "duplicate"
    if solver_failed:
        return "solver", "undecided"
    if crossing:
        return "tied", "tied"
    if v.decided_by in ("hull", "lp"):
        return "geometry", "geometry"
    return ("duplicate" if has_twins else "geometry"), "undecided"


def _by_construction(problem: Problem, env: SolveContext, q: int, ng: np.ndarray) -> str | None:
    """Why member ``q``'s certification was guaranteed before any optimisation, else None
    (``ProbeResult.by_construction``): only when every member of the problem poses the same
    problem and no gold document has an identical copy."""
    gold, excl = env.golds[q], env.excls[q]
    same_problem = all(
        np.array_equal(env.golds[m], gold) and np.array_equal(env.excls[m], excl) for m in problem.members
    )
    if not same_problem or len(env.twins[q]):
        return None
    if env.affine:
        return "n_docs <= dim + 1, affinely independent: every gold set is separable"
    if len(gold) == 1 and ng.any() and np.all(np.abs(env.norms[ng] / max(env.norms[gold[0]], 1e-30) - 1) <= 1e-5):
        return "single gold among distinct documents of equal norm: w = the gold vector separates it"
    return None
