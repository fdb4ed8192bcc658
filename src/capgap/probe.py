"""The capacity probe: a per-query ranking SVM solved by Joachims' cutting-plane method.

For one query with gold set G and non-gold set N over the frozen index D ``(n_docs, dim)``,
the probe optimises a query vector w directly (arXiv 2610.02749, "The empirical half"):

    min_w  1/2 |w|^2 + C * xi
    s.t.   for every c in {0,1}^P:  (1/|P|) sum_{(i,j) in P} c_ij w.(d_i - d_j)
                                        >= (1/|P|) sum c_ij - xi,        xi >= 0,

with P = G x N the gold/non-gold pairs: the 1-slack structural form of the ranking SVM
(Joachims, "Training Linear SVMs in Linear Time", KDD 2006, Sec. 4 and Alg. 2). At the optimum
xi = (1/|P|) sum_pairs max(0, 1 - w.(d_i - d_j)), so the objective is

    1/2 |w|^2 + (C/|P|) * sum_pairs hinge,

i.e. **C is per pair-averaged loss, exactly dlib's ``svm_rank_trainer`` scaling** (dlib
multiplies C by 1/number-of-pairs). Equation 12 of Joachims' 2002 ranking-SVM paper uses
C' = C/|P| per pair.

Cutting plane. The most violated constraint at w has c_ij = 1 iff s_j > s_i - 1 with
s = D.w. It is found without the |G|x|N| pairs: sort the gold scores, and for each document
j count n_j = #{i in G : s_i < s_j + 1} by binary search (``searchsorted``); the count
m_i = #{j in N : s_j > s_i - 1} of each gold document follows from a histogram of the n_j.
The constraint is then one weighted sum over documents, a = D^T coef / |P| with coef_i = m_i
(gold) and coef_j = -n_j (non-gold), b = sum m_i / |P|. Per iteration and batch of B queries
the cost is one (n_docs x dim).(dim x B) product for the scores, one (dim x n_docs).(n_docs x B)
product for the new constraints, and O(n_docs log |G|) counting per query.

The restricted QP over the working set W is solved in its dual,
    max_alpha  b^T alpha - 1/2 alpha^T K alpha,  alpha >= 0,  sum alpha <= C,  K = A^T A,
    w = A alpha,
with ``quadprog`` (Goldfarb-Idnani dual active set: exact for small dense strictly convex QPs;
|W| is the iteration count, so each solve is tens of microseconds; a 1e-10 relative ridge
keeps K positive definite when cutting planes are linearly dependent).

Stopping (Joachims' criterion): the most violated constraint is violated by at most eps more
than the working set's slack, H(w) = b - w.a <= xi_W + eps. Then primal - dual <= C * eps.
``eps`` is in the units of the pair-averaged hinge loss (default 1e-3).

Certificate. A query is *certified* when a witness w ranks every gold document strictly above
every non-gold one (checked in float64: then the hard-margin problem
{w, t : w.d_i >= t + 1 (i in G), w.d_j <= t (j in N)} is feasible after scaling w).
Zero slack implies it. ``lp_feasible`` decides the hard-margin problem exactly as an LP with
|G| + |N| constraints (scipy's HiGHS); the probe runs it for queries the cutting plane does not
certify: whole on a corpus of at most ``lp_check_max_docs`` documents, by constraint generation
on a larger one (the gold documents against the non-gold documents the witness ranks highest,
growing by the documents a subset's LP witness misranks, until that witness separates every
document or a subset is infeasible), with a gold document's identical non-gold copies set
aside; it runs after escalation and only a separating witness replaces w, so the LP never
makes a bound looser. On larger corpora, a query still unseparated after ``HULL_AFTER``
escalations of C gets one inseparability proof: the gold and non-gold
convex hulls intersect (``hull_distance_bound``: convex combinations of the gold documents and
of the non-gold documents that score highest at w, found by non-negative least squares, whose
difference r is computed exactly; any w then has min gold score - max non-gold score <=
w.r <= |w| |r|). With |r| below the certificate's threshold no w can certify the query and C
stays where it is. Recall@k of the probe uses pessimistic ties (a
non-gold document with the same score ranks first), so it stays a lower bound on capacity.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from .config import section_defaults, without

if TYPE_CHECKING:
    from .trec import Run

log = logging.getLogger(__name__)
PRUNE_AFTER = 10  # iterations a cutting plane may stay inactive (alpha = 0) before it is dropped
GEMV_ROWS = 10  # fewer active queries than this: their products are matrix-vector products (_scores32)
MIN_BATCHES = 8  # batch_size=None: at least this many batches where the problems allow (capgap.probe._probe)
BLOCK = 512  # rows of the index per temporary copy (NaN check, float64 casts)
HULL_TOL = 1e-9  # hull_distance_bound below this x max|d| proves that no w certifies (the certificate's threshold)
HULL_ROUNDS = 3  # column-generation rounds of an inseparability proof (_prove_inseparable)
HULL_STEP = 512  # candidates added per round, at least (and at least 2 (dim + 2))
HULL_AFTER = 2  # escalations of C before the one in-loop inseparability proof (C = 100 x the base C by default)
TIGHTEN_STEPS = 3  # certificate mode at C_max, unseparated: eps is tightened 10x at a time, at most this often
TIGHTEN_ITERS = 300  # ... and for at most this many iterations
LP_ROUNDS = 30  # constraint-generation rounds of the hard-margin LP beyond lp_check_max_docs (_lp_generated)
LP_ROUNDS_BEFORE_WHOLE = 4  # ... on corpora small enough for the whole LP, which then follows
LP_WHOLE_FACTOR = 10  # _lp_generated falls back to the whole LP on corpora up to this x lp_check_max_docs


@dataclass
class ProbeResult:
    """One query's probe outcome.

    ``w``: ``(dim,) float64`` the optimised query vector; ``objective``: primal value at w;
    ``dual``: the dual bound (objective - dual = gap >= 0); ``slack``: pair-averaged hinge loss
    at w (xi); ``iterations``; ``converged`` (False: iteration cap hit); ``margin``: min gold
    score - max non-gold score at w (float64; > 0 means certified); ``certified``;
    ``lp_feasible`` (None when the LP was not run); ``gold_ranks``: pessimistic 1-based rank of
    each gold document (``capgap.retrieval.rank_gold``); ``duplicate_conflict``: a gold
    document has an identical non-gold copy (no w can separate them); ``cause``: why an
    uncertified query is uncertified: ``"duplicate"`` (such a twin, and no proof that the gold
    set is inseparable even with the copies set aside), ``"tied"`` (a query with
    identical text needs a crossing ranking, see ``probe(tie_groups=...)``) or ``"geometry"``
    (the index itself), None when certified; ``tied``: how many queries share this w (1: none);
    ``by_construction``: why certification was guaranteed before any optimisation (n_docs <=
    dim + 1 with affinely independent documents, or a single gold document among distinct
    documents of equal norm), else None; ``top_rows``/``top_scores``: ``(depth,) int64 /
    float64`` the first documents of w's ranking (with ``probe(depth=...)``). ``margin`` is in
    unnormalised score units (it scales with |w|); ``inf`` when no document is non-gold.
    ``stopped``: why the cutting plane stopped, i.e. what ``objective``/``slack``/``dual``
    describe: ``"optimum"`` (Joachims' eps criterion: the SVM optimum within C*eps),
    ``"certificate"`` (``solve="certificate"``: the witness separated the gold set; objective and
    slack are the witness's), ``"inseparable"`` (the optimum at C, where ``hull_distance_bound``
    or the in-loop exact LP proved that no w separates the gold set, so C was not escalated
    further; ``extra["hull"]`` holds the proof's bound, None for the LP) or ``"max_iter"``. ``outcome``: how the query was decided (issue: every
    query decided): ``"certified"``; ``"duplicate"`` (certified up to identical copies: w ranks
    every gold document above every non-gold one except the gold documents' identical copies,
    which tie with them under any w, so recall@k is the best any w reaches for every k >= |gold|
    + |copies| and, with the tie rule, a lower bound below it); ``"geometry"`` (no w separates
    the gold set, even with the copies set aside: proven by ``hull_distance_bound`` or by the
    exact LP); ``"tied"`` (a text-tied group with crossing gold sets: no shared w can rank both);
    ``"undecided"`` (neither a witness nor a proof was found, e.g. the LP off or past its time
    limit). ``decided_by``: ``"certificate"`` (the witness itself), ``"lp"``, ``"hull"``,
    ``"construction"`` or None (undecided).
    """

    w: np.ndarray
    objective: float
    dual: float
    slack: float
    iterations: int
    converged: bool
    margin: float
    certified: bool
    gold_ranks: np.ndarray
    lp_feasible: bool | None = None
    duplicate_conflict: bool = False
    extra: dict = field(default_factory=dict)
    cause: str | None = None
    tied: int = 1
    by_construction: str | None = None
    top_rows: np.ndarray | None = None
    top_scores: np.ndarray | None = None
    stopped: str = "optimum"
    outcome: str = "undecided"
    decided_by: str | None = None

    @property
    def gap(self) -> float:
        return self.objective - self.dual

    def recall_at(self, k: int) -> float:
        """|top-k ∩ gold| / |gold| with pessimistic ties."""
        return float(np.mean(self.gold_ranks <= k))


def _most_violated(s: np.ndarray, gold: np.ndarray, n_pairs: int, out: np.ndarray | None = None,
                   excl: np.ndarray | None = None) -> tuple[np.ndarray, float, float]:
    """The most violated 1-slack constraint at scores ``s = D.w`` ``(n_docs,)``.

    Returns ``(coef (n_docs,) float32, b, H)``: the constraint is ``w.a >= b - xi`` with
    ``a = D^T coef``, and ``H = b - w.a`` is its violation at the current w (= the
    pair-averaged hinge loss). Counting as in the module docstring: for |G| <= 16 one
    comparison pass per gold document, else a binary search per document. ``out``: an
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
        total = len(gold) * n_ng + len(gold) * (float(s.sum()) - float(sg.sum()) - float(s[excl].sum())) - n_ng * float(sg.sum())
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


def _solve_dual(K: np.ndarray, b: np.ndarray, C: float) -> np.ndarray:
    """max b.alpha - 1/2 alpha K alpha, alpha >= 0, sum alpha <= C (quadprog)."""
    import quadprog

    n = len(b)
    if n not in _QP_CONSTRAINTS:  # alpha >= 0 and -sum alpha >= -C, as quadprog's C^T x >= b
        _QP_CONSTRAINTS[n] = (np.hstack([np.eye(n), -np.ones((n, 1))]), np.eye(n))
    Cmat, eye = _QP_CONSTRAINTS[n]
    bvec = np.zeros(n + 1)
    bvec[-1] = -C
    scale = max(1.0, float(K.diagonal().sum()) / n)
    try:
        alpha = quadprog.solve_qp(K + (1e-10 * scale) * eye, b.astype(np.float64), Cmat, bvec, 0)[0]
    except ValueError:  # numerically inconsistent: retry with a stronger ridge
        alpha = quadprog.solve_qp(K + (1e-6 * scale) * eye, b.astype(np.float64), Cmat, bvec, 0)[0]
    return np.maximum(alpha, 0.0)


_QP_CONSTRAINTS: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # working-set size -> (_solve_dual's constraint matrix, identity)


def _set_alpha(st: dict, alpha: np.ndarray) -> None:
    """Adopt dual variables: w = A alpha and the working set's slack xi_W at that w."""
    st["alpha"] = alpha
    st["w"] = st["A"] @ alpha
    st["xiW"] = max(0.0, float(np.max(st["b"] - st["A"].T @ st["w"])))


def lp_feasible(D: np.ndarray, gold: Sequence[int], time_limit: float = 60.0, excluded: Sequence[int] = (),
                return_witness: bool = False):
    """Exact hard-margin check: is {w, t : w.d_i >= t + 1 (i in G), w.d_j <= t (j in N)} feasible?

    An LP with |G| + |N| constraints and dim + 1 free variables, solved by scipy's HiGHS.
    ``D``: ``(n_docs, dim)`` float. Returns True/False, or None if HiGHS hit ``time_limit``
    (seconds) or failed numerically. ``excluded``: rows left out of the problem (neither gold
    nor non-gold). With ``return_witness``: ``(feasible, w)``, ``w`` the LP's ``(dim,)
    float64`` witness when feasible (else None): a query vector that ranks every gold document
    above every non-gold one by a margin of 1.
    """
    from scipy.optimize import linprog

    D = np.asarray(D, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.int64)
    if len(excluded):
        keep = np.ones(len(D), dtype=bool)
        keep[np.asarray(excluded, dtype=np.int64)] = False
        new = np.cumsum(keep) - 1
        D, gold = D[keep], new[gold]
    mask = np.zeros(len(D), dtype=bool)
    mask[gold] = True
    if mask.all():
        return (True, np.zeros(D.shape[1])) if return_witness else True
    # variables x = (w, t); constraints A_ub x <= b_ub
    A_gold = np.hstack([-D[mask], np.ones((mask.sum(), 1))])  # -w.d_i + t <= -1
    A_ng = np.hstack([D[~mask], -np.ones(((~mask).sum(), 1))])  # w.d_j - t <= 0
    A = np.vstack([A_gold, A_ng])
    b = np.concatenate([-np.ones(mask.sum()), np.zeros((~mask).sum())])
    res = linprog(np.zeros(D.shape[1] + 1), A_ub=A, b_ub=b, bounds=[(None, None)] * (D.shape[1] + 1), method="highs", options={"time_limit": time_limit})
    ok = True if res.status == 0 else False if res.status == 2 else None
    if return_witness:
        return ok, (np.asarray(res.x[:-1], dtype=np.float64) if ok else None)
    return ok


_D = section_defaults("probe")  # the schema holds every default (capgap.config)
SOLVES = ("certificate", "optimum")
PAIRS = ("gold", "graded")  # ProbeConfig.pairs: gold vs non-gold pairs, or every two grade levels
OUTCOMES = ("certified", "duplicate", "geometry", "tied", "undecided")  # ProbeResult.outcome


@dataclass(frozen=True)
class ProbeConfig:
    """The probe's settings (config section ``probe`` minus ``enabled``), with the schema's
    defaults: the DAG, ``capgap diagnose``, the hardness task and ``probe()`` all use these.
    See ``probe`` for what each one means."""

    C: float = _D["C"]
    C_max: float | None = _D["C_max"]
    eps: float = _D["eps"]
    max_iter: int = _D["max_iter"]
    lp_check_max_docs: int = _D["lp_check_max_docs"]
    batch_size: int | None = _D["batch_size"]
    solve: str = _D["solve"]
    pairs: str = _D["pairs"]

    def __post_init__(self):
        if self.solve not in SOLVES:
            raise ValueError(f"probe.solve must be one of {SOLVES}, got {self.solve!r}")
        if self.pairs not in PAIRS:
            raise ValueError(f"probe.pairs must be one of {PAIRS}, got {self.pairs!r}")

    @classmethod
    def from_config(cls, cfg: Mapping | None = None) -> "ProbeConfig":
        """From a config section (``enabled`` ignored; missing keys take the defaults).
        Raises ``ValueError`` naming unknown keys."""
        cfg = without(cfg or {}, "enabled")
        unknown = set(cfg) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"probe: unknown keys {sorted(unknown)}")
        return cls(**cfg)

    def kwargs(self) -> dict:
        """The settings as keyword arguments of ``probe()``."""
        return asdict(self)


