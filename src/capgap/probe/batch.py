"""The cutting-plane loop over one batch of problems: one float32 score product and one plane
product per iteration for every problem still iterating, each problem's step (certificate,
convergence, the escalation gate with its one proof, eps tightening, the iteration cap), the
restricted dual QP after each new plane, and the final scores handed to ``finish``."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..retrieval import tie_duplicates
from . import constants as const
from .finish import _finish
from .planes import (
    SolverFailed,
    _certified32,
    _exact_near_gold,
    _first_plane,
    _group_violated,
    _hinge,
    _non_gold,
    _planes32,
    _product_error,
    _scores32,
    _separated,
    _solve_dual,
)
from .proofs import _hull_witness, _prove_inseparable, lp_feasible
from .result import ProbeResult
from .state import Problem, SolveContext
from .ties import _crossing


def _solve_batch(env: SolveContext, ps: list[int]) -> tuple[dict[int, ProbeResult], int]:
    """Problems ``ps`` (indices into ``env.problems``) solved together, one matrix product per
    iteration for the ``env.window`` of them iterating at once (0: all): a finished problem's
    place goes to the next of ``ps``, in order, and a problem stopped at its certificate is
    finished at once (its scores are not kept). ``({query: ProbeResult}, queries that hit
    max_iter)``. A problem's iterations depend only on ``ps`` and the window (never on the
    thread count)."""
    window = env.window or len(ps)
    state: dict[int, Problem] = {}
    results: dict[int, ProbeResult] = {}
    capped, nxt, active = 0, 0, []
    while True:
        while len(active) < window and nxt < len(ps):  # refill the window, in order
            p = ps[nxt]
            nxt += 1
            state[p] = _new_problem(env, p)
            if not state[p].done:
                active.append(p)
        if not active:
            break
        ran = active
        active, n_capped = _iteration(env, state, active)
        capped += n_capped
        for p in [p for p in ran if state[p].done and state[p].s32 is not None]:
            results.update(_finish_problem(env, p, state.pop(p)))
    results.update(_finish_batch(env, state, [p for p in ps if p in state]))
    return {q: results[q] for p in ps for q in env.problems[p]}, capped


def _new_problem(env: SolveContext, p: int) -> Problem:
    """Problem ``p``'s state before its first iteration: w = 0, an empty working set."""
    n, dim = env.docs.shape
    members = env.opt_members[p]  # the queries, or a graded query's grade levels (pairs="graded")
    pairs = [len(env.golds[q]) * (n - len(env.golds[q]) - len(env.opt_excl[q])) for q in members]
    crossing = _crossing(members, env.golds, env.excls) if len(members) > 1 and members == env.problems[p] else set()
    return Problem(
        members=members,
        pairs=pairs,
        P=sum(pairs),
        A=np.zeros((dim, 0)),
        b=np.zeros(0),
        K=np.zeros((0, 0)),
        w=np.zeros(dim),
        alpha=np.zeros(0),
        age=np.zeros(0, dtype=np.int64),
        C=float(env.C),
        eps=float(env.eps),
        crossing=crossing,
        early=env.solve == "certificate" and not crossing,
        # escalation on: the capacity is sought, and a separating w replaces the SVM's
        seek_witness=env.C_max > env.C,
        done=sum(pairs) == 0,
    )


def _iteration(env: SolveContext, state: dict[int, Problem], active: list[int]) -> tuple[list[int], int]:
    """One iteration of the problems ``active``: the problems still iterating afterwards, and
    how many queries hit ``max_iter`` in it."""
    first = [p for p in active if state[p].it == 0]
    for p in first:  # w = 0: the first cutting plane in closed form, no product
        state[p].b_new, state[p].a_new = _first_plane(state[p], env.golds, env.opt_excl, env.docs, env.colsum)
    active = [p for p in active if state[p].it > 0]
    W = (
        np.stack([state[p].w for p in active]).astype(np.float32)
        if active
        else np.zeros((0, env.docs.shape[1]), np.float32)
    )
    S = tie_duplicates(_scores32(env.docs, W, env.DT), env.dups, env.tie)  # (B', n): one product, rows contiguous
    Cm = np.empty_like(S)  # coefficient rows of the new cutting planes, filled in order
    add, still, capped = [], list(first), 0
    for row, p in enumerate(active):
        action = _step(env, state[p], S[row], Cm[len(add)])
        if action == "plane":
            add.append(p)
        if action != "stop":
            still.append(p)
        elif state[p].stopped == "max_iter":
            capped += len(env.problems[p])
    del S
    if not still:
        return [], capped
    # new cutting planes, (dim, B''); written D^T.C^T: OpenBLAS runs C.D ~10x slower here
    A_new = _planes32(env.docs, Cm[: len(add)], env.DT) if add else None
    del Cm
    for col, p in enumerate(add + first):
        problem = state[p]
        if col < len(add):
            a = A_new[:, col].astype(np.float64)
        else:
            a, problem.a_new = problem.a_new, None
        try:
            _add_plane(problem, a)
        except SolverFailed:
            _solver_failed(problem)
    return [p for p in still if not state[p].done], capped


