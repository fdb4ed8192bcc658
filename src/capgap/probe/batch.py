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
    SolverFailed,
)
from .proofs import _hull_witness, _prove_inseparable, lp_feasible
from .result import ProbeResult
from .state import Problem, _Env
from .ties import _crossing


def _solve_batch(env: _Env, ps: list[int]) -> tuple[dict[int, ProbeResult], int]:
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


def _new_problem(env: _Env, p: int) -> Problem:
    """Problem ``p``'s state before its first iteration: w = 0, an empty working set."""
    n, dim = env.Df.shape
    members = env.opt_members[p]  # the queries, or a graded query's grade levels (pairs="graded")
    pairs = [len(env.golds[q]) * (n - len(env.golds[q]) - len(env.opt_excl[q])) for q in members]
    crossing = _crossing(members, env.golds, env.excls) if len(members) > 1 and members == env.problems[p] else set()
    return Problem(members=members, pairs=pairs, P=sum(pairs), A=np.zeros((dim, 0)), b=np.zeros(0), K=np.zeros((0, 0)),
                   w=np.zeros(dim), alpha=np.zeros(0), age=np.zeros(0, dtype=np.int64), C=float(env.C), eps=float(env.eps),
                   crossing=crossing, early=env.solve == "certificate" and not crossing,
                   seek_witness=env.C_max > env.C,  # escalation on: the capacity is sought, and a separating w replaces the SVM's
                   done=sum(pairs) == 0)


def _iteration(env: _Env, state: dict[int, Problem], active: list[int]) -> tuple[list[int], int]:
    """One iteration of the problems ``active``: the problems still iterating afterwards, and
    how many queries hit ``max_iter`` in it."""
    first = [p for p in active if state[p].it == 0]
    for p in first:  # w = 0: the first cutting plane in closed form, no product
        state[p].b_new, state[p].a_new = _first_plane(state[p], env.golds, env.opt_excl, env.Df, env.colsum)
    active = [p for p in active if state[p].it > 0]
    W = np.stack([state[p].w for p in active]).astype(np.float32) if active else np.zeros((0, env.Df.shape[1]), np.float32)
    S = tie_duplicates(_scores32(env.Df, W, env.DT), env.dups, env.tie)  # (B', n): one product, rows contiguous
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
    A_new = _planes32(env.Df, Cm[: len(add)], env.DT) if add else None
    del Cm
    for col, p in enumerate(add + first):
        st = state[p]
        if col < len(add):
            a = A_new[:, col].astype(np.float64)
        else:
            a, st.a_new = st.a_new, None
        try:
            _add_plane(st, a)
        except SolverFailed:
            _solver_failed(st)
    return [p for p in still if not state[p].done], capped


def _step(env: _Env, st: Problem, s: np.ndarray, out: np.ndarray) -> str:
    """One problem's step at the float32 scores ``s`` ``(n_docs,)`` (duplicates tied) of its
    working set's minimiser ``st.w``: ``"stop"`` (done: certificate, convergence, proof or
    iteration cap), ``"again"`` (C escalated: the next iteration goes on with the same working
    set) or ``"plane"`` (a new cutting plane, its coefficients written into ``out`` and its
    offset into ``st.b_new``).

    The certificate is checked at ``st.w`` (exact float32 scores); then the line search moves
    the best point ``st.wb`` towards ``st.w`` (``_line_search``), and the stopping rule reads
    the gap between the SVM objective at ``wb`` and the working set's lower bound at ``w``, in
    units of C: ``Rb + (|wb|^2 - |w|^2) / 2C - xi_W`` (Franc & Sonnenburg's criterion; where
    ``wb = w`` it is Joachims' ``H - xi_W``). The new plane is the most violated constraint at
    ``wb + CUT_MU (w - wb)``, or at ``w`` where ``wb`` did not move (Joachims' own cut)."""
    if st.early and _certified32(s, st, env.golds, env.opt_excl, env.rmax, env.dmax):
        st.done, st.stopped = True, "certificate"  # recall, ranks, certificate final
        st.s32 = s.copy()  # the final scores: w does not change any more
        return "stop"
    moved = _line_search(env, st, s)
    if moved and st.early and _certified32(st.sb, st, env.golds, env.opt_excl, env.rmax, env.dmax, st.wb, 2.0 * st.eb):
        st.done, st.stopped = True, "certificate"  # the best point separates: its exact scores come in _finish_batch
        return _stopped(st)
    H = st.Rb + (float(st.wb @ st.wb) - float(st.w @ st.w)) / (2.0 * st.C)
    # certificate mode, escalation on, the gate beyond the base C: the base C's optimum is a waypoint
    # (a query stops there only at its certificate or separated, by the stopping rule's own eps), so
    # C escalates from it at a looser eps
    waypoint = st.early and st.escalations == 0 < const.HULL_AFTER and st.C < env.C_max and not _whole_lp(env, st)
    esc_eps = st.eps * const.BASE_EPS_FACTOR if waypoint else st.eps
    if H <= st.xiW + esc_eps and st.Rb > 0 and not st.crossing:
        action = _converged(env, st, st.sb, H)
        if action is not None:
            return _stopped(st) if action == "stop" else action
    tight_over = st.it_tight is not None and st.it - st.it_tight >= const.TIGHTEN_ITERS
    if H <= st.xiW + st.eps or st.it >= env.max_iter or tight_over:
        st.done = True
        if st.it >= env.max_iter and H > st.xiW + env.eps:
            st.capped = True
            st.stopped = "max_iter"
        return _stopped(st)
    # where wb stood still, the cut near it can repeat a plane the working set already holds (its
    # minimiser w then stays too, and the loop stalls): the plain cutting plane's cut at w instead,
    # which the gap above guarantees is new
    cut = st.sb + np.float32(const.CUT_MU) * (s - st.sb) if moved else s
    st.b_new = _group_violated(cut, st, env.golds, env.opt_excl, out=out)[0]
    return "plane"