def probe(
    D: np.ndarray,
    gold_sets: Sequence[Sequence[int]],
    C: float = _D["C"],
    eps: float = _D["eps"],
    max_iter: int = _D["max_iter"],
    batch_size: int | None = _D["batch_size"],
    lp_check_max_docs: int = _D["lp_check_max_docs"],
    C_max: float | None = _D["C_max"],
    threads: int | None = None,
    progress: bool = False,
    excluded_sets: Sequence[Sequence[int]] | None = None,
    grades: Sequence[Sequence[float]] | None = None,
    tie_groups: Sequence | None = None,
    depth: int = 0,
    duplicates: Sequence[Sequence[int]] = (),
    solve: str = _D["solve"],
    pairs: str = _D["pairs"],
) -> list[ProbeResult]:
    """Run the capacity probe for every query.

    ``D``: ``(n_docs, dim) float32`` frozen index (rows = documents; may be a memory map).
    ``gold_sets[q]``: row indices of query q's gold documents (non-empty). ``C``: see module
    docstring (dlib scaling). ``eps``: stopping tolerance on the pair-averaged hinge. ``max_iter``:
    iteration cap per query (a warning names how many queries hit it). ``batch_size``: queries
    per matrix product (default ``max(16, dim // 4)``: keeps the two ``(n_docs, batch)`` float32
    work matrices under half the index size; fewer where that leaves under ``MIN_BATCHES``
    batches, so that a small query set still spreads over the worker processes). ``lp_check_max_docs``: run the exact LP for queries
    the cutting plane leaves uncertified, whole when ``n_docs`` is at most this, by constraint
    generation otherwise (0: never); a feasible LP's witness becomes the query's w. ``C_max``: when a query converges without strict
    separation, C is raised 10x at a time up to ``C_max`` and the cutting plane continues on the
    same working set, approaching the hard-margin problem (None: no escalation, the plain
    soft-margin problem with ``C``); text-tied queries with crossing gold sets are not
    escalated, and a gold document's identical non-gold copies are set aside from the
    optimisation (they tie with it under any w). ``excluded_sets[q]``: rows that are neither gold nor non-gold for query
    q (BRIGHT's ``excluded_ids``; BEIR's self-retrieval rule): they enter no pair, no rank and
    no certificate. ``grades[q]``: relevance grades aligned with ``gold_sets[q]`` (default 1;
    they order tied gold documents, lowest grade first). ``tie_groups[q]``: a label; queries with
    the same label (identical query text) share one w, a ranking SVM over the union of their
    pair sets (the 1-slack constraint sums every member's pairs), since any text encoder maps
    them to one vector. ``depth``: also keep each query's first ``depth`` documents
    (``ProbeResult.top_rows``/``top_scores``) for a run file. ``duplicates``: groups of rows to
    treat as identical documents besides the bit-identical rows found here (identical texts
    whose embeddings differ in the last bits): they score identically and are twins.
    ``solve``: ``"certificate"`` stops a query once its witness separates the gold set with a
    float32 margin above the float32 error bound (so the float64 check certifies it too):
    recall, ranks and the certificate are then what the optimum would give (every gold
    document ranks above every other), objective and slack are the witness's; graded gold sets
    too (the recall capacity is decided there; the nDCG of that w is a lower bound on the nDCG
    capacity). A text-tied group with crossing gold sets runs to the optimum.
    ``"optimum"``: every query runs to Joachims' eps criterion. ``pairs``: ``"gold"`` (every
    gold document against every non-gold one: the paper's recall capacity) or ``"graded"``:
    for a single query with more than one grade, the pairs of every two grade levels (non-gold
    = grade 0; Joachims, "Optimizing Search Engines using Clickthrough Data", KDD 2002, Sec. 4),
    so w seeks the whole graded order and its nDCG is the nDCG capacity that order supports;
    the 1-slack constraint sums one gold-vs-lower-levels constraint per level, weighted by its
    pairs (as a text-tied group's members), ``solve="certificate"`` stops a query when every
    level ranks above every lower one, and w is the SVM's (no LP or proof witness replaces it:
    those decide gold vs non-gold only). ``slack``/``objective``/``dual`` are then the graded
    problem's; certificate, ranks and recall still judge gold against non-gold.

    Escalation, then one proof: an unseparated problem raises C 10x at a time; after
    ``HULL_AFTER`` escalations it gets one inseparability proof (``hull_distance_bound``; module
    docstring; on a corpus of at most ``lp_check_max_docs`` documents a single query gets the
    whole exact LP at the base C instead). When it holds, no w and hence no C certifies the
    query, so C stays (``stopped="inseparable"``). At ``C_max`` (certificate mode, escalation on)
    eps is tightened 10x at a time (``TIGHTEN_STEPS``, ``TIGHTEN_ITERS``), since eps alone can stop short
    of the hard-margin solution of a separable set. What is still open then goes to the exact LP
    (``lp_check_max_docs`` > 0, single queries) or, with the LP off, to one more proof for the
    verdict; ``ProbeResult.outcome`` / ``decided_by`` record how each query was decided.

    Ranks follow the evaluation tie rule of ``capgap.retrieval`` on float64 scores at the final
    w: identical rows score identically and a non-gold document tied with a gold one ranks first.

    Returns one ``ProbeResult`` per query, in order. Raises ``ValueError`` for NaN/Inf in ``D``,
    an empty gold set, an index out of range, or a document both gold and excluded.
    """
    D = np.asarray(D)
    if D.ndim != 2:
        raise ValueError(f"index must be 2-d, got shape {D.shape}")
    for b0 in range(0, D.shape[0], BLOCK):  # blockwise: no full-size temporary
        if not np.isfinite(D[b0 : b0 + BLOCK]).all():
            raise ValueError("index contains NaN or Inf")
    from threadpoolctl import threadpool_limits

    if solve not in SOLVES:
        raise ValueError(f"solve must be one of {SOLVES}, got {solve!r}")
    if pairs not in PAIRS:
        raise ValueError(f"pairs must be one of {PAIRS}, got {pairs!r}")
    import os

    workers = int(threads) if threads else (os.cpu_count() or 1)
    with threadpool_limits(int(threads) if threads else None):
        return _probe(D, gold_sets, C, eps, max_iter, batch_size, lp_check_max_docs, C if C_max is None else max(C, C_max), progress,
                      excluded_sets, grades, tie_groups, int(depth), duplicates, solve, workers, pairs)


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