def _step(env: SolveContext, problem: Problem, s: np.ndarray, out: np.ndarray) -> str:
    """One problem's step at the float32 scores ``s`` ``(n_docs,)`` (duplicates tied) of its
    working set's minimiser ``problem.w``: ``"stop"`` (done: certificate, convergence, proof or
    iteration cap), ``"again"`` (C escalated: the next iteration goes on with the same working
    set) or ``"plane"`` (a new cutting plane, its coefficients written into ``out`` and its
    offset into ``problem.b_new``).

    The certificate is checked at ``problem.w`` (exact float32 scores); then the line search moves
    the best point ``problem.w_best`` towards ``problem.w`` (``_line_search``), and the stopping rule reads
    the gap between the SVM objective at ``w_best`` and the working set's lower bound at ``w``, in
    units of C: ``hinge_best + (|w_best|^2 - |w|^2) / 2C - xi_W`` (Franc & Sonnenburg's criterion; where
    ``w_best = w`` it is Joachims' ``H - xi_W``). The new plane is the most violated constraint at
    ``w_best + CUT_MU (w - w_best)``, or at ``w`` where ``w_best`` did not move (Joachims' own cut)."""
    if problem.early and _certified32(s, problem, env.golds, env.opt_excl, env.rmax, env.dmax):
        problem.done, problem.stopped = True, "certificate"  # recall, ranks, certificate final
        problem.s32 = s.copy()  # the final scores: w does not change any more
        return "stop"
    moved = _line_search(env, problem, s)
    if (
        moved
        and problem.early
        and _certified32(
            problem.s_best, problem, env.golds, env.opt_excl, env.rmax, env.dmax, problem.w_best, 2.0 * problem.err_best
        )
    ):
        # the best point separates: its exact scores come in _finish_batch
        problem.done, problem.stopped = True, "certificate"
        return _stopped(problem)
    H = problem.hinge_best + (float(problem.w_best @ problem.w_best) - float(problem.w @ problem.w)) / (2.0 * problem.C)
    # certificate mode, escalation on, the gate beyond the base C: the base C's optimum is a waypoint
    # (a query stops there only at its certificate or separated, by the stopping rule's own eps), so
    # C escalates from it at a looser eps
    waypoint = (
        problem.early
        and problem.escalations == 0 < const.HULL_AFTER
        and problem.C < env.C_max
        and not _whole_lp(env, problem)
    )
    esc_eps = problem.eps * const.BASE_EPS_FACTOR if waypoint else problem.eps
    if H <= problem.xiW + esc_eps and problem.hinge_best > 0 and not problem.crossing:
        action = _converged(env, problem, problem.s_best, H)
        if action is not None:
            return _stopped(problem) if action == "stop" else action
    tight_over = problem.it_tight is not None and problem.it - problem.it_tight >= const.TIGHTEN_ITERS
    if H <= problem.xiW + problem.eps or problem.it >= env.max_iter or tight_over:
        problem.done = True
        if problem.it >= env.max_iter and H > problem.xiW + env.eps:
            problem.capped = True
            problem.stopped = "max_iter"
        return _stopped(problem)
    # where w_best stood still, the cut near it can repeat a plane the working set already holds (its
    # minimiser w then stays too, and the loop stalls): the plain cutting plane's cut at w instead,
    # which the gap above guarantees is new
    cut = problem.s_best + np.float32(const.CUT_MU) * (s - problem.s_best) if moved else s
    problem.b_new = _group_violated(cut, problem, env.golds, env.opt_excl, out=out)[0]
    return "plane"


