"""The resumable training loop and the learning-curve evaluator shared by capgap's trainers.

``finetune.train_query_encoder`` (LoRA on a query encoder against a frozen index) and
``colbert.train_colbert`` (a PyLate ColBERT) differ only in their batches and losses; this
module owns everything else:

- ``seed_everything(seed)``: seeds torch and Python's ``random`` and returns the numpy sampler
  that draws every batch (call it before building anything random, e.g. LoRA weights).
- ``run_loop(batch_loss, model, optimizer, n_steps, n_items, batch_size, sampler, ...)``:
  batches of item indices from a seeded permutation per epoch, one optimiser step per batch,
  a learning-curve point every ``eval_every`` steps and at the end, a tqdm progress bar with
  loss and steps/s, and atomic checkpoints every ``checkpoint_every`` steps (weights,
  optimiser, RNG states, sampler position, curve) resumed only when their digest matches, so a
  killed run ends with the same weights and curve as an uninterrupted one.
- ``curve_evaluator(rs, doc_ids, scorer, ks, groups, max_queries)``: the curve's
  ``evaluate(step)``: train/held-out recall@k (k <= 10) on the first ``max_queries`` queries
  of each split, ranked with the evaluation tie rule.

Per step the loop does, in this order: a new permutation when the epoch is used up, the batch,
``batch_loss(batch)`` (which may draw more from the sampler), ``zero_grad``, ``backward``,
``optimizer.step()``, the curve point, the checkpoint. RNG consumption is therefore fixed by
the seed, the batch size and what ``batch_loss`` draws.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from .config import section_defaults
from .evaluate import Judged
from .io import atomic_open
from .metrics import recall_from_ranks
from .retrieval import rank_queries

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> np.random.Generator:
    """Seed torch's and Python's global RNGs with ``seed``; return ``np.random.default_rng(seed)``
    (the sampler ``run_loop`` draws batches from)."""
    import torch

    torch.manual_seed(seed)
    random.seed(seed)
    return np.random.default_rng(seed)


def json_digest(obj) -> str:
    """sha256 (hex) of ``obj``'s canonical JSON (keys sorted): a digest of training inputs."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def rng_state(sampler: np.random.Generator) -> dict:
    """The RNG states a resumed run needs: ``{"torch", "numpy" (the sampler), "python"}`` plus
    ``"cuda"`` (every device's generator) when CUDA is initialised."""
    import torch

    state = {"torch": torch.get_rng_state(), "numpy": sampler.bit_generator.state, "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict, sampler: np.random.Generator) -> None:
    """Restore what ``rng_state`` captured (``sampler`` in place)."""
    import torch

    torch.set_rng_state(state["torch"])
    sampler.bit_generator.state = state["numpy"]
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | Path, payload: dict) -> None:
    """``torch.save(payload)`` to ``path`` atomically (``capgap.io.atomic_open``): a kill leaves
    the previous checkpoint or the new one. Creates the parent folder."""
    import torch

    with atomic_open(path, "wb") as fh:
        torch.save(payload, fh)


class PartialState:
    """The entries of ``module.state_dict()`` whose key passes ``keep`` (e.g. LoRA weights only),
    with ``state_dict()`` / ``load_state_dict()`` like a module, for ``run_loop(weights=...)``.
    ``load_state_dict`` raises ``KeyError`` unless it gets exactly the kept keys."""

    def __init__(self, module, keep: Callable[[str], bool]):
        self.module, self.keep = module, keep

    def state_dict(self) -> dict:
        return {k: v.detach().clone() for k, v in self.module.state_dict().items() if self.keep(k)}

    def load_state_dict(self, state: dict) -> None:
        want = {k for k in self.module.state_dict() if self.keep(k)}
        if set(state) != want:
            raise KeyError(f"checkpoint weights do not match the model: {sorted(set(state) ^ want)[:5]}")
        self.module.load_state_dict(state, strict=False)


