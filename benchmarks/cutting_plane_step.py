"""Study: the probe's cutting-plane step (BMRM / Joachims' 1-slack: the next w is the working
set's minimiser) against an OCAS step (Franc & Sonnenburg, "Optimized Cutting Plane Algorithm
for Large-Scale Risk Minimization", JMLR 2009: a line search from the best point so far towards
that minimiser, and the next plane cut near the new best point), one query at a time at a fixed
C, on the real embeddings of a pipeline run, side by side in one process.

OCAS's new best point is the one with the lowest objective among the line search's candidates
(its bracket's left end; where its evaluation budget ran out, also its last secant estimate)
and the minimiser itself. Both solve the same problem as
``capgap.probe`` (pair-averaged hinge, dlib's C scaling, the probe's gold rows and the rows
it sets aside: exclusions and a gold document's identical copies) with the probe's own
primitives (``_most_violated``, ``_hinge``, ``_solve_dual``), and both stop at the first of:
a strict separation of the gold set (the probe's certificate mode; checked at the minimiser,
and for OCAS at the best point too, not at the cut point), or an optimality gap
F(w) - (working-set lower bound) <= C * eps (Joachims' criterion for BMRM, where w is the
working set's minimiser; the best point's gap for OCAS). Planes inactive for ``PRUNE_AFTER``
iterations are dropped in both. This is a study, not the probe: no escalation of C, no
proofs, no batching, no graded pairs (the duplicates' second solve), float32 separation
without the probe's error margin, and duplicate rows not tied; it measures how many
iterations each step needs.

usage: python benchmarks/cutting_plane_step.py [--every 40] [--C 1e3,1e4,1e5] [--line-evals 8] [--narrow]
       [--results results]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe import real_cases  # noqa: E402  (this folder's real-embedding loader)

from capgap.probe import constants as const  # noqa: E402
from capgap.probe import probe  # noqa: E402
from capgap.probe.config import SolveSettings  # noqa: E402
from capgap.probe.planes import _hinge, _most_violated, _separated, _solve_dual  # noqa: E402
from capgap.probe.setup import _environment, _queries  # noqa: E402

LAMBDA = 0.1  # OCAS: the next plane is cut at (1 - LAMBDA) w_best + LAMBDA w_model
LINE_EVALS = 8  # OCAS: derivative evaluations per line search, at most
NARROW = False  # OCAS: refine the bracket on the rows that can be in a violated pair there (--narrow)


def line_search(slope, wd: float, dd: float, C: float, narrow=None) -> tuple[list[float], int]:
    """Candidates for argmin over t >= 0 of 0.5 |w_b + t d|^2 + C R(t), a convex function whose
    derivative is ``wd + t dd + C slope(t)`` (``slope(t)``: R's right derivative), by the
    Illinois variant of regula falsi on a bracket of the derivative's sign change; returns
    ``(ts, evaluations)``: the bracket's left end (the objective there is at most its value at
    0) and, where the evaluation budget ran out first, the last secant estimate inside the
    bracket (the caller keeps the candidate with the lower objective). ``narrow(lo, hi)``: a
    cheaper ``slope`` valid on the bracket ``[lo, hi]``, used once the bracket is found."""
    f = lambda t: wd + t * dd + C * slope(t)  # noqa: E731
    lo, flo = 0.0, f(0.0)
    if flo >= 0:
        return [0.0], 1
    hi, fhi, ne = 1.0, f(1.0), 2
    while fhi < 0 and hi < 1e3:
        lo, flo, hi = hi, fhi, 4.0 * hi
        fhi, ne = f(hi), ne + 1
    if fhi < 0:
        return [hi], ne
    if narrow is not None:
        sl = narrow(lo, hi)
        f = lambda t: wd + t * dd + C * sl(t)  # noqa: E731
    side = 0
    while hi - lo > 1e-3 * hi:
        t = lo - flo * (hi - lo) / (fhi - flo)
        if not lo < t < hi:
            t = 0.5 * (lo + hi)
        if ne >= LINE_EVALS:
            return [lo, t], ne
        ft, ne = f(t), ne + 1
        if ft < 0:
            lo, flo = t, ft
            fhi, side = (fhi / 2 if side == -1 else fhi), -1
        elif ft > 0:
            hi, fhi = t, ft
            flo, side = (flo / 2 if side == 1 else flo), 1
        else:
            return [t], ne
    return [lo], ne


def narrowed(sb, ds, gold, other, P):
    """``narrow(lo, hi)`` for ``line_search``: R's slope along ``sb + t ds`` on ``[lo, hi]`` from
    the gold rows and the non-gold rows that can be in a violated pair somewhere on it. A pair
    (i, j) is violated where s_j(t) + 1 > s_i(t); s_j(t) + 1 - min_i s_i(t) is convex in t, so a
    row below the gold minimum - 1 at both ends is below it on the whole bracket and counts in
    no pair there."""

    def narrow(lo, hi):
        keep = np.zeros(len(sb), dtype=bool)
        for t in (lo, hi):
            st = sb + t * ds
            keep |= other & (st + 1.0 > st[gold].min())
        rows = np.concatenate([gold, np.flatnonzero(keep)])
        s0, d0, g0 = sb[rows], ds[rows], np.arange(len(gold))
        return lambda t: -float(_most_violated(s0 + t * d0, g0, P)[0] @ d0)

    return narrow


def solve(Df, gold, excl, C, eps, ocas, max_iter):
    """One query's 1-slack ranking SVM; returns (iterations, F at the returned w, stop reason,
    line-search evaluations)."""
    n, dim = Df.shape
    P = len(gold) * (n - len(gold) - len(excl))
    other = np.ones(n, dtype=bool)
    other[gold] = False
    other[excl] = False
    A, b, K, age = np.zeros((dim, 0)), np.zeros(0), np.zeros((0, 0)), np.zeros(0, dtype=np.int64)
    wc, xi = np.zeros(dim), 0.0  # the working set's minimiser and its slack there
    wb, sb = np.zeros(dim), np.zeros(n)  # OCAS: the best point and its scores
    evals = 0
    for it in range(max_iter):
        sc = (Df @ wc.astype(np.float32)).astype(np.float64)
        if it and _separated(sc, gold, excl):
            return it, 0.5 * wc @ wc + C * _hinge(sc, gold, P, excl), "separated", evals
        if ocas and it:
            d, ds = wc - wb, sc - sb
            ts, ne = line_search(
                lambda t: -float(_most_violated(sb + t * ds, gold, P, excl=excl)[0] @ ds),
                wb @ d,
                d @ d,
                C,
                narrowed(sb, ds, gold, other, P) if NARROW else None,
            )
            evals += ne
            # the candidates' objectives, and the minimiser's (t = 1): the lowest is the new best point
            Fb, t = min(
                (0.5 * (wb + u * d) @ (wb + u * d) + C * _hinge(sb + u * ds, gold, P, excl), u) for u in ts + [1.0]
            )
            wb, sb = wb + t * d, sb + t * ds
            if _separated(sb, gold, excl):
                return it, Fb, "separated", evals
            if Fb - (0.5 * wc @ wc + C * xi) <= C * eps:
                return it, Fb, "gap", evals
            s = (1 - LAMBDA) * sb + LAMBDA * sc
        else:
            s = sc
        coef, b_new, H = _most_violated(s, gold, P, excl=excl)
        if not ocas and it and H <= xi + eps:
            return it, 0.5 * wc @ wc + C * H, "gap", evals
        a = (Df.T @ coef).astype(np.float64)
        Kn = np.empty((len(b) + 1,) * 2)
        Kn[:-1, :-1], Kn[-1, :-1], Kn[-1, -1] = K, A.T @ a, a @ a
        Kn[:-1, -1] = Kn[-1, :-1]
        A, b, K = np.hstack([A, a[:, None]]), np.append(b, b_new), Kn
        alpha = _solve_dual(K, b, C)
        age = np.where(alpha > 1e-12 * C, 0, np.append(age, 0) + 1)
        keep = age <= const.PRUNE_AFTER
        A, b, K, alpha, age = A[:, keep], b[keep], K[np.ix_(keep, keep)], alpha[keep], age[keep]
        wc = A @ alpha
        xi = max(0.0, float(np.max(b - A.T @ wc)))
    return max_iter, float("nan"), "max_iter", evals


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--every", type=int, default=40, help="every k-th query of the first real case")
    ap.add_argument("--C", default="1e3,1e4,1e5")
    ap.add_argument("--eps", type=float, default=1e-3)
    ap.add_argument("--max-iter", type=int, default=3000)
    ap.add_argument(
        "--line-evals", type=int, default=LINE_EVALS, help="at most this many slope evaluations per line search (>= 2)"
    )
    ap.add_argument("--narrow", action="store_true", help="OCAS's line search on the bracket's candidate rows only")
    ap.add_argument("--results", default="results")
    args = ap.parse_args()
    if args.line_evals < 2:
        ap.error("--line-evals: at least 2 (the line's two ends)")
    globals().update(LINE_EVALS=args.line_evals, NARROW=args.narrow)
    case = next(real_cases(args.results), None)
    if case is None:
        sys.exit(f"cutting_plane_step: no index under {args.results}/<dataset>/<encoder>/index: run the pipeline first")
    label, D, golds0, kw = case
    Df = np.ascontiguousarray(D, dtype=np.float32)
    pick = list(range(0, len(golds0), args.every))
    sub = {k: ([v[i] for i in pick] if k != "duplicates" and v is not None else v) for k, v in kw.items()}
    outcome = [
        r.outcome for r in probe(Df, [golds0[i] for i in pick], threads=1, **sub)
    ]  # the shipped probe's verdicts
    golds, grs, excls = _queries(Df.shape[0], [golds0[i] for i in pick], sub["excluded_sets"], sub["grades"])
    env = _environment(
        Df,
        golds,
        grs,
        excls,
        None,
        kw["duplicates"],
        SolveSettings(
            C=1e3,
            C_max=1e8,
            eps=args.eps,
            max_iter=args.max_iter,
            batch_size=None,
            lp_check_max_docs=0,
            depth=0,
            solve="certificate",
            pairs="gold",
        ),
    )
    print(
        f"{label}: {len(pick)} queries (every {args.every}th); machine {platform.machine()}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.2f}; eps {args.eps}, lambda {LAMBDA}, line-search evaluations <= {LINE_EVALS}"
        f"{', narrowed to the bracket' if NARROW else ''}\n"
    )
    print(
        "| C | probe's outcome | queries | BMRM iterations | OCAS iterations | BMRM s | OCAS s | OCAS slope evaluations / iteration "
        "| F(OCAS) / F(BMRM) where both stop at the gap: median (min–max, queries) | stops BMRM / OCAS |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for C in [float(c) for c in args.C.split(",")]:
        rows = defaultdict(lambda: defaultdict(list))
        for q in range(len(pick)):
            for ocas in (False, True):
                t0 = time.perf_counter()
                it, F, why, ev = solve(Df, env.golds[q], env.opt_excl[q], C, args.eps, ocas, args.max_iter)
                r = rows[outcome[q]]
                r[f"it{ocas}"].append(it)
                r[f"s{ocas}"].append(time.perf_counter() - t0)
                r[f"F{ocas}"].append(F)
                r[f"why{ocas}"].append(why)
                r["ev"].append(ev) if ocas else None
        for oc, r in sorted(rows.items()):
            both = [
                a / b for a, b, x, y in zip(r["FTrue"], r["FFalse"], r["whyTrue"], r["whyFalse"]) if x == y == "gap"
            ]
            ratio = f"{np.median(both):.4f} ({min(both):.3f}–{max(both):.3f}, {len(both)})" if both else "–"
            stops = " / ".join(
                ",".join(f"{w} {r[f'why{o}'].count(w)}" for w in sorted(set(r[f"why{o}"]))) for o in (False, True)
            )
            print(
                f"| {C:g} | {oc} | {len(r['itFalse'])} | {sum(r['itFalse'])} | {sum(r['itTrue'])} | {sum(r['sFalse']):.2f} | "
                f"{sum(r['sTrue']):.2f} | {sum(r['ev']) / max(sum(r['itTrue']), 1):.1f} | {ratio} | {stops} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