def _solver_failed(st: Problem) -> None:
    """The dual QP failed (``planes.SolverFailed``): the problem stops at its best point (w = 0
    before the first line search), ``stopped="solver"``; ``finish`` then takes no proof from it,
    so its queries end certified (a float64-checked witness) or undecided with cause
    ``"solver"``."""
    st.done, st.stopped = True, "solver"
    if st.wb is not None:
        st.w = st.wb
    st.s32 = None  # the final scores come from _finish_batch


def _stopped(st: Problem) -> str:
    """A problem stopped anywhere but at a certificate at its minimiser ends at its best point
    ``wb`` (its scores are computed again, exactly, by ``_finish_batch``)."""
    st.w = st.wb
    return "stop"


def _line_search(env: _Env, st: Problem, s: np.ndarray) -> bool:
    """Move the best point ``st.wb`` to the lowest SVM objective ``F = |w|^2 / 2 + C R`` on the
    segment from ``wb`` to the working set's minimiser ``st.w`` (scores ``s``), OCAS's line
    search (Franc & Sonnenburg, JMLR 2009, Sec. 3) restricted to the segment, so ``sb`` stays
    a convex combination of exact products. R is the pair-averaged hinge along the segment,
    convex and piecewise linear; its slope at a point is ``-coef . (s - sb)`` with that point's
    most violated coefficients. The point ``w`` itself is tried first (where F still falls there,
    it is the new ``wb``: the cutting plane's own step); else up to ``LINE_SEARCH_STEPS`` secant
    steps on F's slope inside the bracket, and the lowest F found is kept (wb itself unless a
    point lowers it). The first call starts from ``wb = 0``, the first plane's point. Returns
    whether ``wb`` moved; ``st.eb`` bounds ``|sb - D wb|`` (each product's error,
    ``planes._product_error``, carried through the convex combinations, plus their own float32
    rounding)."""
    golds, excl = env.golds, env.opt_excl
    if st.wb is None:
        st.wb, st.sb = np.zeros_like(st.w), np.zeros(len(s), dtype=np.float32)
        st.cb = np.empty(len(s), dtype=np.float32)
        st.Rb = _group_violated(st.sb, st, golds, excl, out=st.cb)[1]
    d = st.w - st.wb
    dd, wd, ww, C = float(d @ d), float(st.wb @ d), float(st.wb @ st.wb), st.C
    delta = s - st.sb
    dl = delta.astype(np.float64)
    g0 = wd - C * float(st.cb @ dl)
    if not (g0 < 0 and dd > 0):
        return False  # F does not fall towards w: wb stays

    def at(k: float, x: np.ndarray) -> tuple[float, float, float, np.ndarray]:
        c = np.empty(len(x), dtype=np.float32)
        R = _group_violated(x, st, golds, excl, out=c)[1]
        return 0.5 * (ww + 2.0 * k * wd + k * k * dd) + C * R, wd + k * dd - C * float(c @ dl), R, c

    F1, g1, R1, c1 = at(1.0, s)
    best = (0.5 * ww + C * st.Rb, 0.0, st.Rb, st.cb)  # wb itself: a secant step can overshoot to a higher F
    if F1 < best[0]:
        best = (F1, 1.0, R1, c1)
    if g1 > 0:  # the minimum lies inside the segment: secant steps on the slope
        lo, glo, hi, ghi = 0.0, g0, 1.0, g1
        for _ in range(const.LINE_SEARCH_STEPS):
            k = lo - glo * (hi - lo) / (ghi - glo)
            if not lo < k < hi:
                break
            Fk, gk, Rk, ck = at(k, st.sb + np.float32(k) * delta)
            if Fk < best[0]:
                best = (Fk, k, Rk, ck)
            if gk < 0:
                lo, glo = k, gk
            elif gk > 0:
                hi, ghi = k, gk
            else:
                break
    if best[1] == 0.0:
        return False  # no point on the segment lowers F: wb stays
    _, k, st.Rb, st.cb = best
    wn, wbn = float(np.sqrt(st.w @ st.w)), float(np.sqrt(ww))
    err = _product_error(len(d), wn, env.rmax)
    if k == 1.0:
        st.sb, st.eb = s.copy(), err
    else:  # the combination's error, and its float32 rounding (three operations on scores of at most (|wb| + |w|) max|d|)
        st.sb = st.sb + np.float32(k) * delta
        st.eb = (1.0 - k) * st.eb + k * err + 2.0 * 3.0 * 2.0**-24 * (wbn + wn) * env.rmax
    st.wb = st.wb + k * d
    return True