def _solver_failed(problem: Problem) -> None:
    """The dual QP failed (``planes.SolverFailed``): the problem stops at its best point (w = 0
    before the first line search), ``stopped="solver"``; ``finish`` then takes no proof from it,
    so its queries end certified (a float64-checked witness) or undecided with cause
    ``"solver"``."""
    problem.done, problem.stopped = True, "solver"
    if problem.w_best is not None:
        problem.w = problem.w_best
    problem.s32 = None  # the final scores come from _finish_batch


def _stopped(problem: Problem) -> str:
    """A problem stopped anywhere but at a certificate at its minimiser ends at its best point
    ``w_best`` (its scores are computed again, exactly, by ``_finish_batch``)."""
    problem.w = problem.w_best
    return "stop"


def _line_search(env: SolveContext, problem: Problem, s: np.ndarray) -> bool:
    """Move the best point ``problem.w_best`` to the lowest SVM objective ``F = |w|^2 / 2 + C R`` on the
    segment from ``w_best`` to the working set's minimiser ``problem.w`` (scores ``s``), OCAS's line
    search (Franc & Sonnenburg, JMLR 2009, Sec. 3) restricted to the segment, so ``s_best`` stays
    a convex combination of exact products. R is the pair-averaged hinge along the segment,
    convex and piecewise linear; its slope at a point is ``-coef . (s - s_best)`` with that point's
    most violated coefficients. The point ``w`` itself is tried first (where F still falls there,
    it is the new ``w_best``: the cutting plane's own step); else up to ``LINE_SEARCH_STEPS`` secant
    steps on F's slope inside the bracket, and the lowest F found is kept (w_best itself unless a
    point lowers it). The first call starts from ``w_best = 0``, the first plane's point. Returns
    whether ``w_best`` moved; ``problem.err_best`` bounds ``|s_best - D w_best|`` (each product's error,
    ``planes._product_error``, carried through the convex combinations, plus their own float32
    rounding)."""
    golds, excl = env.golds, env.opt_excl
    if problem.w_best is None:
        problem.w_best, problem.s_best = np.zeros_like(problem.w), np.zeros(len(s), dtype=np.float32)
        problem.coef_best = np.empty(len(s), dtype=np.float32)
        problem.hinge_best = _group_violated(problem.s_best, problem, golds, excl, out=problem.coef_best)[1]
    d = problem.w - problem.w_best
    dd, wd, ww, C = float(d @ d), float(problem.w_best @ d), float(problem.w_best @ problem.w_best), problem.C
    delta = s - problem.s_best
    dl = delta.astype(np.float64)
    g0 = wd - C * float(problem.coef_best @ dl)
    if not (g0 < 0 and dd > 0):
        return False  # F does not fall towards w: w_best stays

    def at(k: float, x: np.ndarray) -> tuple[float, float, float, np.ndarray]:
        c = np.empty(len(x), dtype=np.float32)
        R = _group_violated(x, problem, golds, excl, out=c)[1]
        return 0.5 * (ww + 2.0 * k * wd + k * k * dd) + C * R, wd + k * dd - C * float(c @ dl), R, c

    F1, g1, R1, c1 = at(1.0, s)
    # w_best itself: a secant step can overshoot to a higher F
    best = (0.5 * ww + C * problem.hinge_best, 0.0, problem.hinge_best, problem.coef_best)
    if F1 < best[0]:
        best = (F1, 1.0, R1, c1)
    if g1 > 0:  # the minimum lies inside the segment: secant steps on the slope
        lo, glo, hi, ghi = 0.0, g0, 1.0, g1
        for _ in range(const.LINE_SEARCH_STEPS):
            k = lo - glo * (hi - lo) / (ghi - glo)
            if not lo < k < hi:
                break
            Fk, gk, Rk, ck = at(k, problem.s_best + np.float32(k) * delta)
            if Fk < best[0]:
                best = (Fk, k, Rk, ck)
            if gk < 0:
                lo, glo = k, gk
            elif gk > 0:
                hi, ghi = k, gk
            else:
                break
    if best[1] == 0.0:
        return False  # no point on the segment lowers F: w_best stays
    _, k, problem.hinge_best, problem.coef_best = best
    wn, wbn = float(np.sqrt(problem.w @ problem.w)), float(np.sqrt(ww))
    err = _product_error(len(d), wn, env.rmax)
    if k == 1.0:
        problem.s_best, problem.err_best = s.copy(), err
    else:
        # the combination's error, and its float32 rounding (three operations on scores of at most (|w_best| + |w|)
        # max|d|)
        problem.s_best = problem.s_best + np.float32(k) * delta
        problem.err_best = (1.0 - k) * problem.err_best + k * err + 2.0 * 3.0 * 2.0**-24 * (wbn + wn) * env.rmax
    problem.w_best = problem.w_best + k * d
    return True


