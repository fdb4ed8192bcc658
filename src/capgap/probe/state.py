"""The probe's state: what every batch shares (``SolveContext``) and one problem's cutting-plane
state (``Problem``), which the solver (``batch``) advances and ``finish`` reads."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class SolveContext:
    """What every batch of problems shares: the index ``docs`` ``(n_docs, dim) float32``, the
    validated per-query rows (gold, grades, exclusions, a gold document's identical copies and
    the rows the optimisation leaves out; ``golds``/``opt_excl`` also hold the grade-level gold
    sets of ``pairs="graded"`` after the queries), the problems (lists of queries sharing one
    w) and the members each one's cutting plane optimises (``opt_members``), the
    duplicate groups and each row's representative, the index's column sum, max |entry|, max
    row norm and row norms, and the settings. ``DT``: the index once more in column-major order
    for the cutting plane's products (``setup.transposed``), ``tie``: the duplicate groups as
    one gather/scatter (``retrieval.tie_index``)."""

    docs: np.ndarray
    golds: list
    grades: list
    excls: list
    twins: list
    opt_excl: list
    problems: list
    opt_members: list
    dups: list
    rep: np.ndarray
    colsum: np.ndarray
    dmax: float
    rmax: float
    norms: np.ndarray
    affine: bool
    C: float
    C_max: float
    eps: float
    max_iter: int
    lp_check_max_docs: int
    depth: int
    solve: str
    # False: no inseparability proof, exact LP or order witness at all (a solve that only seeks a w: refine's)
    prove: bool = True
    window: int = 0  # problems iterating at once in a batch (solver.batch_window); 0: the whole batch
    # the index transposed, (dim, n_docs) float32 C-contiguous (setup.transposed); None: the index's rows only
    DT: np.ndarray | None = None
    # retrieval.tie_index(dups): (src, dst), every duplicate group tied in one step; None: from dups
    tie: tuple | None = None


@dataclass
class Problem:
    """One problem's cutting-plane state: a query, a text-tied group of queries sharing one w,
    or a graded query's grade levels (``pairs="graded"``), solved as one 1-slack ranking SVM.

    Fixed at the start: ``members`` (indices into ``SolveContext.golds``/``opt_excl``: the queries, or
    the grade levels, whose pairs the cutting plane sums), ``pairs`` (each member's number of
    gold/non-gold pairs) and ``P`` (their sum), ``crossing`` (members of a text-tied group whose
    gold sets cross, ``ties._crossing``: no shared w ranks both, so they are not escalated),
    ``early`` (``solve="certificate"``: stop at the first separating witness) and
    ``seek_witness`` (escalation on: a separating w from a proof replaces the SVM's).

    The working set, in float64: ``A`` ``(dim, m)`` the cutting planes' directions, ``b``
    ``(m,)`` their offsets, ``K`` ``(m, m)`` = A^T A, ``alpha`` ``(m,)`` the dual variables,
    ``age`` ``(m,) int64`` iterations each plane has been inactive (``PRUNE_AFTER``); ``w``
    ``(dim,)`` = A alpha and ``xiW`` the working set's slack at w (``adopt``). ``b_new`` /
    ``a_new``: the plane found this iteration, waiting to join (``a_new`` only for the first,
    closed-form plane; the others' directions come from one batch product).

    Progress: ``it`` (iterations), ``C`` (the current C, escalated 10x at a time), ``escalations``,
    ``eps`` (the stopping tolerance, tightened at C_max: ``tightened`` times, from iteration
    ``it_tight`` on, None until then), ``done``, ``stopped`` (``ProbeResult.stopped``),
    ``capped`` (stopped by ``max_iter`` before eps), ``s32`` (the final float32 scores ``(n_docs,)``
    when known in the loop, None until then).

    Proofs: ``proof_tried`` (the one in-loop proof attempt was made), ``hull`` (its
    ``hull_distance_bound``, None: no proof), ``hull_members`` (the members it proved),
    ``witness`` (``(w, scores)`` from the proof or the in-loop LP: a separating w, margin 1, or
    None), ``lp`` (the in-loop whole LP's verdict: False, the single member
    is proven inseparable; True, feasible, and ``witness`` is its witness where one was adopted;
    None: not run or undecided). ``graded``: the state as ``finish`` judges a graded query
    (gold vs non-gold, its w kept).

    The line search (``batch._line_search``; Franc & Sonnenburg, "Optimized Cutting Plane
    Algorithm for Large-Scale Risk Minimization", JMLR 2009, Sec. 3): ``w_best`` ``(dim,)`` the best
    point so far (the lowest SVM objective found), ``s_best`` ``(n_docs,) float32`` its scores (a
    convex combination of exact float32 products, duplicates tied; ``err_best`` bounds their error),
    ``hinge_best`` its pair-averaged hinge and ``coef_best`` ``(n_docs,) float32`` its most violated
    constraint's coefficients (the hinge's slope along a line); None until the first line
    search. ``w`` stays the working set's minimiser (``adopt``) while the problem iterates; a
    problem ends with ``w = w_best`` unless its certificate came at ``w``."""

    members: list
    pairs: list
    P: int
    A: np.ndarray
    b: np.ndarray
    K: np.ndarray
    w: np.ndarray
    alpha: np.ndarray
    age: np.ndarray
    C: float
    eps: float
    crossing: set
    early: bool
    seek_witness: bool
    xiW: float = 0.0
    it: int = 0
    done: bool = False
    escalations: int = 0
    stopped: str = "optimum"
    hull: float | None = None
    proof_tried: bool = False
    tightened: int = 0
    it_tight: int | None = None
    capped: bool = False
    b_new: float = 0.0
    a_new: np.ndarray | None = None
    s32: np.ndarray | None = None
    witness: tuple | None = None
    hull_members: list = field(default_factory=list)
    lp: bool | None = None
    graded: bool = False
    w_best: np.ndarray | None = None
    s_best: np.ndarray | None = None
    hinge_best: float = 0.0
    coef_best: np.ndarray | None = None
    err_best: float = 0.0

    def adopt(self, alpha: np.ndarray) -> None:
        """Adopt dual variables: w = A alpha and the working set's slack xi_W at that w."""
        self.alpha = alpha
        self.w = self.A @ alpha
        self.xiW = max(0.0, float(np.max(self.b - self.A.T @ self.w)))
