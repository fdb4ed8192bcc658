"""The convergence rule every trainer stops on (``Convergence``), the state it leaves
(``ConvergenceState``, its results.csv rows and words) and the state read back from a curve."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

STATE_METRICS = ("converged", "early_stopped", "steps", "max_steps", "train_loss", "loss_improvement", "decay_steps")
"""The results.csv metrics (split ``train``, empty k) that carry a trainer's convergence state
(``decay_steps`` only where a decay phase followed convergence)."""


def relative_improvement(objectives: Sequence[float], window: int, floor: float = 1.0) -> float:
    """The criterion of ``Convergence``: how much the last ``window`` points improved on the best
    point before them, relative to it (SciPy L-BFGS-B's ``ftol`` scaling).

    Parameters
    ----------
    objectives : sequence of float
        The training objective (lower is better) at each curve point, in step order.
    window : int
        ``n_iter_no_change``: the trailing window, in curve points (>= 1).
    floor : float
        The denominator's floor (``Convergence.floor``; default 1).

    Returns
    -------
    float
        ``(min(before) - min(last window)) / max(|min(before)|, floor)`` where ``before`` is
        every point ahead of the window: the fraction by which the window lowered the best
        objective (<= 0: no improvement). With the floor 1 an objective that approaches 0 (an
        InfoNCE loss whose margins keep growing) is judged by its absolute change, as
        ``scipy.optimize.minimize(method="L-BFGS-B")`` judges ``ftol``; with the floor 0 the
        change is always relative (0 when the best before is 0 and nothing improved on it). Non-finite values (a
        diverged step) are left out of both minima; NaN while fewer than ``window + 1`` points
        exist, when the last point is not finite (a run that ends diverged is not converged), or
        when the window or the points before it hold no finite value.
    """
    values = np.asarray(list(objectives), dtype=np.float64)
    if window < 1 or len(values) < window + 1 or not np.isfinite(values[-1]):
        return float("nan")
    head, tail = values[:-window], values[-window:]
    head, tail = head[np.isfinite(head)], tail[np.isfinite(tail)]
    if not len(head) or not len(tail):
        return float("nan")
    before, last = float(head.min()), float(tail.min())
    scale = max(abs(before), floor)
    return (before - last) / scale if scale > 0 else (0.0 if last >= before else float("inf"))


@dataclass(frozen=True)
class Convergence:
    """One convergence rule for every trainer (scikit-learn's convention: ``tol``,
    ``n_iter_no_change``, ``max_iter``).

    A run has converged at a curve point when the training objective's relative improvement
    over the trailing ``n_iter_no_change`` points (``relative_improvement``) is below ``tol`` and
    above ``-tol`` (a window that rose by ``tol`` or more is diverging, not converged);
    training stops there, or at ``max_iter`` steps (the cap), whichever comes first. A run the cap
    stopped is not converged, and its state says by how much the objective was still falling.

    Attributes
    ----------
    tol : float
        Relative improvement per window below which the run has converged (0: never, the run
        trains to the cap).
    n_iter_no_change : int
        The window, in curve points (>= 1).
    max_iter : int
        The step cap (>= 1).
    stop : bool
        True (the default): training stops once the rule holds. False: training runs to the
        cap (a fixed-length protocol such as the paper's 3,000 steps), and the rule judges the
        last curve point only: the run has converged when it holds there.
    floor : float
        The criterion's denominator floor (``relative_improvement``): 1 (the default) for an
        InfoNCE loss, which may fall toward 0 without limit once every gold document ranks first
        (judged by its absolute change below 1); 0 for an objective whose small values still
        matter relatively (a squared error to targets, the parity task's regression learners).
    """

    tol: float
    n_iter_no_change: int
    max_iter: int
    stop: bool = True
    floor: float = 1.0

    def __post_init__(self):
        if not (self.tol >= 0 and self.n_iter_no_change >= 1 and self.max_iter >= 1 and 0 <= self.floor < float("inf")):
            raise ValueError(
                "convergence: tol must be >= 0, n_iter_no_change and the step cap >= 1, floor finite and "
                f">= 0 (got {self.tol}, {self.n_iter_no_change}, {self.max_iter}, {self.floor})"
            )

    def converged(self, objectives: Sequence[float]) -> bool:
        """True when ``-tol < relative_improvement(objectives, n_iter_no_change) < tol``: the
        window neither improved on the best before it by ``tol`` nor rose above it by ``tol``
        (a rising objective is diverging, not converged); never while the criterion is NaN (too
        few points, a last value not finite), never when ``tol`` is 0."""
        value = relative_improvement(objectives, self.n_iter_no_change, self.floor)
        return bool(self.tol > 0 and np.isfinite(value) and -self.tol < value < self.tol)

    def state(
        self, objectives: Sequence[float], steps: int, converged: bool, early_stopped: bool = False
    ) -> "ConvergenceState":
        """The ``ConvergenceState`` of a run that ran ``steps`` steps and whose curve points had
        these ``objectives``; ``early_stopped``: a validation split chose the weights of a point
        before the last (``ConvergenceState.early_stopped``)."""
        values = list(objectives)
        gain = relative_improvement(values, self.n_iter_no_change, self.floor)
        return ConvergenceState(
            converged=bool(converged),
            steps=int(steps),
            max_steps=self.max_iter,
            objective=float(values[-1]) if values else float("nan"),
            improvement=gain if np.isfinite(gain) else None,
            tol=self.tol,
            n_iter_no_change=self.n_iter_no_change,
            early_stopped=bool(early_stopped),
        )


@dataclass(frozen=True)
class ConvergenceState:
    """Where a trainer stopped and why (``Convergence``).

    Attributes
    ----------
    converged : bool
        True: the rule stopped it; False: the step cap or early stopping did.
    steps : int
        Optimiser steps run (the resumed ones included).
    max_steps : int
        The step cap.
    objective : float
        The training objective at the last curve point (the trainer's loss: lower is better).
    improvement : float or None
        The criterion's last value: the relative improvement over the last window (None: too
        few points).
    tol, n_iter_no_change : float, int
        The rule's settings.
    early_stopped : bool
        A validation split carved from the training data chose the weights of a point before the
        last one (early stopping: the best validation point's weights are kept, ``run_loop``'s
        ``validation``): a model selection of its own, so its numbers are findings too. A run
        whose validation value was still rising at its last point was not stopped early (at the
        cap it is not converged).
    decay_steps : int
        Steps of a learning-rate decay run after the rule held (the ladder's ``stable-decay``;
        0: none): ``steps`` is where the rule held, the weights are those after the decay.
    """

    converged: bool
    steps: int
    max_steps: int
    objective: float
    improvement: float | None
    tol: float
    n_iter_no_change: int
    early_stopped: bool = False
    decay_steps: int = 0

    def rows(self, dataset: str, encoder: str, method: str) -> list[dict]:
        """results.csv rows (split ``train``, k empty): ``converged`` (1/0), ``early_stopped``
        (1/0), ``steps``, ``max_steps``, ``train_loss`` (the final objective),
        ``loss_improvement`` (the criterion's last value; no row while it is not finite: too few
        curve points), ``decay_steps`` (only when > 0)."""
        gain = float("nan") if self.improvement is None else self.improvement
        values = (
            float(self.converged),
            float(self.early_stopped),
            float(self.steps),
            float(self.max_steps),
            self.objective,
            gain,
            float(self.decay_steps) if self.decay_steps else float("nan"),
        )
        return [
            {
                "dataset": dataset,
                "encoder": encoder,
                "method": method,
                "split": "train",
                "metric": m,
                "k": "",
                "value": v,
            }
            for m, v in zip(STATE_METRICS, values)
            if np.isfinite(v)
        ]

    def describe(self) -> str:
        """``converged at N steps`` or ``stopped at the cap N, objective still falling x% per
        window`` (the report's wording; ``describe_state``)."""
        text = describe_state(
            self.converged, self.steps, self.max_steps, self.improvement, self.early_stopped, self.decay_steps
        )
        if not np.isfinite(self.objective) and not self.converged:
            text += " (the objective was not finite at the last point: diverged)"
        return text

    def to_dict(self) -> dict:
        """A strict-JSON dict (NaN as None)."""
        return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in self.__dict__.items()}


def state_from_curve(curve: Sequence[Mapping], convergence: Convergence, validation: bool = False) -> ConvergenceState:
    """The ``ConvergenceState`` a ``run_loop`` curve records under ``convergence``: the steps are
    the last point's ``step``, converged when the rule holds at the last point (the loop checks
    the rule before early stopping, so a run it stopped at convergence ends on such a point);
    ``validation``: a validation split chose the weights of a point before the last. Points
    marked ``decay`` (a decay phase after convergence) are left out of the rule: the steps are
    the last rule point's, ``decay_steps`` the rest, the objective the curve's last.
    ``ValueError`` for an empty curve or one without ``objective`` values."""
    if not curve or any("objective" not in p for p in curve):
        raise ValueError(
            "state_from_curve: the curve has no objective values (was it trained under a convergence rule?)"
        )
    ruled = [p for p in curve if not p.get("decay")] or list(curve)
    objectives = [_objective(p) for p in ruled]
    steps, converged = int(ruled[-1]["step"]), convergence.converged(objectives)
    state = convergence.state(objectives, steps, converged, early_stopped=validation)
    if ruled[-1] is not curve[-1]:
        state = replace(state, objective=_objective(curve[-1]), decay_steps=int(curve[-1]["step"]) - steps)
    return state


def _objective(point: Mapping) -> float:
    """A curve point's objective as a float: NaN where it is missing (a checkpoint written
    without a convergence rule) or None (a non-finite value written to strict JSON)."""
    value = point.get("objective")
    return float("nan") if value is None else float(value)


def describe_state(
    converged: bool, steps: int, max_steps: int, improvement: float, early_stopped: bool = False, decay_steps: int = 0
) -> str:
    """The report's words for a learner's state: ``converged at N steps`` (with ``, then D decay
    steps`` after a decay phase, ``; weights of an earlier point chosen on its validation split``
    when ``early_stopped``); ``stopped early by its validation split at N steps``
    (``early_stopped``); ``stopped at the cap N, objective still falling x% per window`` (``x``:
    ``improvement`` in percent, or ``too few curve points to judge``); ``ran to the cap N,
    weights of an earlier point chosen on its validation split`` (``early_stopped`` at the cap);
    a run that ended before its cap otherwise ``stopped early at N steps, not converged``."""
    if converged:
        text = f"converged at {int(steps):,} steps"
        if decay_steps:
            text += f", then {int(decay_steps):,} decay steps"
        if early_stopped:
            text += "; weights of an earlier point chosen on its validation split"
        return text
    if early_stopped:
        if int(steps) < int(max_steps):
            return f"stopped early by its validation split at {int(steps):,} steps"
        return f"ran to the cap {int(steps):,}, weights of an earlier point chosen on its validation split"
    if int(steps) < int(max_steps):
        return f"stopped early at {int(steps):,} steps, not converged"
    if improvement is None or not np.isfinite(improvement):
        trend = "too few curve points to judge"
    elif improvement > 0:
        pct = f"{100 * improvement:.1f}" if improvement >= 0.001 else f"{100 * improvement:.1g}"
        trend = f"objective still falling {pct}% per window"
    else:
        trend = "objective no longer falling"
    return f"stopped at the cap {int(steps):,}, {trend}"
