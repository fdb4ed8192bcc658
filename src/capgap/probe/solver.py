"""The probe's entry point: ``probe()`` validates its input, builds the shared environment
(``setup``), splits the problems into batches and runs them (``workers``, ``batch``)."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from . import constants as const
from .config import _D, PAIRS, SOLVES, SolveSettings
from .refine import refine_duplicates
from .result import ProbeResult
from .screen import screened_probe, screens
from .setup import _environment, _queries
from .state import SolveContext
from .workers import _map_batches

log = logging.getLogger("capgap.probe")  # the package's one logger


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
    ``gold_sets[q]``: row indices of query q's gold documents (non-empty). ``C``: the SVM's C on
    the pair-averaged hinge (dlib's scaling; docs/probe.md). ``eps``: stopping tolerance on the
    pair-averaged hinge. ``max_iter``: iteration cap per query (a warning names how many queries
    hit it). ``batch_size``: queries iterating at once, the rows of each matrix product (default
    ``batch_window``: the two ``(n_docs, window)`` float32 work matrices under half the index
    size or under ``WORK_BYTES``; fewer where that leaves under ``MIN_BATCHES`` batches, so that
    a small query set still spreads over the worker processes); a batch holds up to
    ``STREAM_WINDOWS`` such windows and refills a finished query's place (``problem_batches``).
    ``lp_check_max_docs``: run the exact LP for queries the cutting plane leaves uncertified,
    whole when ``n_docs`` is at most this, by constraint generation otherwise (0: never); a
    feasible LP's witness becomes the query's w. ``C_max``: when a query converges without
    strict separation, C is raised 10x at a time up to ``C_max`` and the cutting plane continues
    on the same working set, approaching the hard-margin problem (None: no escalation, the plain
    soft-margin problem with ``C``); text-tied queries with crossing gold sets are not
    escalated, and a gold document's identical non-gold copies are set aside from the
    optimisation (they tie with it under any w). ``excluded_sets[q]``: rows that are neither
    gold nor non-gold for query q (BRIGHT's ``excluded_ids``; BEIR's self-retrieval rule): they
    enter no pair, no rank and no certificate. ``grades[q]``: relevance grades aligned with
    ``gold_sets[q]`` (default 1; they order tied gold documents, lowest grade first).
    ``tie_groups[q]``: a label; queries with the same label (identical query text) share one w,
    a ranking SVM over the union of their pair sets (the 1-slack constraint sums every member's
    pairs), since any text encoder maps them to one vector. ``depth``: also keep each query's
    first ``depth`` documents (``ProbeResult.top_rows``/``top_scores``) for a run file.
    ``duplicates``: groups of rows to treat as identical documents besides the bit-identical
    rows found here (identical texts whose embeddings differ in the last bits): they score
    identically and are twins. ``solve``: ``"certificate"`` stops a query once its witness
    separates the gold set with a float32 margin above the float32 error bound (so the float64
    check certifies it too): recall, ranks and the certificate are then what the optimum would
    give (every gold document ranks above every other), objective and slack are the witness's;
    graded gold sets too (the recall capacity is decided there; the nDCG of that w is a lower
    bound on the nDCG capacity). A text-tied group with crossing gold sets runs to the optimum.
    ``"optimum"``: every query runs to the eps criterion (docs/probe.md: primal - dual <= C eps
    at the best point the line search found). ``pairs``: ``"gold"`` (every gold document against
    every non-gold one: the paper's recall capacity) or ``"graded"``: for a single query with
    more than one grade, the pairs of every two grade levels (non-gold = grade 0; Joachims,
    "Optimizing Search Engines using Clickthrough Data", KDD 2002, Sec. 4), so w seeks the whole
    graded order and its nDCG is the nDCG capacity that order supports; the 1-slack constraint
    sums one gold-vs-lower-levels constraint per level, weighted by its pairs (as a text-tied
    group's members), ``solve="certificate"`` stops a query when every level ranks above every
    lower one, and w is the SVM's (no LP or proof witness replaces it: those decide gold vs
    non-gold only). ``slack``/``objective``/``dual`` are then the graded problem's; certificate,
    ranks and recall still judge gold against non-gold.

    Escalation, then one proof: an unseparated problem raises C 10x at a time; after
    ``HULL_AFTER`` escalations it gets one inseparability proof (``hull_distance_bound``;
    docs/probe.md; on a corpus of at most ``lp_check_max_docs`` documents a single query gets the
    whole exact LP at the base C instead). When it holds, no w and hence no C certifies the
    query, so C stays (``stopped="inseparable"``). At ``C_max`` (certificate mode, escalation on)
    eps is tightened 10x at a time (``TIGHTEN_STEPS``, ``TIGHTEN_ITERS``), since eps alone can stop short
    of the hard-margin solution of a separable set. What is still open then goes to the exact LP
    (``lp_check_max_docs`` > 0, single queries) or, with the LP off, to one more proof for the
    verdict; ``ProbeResult.outcome`` / ``decided_by`` record how each query was decided.

    Ranks follow the evaluation tie rule of ``capgap.retrieval`` on float64 scores at the final
    w: identical rows score identically and a non-gold document tied with a gold one ranks first.

    An index of more than ``SCREEN_MIN_DOCS`` documents (``constants``) is probed by screening
    (``capgap.probe.screen``): each query on its candidate documents, checked against the whole
    index, with the same verdicts, certificates and recall; queries with text ties or graded
    pairs over several levels, and the whole-index fallback, take the path described here.

    An index whose largest row norm lies outside ``[SCALE_LOW, SCALE_HIGH]`` (``constants``) is
    probed multiplied by a power of two (``power_of_two_scale``), which changes no ranking;
    ``ProbeResult.w`` is then mapped back to the caller's ``D`` (scores, margins, ranks and top
    scores are the same on either), ``objective``/``dual``/``slack`` are the scaled problem's,
    and ``extra["scale"]`` holds the factor.

    Returns one ``ProbeResult`` per query, in order. Raises ``ValueError`` for NaN/Inf in ``D``,
    an empty gold set, an index out of range, or a document both gold and excluded.
    """
    D = checked_index(D, solve, pairs)
    scale = power_of_two_scale(D)
    if scale != 1.0:  # exact: every value keeps its mantissa, so every ranking and tie is kept
        e = int(np.log2(scale))
        D = np.concatenate(
            [
                np.ldexp(np.asarray(D[b0 : b0 + const.BLOCK], dtype=np.float32), e)
                for b0 in range(0, D.shape[0], const.BLOCK)
            ]
        )
    workers = int(threads) if threads else (os.cpu_count() or 1)
    settings = SolveSettings.resolved(
        C=C,
        C_max=C_max,
        eps=eps,
        max_iter=max_iter,
        batch_size=batch_size,
        lp_check_max_docs=lp_check_max_docs,
        depth=depth,
        solve=solve,
        pairs=pairs,
        workers=workers,
        progress=progress,
    )
    with threadpool_limits(int(threads) if threads else None):
        # validated here only where screening may apply (_probe validates the whole-index path's queries itself)
        golds, grs, excls = (
            _queries(D.shape[0], gold_sets, excluded_sets, grades)
            if D.shape[0] > const.SCREEN_MIN_DOCS
            else (None, None, None)
        )
        if golds is not None and screens(D.shape[0], tie_groups, pairs, grs):  # each query on its candidates (screen)

            def whole(qs):
                return _probe(
                    D,
                    [golds[q] for q in qs],
                    settings,
                    excluded_sets=[excls[q] for q in qs],
                    grades=[grs[q] for q in qs],
                    duplicates=duplicates,
                )

            results = screened_probe(D, golds, grs, excls, duplicates, settings, whole, _probe)
        else:
            results = _probe(
                D,
                gold_sets,
                settings,
                excluded_sets=excluded_sets,
                grades=grades,
                tie_groups=tie_groups,
                duplicates=duplicates,
            )
    if scale != 1.0:
        for res in results:  # (scale D).w = D.(scale w): the same scores, margins and ranks on the caller's D
            res.w = res.w * scale
            res.extra["scale"] = scale
    return results


