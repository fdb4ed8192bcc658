"""benchmarks/cutting_plane_step.py (the BMRM-vs-OCAS study): its line search on convex
functions whose minimiser is known in closed form, and its narrowed slope against the slope
over every row."""

import importlib.util

import numpy as np

from capgap.probe.planes import _most_violated

from ..conftest import ROOT


def _study():
    spec = importlib.util.spec_from_file_location("cutting_plane_step", ROOT / "benchmarks" / "cutting_plane_step.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_line_search_closed_forms():
    ls = _study().line_search
    hinge_slope = lambda t: -1.0 if t < 1 else 0.0  # noqa: E731  R(t) = max(0, 1 - t)
    # F = 0.5 (t - 2)^2 + C max(0, 1 - t): F' = t - 2 - C below 1, t - 2 above: minimiser 2
    (t,), n = ls(hinge_slope, -2.0, 1.0, 10.0)
    assert 2.0 * (1 - 1e-3) <= t <= 2.0 and n <= 8
    # F = 0.5 t^2 - 0.5 t + max(0, 1 - t): F' = t - 1.5 below 1, t - 0.5 above: minimiser at the kink, 1
    (t,), n = ls(hinge_slope, -0.5, 1.0, 1.0)
    assert abs(t - 1.0) <= 1e-3 and n <= 8
    # no descent along the line: t = 0 after one evaluation
    assert ls(lambda t: 0.0, 0.5, 1.0, 1.0) == ([0.0], 1)
    # F = 0.5 (t - 3)^2 (wd = -3, dd = 1, R = 0): the bracket [1, 4] after 3 evaluations, the
    # secant through F'(1) = -2 and F'(4) = 1 lands on the minimiser 3 exactly
    (t,), n = ls(lambda t: 0.0, -3.0, 1.0, 1.0)
    assert t == 3.0 and n == 4


def test_line_search_budget_returns_the_left_end_and_the_secant():
    """With 3 evaluations on F' = t - 1.5 below 1, t - 0.5 above: F'(0) = -1.5, F'(1) = 0.5,
    the secant's 0.75 (F' = -0.75, the new left end), then the secant through (0.75, -0.75)
    and (1, 0.5): 0.75 + 0.75 * 0.25 / 1.25 = 0.9, not evaluated."""
    study = _study()
    study.LINE_EVALS = 3
    ts, n = study.line_search(lambda t: -1.0 if t < 1 else 0.0, -0.5, 1.0, 1.0)
    assert n == 3 and np.allclose(ts, [0.75, 0.9])


def test_narrowed_slope_equals_the_slope_over_every_row():
    study = _study()
    rng = np.random.default_rng(3)
    n = 400
    for trial in range(20):
        sb, ds = rng.normal(size=n) * 2, rng.normal(size=n)
        gold = rng.choice(n, size=int(rng.integers(1, 40)), replace=False)
        excl = np.setdiff1d(rng.choice(n, size=5, replace=False), gold)
        other = np.ones(n, dtype=bool)
        other[gold] = False
        other[excl] = False
        P = len(gold) * int(other.sum())
        lo, hi = sorted(rng.uniform(0, 3, size=2))
        narrow = study.narrowed(sb, ds, gold, other, P)(lo, hi)
        for t in np.linspace(lo, hi, 7):
            full = -float(_most_violated(sb + t * ds, gold, P, excl=excl)[0].astype(np.float64) @ ds)
            assert np.isclose(narrow(t), full, rtol=1e-5, atol=1e-9), (trial, t)