# --- convergence: one rule for every trainer -------------------------------------------------

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
            raise ValueError(f"convergence: tol must be >= 0, n_iter_no_change and the step cap >= 1, floor finite and >= 0 "
                             f"(got {self.tol}, {self.n_iter_no_change}, {self.max_iter}, {self.floor})")

    def converged(self, objectives: Sequence[float]) -> bool:
        """True when ``-tol < relative_improvement(objectives, n_iter_no_change) < tol``: the
        window neither improved on the best before it by ``tol`` nor rose above it by ``tol``
        (a rising objective is diverging, not converged); never while the criterion is NaN (too
        few points, a last value not finite), never when ``tol`` is 0."""
        value = relative_improvement(objectives, self.n_iter_no_change, self.floor)
        return bool(self.tol > 0 and np.isfinite(value) and -self.tol < value < self.tol)

    def state(self, objectives: Sequence[float], steps: int, converged: bool, early_stopped: bool = False) -> "ConvergenceState":
        """The ``ConvergenceState`` of a run that ran ``steps`` steps and whose curve points had
        these ``objectives``; ``early_stopped``: a validation split chose the weights of a point
        before the last (``ConvergenceState.early_stopped``)."""
        values = list(objectives)
        gain = relative_improvement(values, self.n_iter_no_change, self.floor)
        return ConvergenceState(converged=bool(converged), steps=int(steps), max_steps=self.max_iter,
                                objective=float(values[-1]) if values else float("nan"),
                                improvement=gain if np.isfinite(gain) else None,
                                tol=self.tol, n_iter_no_change=self.n_iter_no_change,
                                early_stopped=bool(early_stopped))


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
        values = (float(self.converged), float(self.early_stopped), float(self.steps), float(self.max_steps), self.objective,
                  gain, float(self.decay_steps) if self.decay_steps else float("nan"))
        return [{"dataset": dataset, "encoder": encoder, "method": method, "split": "train", "metric": m, "k": "", "value": v}
                for m, v in zip(STATE_METRICS, values) if np.isfinite(v)]

    def describe(self) -> str:
        """``converged at N steps`` or ``stopped at the cap N, objective still falling x% per
        window`` (the report's wording; ``describe_state``)."""
        text = describe_state(self.converged, self.steps, self.max_steps, self.improvement, self.early_stopped,
                              self.decay_steps)
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
        raise ValueError("state_from_curve: the curve has no objective values (was it trained under a convergence rule?)")
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


def describe_state(converged: bool, steps: int, max_steps: int, improvement: float, early_stopped: bool = False,
                   decay_steps: int = 0) -> str:
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


@dataclass
class LoopResult:
    """``curve``: one dict per curve point (``step``, ``loss``: the mean training loss since the
    previous point, NaN if none, then ``evaluate``'s metrics); ``steps_per_s``: optimiser steps
    of this call per second of its loop (NaN when no time elapsed); ``resumed_from``: the step a
    checkpoint restored (0 if none); ``steps_run``: steps this call ran; ``stopped_at``: the step
    at which ``patience`` ended training early (None: it ran every step); ``convergence``: the
    ``ConvergenceState`` when the loop ran under a ``Convergence`` rule (None otherwise);
    ``converged_at``: the step at which the rule stopped training (None: it did not)."""

    curve: list
    steps_per_s: float
    resumed_from: int
    steps_run: int
    stopped_at: int | None = None
    convergence: ConvergenceState | None = None
    converged_at: int | None = None


def _load(ckpt: Path, digest: Mapping[str, str], desc: str):
    """The checkpoint's payload if its digest parts all equal ``digest``, else None (logged)."""
    import torch

    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    saved = state.get("digest")
    saved = saved if isinstance(saved, dict) else {}
    differ = [name for name in digest if saved.get(name) != digest[name]]
    if not differ and set(saved) == set(digest):
        return state
    why = " and ".join(f"the {name}" for name in differ) or "the checkpoint's format"
    log.warning("%s: ignoring checkpoint %s and starting over: %s differ", desc, ckpt, why)
    return None