def power_of_two_scale(D: np.ndarray) -> float:
    """The power of two ``2^-e`` that ``probe()`` multiplies the index ``D`` ``(n_docs, dim)`` by:
    1.0 while the largest row norm (float64, blockwise) lies in ``[SCALE_LOW, SCALE_HIGH]``,
    else the one that brings it into ``[2^-0.5, 2^0.5]``. A positive scale changes no ranking
    and a power of two changes no mantissa; outside that range the float32 products overflow
    or lose their low bits and the proofs' absolute tolerances stop meaning what they say (an
    index of norm 1e15 or 1e-10 was "proven" inseparable). Returns 1.0 for an all-zero index."""
    rmax = 0.0
    for b0 in range(0, D.shape[0], const.BLOCK):
        x = np.asarray(D[b0 : b0 + const.BLOCK], dtype=np.float64)
        rmax = max(rmax, float(np.sqrt(np.einsum("ij,ij->i", x, x).max())) if len(x) else 0.0)
    if rmax == 0.0 or const.SCALE_LOW <= rmax <= const.SCALE_HIGH:
        return 1.0
    return float(np.ldexp(1.0, -int(np.round(np.log2(rmax)))))


def _probe(
    D: np.ndarray,
    gold_sets,
    settings: SolveSettings,
    excluded_sets=None,
    grades=None,
    tie_groups=None,
    duplicates=(),
    refine: bool = True,
    prove: bool = True,
    by_construction: bool = True,
) -> list[ProbeResult]:
    """``probe()`` past its checks, with its settings resolved.

    Parameters
    ----------
    D : ndarray, shape (n_docs, dim)
        The index (float32, or cast to it; may be a memory map).
    gold_sets, excluded_sets, grades, tie_groups, duplicates
        As ``probe()``.
    settings : SolveSettings
        ``C_max`` >= ``C`` and ``workers`` processes.
    refine : bool
        False: no second solve of the duplicates (``refine.refine_duplicates``) and no
        iteration-cap warning.
    prove : bool
        False: no inseparability proof, exact LP or order witness (``SolveContext.prove``; the
        second solve itself, which only seeks a better w: the verdict stays the first solve's).
    by_construction : bool
        False: ``ProbeResult.by_construction`` is not sought (``setup._environment``; screening's
        candidates, whose results the screen rebuilds on the whole index).

    Returns
    -------
    list of ProbeResult
        One per query, in order.
    """
    golds, grs, excls, context, batches = solve_context(
        D,
        gold_sets,
        settings,
        excluded_sets,
        grades,
        tie_groups,
        duplicates,
        prove=prove,
        by_construction=by_construction,
    )
    results: list[ProbeResult | None] = [None] * len(golds)
    capped = 0
    for out, n_capped in _map_batches(context, batches, settings.workers, settings.progress):
        capped += n_capped
        for q, res in out.items():
            results[q] = res
    if capped and refine:
        log.warning(
            "probe: %d of %d queries hit the iteration cap (max_iter=%d) before eps=%g",
            capped,
            len(golds),
            settings.max_iter,
            settings.eps,
        )
    if refine and settings.pairs == "gold" and settings.solve == "certificate" and settings.C_max > settings.C:
        # the capacity is sought: tighten the duplicates' R-precision; the batches are done: the second solve makes its
        # own column-major
        # copy, not a second one beside it
        context = replace(context, DT=None)
        solve_again = second_solve(D, golds, excls, context.dups, settings)
        results = refine_duplicates(context, results, grs, solve_again)
    return results  # type: ignore[return-value]