def _converged(env: _Env, st: Problem, s: np.ndarray, H: float) -> str | None:
    """Converged for this C with some pair violated (violation ``H``): unless the gold set is
    separated, either prove that no w separates it (then C stays: the certificate cannot
    change; ``"stop"``) or continue towards the hard margin with a 10x larger C (the working
    set stays valid: cutting planes do not depend on C; ``"again"``). At C_max, certificate
    mode tightens eps instead. None: the step's stopping rule decides."""
    if all(_separated(s, env.golds[q], env.opt_excl[q]) for q in st.members):
        return None
    # the gate: one proof attempt after HULL_AFTER escalations (most separable queries are
    # certified by then, so few proofs are spent on them); on a corpus the whole LP decides, the
    # exact LP at the base C (finish's exact LP settles the certificate there)
    whole_lp = _whole_lp(env, st)
    if env.prove and not st.proof_tried and (st.escalations >= (0 if whole_lp else const.HULL_AFTER) or st.C >= env.C_max):
        st.proof_tried = True
        if _proof(env, st, s, whole_lp):
            return "stop"
    if st.C < env.C_max:
        st.C = min(st.C * 10.0, env.C_max)
        try:
            st.adopt(_solve_dual(st.K, st.b, st.C))
        except SolverFailed:
            _solver_failed(st)
            return "stop"
        st.escalations += 1
        return "again"
    # certificate mode at C_max: on a separable set the SVM optimum there is (near) the
    # hard-margin solution, which separates; eps alone stopped short of it, so tighten it 10x at
    # a time (at most TIGHTEN_STEPS times, for at most TIGHTEN_ITERS iterations) and go on; not
    # without escalation (C_max=None: the plain soft-margin problem at C)
    while st.early and env.C_max > env.C and st.tightened < const.TIGHTEN_STEPS and H <= st.xiW + st.eps:
        st.eps /= 10.0
        st.tightened += 1
        if st.it_tight is None:
            st.it_tight = st.it
    return None


def _whole_lp(env: _Env, st: Problem) -> bool:
    """Whether the gate is the whole exact LP at the base C (a single query on a corpus of at
    most ``lp_check_max_docs`` documents) rather than the proof after ``HULL_AFTER`` escalations."""
    return bool(env.lp_check_max_docs) and env.Df.shape[0] <= env.lp_check_max_docs and len(st.members) == 1