def run_loop(
    batch_loss: Callable[[np.ndarray], object],
    model,
    optimizer,
    n_steps: int,
    n_items: int,
    batch_size: int,
    sampler: np.random.Generator,
    *,
    ckpt_path: str | Path | None = None,
    digest: Mapping[str, str] | None = None,
    checkpoint_every: int = 0,
    weights=None,
    evaluate: Callable[[int], dict] | None = None,
    eval_every: int = 0,
    progress: bool = False,
    desc: str = "train",
    stop_after: int | None = None,
    patience: int | None = None,
    monitor: Callable[[dict], float] | None = None,
    convergence: Convergence | None = None,
    objective: Callable[[], float] | None = None,
    validation: bool = False,
    monitor_start: float | None = None,
) -> LoopResult:
    """Train ``model`` for ``n_steps`` optimiser steps from step 0 or from a checkpoint.

    Parameters
    ----------
    batch_loss : callable
        ``batch_loss(batch)`` -> 0-d loss tensor for ``batch``, an ``(b,) int64`` array of item
        indices (``b = min(batch_size, n_items)``); it may draw from ``sampler`` (negatives).
    model : torch.nn.Module
        Put in train mode while training, in eval mode (under ``torch.no_grad``) for
        ``evaluate`` and when the loop returns.
    optimizer : torch.optim.Optimizer
        Stepped once per batch after ``zero_grad(set_to_none=True)`` and ``backward``.
    n_steps, n_items, batch_size : int
        Total steps, number of items (e.g. train queries), items per batch. Batches walk a
        permutation of ``range(n_items)`` drawn from ``sampler`` (one before resuming, a new one
        when fewer than ``batch_size`` items are left).
    sampler : numpy.random.Generator
        The seeded sampler (``seed_everything``); its state is checkpointed.
    ckpt_path : path, optional
        Checkpoint file, written atomically (``save_checkpoint``) every ``checkpoint_every``
        steps and at the last step; resumed when it exists and its digest matches. Its payload:
        ``digest`` (with ``n_items`` as the part "number of training items"), ``step``, ``weights``, ``optim``, ``rng`` (``rng_state``),
        ``perm``, ``pos``, ``curve``, ``losses`` (losses since the last curve point).
    digest : mapping of str to str
        Named digests of everything the run depends on (e.g. ``{"settings": ..., "data": ...}``).
        A checkpoint whose parts differ is never resumed: training starts over and the log
        names the parts that differ.
    weights : object with ``state_dict`` / ``load_state_dict``, optional
        What of the model the checkpoint holds (default ``model``; ``PartialState`` for a part).
    evaluate : callable, optional
        ``evaluate(step)`` -> dict of curve metrics. Without it the curve points hold ``step`` and
        ``loss`` only.
    eval_every : int
        A curve point every ``eval_every`` steps before the last (0: none); the last step always
        gets one, after the loop (also when a resumed run has nothing left to train).
    progress : bool
        A tqdm bar (``desc``) with the last loss and steps/s.
    stop_after : int, optional
        Raise ``KeyboardInterrupt`` after this many steps of this call, after that step's
        checkpoint (tests simulate a kill with it); ignored at the last step.
    patience, monitor : int and callable, optional
        Early stopping: after each curve point, ``monitor(point)`` -> float (higher is better;
        e.g. held-out recall); when the last ``patience`` points brought no new best, training
        stops there (a checkpoint marks it: a resumed run does not train further), and that
        point is the curve's last. ``ValueError`` when ``patience`` is set without ``monitor``
        or ``evaluate``.
    monitor_start : float, optional
        The monitored value before the first step (e.g. the initial model's validation score,
        when its weights are a candidate too): patience then also counts from it, so a run whose
        start stays best stops ``patience`` points after the start.
    convergence : Convergence, optional
        The convergence rule: every curve point gets ``objective`` (``objective()`` when given,
        else the point's ``loss``: the mean training loss since the previous point) and
        ``improvement`` (``relative_improvement`` over the trailing ``n_iter_no_change`` points,
        None while it is not finite);
        once ``convergence.converged`` holds, training stops there (the point is the curve's last,
        a checkpoint marks it: a resumed run stops at the same step); with ``convergence.stop``
        False it trains to the cap and the rule judges the last point. ``n_steps`` must equal
        ``convergence.max_iter`` and ``eval_every`` be >= 1 (``ValueError`` otherwise).
    objective : callable, optional
        ``objective()`` -> float: the training objective measured at a curve point (model in eval
        mode, under ``torch.no_grad``), e.g. the loss on the whole training set or a fixed sample.
    validation : bool
        True when ``monitor`` watches a validation split carved from the training data and the
        caller keeps the best point's weights (early stopping): the state then records
        ``early_stopped`` when ``patience`` (or the rule) ended the run and that point (the best,
        the earliest of equal ones, ``monitor_start`` included; NaN never the best) is not the
        last. A run the cap ended is not early-stopped, whatever point validation kept. False
        (e.g. a monitor on held-out queries): a run ``patience`` ended is not converged.

    Returns
    -------
    LoopResult
        With ``convergence``: ``result.convergence`` holds the state (converged or not, steps run,
        the last objective and criterion value).
    """
    import torch

    if patience and (monitor is None or evaluate is None):
        raise ValueError("run_loop: patience needs evaluate and monitor (the curve metric to watch)")
    if convergence is not None and (convergence.max_iter != n_steps or eval_every < 1):
        raise ValueError(f"run_loop: the convergence rule's cap ({convergence.max_iter}) must equal n_steps ({n_steps}) "
                         f"and eval_every ({eval_every}) be >= 1 (the rule is checked at curve points)")
    perm, pos, step, curve, losses, resumed = sampler.permutation(n_items), 0, 0, [], [], 0
    stopped_at = converged_at = None
    ckpt = Path(ckpt_path) if ckpt_path else None
    digest = {**dict(digest or {}), "number of training items": n_items}  # a resumed permutation must fit
    weights = model if weights is None else weights
    if ckpt and ckpt.is_file():
        state = _load(ckpt, digest, desc)
        if state is not None:
            weights.load_state_dict(state["weights"])
            optimizer.load_state_dict(state["optim"])
            set_rng_state(state["rng"], sampler)
            perm, pos, step, curve, losses = state["perm"], state["pos"], state["step"], state["curve"], state["losses"]
            stopped_at, converged_at = state.get("stopped_at"), state.get("converged_at")
            resumed = step
            log.info("%s: resumed from %s at step %d", desc, ckpt, step)

    def curve_point(at: int) -> None:
        point = {"step": at, "loss": float(np.mean(losses)) if losses else float("nan")}
        if evaluate is not None or objective is not None:
            model.eval()
            with torch.no_grad():
                if evaluate is not None:
                    point.update(evaluate(at))
                if objective is not None:
                    point["objective"] = float(objective())
        model.train()
        if convergence is not None:
            point.setdefault("objective", point["loss"])
            gain = relative_improvement([_objective(p) for p in curve + [point]], convergence.n_iter_no_change, convergence.floor)
            point["improvement"] = gain if np.isfinite(gain) else None  # None: too few points (strict JSON, equal on resume)
        curve.append(point)
        losses.clear()

    def has_converged() -> bool:
        return convergence is not None and convergence.converged([_objective(p) for p in curve])

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n_steps, initial=step, desc=desc, unit="step")
    def monitored() -> np.ndarray:  # the watched values, the start first; NaN never the best
        values = np.asarray(([] if monitor_start is None else [monitor_start]) + [monitor(p) for p in curve], dtype=np.float64)
        return np.where(np.isnan(values), -np.inf, values)

    def plateaued() -> bool:
        values = monitored()
        return len(values) - 1 - int(np.argmax(values)) >= patience

    def save() -> None:
        save_checkpoint(ckpt, {"digest": digest, "step": step, "weights": weights.state_dict(),
                               "optim": optimizer.state_dict(), "rng": rng_state(sampler), "perm": perm, "pos": pos,
                               "curve": curve, "losses": losses, "stopped_at": stopped_at, "converged_at": converged_at})

    model.train()
    t0, done_here = time.perf_counter(), 0
    while step < n_steps and stopped_at is None and converged_at is None:
        if pos + batch_size > n_items and pos > 0:
            perm, pos = sampler.permutation(n_items), 0
        batch = perm[pos : pos + batch_size]
        pos += len(batch)
        loss = batch_loss(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        done_here += 1
        losses.append(float(loss.detach()))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.4f}", steps_per_s=f"{done_here / (time.perf_counter() - t0):.2f}")
        if eval_every and step % eval_every == 0 and step < n_steps:
            curve_point(step)
            if convergence is not None and convergence.stop and has_converged():
                converged_at = step
                log.info("%s: converged at step %d (objective %.6g, improved %.3g < tol %g over the last %d points)", desc,
                         step, curve[-1]["objective"], curve[-1]["improvement"], convergence.tol, convergence.n_iter_no_change)
            elif patience and plateaued():
                stopped_at = step
                log.info("%s: no better %s point in the last %d: stopped at step %d", desc, "curve", patience, step)
        ended = stopped_at is not None or converged_at is not None
        if ckpt and ((checkpoint_every and step % checkpoint_every == 0) or step == n_steps or ended):
            save()
        if stop_after is not None and done_here >= stop_after and step < n_steps:
            raise KeyboardInterrupt(f"stopped after {done_here} steps (test hook)")
    elapsed = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    if stopped_at is None and converged_at is None:
        curve_point(step)
        if has_converged():
            converged_at = step
    elif converged_at is None and convergence is not None and not convergence.stop and has_converged():
        converged_at = step  # trained to the cap but for patience: the rule judges the last point, as state_from_curve does
    state = None
    if convergence is not None:
        chose_earlier = False
        if validation and monitor is not None and curve and (stopped_at is not None or converged_at is not None):
            values = monitored()  # patience (or the rule) ended it and the kept point is not the last
            chose_earlier = int(np.argmax(values)) < len(values) - 1
        state = convergence.state([_objective(p) for p in curve], step, converged_at is not None, chose_earlier)
        if not state.converged and not state.early_stopped:
            log.warning("%s: not converged: %s (tol %g over %d curve points)", desc, state.describe(), convergence.tol,
                        convergence.n_iter_no_change)
    model.eval()
    return LoopResult(curve, done_here / elapsed if elapsed > 0 else float("nan"), resumed, done_here, stopped_at,
                      state, converged_at)