def solve_context(
    D: np.ndarray, gold_sets, settings: SolveSettings, excluded_sets, grades, tie_groups, duplicates, **flags
) -> tuple[list, list, list, SolveContext, list[list[int]]]:
    """The set-up of ``_probe`` and of the probe shards (``shards``): the validated queries
    ``(golds, grs, excls)`` (``setup._queries``), the ``SolveContext`` over the index ``D``
    ``(n_docs, dim)`` as float32 with its batch window (``batch_window``), and the batches of
    problem indices (``problem_batches``). ``flags``: ``setup._environment``'s ``prove``,
    ``solves`` and ``by_construction``."""
    golds, grs, excls = _queries(D.shape[0], gold_sets, excluded_sets, grades)
    context = _environment(
        np.ascontiguousarray(D, dtype=np.float32), golds, grs, excls, tie_groups, duplicates, settings, **flags
    )
    context = replace(context, window=batch_window(len(context.problems), D.shape, settings.batch_size))
    return golds, grs, excls, context, problem_batches(len(context.problems), D.shape, settings.batch_size)


def checked_index(D, solve: str, pairs: str) -> np.ndarray:
    """``probe()``'s input checks: the index ``D`` ``(n_docs, dim)`` as an array, 2-d with at
    least one column and finite (checked blockwise: no full-size temporary), ``solve`` in
    ``SOLVES`` and ``pairs`` in ``PAIRS``, else ``ValueError``."""
    D = np.asarray(D)
    if D.ndim != 2 or D.shape[1] == 0:
        raise ValueError(f"index must be 2-d with at least one dimension, got shape {D.shape}")
    for b0 in range(0, D.shape[0], const.BLOCK):
        if not np.isfinite(D[b0 : b0 + const.BLOCK]).all():
            raise ValueError("index contains NaN or Inf")
    if solve not in SOLVES:
        raise ValueError(f"solve must be one of {SOLVES}, got {solve!r}")
    if pairs not in PAIRS:
        raise ValueError(f"pairs must be one of {PAIRS}, got {pairs!r}")
    return D