def _converged(env: SolveContext, problem: Problem, s: np.ndarray, H: float) -> str | None:
    """Converged for this C with some pair violated (violation ``H``): unless the gold set is
    separated, either prove that no w separates it (then C stays: the certificate cannot
    change; ``"stop"``) or continue towards the hard margin with a 10x larger C (the working
    set stays valid: cutting planes do not depend on C; ``"again"``). At C_max, certificate
    mode tightens eps instead. None: the step's stopping rule decides."""
    if all(_separated(s, env.golds[q], env.opt_excl[q]) for q in problem.members):
        return None
    # the gate: one proof attempt after HULL_AFTER escalations (most separable queries are
    # certified by then, so few proofs are spent on them); on a corpus the whole LP decides, the
    # exact LP at the base C (finish's exact LP settles the certificate there)
    whole_lp = _whole_lp(env, problem)
    if (
        env.prove
        and not problem.proof_tried
        and (problem.escalations >= (0 if whole_lp else const.HULL_AFTER) or problem.C >= env.C_max)
    ):
        problem.proof_tried = True
        if _proof(env, problem, s, whole_lp):
            return "stop"
    if problem.C < env.C_max:
        problem.C = min(problem.C * 10.0, env.C_max)
        try:
            problem.adopt(_solve_dual(problem.K, problem.b, problem.C))
        except SolverFailed:
            _solver_failed(problem)
            return "stop"
        problem.escalations += 1
        return "again"
    # certificate mode at C_max: on a separable set the SVM optimum there is (near) the
    # hard-margin solution, which separates; eps alone stopped short of it, so tighten it 10x at
    # a time (at most TIGHTEN_STEPS times, for at most TIGHTEN_ITERS iterations) and go on; not
    # without escalation (C_max=None: the plain soft-margin problem at C)
    while (
        problem.early
        and env.C_max > env.C
        and problem.tightened < const.TIGHTEN_STEPS
        and H <= problem.xiW + problem.eps
    ):
        problem.eps /= 10.0
        problem.tightened += 1
        if problem.it_tight is None:
            problem.it_tight = problem.it
    return None


def _whole_lp(env: SolveContext, problem: Problem) -> bool:
    """Whether the gate is the whole exact LP at the base C (a single query on a corpus of at
    most ``lp_check_max_docs`` documents) rather than the proof after ``HULL_AFTER`` escalations."""
    return bool(env.lp_check_max_docs) and env.docs.shape[0] <= env.lp_check_max_docs and len(problem.members) == 1


def _proof(env: SolveContext, problem: Problem, s: np.ndarray, whole_lp: bool) -> bool:
    """The one in-loop proof attempt at scores ``s``: the whole exact LP (``whole_lp``, a single
    query) or ``_prove_inseparable``. True when it ends the problem: proven inseparable
    (``stopped="inseparable"``), or the proof or the feasible LP found a separating witness
    instead (``problem.witness``, checked in float64 as ``_hull_witness`` checks the proof's; then the
    problem is converged at C: objective, slack and dual are that optimum's)."""
    if whole_lp:
        q = problem.members[0]
        ok, w_lp = lp_feasible(env.docs, env.golds[q], excluded=env.opt_excl[q], return_witness=True)
        problem.lp = ok  # ProbeResult.lp_feasible, whatever decides the query
        if ok is False:
            problem.done, problem.stopped = True, "inseparable"
            return True
        if ok and problem.seek_witness and problem.early:
            # certificate mode: the LP's witness, checked exactly, decides the query
            ng = np.flatnonzero(_non_gold(env.docs.shape[0], env.golds[q], env.opt_excl[q]))
            problem.witness = _hull_witness(env.docs, w_lp, env.golds[q], ng, env.rep, env.dmax)
            if problem.witness is not None:
                problem.done = True
                return True
        return False
    proof = _prove_inseparable(
        s, problem.members, problem.seek_witness, env.golds, env.opt_excl, env.docs, env.rep, env.dmax
    )
    problem.hull_members, problem.witness = proof.proven, proof.witness
    if proof.bound is not None:
        problem.done, problem.stopped, problem.hull = True, "inseparable", proof.bound
        return True
    if problem.witness is not None:
        problem.done = True
        return True
    return False