def _probe(D, gold_sets, C, eps, max_iter, batch_size, lp_check_max_docs, C_max, progress, excluded_sets=None,
           grades=None, tie_groups=None, depth=0, duplicates=(), solve=_D["solve"], workers=1, pairs="gold") -> list[ProbeResult]:
    from .retrieval import duplicate_groups, merge_groups

    n, dim = D.shape
    golds, grs, excls = _queries(n, gold_sets, excluded_sets, grades)
    Df = np.ascontiguousarray(D, dtype=np.float32)
    dmax = max([1.0] + [float(np.abs(Df[b0 : b0 + BLOCK]).max()) for b0 in range(0, n, BLOCK)])
    norms = np.concatenate([np.sqrt((Df[b0 : b0 + BLOCK].astype(np.float64) ** 2).sum(1)) for b0 in range(0, n, BLOCK)])
    rmax = float(norms.max()) if n else 0.0
    dups = merge_groups(n, duplicate_groups(Df), [np.asarray(g, dtype=np.int64) for g in duplicates])
    dup_of = {int(i): g for g in dups for i in g}
    colsum = sum(Df[b0 : b0 + BLOCK].sum(0, dtype=np.float64) for b0 in range(0, n, BLOCK)) if n else np.zeros(dim)
    rep = np.arange(n)  # each row's duplicate-group representative (its scores are the group's)
    for g in dups:
        rep[g] = g[0]
    # a gold document's identical non-gold twins always tie with it: they cannot be separated by
    # any w, add only a constant to the hinge, and are left out of the optimisation (not the ranks)
    twins, opt_excl = [], []
    for g, e in zip(golds, excls):
        t = sorted({int(j) for i in g.tolist() if i in dup_of for j in dup_of[i]} - set(g.tolist()) - set(e.tolist()))
        twins.append(np.asarray(t, dtype=np.int64))
        opt_excl.append(np.union1d(e, t).astype(np.int64))
    labels = list(range(len(golds))) if tie_groups is None else list(tie_groups)
    if len(labels) != len(golds):
        raise ValueError(f"{len(labels)} tie-group labels for {len(golds)} queries")
    problems: dict = {}
    for q, lab in enumerate(labels):
        problems.setdefault(lab, []).append(q)
    problems = list(problems.values())
    affine = bool(n <= dim + 1 and np.linalg.matrix_rank(np.hstack([Df.astype(np.float64), np.ones((n, 1))])) == n)
    # the members each problem's cutting plane optimises: its queries, or (pairs="graded", a
    # single query with several grades) one gold set per grade level h, the documents of grade
    # h against every lower level (non-gold included), higher levels set aside
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
    # batches: max(16, dim // 4) problems, fewer where that leaves under MIN_BATCHES batches (a small
    # query set still spreads over the worker processes); never a function of the thread count,
    # so the numbers are not either
    B = batch_size or min(max(16, dim // 4), max(1, -(-len(problems) // MIN_BATCHES)))
    env = _Env(Df=Df, golds=golds_opt, grades=grs, excls=excls, twins=twins, opt_excl=excl_opt, problems=problems,
               opt_members=opt_members, dups=dups,
               rep=rep, colsum=colsum, dmax=dmax, rmax=rmax, norms=norms, affine=affine, C=float(C), C_max=float(C_max),
               eps=float(eps), max_iter=int(max_iter), lp_check_max_docs=int(lp_check_max_docs), depth=int(depth), solve=solve)
    batches = [list(range(b0, min(b0 + B, len(problems)))) for b0 in range(0, len(problems), B)]
    results: list[ProbeResult | None] = [None] * len(golds)
    capped = 0
    for out, n_capped in _map_batches(env, batches, workers, progress):
        capped += n_capped
        for q, res in out.items():
            results[q] = res
    if capped:
        log.warning("probe: %d of %d queries hit the iteration cap (max_iter=%d) before eps=%g", capped, len(golds), max_iter, eps)
    return results  # type: ignore[return-value]


@dataclass(frozen=True)
class _Env:
    """What every batch of problems shares: the index ``Df`` ``(n_docs, dim) float32``, the
    validated per-query rows (gold, grades, exclusions, a gold document's identical copies and
    the rows the optimisation leaves out; ``golds``/``opt_excl`` also hold the grade-level gold
    sets of ``pairs="graded"`` after the queries), the problems (lists of queries sharing one
    w) and the members each one's cutting plane optimises (``opt_members``), the
    duplicate groups and each row's representative, the index's column sum, max |entry|, max
    row norm and row norms, and the settings."""

    Df: np.ndarray
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


def _solve_batch(env: _Env, ps: list[int]) -> tuple[dict[int, ProbeResult], int]:
    """Problems ``ps`` (indices into ``env.problems``) solved together, one matrix product per
    iteration for all of them: ``({query: ProbeResult}, queries that hit max_iter)``. A
    problem's result does not depend on which others share its batch."""
    from .retrieval import tie_duplicates

    Df, golds, excls, opt_excl, problems, dups, rep = env.Df, env.golds, env.excls, env.opt_excl, env.problems, env.dups, env.rep
    colsum, dmax, rmax, C, C_max, eps, max_iter, solve = env.colsum, env.dmax, env.rmax, env.C, env.C_max, env.eps, env.max_iter, env.solve
    n, dim = Df.shape
    lp_decides = bool(env.lp_check_max_docs) and n <= env.lp_check_max_docs  # _finish's exact LP settles the certificate
    results: dict[int, ProbeResult] = {}
    capped = 0
    state = {}
    for p in ps:
        members = env.opt_members[p]  # the queries, or a graded query's grade levels (pairs="graded")
        pairs = [len(golds[q]) * (n - len(golds[q]) - len(opt_excl[q])) for q in members]
        state[p] = {"A": np.zeros((dim, 0)), "b": np.zeros(0), "K": np.zeros((0, 0)), "w": np.zeros(dim), "alpha": np.zeros(0),
                    "xiW": 0.0, "it": 0, "done": sum(pairs) == 0, "members": members, "pairs": pairs, "P": sum(pairs),
                    "C": float(C), "escalations": 0, "age": np.zeros(0, dtype=np.int64),
                    "crossing": _crossing(members, golds, excls) if len(members) > 1 and members == problems[p] else set(),
                    "stopped": "optimum", "hull": None, "proof_tried": False, "eps": float(eps), "tightened": 0}
        st = state[p]
        st["early"] = solve == "certificate" and not st["crossing"]
        st["seek_witness"] = C_max > C  # escalation on: the capacity is sought, and a separating w replaces the SVM's
    active = [p for p in ps if not state[p]["done"]]
    while active:
        first = [p for p in active if state[p]["it"] == 0]
        for p in first:  # w = 0: the first cutting plane in closed form, no product
            state[p]["b_new"], state[p]["a_new"] = _first_plane(state[p], golds, opt_excl, Df, colsum)
        active = [p for p in active if state[p]["it"] > 0]
        W = np.stack([state[p]["w"] for p in active]).astype(np.float32) if active else np.zeros((0, dim), np.float32)
        S = tie_duplicates(_scores32(Df, W), dups)  # (B', n): one product, rows contiguous
        Cm = np.empty_like(S)  # coefficient rows of the new cutting planes, filled in order
        add, still = [], list(first)
        for row, p in enumerate(active):
            st = state[p]
            if st["early"] and st["it"] > 0 and _certified32(S[row], st, golds, opt_excl, rmax, dmax):
                st["done"], st["stopped"] = True, "certificate"  # recall, ranks, certificate final
                st["s32"] = S[row].copy()  # the final scores: w does not change any more
                continue
            b_new, H = _group_violated(S[row], st, golds, opt_excl, out=Cm[len(add)])
            if st["it"] > 0 and H <= st["xiW"] + st["eps"] and H > 0 and not st["crossing"]:
                # converged for this C with some pair violated: unless the gold set is
                # separated, either prove that no w separates it (then C stays: the
                # certificate cannot change) or continue towards the hard margin with a 10x
                # larger C (the working set stays valid: cutting planes do not depend on C)
                if not all(_separated(S[row], golds[q], opt_excl[q]) for q in st["members"]):
                    # the gate: one proof attempt after HULL_AFTER escalations (most separable
                    # queries are certified by then, so few proofs are spent on them); on a
                    # corpus the whole LP decides (lp_decides), the exact LP at the base C
                    whole_lp = lp_decides and len(st["members"]) == 1  # a corpus the whole LP decides: at the base C
                    if not st["proof_tried"] and (st["escalations"] >= (0 if whole_lp else HULL_AFTER) or st["C"] >= C_max):
                        st["proof_tried"] = True
                        if whole_lp:
                            q = st["members"][0]
                            if lp_feasible(Df, golds[q], excluded=opt_excl[q]) is False:
                                st["done"], st["stopped"], st["lp"] = True, "inseparable", False
                                continue
                        else:
                            bound = _prove_inseparable(S[row], st, golds, opt_excl, Df, rep, dmax)
                            if bound is not None:
                                st["done"], st["stopped"], st["hull"] = True, "inseparable", bound
                                continue
                            if st.get("witness") is not None:  # the proof found a separating w instead
                                st["done"] = True  # converged at C: objective, slack and dual are that optimum's
                                continue
                    if st["C"] < C_max:
                        st["C"] = min(st["C"] * 10.0, C_max)
                        _set_alpha(st, _solve_dual(st["K"], st["b"], st["C"]))
                        st["escalations"] += 1
                        still.append(p)
                        continue
                    # certificate mode at C_max: on a separable set the SVM optimum there is
                    # (near) the hard-margin solution, which separates; eps alone stopped
                    # short of it, so tighten it 10x at a time (at most TIGHTEN_STEPS times,
                    # for at most TIGHTEN_ITERS iterations) and go on; not without
                    # escalation (C_max=None: the plain soft-margin problem at C)
                    while st["early"] and C_max > C and st["tightened"] < TIGHTEN_STEPS and H <= st["xiW"] + st["eps"]:
                        st["eps"] /= 10.0
                        st["tightened"] += 1
                        st.setdefault("it_tight", st["it"])
            tight_over = "it_tight" in st and st["it"] - st["it_tight"] >= TIGHTEN_ITERS
            if (st["it"] > 0 and H <= st["xiW"] + st["eps"]) or st["it"] >= max_iter or tight_over:
                st["done"] = True
                if st["it"] >= max_iter and H > st["xiW"] + eps:
                    st["capped"] = True
                    st["stopped"] = "max_iter"
                    capped += len(problems[p])
                continue
            add.append(p)
            st["b_new"] = b_new
            still.append(p)
        del S
        if not still:
            break
        # new cutting planes, (dim, B''); written D^T.C^T: OpenBLAS runs C.D ~10x slower here
        A_new = _planes32(Df, Cm[: len(add)]) if add else None
        del Cm
        for col, p in enumerate(add + first):
            st = state[p]
            a = A_new[:, col].astype(np.float64) if col < len(add) else st.pop("a_new")
            cross = st["A"].T @ a
            K = np.empty((len(st["b"]) + 1,) * 2)
            K[:-1, :-1] = st["K"]
            K[-1, :-1] = K[:-1, -1] = cross
            K[-1, -1] = a @ a
            st["A"] = np.hstack([st["A"], a[:, None]])
            st["b"] = np.append(st["b"], st["b_new"])
            st["K"] = K
            alpha = _solve_dual(K, st["b"], st["C"])
            # drop cutting planes inactive for PRUNE_AFTER iterations (Joachims 2006, Sec. 5)
            st["age"] = np.where(alpha > 1e-12 * st["C"], 0, np.append(st["age"], 0) + 1)
            keep = st["age"] <= PRUNE_AFTER
            if not keep.all():
                st["A"], st["b"], st["K"] = st["A"][:, keep], st["b"][keep], K[np.ix_(keep, keep)]
                alpha, st["age"] = alpha[keep], st["age"][keep]
            _set_alpha(st, alpha)
            st["it"] += 1
        active = [p for p in still if not state[p]["done"]]
    ctx = {"Df": Df, "dups": dups, "golds": golds, "grades": env.grades, "excls": excls, "twins": env.twins, "opt_excl": opt_excl,
           "dmax": dmax, "norms": env.norms, "affine": env.affine, "lp_check_max_docs": env.lp_check_max_docs, "depth": env.depth,
           "rep": rep}
    def finish(p):
        st = state.pop(p)
        real = problems[p]
        s = _exact_near_gold(Df, st["w"], st["s32"], [golds[q] for q in real], rmax, dups)
        if st["members"] == real:
            results.update(_finish(st, ctx, s))
            return
        # a graded query (pairs="graded"): judged gold vs non-gold as any query, with w, slack
        # and objective those of the graded problem the cutting plane solved
        slack = sum(_hinge(s, golds[v], n_v, opt_excl[v]) * n_v for v, n_v in zip(st["members"], st["pairs"]) if n_v) / max(st["P"], 1)
        q = real[0]
        n_q = len(golds[q]) * (n - len(golds[q]) - len(opt_excl[q]))
        res = _finish({**st, "members": real, "pairs": [n_q], "P": n_q, "graded": True, "seek_witness": False}, ctx, s)[q]
        results[q] = replace(res, slack=slack, objective=0.5 * float(np.linalg.norm(st["w"])) ** 2 + st["C"] * slack)

    for p in [p for p in ps if "s32" in state[p]]:  # stopped at their certificate: scores known
        finish(p)
    rest = list(state)
    for c0 in range(0, len(rest), 32):  # final scores of the others, 32 problems per product
        chunk = rest[c0 : c0 + 32]
        S32 = tie_duplicates(_scores32(Df, np.stack([state[p]["w"] for p in chunk]).astype(np.float32)), dups)
        for row, p in enumerate(chunk):
            state[p]["s32"] = S32[row]
            finish(p)
    return results, capped


_WORKER_ENV: _Env | None = None  # a worker process's copy of the batches' environment (_map_batches)


def _scores32(Df: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``W @ Df.T``: ``(m, dim) float32`` query vectors against the index ``(n_docs, dim) float32``,
    ``(m, n_docs) float32``. Below ``GEMV_ROWS`` rows, one matrix-vector product per row:
    OpenBLAS's matrix product packs the whole index first (~2 ms on a 3,633 x 384 index, as
    much as 10 matrix-vector products), which the long tail of a batch, a few queries still
    iterating, paid at every iteration (benchmarks/README.md)."""
    if len(W) >= GEMV_ROWS:
        return W @ Df.T
    out = np.empty((len(W), Df.shape[0]), dtype=np.float32)
    for i, w in enumerate(W):
        np.dot(Df, w, out=out[i])
    return out


def _planes32(Df: np.ndarray, Cm: np.ndarray) -> np.ndarray:
    """``Df.T @ Cm.T``: the cutting planes' directions ``(dim, m) float32`` from their coefficient
    rows ``Cm`` ``(m, n_docs) float32`` (written D^T.C^T: OpenBLAS runs C.D ~10x slower here);
    below ``GEMV_ROWS`` rows one matrix-vector product per row, as in ``_scores32``."""
    if len(Cm) >= GEMV_ROWS:
        return Df.T @ Cm.T
    out = np.empty((Df.shape[1], len(Cm)), dtype=np.float32)
    for i, c in enumerate(Cm):
        out[:, i] = c @ Df
    return out


def _init_worker(env: _Env, memmap: tuple | None) -> None:
    from threadpoolctl import threadpool_limits

    global _WORKER_ENV
    if memmap is not None:  # the index reopened from its file, not copied through a pipe
        filename, offset, shape = memmap
        env = replace(env, Df=np.memmap(filename, dtype=np.float32, mode="r", offset=offset, shape=shape))
    threadpool_limits(1)  # one BLAS thread per worker: the workers are the parallelism
    _WORKER_ENV = env


def _worker_batch(ps: list[int]) -> tuple[dict[int, ProbeResult], int]:
    return _solve_batch(_WORKER_ENV, ps)  # type: ignore[arg-type]


def _map_batches(env: _Env, batches: list[list[int]], workers: int, progress: bool):
    """Yield ``_solve_batch`` of each batch, in order: in this process, or with ``workers`` > 1
    in that many worker processes (forked: the environment is inherited, nothing re-imports a
    script's top level), each with one BLAS thread. Batches are the same either way, so the
    results are too."""
    it = None
    if progress:
        from tqdm import tqdm

        it = tqdm(total=len(batches), desc="probe", unit="batch")
    if workers > 1 and len(batches) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        Df = env.Df
        base = Df.base if isinstance(Df.base, np.memmap) else Df
        memmap = None
        if isinstance(base, np.memmap) and base.dtype == np.float32 and base.flags.c_contiguous and base.shape == Df.shape:
            memmap = (base.filename, base.offset, base.shape)
        with ProcessPoolExecutor(min(workers, len(batches)), mp_context=mp.get_context("fork"), initializer=_init_worker,
                                 initargs=(env, memmap)) as pool:
            for out in pool.map(_worker_batch, batches):
                if it is not None:
                    it.update()
                yield out
    else:
        from threadpoolctl import threadpool_limits

        for ps in batches:
            with threadpool_limits(1):  # as in a worker: the numbers do not depend on the thread count
                out = _solve_batch(env, ps)
            if it is not None:
                it.update()
            yield out
    if it is not None:
        it.close()


def _group_violated(s: np.ndarray, st: dict, golds, opt_excl, out: np.ndarray) -> tuple[float, float]:
    """The most violated 1-slack constraint over the union of a tie group's pair sets: each
    member's constraint weighted by its share of the pairs. Writes the coefficients into
    ``out``; returns ``(b, H)``."""
    members, pairs, P = st["members"], st["pairs"], st["P"]
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


def _first_plane(st: dict, golds, opt_excl, Df: np.ndarray, colsum: np.ndarray) -> tuple[float, np.ndarray]:
    """The most violated constraint at w = 0, ``(b, a)`` with ``a`` ``(dim,) float64``: every pair
    is violated by 1, so each member's constraint is b_q = 1 and a_q = mean gold document - mean
    non-gold document (its coefficients are n_ng / P on gold rows and -|G| / P on non-gold ones,
    ``_most_violated``), weighted by the member's share of the group's pairs. The non-gold sum
    is ``colsum`` ``(dim,) float64`` (the sum of all rows) minus the gold and excluded rows."""
    a = np.zeros(Df.shape[1])
    b = 0.0
    for q, n_pairs in zip(st["members"], st["pairs"]):
        if n_pairs:
            g, e = golds[q], opt_excl[q]
            sg = Df[g].sum(0, dtype=np.float64)
            se = Df[e].sum(0, dtype=np.float64) if len(e) else 0.0
            n_ng = Df.shape[0] - len(g) - len(e)
            a += (n_pairs / st["P"]) * (sg / len(g) - (colsum - sg - se) / n_ng)
            b += n_pairs / st["P"]
    return b, a


def _certified32(s: np.ndarray, st: dict, golds, opt_excl, rmax: float, dmax: float) -> bool:
    """Whether float32 scores ``s`` ``(n_docs,)`` at the problem's w separate every member's gold
    set by more than the float32 error bound (``_exact_near_gold``'s delta) plus the float64
    certificate's threshold, so the final float64 check certifies it too."""
    dim = len(st["w"])
    wn = max(float(np.linalg.norm(st["w"])), 1e-30)
    delta = 2.0 * dim * 2.0**-24 * wn * max(rmax, 1e-30) + 1e-9 * max(1.0, wn) * dmax
    return all(_separated(s, golds[q], opt_excl[q], by=delta) for q in st["members"])


def _prove_inseparable(s: np.ndarray, st: dict, golds, opt_excl, Df: np.ndarray, rep: np.ndarray,
                       dmax: float) -> float | None:
    """The escalation gate: an inseparability proof for every member of a problem whose gold set
    the scores ``s`` ``(n_docs,)`` (at the problem's w, duplicates tied) do not separate.

    Per unseparated member, column generation on the nearest-point problem of the two hulls:
    start from the ``max(2 (dim + 2), HULL_STEP)`` highest-scoring non-gold documents; ``hull_distance_bound``
    of the gold documents against them gives convex weights and r = p - q; if |r| <=
    ``HULL_TOL * dmax`` the member is proven (every w has min gold score - max non-gold score
    <= |w| |r|, below the certificate's threshold in ``_finish``, so no C certifies it). Else r
    points from the gold hull towards the subset's non-gold hull: the non-gold documents ranked
    at or above the lowest gold one along r join the candidates (highest first), topped up with
    the next documents by score at w to that many new ones per round, and the next round
    starts. At most ``HULL_ROUNDS`` rounds; a failed proof escalates. Documents enter as their
    duplicate group's first row (``rep``), whose score every member of the group gets. Returns
    the largest member bound when every unseparated member is proven, else None."""
    dim = Df.shape[1]
    step = max(2 * (dim + 2), HULL_STEP)
    worst, proven = 0.0, []
    st["hull_members"] = proven
    single = len(st["members"]) == 1 and st.get("seek_witness", True)
    for q in st["members"]:
        gold = golds[q]
        if _separated(s, gold, opt_excl[q]):
            continue  # separated (or nothing to separate from)
        ng = np.flatnonzero(_non_gold(len(s), gold, opt_excl[q]))
        n_rows = len(np.unique(rep[ng]))
        G = Df[np.unique(rep[gold])]
        by_s = ng[np.argsort(-s[ng], kind="stable")]  # non-gold documents, highest score at w first
        cand, used = by_s[:step], step
        bound = float("inf")
        for _ in range(HULL_ROUNDS):
            rows = np.unique(rep[cand])
            bound, r = hull_distance_bound(G, Df[rows], return_direction=True)
            if bound <= HULL_TOL * dmax or r is None:
                break
            t = (Df @ r.astype(np.float32))[rep]  # along r, duplicates tied
            if single and float(t[gold].min()) > float(t[ng].max()):
                # r, the nearest-point direction of the subset's hulls, separates every document:
                # the query is separable and r is its witness (checked exactly, scaled to margin 1)
                st["witness"] = _hull_witness(Df, r, gold, ng, rep, dmax)
                if st["witness"] is not None:
                    break
            if len(rows) >= n_rows:
                break
            new = _misranked(t, gold, ng, rep, rows, step)
            fill = by_s[used : used + step - len(new)]  # the rest of the round: the next by score at w
            used += len(fill)
            cand = np.concatenate([cand, new, fill])
        if bound > HULL_TOL * dmax:
            return None
        worst = max(worst, bound)
        proven.append(q)
    return worst if proven else None


def _hull_witness(Df: np.ndarray, r: np.ndarray, gold: np.ndarray, ng: np.ndarray, rep: np.ndarray,
                  dmax: float) -> tuple[np.ndarray, np.ndarray] | None:
    """A separating witness from a nearest-point direction ``r`` ``(dim,) float64``: the exact
    (float64) scores along r, duplicates tied through ``rep``; when every gold document scores
    above every non-gold one in ``ng`` (row indices) by a margin m that ``_finish``'s certificate
    threshold accepts after scaling, returns ``(r / m, scores / m)`` (margin 1: a feasible point
    of the hard-margin problem), else None."""
    s = _scores64(Df, r, ())[rep]
    m = float(s[gold].min() - s[ng].max()) if len(ng) else float("inf")
    if not np.isfinite(m) or m <= 0:
        return None
    wn = float(np.linalg.norm(r)) / m
    if 1.0 <= 1e-9 * max(1.0, wn) * dmax:  # _finish's threshold: not certified after scaling
        return None
    return r / m, s / m


def hull_distance_bound(P: np.ndarray, N: np.ndarray, return_direction: bool = False):
    """An upper bound on the distance between the convex hulls of the rows of ``P`` ``(p, dim)``
    and ``N`` ``(m, dim)`` (float32 or float64): |r| for r = sum_i lam_i P_i - sum_j mu_j N_j with
    lam, mu convex weights, found by non-negative least squares (scipy's ``nnls`` on
    [P^T, -N^T; 10 1^T, 0; 0, 10 1^T] x = [0; 10; 10], then lam, mu normalised) and r computed
    in float64. Whatever the solver's accuracy, the bound is exact for the weights it returns:
    for every w, min_i w.P_i - max_j w.N_j <= w.r <= |w| |r| (a convex combination lies between
    the minimum and the maximum). 0 (up to rounding, ~1e-15) when the hulls intersect, i.e.
    when no hyperplane separates P from N (Bennett & Bredensteiner, "Duality and Geometry in SVM
    Classifiers", ICML 2000: the hard-margin SVM is the nearest-point problem of the two hulls).
    Returns ``inf`` when the solver fails. With ``return_direction``: ``(bound, r)``, r the
    ``(dim,) float64`` difference (None when the solver fails)."""
    from scipy.optimize import nnls

    P = np.asarray(P, dtype=np.float64)
    N = np.asarray(N, dtype=np.float64)
    p, dim = P.shape
    A = np.zeros((dim + 2, p + len(N)))
    A[:dim, :p], A[:dim, p:] = P.T, -N.T
    A[dim, :p] = A[dim + 1, p:] = 10.0
    b = np.zeros(dim + 2)
    b[dim:] = 10.0
    fail = (float("inf"), None) if return_direction else float("inf")
    try:
        x = nnls(A, b)[0]
    except RuntimeError:  # iteration limit
        return fail
    lam, mu = x[:p], x[p:]
    if lam.sum() <= 0 or mu.sum() <= 0:
        return fail
    r = P.T @ (lam / lam.sum()) - N.T @ (mu / mu.sum())
    return (float(np.linalg.norm(r)), r) if return_direction else float(np.linalg.norm(r))


def _non_gold(n: int, gold: np.ndarray, excl: np.ndarray) -> np.ndarray:
    """``(n,) bool``: the documents that are neither gold nor excluded."""
    mask = np.ones(n, dtype=bool)
    mask[gold] = False
    mask[excl] = False
    return mask


def _separated(s: np.ndarray, gold: np.ndarray, excl: np.ndarray, by: float = 0.0) -> bool:
    """Every gold score above every other non-excluded score by more than ``by``."""
    mask = _non_gold(len(s), gold, excl)
    return not mask.any() or float(s[gold].min()) - float(s[mask].max()) > by


def _scores64(Df: np.ndarray, W: np.ndarray, dups) -> np.ndarray:
    """Exact (float64) scores of the index against ``W``: ``(dim,)`` -> ``(n_docs,)``, or
    ``(m, dim)`` -> ``(m, n_docs)``; the index is cast blockwise, duplicates are tied."""
    from .retrieval import tie_duplicates

    W = np.asarray(W, dtype=np.float64)
    out = np.empty(W.shape[:-1] + (Df.shape[0],))
    for b0 in range(0, Df.shape[0], 8 * BLOCK):
        out[..., b0 : b0 + 8 * BLOCK] = W @ Df[b0 : b0 + 8 * BLOCK].astype(np.float64).T
    return tie_duplicates(out, dups)


def _group_score(st: dict, ctx: dict, s: np.ndarray) -> float:
    """Sum over a group's members of the mean reciprocal (pessimistic) rank of their gold."""
    from .retrieval import rank_gold

    total = 0.0
    for q in st["members"]:
        valid = np.ones(len(s), dtype=bool)
        valid[ctx["excls"][q]] = False
        total += float(np.mean(1.0 / rank_gold(s, ctx["golds"][q], ctx["grades"][q], valid)))
    return total


def _break_ties(st: dict, ctx: dict, w: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A text-tied group with crossing gold sets: the SVM optimum is symmetric between the
    members, so their gold documents tie and, ranked pessimistically, none counts. Any vector is
    an achievable query, so try w nudged towards each member's gold centroid (by 1e-6, 1e-3 and
    1e-1 of |w|) and keep the one whose members' gold documents rank best (sum of mean
    reciprocal ranks); w itself when nothing is better."""
    best = (_group_score(st, ctx, s), w, s)
    scale = max(float(np.linalg.norm(w)), 1e-12)
    for q in st["members"]:
        u = ctx["Df"][ctx["golds"][q]].astype(np.float64).mean(0)
        un = float(np.linalg.norm(u))
        if un == 0:
            continue
        for tau in (1e-6, 1e-3, 1e-1):
            w2 = w + tau * scale * u / un
            s2 = _scores64(ctx["Df"], w2, ctx["dups"])
            score = _group_score(st, ctx, s2)
            if score > best[0] + 1e-12:
                best = (score, w2, s2)
    return best[1], best[2]


def _exact_near_gold(Df: np.ndarray, w: np.ndarray, s32: np.ndarray, golds, rmax: float, dups) -> np.ndarray:
    """Scores at w ``(n_docs,) float64``: exact (float64) for the gold documents and every
    document within the float32 error bound of the lowest gold score, ``s32`` elsewhere. So the
    margin's sign, every tie with a gold document and every gold rank are exact; documents
    further below only keep float32 precision. Duplicates are tied."""
    from .retrieval import tie_duplicates

    s = s32.astype(np.float64)
    # |s32 - s64| <= dim * 2^-24 * |w| * max|d| (float32 dot + rounding of w), doubled for safety
    delta = 2.0 * Df.shape[1] * 2.0**-24 * max(float(np.linalg.norm(w)), 1e-30) * max(rmax, 1e-30)
    low = min(float(s32[g].min()) for g in golds)
    cand = np.flatnonzero(s32 >= low - delta)
    s[cand] = Df[cand].astype(np.float64) @ np.asarray(w, dtype=np.float64)
    return tie_duplicates(s, dups)


def _misranked(t: np.ndarray, gold: np.ndarray, ng: np.ndarray, rep: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """The column-generation step of ``_prove_inseparable`` and ``_lp_generated``: the non-gold
    documents ``ng`` (row indices) that scores ``t`` ``(n_docs,)`` rank at or above the lowest gold
    one and whose duplicate-group representative (``rep``) is not among ``rows`` yet, the ``k``
    highest first."""
    new = ng[(t[ng] >= t[gold].min()) & ~np.isin(rep[ng], rows)]
    return new[np.argsort(-t[new], kind="stable")[:k]]


def _lp_generated(Df: np.ndarray, rep: np.ndarray, gold: np.ndarray, ng: np.ndarray, s: np.ndarray, dups,
                  whole_max_docs: int, time_limit: float = 60.0):
    """The hard-margin LP (``lp_feasible``) by constraint generation, for a corpus too large to
    pass whole: the gold documents against the ``2 (dim + 2)`` non-gold documents scoring
    highest at the final w (``s`` ``(n_docs,) float64``); a feasible LP's witness is scored on
    every document, and the non-gold documents it ranks at or above the lowest gold one join
    (at most ``2 (dim + 2)`` per round, highest first) until the witness separates the whole
    gold set (``True``, exact) or a subset's LP is infeasible (``False``, exact: a subset of the
    constraints already admits no w). A corpus of at most ``whole_max_docs`` documents gets the
    whole LP after ``LP_ROUNDS_BEFORE_WHOLE`` undecided rounds; a larger one up to ``LP_ROUNDS``
    rounds. Documents enter as their duplicate group's
    first row (``rep``), whose score the group gets. ``ng``: ``(n_docs,) bool`` the non-gold
    documents. Returns ``(lp, w, scores)``: ``lp`` None when undecided within ``time_limit``
    seconds (in all); ``w`` ``(dim,) float64`` and ``scores`` (duplicates tied) when True."""
    import time

    step = 2 * (Df.shape[1] + 2)
    ngr = np.flatnonzero(ng)
    cand = ngr[np.argsort(-s[ngr], kind="stable")[:step]]
    G = np.unique(rep[gold])
    t_end = time.perf_counter() + time_limit

    def witness(rows):
        ok, w = lp_feasible(Df[np.concatenate([G, rows])], np.arange(len(G)), time_limit=max(t_end - time.perf_counter(), 1e-3),
                            return_witness=True)
        return ok, w, (_scores64(Df, w, dups) if ok else None)

    for _ in range(LP_ROUNDS_BEFORE_WHOLE if len(Df) <= whole_max_docs else LP_ROUNDS):
        if time.perf_counter() >= t_end:
            return None, None, None
        rows = np.unique(rep[cand])
        ok, w, sw = witness(rows)
        if not ok:
            return ok, None, None
        new = _misranked(sw, gold, ngr, rep, rows, step)
        if not len(new):
            return (True, w, sw) if sw[gold].min() > sw[ngr].max() else (None, None, None)
        cand = np.concatenate([cand, new])
    if len(Df) <= whole_max_docs and time.perf_counter() < t_end:
        ok, w, sw = witness(np.unique(rep[ngr]))
        if ok and sw[gold].min() > sw[ngr].max():
            return True, w, sw
        return (False, None, None) if ok is False else (None, None, None)
    return None, None, None


def _finish(st: dict, ctx: dict, s: np.ndarray) -> dict[int, ProbeResult]:
    """Results of one problem (a query, or a text-tied group sharing w) at its final w, whose
    scores (``_exact_near_gold``; duplicates tied) are ``s`` ``(n_docs,) float64``.

    Scores, margin, certificate and ranks are computed in float64 with duplicates tied; ranks
    and the top rows follow ``capgap.retrieval``'s pessimistic tie rule. The LP runs for an
    uncertified single query (unless its escalation stopped at an inseparability proof): whole
    when the corpus has at most ``lp_check_max_docs`` documents, else by constraint generation
    (``_lp_generated``); a feasible LP's witness replaces w.
    """
    from .retrieval import rank_gold, rank_top

    Df, w = ctx["Df"], st["w"]
    n = Df.shape[0]
    if st["crossing"]:
        w, s = _break_ties(st, ctx, w, s)
    out = {}
    members = st["members"]
    P = max(st["P"], 1)
    slacks = {}
    for q, n_pairs in zip(members, st["pairs"]):
        slacks[q] = _hinge(s, ctx["golds"][q], n_pairs, ctx["opt_excl"][q]) if n_pairs else 0.0
    group_slack = sum(slacks[q] * n_pairs for q, n_pairs in zip(members, st["pairs"])) / P
    C = st["C"]
    single = len(members) == 1
    for q in members:
        gold, grades, excl, twins = ctx["golds"][q], ctx["grades"][q], ctx["excls"][q], ctx["twins"][q]
        wq, sq = w, s
        valid = np.ones(n, dtype=bool)
        valid[excl] = False
        ng = valid.copy()
        ng[gold] = False
        rest = ng.copy()  # the non-gold documents less the gold documents' identical copies
        rest[twins] = False

        def margin_of(scores, mask):
            return float(scores[gold].min() - scores[mask].max()) if mask.any() else float("inf")

        wn = float(np.linalg.norm(wq))
        thresh = 1e-9 * max(1.0, wn) * ctx["dmax"]
        margin = margin_of(sq, ng)
        certified = margin > thresh
        separated = certified or (len(twins) > 0 and margin_of(sq, rest) > thresh)  # up to identical copies
        lp, decided_by, hull = (False if len(twins) else None), None, st["hull"]
        if not separated and single and st.get("witness") is not None:  # the proof's separating w (_hull_witness)
            wq, sq = st["witness"]
            margin = margin_of(sq, ng)
            certified = margin > 1e-9 * max(1.0, float(np.linalg.norm(wq))) * ctx["dmax"]
            separated, decided_by = True, "hull"
        if decided_by is not None:
            pass
        elif separated:
            decided_by = "certificate"
        elif q in st["crossing"]:
            decided_by = "construction"
        elif hull is not None and q in st.get("hull_members", ()):  # the in-loop proof of this member
            decided_by = "hull"
        elif st.get("lp") is False:  # the in-loop exact LP (a single query)
            decided_by, lp = "lp", False
        elif single and ctx["lp_check_max_docs"] and not st.get("graded"):  # (a graded query keeps its w)
            # the exact LP on what is still open: the gold set against ``rest`` (a gold
            # document's identical copies set aside: they tie with it whatever w is)
            excl_r = ctx["opt_excl"][q]
            if n <= ctx["lp_check_max_docs"]:  # the whole LP; beyond, by constraint generation
                ok, w_lp = lp_feasible(Df, gold, excluded=excl_r, return_witness=True)
                s_lp = _scores64(Df, w_lp, ctx["dups"]) if ok else None
            else:
                ok, w_lp, s_lp = _lp_generated(Df, ctx["rep"], gold, rest, sq, ctx["dups"], LP_WHOLE_FACTOR * ctx["lp_check_max_docs"])
            if ok and margin_of(s_lp, rest) > 0:  # a witness separates what w did not: strictly better, adopted
                wq, sq = w_lp, s_lp
                margin = margin_of(sq, ng)
                certified = margin > 0
                separated = True
                decided_by = "lp"
            elif ok is False:
                decided_by = "lp"
            if not len(twins):
                lp = ok
        # still open (the LP off, a text-tied group, the LP undecided within its time limit, or a
        # witness HiGHS's tolerance let through): a proof, for the verdict only
        if decided_by is None and not separated:
            fallback = {"members": [q], "seek_witness": st["seek_witness"]}
            hull = _prove_inseparable(sq, fallback, ctx["golds"], ctx["opt_excl"], Df, ctx["rep"], ctx["dmax"])
            decided_by = "hull" if hull is not None else None
            if fallback.get("witness") is not None:  # no proof, but a separating w
                wq, sq = fallback["witness"]
                margin = margin_of(sq, ng)
                certified = margin > 1e-9 * max(1.0, float(np.linalg.norm(wq))) * ctx["dmax"]
                separated, decided_by = True, "hull"
        ranks = rank_gold(sq, gold, grades, valid)
        top_rows, top_scores = rank_top(sq, ctx["depth"], gold, grades, valid) if ctx["depth"] else (None, None)
        if certified:
            cause, outcome = None, "certified"
        elif separated:
            cause = outcome = "duplicate"
        elif q in st["crossing"]:
            cause = outcome = "tied"
        elif decided_by in ("hull", "lp"):
            cause = outcome = "geometry"
        else:
            cause, outcome = ("duplicate" if len(twins) else "geometry"), "undecided"
        same_problem = all(np.array_equal(ctx["golds"][m], gold) and np.array_equal(ctx["excls"][m], excl) for m in members)
        by_construction = None
        if same_problem and not len(twins):
            if ctx["affine"]:
                by_construction = "n_docs <= dim + 1, affinely independent: every gold set is separable"
            elif len(gold) == 1 and ng.any() and np.all(np.abs(ctx["norms"][ng] / max(ctx["norms"][gold[0]], 1e-30) - 1) <= 1e-5):
                by_construction = "single gold among distinct documents of equal norm: w = the gold vector separates it"
        dual = float(st["b"] @ st["alpha"] - 0.5 * float(np.linalg.norm(w)) ** 2) if len(st["alpha"]) else 0.0
        out[q] = ProbeResult(wq, 0.5 * float(np.linalg.norm(w)) ** 2 + C * group_slack, dual, slacks[q], st["it"],
                             not st.get("capped", False), margin, bool(certified), ranks, lp, bool(len(twins)),
                             {"C_final": C, "escalations": st["escalations"], "hull": hull}, cause, len(members), by_construction,
                             top_rows, top_scores, st["stopped"], outcome, decided_by)
    return out


def per_query_records(results: Sequence[ProbeResult], query_ids: Sequence[str], gold: Sequence[np.ndarray], doc_ids: Sequence[str],
                  split_of: Mapping[str, str], ks: Sequence[int]) -> list[dict]:
    """One JSON-ready record per query (the probe's ``per_query.jsonl``): id, split, gold-set
    size, recall@k for each k in ``ks`` (pessimistic ties), certificate and its cause, slack
    (pair-averaged hinge), margin (unnormalised score units; ``inf`` -> ``null`` in strict
    JSON: no non-gold document), objective, duality gap, iterations, convergence, |w|, the final
    C and escalations, ``outcome`` and ``decided_by`` (``ProbeResult``), the inseparability proof's ``hull_distance_bound`` (null: no proof was
    needed or found), and each gold document's rank by id. ``gold[i]``: ``(g,) int64`` rows of
    query i's gold documents (into ``doc_ids``), aligned with ``results[i].gold_ranks``."""
    out = []
    for q, g, r in zip(query_ids, gold, results):
        out.append({
            "query_id": q, "split": split_of.get(q, ""), "n_gold": len(g),
            **{f"recall@{k}": r.recall_at(k) for k in ks},
            "certified": r.certified, "cause": r.cause, "outcome": r.outcome, "decided_by": r.decided_by,
            "by_construction": r.by_construction, "tied": r.tied,
            "lp_feasible": r.lp_feasible, "duplicate_conflict": r.duplicate_conflict,
            "slack": r.slack, "margin": r.margin, "objective": r.objective, "gap": r.gap,
            "iterations": r.iterations, "converged": r.converged, "stopped": r.stopped, "w_norm": float(np.linalg.norm(r.w)),
            "C_final": r.extra.get("C_final"), "escalations": r.extra.get("escalations"),
            "hull_distance_bound": r.extra.get("hull"),
            "gold_ranks": {doc_ids[d]: int(x) for d, x in zip(g, r.gold_ranks)},
        })
    return out


def summary_rows(results: Sequence[ProbeResult], query_ids: Sequence[str], split_ids: Mapping[str, Sequence[str]],
                 base: Mapping) -> list[dict]:
    """The probe's own results.csv rows (``k`` empty) per split of ``split_ids`` (name -> query
    ids; empty splits skipped): ``certified`` (fraction), ``uncertified_duplicate`` /
    ``uncertified_tied`` / ``uncertified_geometry`` (fractions by cause), ``queries_<outcome>``
    for each of ``OUTCOMES`` (counts: certified, certified up to identical copies, proven not
    separable, crossing text-tied, undecided; ``ProbeResult.outcome``), ``tied_queries`` (count
    of queries sharing their text), ``certified_by_construction`` (fraction), ``slack_median``
    (pair-averaged hinge at each query's final w: the witness's for queries stopped at their
    certificate), ``iterations_median`` / ``iterations_p90`` / ``iterations_max`` (cutting-plane
    iterations per query), ``stopped_at_certificate`` (fraction stopped by ``solve="certificate"``),
    ``proven_inseparable`` (fraction whose escalation stopped at an inseparability proof),
    ``not_converged`` (fraction that hit ``max_iter``). ``base``: the
    dataset / encoder / method columns."""
    by_q = dict(zip(query_ids, results))
    rows = []
    for split, ids in split_ids.items():
        if not ids:
            continue
        b = {**base, "split": split, "k": ""}
        res = [by_q[q] for q in ids]
        rows.append({**b, "metric": "certified", "value": float(np.mean([r.certified for r in res]))})
        for cause in ("duplicate", "tied", "geometry"):
            rows.append({**b, "metric": f"uncertified_{cause}", "value": float(np.mean([r.cause == cause for r in res]))})
        for outcome in OUTCOMES:  # every query decided: how many ended each way (counts)
            rows.append({**b, "metric": f"queries_{outcome}", "value": int(sum(r.outcome == outcome for r in res))})
        rows.append({**b, "metric": "tied_queries", "value": int(sum(r.tied > 1 for r in res))})
        rows.append({**b, "metric": "certified_by_construction", "value": float(np.mean([r.by_construction is not None for r in res]))})
        rows.append({**b, "metric": "slack_median", "value": float(np.median([r.slack for r in res]))})
        its = [r.iterations for r in res]
        rows.append({**b, "metric": "iterations_median", "value": float(np.median(its))})
        rows.append({**b, "metric": "iterations_p90", "value": float(np.percentile(its, 90))})
        rows.append({**b, "metric": "iterations_max", "value": int(max(its))})
        rows.append({**b, "metric": "stopped_at_certificate", "value": float(np.mean([r.stopped == "certificate" for r in res]))})
        rows.append({**b, "metric": "proven_inseparable", "value": float(np.mean([r.stopped == "inseparable" for r in res]))})
        rows.append({**b, "metric": "not_converged", "value": float(np.mean([not r.converged for r in res]))})
    return rows


def evaluate(rs, index, cfg: ProbeConfig, encoder_name: str, ks: Sequence[int], ndcg_k: int,
             threads: int | None = 1) -> tuple[list[dict], list[dict], Run]:
    """The capacity probe on every query of a dataset's frozen index, as the DAG reports it.

    ``rs``: a ``capgap.data.RetrievalSet``; ``index``: its ``capgap.index.FrozenIndex``
    (``embeddings`` ``(n_docs, dim) float32``, rows in corpus order). Queries with identical
    text (``retrieval.text_key``) share one w; documents with identical text are twins
    (``retrieval.document_groups``). Returns ``(rows, records, run)``: recall@k / nDCG per split
    from the same ranks as every method, each split followed by ``summary_rows``; one
    ``per_query_records`` record per query; and the run of every query's w (tag
    ``{encoder_name}-probe``, depth ``eval_depth(ks, ndcg_k)``). A set with near-miss twins
    (``rs.twins``) is solved to the optimum whatever ``cfg.solve`` says: its twin margins
    (``twin_margins``) are the optimum's.
    """
    import time

    from .data import SPLITS
    from .evaluate import Judged, eval_depth, interleave_rows, rows_from_ranks, split_members
    from .retrieval import document_groups, text_key
    from .trec import Run

    qids = list(rs.queries.ids)
    j = Judged.of(rs, qids, index.doc_ids)
    if rs.twins and cfg.solve != "optimum":
        # the twin margin (twin_margins) is a property of the SVM optimum, not of any witness
        log.info("probe: %s has near-miss twins: every query runs to the optimum (solve=optimum)", rs.name)
        cfg = replace(cfg, solve="optimum")
    t = time.perf_counter()
    results = probe(index.embeddings, j.gold, threads=threads, progress=True, excluded_sets=j.excluded, grades=j.grades,
                    tie_groups=[text_key(x) for x in rs.queries.texts], depth=eval_depth(ks, ndcg_k),
                    duplicates=document_groups(rs.corpus), **cfg.kwargs())
    log.info("probe: %d queries in %.1f s", len(qids), time.perf_counter() - t)
    splits = split_members(rs)
    split_of = {q: s for s in SPLITS for q in splits[s]}
    records = per_query_records(results, qids, j.gold, index.doc_ids, split_of, ks)
    run = Run(qids, np.stack([r.top_rows for r in results]), np.stack([r.top_scores for r in results]), index.doc_ids,
              f"{encoder_name}-probe")
    rows = rows_from_ranks(rs, j, [r.gold_ranks for r in results], ks, ndcg_k, encoder=encoder_name, method="probe")
    base = {"dataset": rs.name, "encoder": encoder_name, "method": "probe"}
    extra = summary_rows(results, qids, splits, base)
    if rs.twins:
        extra = interleave_rows(extra, twin_margins(rs, index, results, qids, records, splits, base))
    return interleave_rows(rows, extra), records, run


def twin_margins(rs, index, results: Sequence[ProbeResult], query_ids: Sequence[str], records: list[dict],
                 splits: Mapping[str, Sequence[str]], base: Mapping) -> list[dict]:
    """The probe's margin between each gold document and its near-miss twins
    (``capgap.nearmiss``): with the query's witness scaled to unit norm, ``w/|w| . (gold -
    twin)`` in float64, i.e. how far the twin lies behind the gold document along the best
    direction the probe found (the geometric margin of that pair; > 0: separated). Adds
    ``twin_margin: {twin id: margin}`` to each of ``records`` (aligned with ``query_ids``) and
    returns ``capgap.nearmiss.twin_rows`` of the margins (``twin_gap:<type>`` is the median
    margin, ``twin_win`` the fraction separated)."""
    from .nearmiss import TwinPairs, twin_rows

    pairs = TwinPairs.of(rs, query_ids, index.doc_ids)
    D = index.embeddings
    W = np.stack([np.asarray(r.w, dtype=np.float64) for r in results])
    W /= np.maximum(np.linalg.norm(W, axis=1, keepdims=True), 1e-300)
    Wp = W[pairs.query]  # (n_pairs, dim): each pair's unit witness
    g = np.einsum("ij,ij->i", np.asarray(D[pairs.gold], dtype=np.float64), Wp)
    t = np.einsum("ij,ij->i", np.asarray(D[pairs.twin], dtype=np.float64), Wp)
    for qi, tr, m in zip(pairs.query, pairs.twin, g - t):
        records[qi].setdefault("twin_margin", {})[index.doc_ids[tr]] = float(m)
    return twin_rows(pairs, g, t, query_ids, splits, base)