def batch_window(n_problems: int, shape: tuple[int, int], batch_size: int | None) -> int:
    """Problems iterating at once in a batch, the rows of its matrix products: ``batch_size``,
    or by default as many as keep the two ``(n_docs, window)`` float32 work matrices under half
    the index size (``dim // 4``, at least 16) or under ``WORK_BYTES`` together, whichever
    allows more, and fewer where that leaves under ``MIN_BATCHES`` batches (a small query set
    still spreads over the worker processes). ``shape``: the index's ``(n_docs, dim)``."""
    n_docs, dim = shape
    wide = max(16, dim // 4, const.WORK_BYTES // (8 * max(n_docs, 1)))
    return int(batch_size or min(wide, max(1, -(-n_problems // const.MIN_BATCHES))))


def problem_batches(n_problems: int, shape: tuple[int, int], batch_size: int | None) -> list[list[int]]:
    """The batches of problem indices, in order: each holds up to ``STREAM_WINDOWS`` windows
    (``batch_window``) of problems, fewer where that leaves under ``MIN_BATCHES`` batches, and
    never fewer than one window. A batch iterates ``window`` problems at once and a finished
    problem's place goes to the batch's next one (``batch._solve_batch``), so the products keep
    their width until the batch's last problems: the iterations of a batch's slowest problem do
    not cost a product each for a batch of mostly finished problems. Never a function of the
    thread count, so the numbers are not either."""
    window = batch_window(n_problems, shape, batch_size)
    B = max(window, min(const.STREAM_WINDOWS * window, -(-n_problems // const.MIN_BATCHES)))
    return [list(range(b0, min(b0 + B, n_problems))) for b0 in range(0, n_problems, B)]


def second_solve(D: np.ndarray, golds, excls, dups, settings: SolveSettings):
    """``solve_again(rows, levels)`` for ``refine.refine_duplicates``: the probe on queries
    ``rows`` (their gold rows ``golds[q]``, exclusions ``excls[q]``) of the index ``D`` ``(n_docs,
    dim)`` with grade levels ``levels`` and ``pairs="graded"``, at most ``REFINE_MAX_ITER``
    iterations, no progress bar, the duplicate groups ``dups``, without a second solve of its
    own and without proofs or exact LPs (``prove=False``: it only seeks a better w); the other
    settings are ``settings``'. One definition for ``_probe`` and the probe shards' gather
    (``shards.gather_shards``)."""
    again = replace(settings, max_iter=min(settings.max_iter, const.REFINE_MAX_ITER), progress=False, pairs="graded")

    def solve_again(rows, levels):
        return _probe(
            D,
            [golds[q] for q in rows],
            again,
            excluded_sets=[excls[q] for q in rows],
            grades=levels,
            duplicates=dups,
            refine=False,
            prove=False,
        )

    return solve_again