def curve_ks(ks: Sequence[int]) -> list[int]:
    """The curve's cut-offs: every k <= 10 of ``ks``, else the smallest."""
    return [k for k in ks if k <= 10] or [min(ks)]


def curve_evaluator(rs, doc_ids: Sequence[str], scorer: Callable[[], Callable], ks: Sequence[int],
                    groups: Sequence[np.ndarray] = (), max_queries: int | None = None) -> Callable[[int], dict]:
    """The learning curve's ``evaluate(step)`` for ``run_loop``.

    Parameters
    ----------
    rs : capgap.data.RetrievalSet
        Queries, qrels, splits and exclusions.
    doc_ids : sequence of str
        Document ids in score-column order (the index order).
    scorer : callable
        Called once per curve point (e.g. to encode the documents with the model as it is
        then); returns ``score(texts)`` -> a ``capgap.retrieval.rank_queries`` ``score_block``
        over the query ``texts``: ``score_block(a, b)`` -> ``(b - a, len(doc_ids)) float``.
    ks : sequence of int
        The evaluation cut-offs; the curve uses ``curve_ks(ks)``.
    groups : sequence of arrays
        Duplicate groups (``capgap.retrieval.document_groups``) tied before ranking.
    max_queries : int, optional
        The first ``max_queries`` queries of each split (all when None).

    Returns
    -------
    callable
        ``evaluate(step)`` -> ``{"train_recall@k": float, "heldout_recall@k": float, ...}`` for
        each non-empty split (train first) and each curve k; the mean recall@k over the split's
        sampled queries, from full rankings (``capgap.metrics.recall_from_ranks``).
    """
    text = dict(zip(rs.queries.ids, rs.queries.texts))
    cks = curve_ks(ks)
    judged = {}
    for split in ("train", "heldout"):
        ids = list(rs.split.ids(split))[:max_queries]
        if ids:
            judged[split] = Judged.of(rs, ids, doc_ids)

    def evaluate(step: int) -> dict:
        score = scorer()
        out = {}
        for split, j in judged.items():
            ranks = rank_queries(score([text[q] for q in j.query_ids]), len(j.query_ids), j.gold, j.grades, j.excluded, 0,
                                 len(doc_ids), groups)[0]
            ranks, _ = j.full_ranks(ranks)  # unfindable gold: in the denominator, never found
            for k in cks:
                out[f"{split}_recall@{k}"] = float(recall_from_ranks(ranks, k).mean())
        return out

    return evaluate


_VALIDATION_SEED = section_defaults("finetune")["validation_seed"]  # the schema holds every default


def validation_split(train_ids: Sequence[str], fraction: float, seed: int = _VALIDATION_SEED) -> tuple[list[str], list[str]]:
    """Carve a validation split out of the train queries for early stopping (never out of the
    held-out ones): a seeded permutation of ``sorted(train_ids)`` (so the data's order does not
    matter), its first ``round(fraction * n)`` ids (at least 1, at most n - 1) the validation
    queries. Returns ``(fit_ids, validation_ids)``, each in the order of ``train_ids``; they
    are disjoint and together are ``train_ids``. Raises ``ValueError`` for fewer than two
    train queries or ``fraction`` outside (0, 1)."""
    ids = list(train_ids)
    if len(ids) < 2 or not 0.0 < fraction < 1.0:
        raise ValueError(f"validation_split: need two train queries and 0 < fraction < 1 ({len(ids)} queries, {fraction})")
    n_val = min(max(1, round(fraction * len(ids))), len(ids) - 1)
    order = sorted(ids)
    val = {order[i] for i in np.random.default_rng(seed).permutation(len(order))[:n_val]}
    return [q for q in ids if q not in val], [q for q in ids if q in val]
