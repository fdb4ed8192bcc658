"""The resumable training loop (``run_loop``), its seeding, RNG states and atomic checkpoints."""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from ..io import atomic_open
from .convergence import Convergence, ConvergenceState, _objective, relative_improvement

log = logging.getLogger("capgap.training")


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
        ``digest`` (with ``n_items`` as the part "number of training items"), ``step``,
        ``weights``, ``optim``, ``rng`` (``rng_state``), ``perm``, ``pos``, ``curve``, ``losses``
        (losses since the last curve point).
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
        raise ValueError(
            f"run_loop: the convergence rule's cap ({convergence.max_iter}) must equal n_steps "
            f"({n_steps}) and eval_every ({eval_every}) be >= 1 (the rule is checked at curve points)"
        )
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
            gain = relative_improvement(
                [_objective(p) for p in curve + [point]], convergence.n_iter_no_change, convergence.floor
            )
            # None: too few points (strict JSON, equal on resume)
            point["improvement"] = gain if np.isfinite(gain) else None
        curve.append(point)
        losses.clear()

    def has_converged() -> bool:
        return convergence is not None and convergence.converged([_objective(p) for p in curve])

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n_steps, initial=step, desc=desc, unit="step")

    def monitored() -> np.ndarray:  # the watched values, the start first; NaN never the best
        values = np.asarray(
            ([] if monitor_start is None else [monitor_start]) + [monitor(p) for p in curve], dtype=np.float64
        )
        return np.where(np.isnan(values), -np.inf, values)

    def plateaued() -> bool:
        values = monitored()
        return len(values) - 1 - int(np.argmax(values)) >= patience

    def save() -> None:
        save_checkpoint(
            ckpt,
            {
                "digest": digest,
                "step": step,
                "weights": weights.state_dict(),
                "optim": optimizer.state_dict(),
                "rng": rng_state(sampler),
                "perm": perm,
                "pos": pos,
                "curve": curve,
                "losses": losses,
                "stopped_at": stopped_at,
                "converged_at": converged_at,
            },
        )

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
                log.info(
                    "%s: converged at step %d (objective %.6g, improved %.3g < tol %g over the last %d points)",
                    desc,
                    step,
                    curve[-1]["objective"],
                    curve[-1]["improvement"],
                    convergence.tol,
                    convergence.n_iter_no_change,
                )
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
        # trained to the cap but for patience: the rule judges the last point, as state_from_curve does
        converged_at = step
    state = None
    if convergence is not None:
        chose_earlier = False
        if validation and monitor is not None and curve and (stopped_at is not None or converged_at is not None):
            values = monitored()  # patience (or the rule) ended it and the kept point is not the last
            chose_earlier = int(np.argmax(values)) < len(values) - 1
        state = convergence.state([_objective(p) for p in curve], step, converged_at is not None, chose_earlier)
        if not state.converged and not state.early_stopped:
            log.warning(
                "%s: not converged: %s (tol %g over %d curve points)",
                desc,
                state.describe(),
                convergence.tol,
                convergence.n_iter_no_change,
            )
    model.eval()
    return LoopResult(
        curve, done_here / elapsed if elapsed > 0 else float("nan"), resumed, done_here, stopped_at, state, converged_at
    )