def _add_plane(problem: Problem, a: np.ndarray) -> None:
    """Add the cutting plane ``(a, problem.b_new)`` (``a`` ``(dim,) float64``) to the working set,
    re-solve the dual QP, drop planes inactive in more than ``PRUNE_AFTER`` consecutive
    re-solves (Joachims 2006, Sec. 5) and adopt the new w."""
    m = len(problem.b)
    K = np.empty((m + 1, m + 1))  # the working set grown by one plane, each array filled in place
    K[:m, :m] = problem.K
    K[m, :m] = K[:m, m] = problem.A.T @ a
    K[m, m] = a @ a
    A = np.empty((len(a), m + 1))
    A[:, :m], A[:, m] = problem.A, a
    b = np.empty(m + 1)
    b[:m], b[m] = problem.b, problem.b_new
    alpha = _solve_dual(K, b, problem.C)  # before the working set changes: a failure leaves it as it was
    problem.A, problem.b, problem.K = A, b, K
    age = np.empty(m + 1, dtype=np.int64)
    age[:m], age[m] = problem.age + 1, 1
    age[alpha > 1e-12 * problem.C] = 0
    problem.age = age
    keep = age <= const.PRUNE_AFTER
    if not keep.all():
        problem.A, problem.b, problem.K = problem.A[:, keep], problem.b[keep], K[np.ix_(keep, keep)]
        alpha, problem.age = alpha[keep], problem.age[keep]
    problem.adopt(alpha)
    problem.it += 1


def _finish_batch(env: SolveContext, state: dict[int, Problem], ps: list[int]) -> dict[int, ProbeResult]:
    """Every problem's results at its final w: first those stopped at their certificate (scores
    known), then the others, their final scores 32 problems per product."""
    results: dict[int, ProbeResult] = {}
    for p in [p for p in ps if state[p].s32 is not None]:
        results.update(_finish_problem(env, p, state.pop(p)))
    rest = list(state)
    for c0 in range(0, len(rest), 32):
        chunk = rest[c0 : c0 + 32]
        S32 = tie_duplicates(
            _scores32(env.docs, np.stack([state[p].w for p in chunk]).astype(np.float32), env.DT), env.dups, env.tie
        )
        for row, p in enumerate(chunk):
            problem = state.pop(p)
            problem.s32 = S32[row]
            results.update(_finish_problem(env, p, problem))
    return results


def _finish_problem(env: SolveContext, p: int, problem: Problem) -> dict[int, ProbeResult]:
    """Problem ``p``'s results (``_finish``) at float64 scores near its gold documents. A graded
    query (``pairs="graded"``) is judged gold vs non-gold as any query, with w, slack and
    objective those of the graded problem the cutting plane solved."""
    real = env.problems[p]
    s = _exact_near_gold(env.docs, problem.w, problem.s32, [env.golds[q] for q in real], env.rmax, env.dups, env.tie)
    if problem.members == real:
        return _finish(problem, env, s)
    n = env.docs.shape[0]
    slack = sum(
        _hinge(s, env.golds[v], n_v, env.opt_excl[v]) * n_v for v, n_v in zip(problem.members, problem.pairs) if n_v
    ) / max(problem.P, 1)
    q = real[0]
    n_q = len(env.golds[q]) * (n - len(env.golds[q]) - len(env.opt_excl[q]))
    res = _finish(replace(problem, members=real, pairs=[n_q], P=n_q, graded=True, seek_witness=False), env, s)[q]
    return {q: replace(res, slack=slack, objective=0.5 * float(np.linalg.norm(problem.w)) ** 2 + problem.C * slack)}