def _proof(env: _Env, st: Problem, s: np.ndarray, whole_lp: bool) -> bool:
    """The one in-loop proof attempt at scores ``s``: the whole exact LP (``whole_lp``, a single
    query) or ``_prove_inseparable``. True when it ends the problem: proven inseparable
    (``stopped="inseparable"``), or the proof or the feasible LP found a separating witness
    instead (``st.witness``, checked in float64 as ``_hull_witness`` checks the proof's; then the
    problem is converged at C: objective, slack and dual are that optimum's)."""
    if whole_lp:
        q = st.members[0]
        ok, w_lp = lp_feasible(env.Df, env.golds[q], excluded=env.opt_excl[q], return_witness=True)
        st.lp = ok  # ProbeResult.lp_feasible, whatever decides the query
        if ok is False:
            st.done, st.stopped = True, "inseparable"
            return True
        if ok and st.seek_witness and st.early:  # certificate mode: the LP's witness, checked exactly, decides the query
            ng = np.flatnonzero(_non_gold(env.Df.shape[0], env.golds[q], env.opt_excl[q]))
            st.witness = _hull_witness(env.Df, w_lp, env.golds[q], ng, env.rep, env.dmax)
            if st.witness is not None:
                st.done = True
                return True
        return False
    proof = _prove_inseparable(s, st.members, st.seek_witness, env.golds, env.opt_excl, env.Df, env.rep, env.dmax)
    st.hull_members, st.witness = proof.proven, proof.witness
    if proof.bound is not None:
        st.done, st.stopped, st.hull = True, "inseparable", proof.bound
        return True
    if st.witness is not None:
        st.done = True
        return True
    return False


def _add_plane(st: Problem, a: np.ndarray) -> None:
    """Add the cutting plane ``(a, st.b_new)`` (``a`` ``(dim,) float64``) to the working set,
    re-solve the dual QP, drop planes inactive in more than ``PRUNE_AFTER`` consecutive
    re-solves (Joachims 2006, Sec. 5) and adopt the new w."""
    m = len(st.b)
    K = np.empty((m + 1, m + 1))  # the working set grown by one plane, each array filled in place
    K[:m, :m] = st.K
    K[m, :m] = K[:m, m] = st.A.T @ a
    K[m, m] = a @ a
    A = np.empty((len(a), m + 1))
    A[:, :m], A[:, m] = st.A, a
    b = np.empty(m + 1)
    b[:m], b[m] = st.b, st.b_new
    alpha = _solve_dual(K, b, st.C)  # before the working set changes: a failure leaves it as it was
    st.A, st.b, st.K = A, b, K
    age = np.empty(m + 1, dtype=np.int64)
    age[:m], age[m] = st.age + 1, 1
    age[alpha > 1e-12 * st.C] = 0
    st.age = age
    keep = age <= const.PRUNE_AFTER
    if not keep.all():
        st.A, st.b, st.K = st.A[:, keep], st.b[keep], K[np.ix_(keep, keep)]
        alpha, st.age = alpha[keep], st.age[keep]
    st.adopt(alpha)
    st.it += 1


def _finish_batch(env: _Env, state: dict[int, Problem], ps: list[int]) -> dict[int, ProbeResult]:
    """Every problem's results at its final w: first those stopped at their certificate (scores
    known), then the others, their final scores 32 problems per product."""
    results: dict[int, ProbeResult] = {}
    for p in [p for p in ps if state[p].s32 is not None]:
        results.update(_finish_problem(env, p, state.pop(p)))
    rest = list(state)
    for c0 in range(0, len(rest), 32):
        chunk = rest[c0 : c0 + 32]
        S32 = tie_duplicates(_scores32(env.Df, np.stack([state[p].w for p in chunk]).astype(np.float32), env.DT), env.dups, env.tie)
        for row, p in enumerate(chunk):
            st = state.pop(p)
            st.s32 = S32[row]
            results.update(_finish_problem(env, p, st))
    return results


def _finish_problem(env: _Env, p: int, st: Problem) -> dict[int, ProbeResult]:
    """Problem ``p``'s results (``_finish``) at float64 scores near its gold documents. A graded
    query (``pairs="graded"``) is judged gold vs non-gold as any query, with w, slack and
    objective those of the graded problem the cutting plane solved."""
    real = env.problems[p]
    s = _exact_near_gold(env.Df, st.w, st.s32, [env.golds[q] for q in real], env.rmax, env.dups, env.tie)
    if st.members == real:
        return _finish(st, env, s)
    n = env.Df.shape[0]
    slack = sum(_hinge(s, env.golds[v], n_v, env.opt_excl[v]) * n_v for v, n_v in zip(st.members, st.pairs) if n_v) / max(st.P, 1)
    q = real[0]
    n_q = len(env.golds[q]) * (n - len(env.golds[q]) - len(env.opt_excl[q]))
    res = _finish(replace(st, members=real, pairs=[n_q], P=n_q, graded=True, seek_witness=False), env, s)[q]
    return {q: replace(res, slack=slack, objective=0.5 * float(np.linalg.norm(st.w)) ** 2 + st.C * slack)}
