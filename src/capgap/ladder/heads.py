"""Shared query heads on frozen query embeddings, trained with InfoNCE against the frozen index.

A head maps every query's pre-trained embedding ``x`` (``(dim,) float32``) to a query vector
scored against the frozen index by inner product; one head serves every query (shared), unlike
the probe's one w per query. Two families (issue 29, rungs 2 and 3):

- ``linear``: e(x) = W x, ``W (dim, dim)``, initialised to the identity (the pre-trained
  encoder itself), no bias.
- ``mlp``: one hidden ReLU layer, e(x) = W2 ReLU(W1 x + b1) + b2 (the paper's perfect-encoder
  family, ``capgap.hardness``) with ``width_factor * dim`` hidden units, also initialised to the
  identity: W1 = [I; -I; seeded random rows], W2 = [I, -I, 0], biases 0, since
  x = ReLU(x) - ReLU(-x).

Training (``fit_head``) minimises the mean InfoNCE loss (``GoldRows.loss``) of the
L2-normalised head outputs of *every* query it is fit on, against the whole frozen index (never
changed), under the one convergence rule (``capgap.training.Convergence``, through
``capgap.training.run_loop``; the objective on the whole fit set: ``FitObjective``). Optimisers
(``LadderConfig.optimizer``): ``adamw`` (the default; learning-rate ``schedule``
``stable-decay``, ``constant`` or ``cosine``) or full-batch ``lbfgs``. With a validation split
(the train-only heads) the best curve point's weights are kept and ``patience`` stops training.
The optimisers, schedules and validation in detail: docs/ladder.md. Seeded: the same inputs and
config give the same head on CPU.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from ..finetune import candidate_masks, infonce_loss
from ..training import LoopResult, run_loop, seed_everything
from .config import LadderConfig

log = logging.getLogger(__name__)

HEADS = ("linear", "mlp")
SCHEDULES = ("stable-decay", "constant", "cosine")


def make_head(kind: str, dim: int, width_factor: int = LadderConfig.width_factor):
    """A ``torch.nn.Module`` mapping ``(n, dim)`` to ``(n, dim)`` that starts as the identity
    (module docstring). The mlp's hidden rows beyond ``2 * dim`` keep torch's default (seeded)
    initialisation, their output columns 0. Raises ``ValueError`` for an unknown ``kind`` or
    ``width_factor < 2``."""
    import torch

    if kind == "linear":
        head = torch.nn.Linear(dim, dim, bias=False)
        with torch.no_grad():
            head.weight.copy_(torch.eye(dim))
        return head
    if kind != "mlp":
        raise ValueError(f"make_head: kind must be one of {HEADS}, got {kind!r}")
    if width_factor < 2:
        raise ValueError(f"make_head: width_factor must be >= 2 to start as the identity, got {width_factor}")
    hidden = width_factor * dim
    head = torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, dim))
    eye = torch.eye(dim)
    with torch.no_grad():
        head[0].weight[: 2 * dim] = torch.cat([eye, -eye])
        head[0].bias[: 2 * dim] = 0.0
        head[2].weight.zero_()
        head[2].weight[:, : 2 * dim] = torch.cat([eye, -eye], dim=1)
        head[2].bias.zero_()
    return head


class GoldRows:
    """Every item's gold and excluded document rows, flattened, so a batch's InfoNCE masks are
    built in one step (``masks``) and its ``avg`` loss needs only the gold entries (``loss``)."""

    def __init__(self, gold: Sequence[Sequence[int]], excluded: Sequence[Sequence[int]] | None, n_docs: int):
        self.n_docs = n_docs
        self.gold = [np.asarray(g, dtype=np.int64) for g in gold]
        self.excluded = None if excluded is None else [np.asarray(e, dtype=np.int64) for e in excluded]

    def masks(self, batch: np.ndarray, device=None) -> tuple:
        """``(gold_mask, exclude_mask, rows, cols)`` of the items ``batch``: ``(b, n_docs) bool``
        tensors (``exclude_mask`` None when no item of the batch has exclusions), and the
        batch row and document column of every gold entry (``(g,) int64``), row by row."""
        import torch

        batch = np.asarray(batch, dtype=np.int64)
        sizes = [len(self.gold[i]) for i in batch]
        rows, cols = np.repeat(np.arange(len(batch)), sizes), np.concatenate([self.gold[i] for i in batch])
        gold = np.zeros((len(batch), self.n_docs), dtype=bool)
        gold[rows, cols] = True
        excl = None
        if self.excluded is not None and any(len(self.excluded[i]) for i in batch):
            excl = np.zeros((len(batch), self.n_docs), dtype=bool)
            esizes = [len(self.excluded[i]) for i in batch]
            excl[np.repeat(np.arange(len(batch)), esizes), np.concatenate([self.excluded[i] for i in batch])] = True
            excl = torch.from_numpy(excl).to(device)
        return (
            torch.from_numpy(gold).to(device),
            excl,
            torch.from_numpy(rows).to(device),
            torch.from_numpy(cols).to(device),
        )

    @staticmethod
    def loss(scores, masks: tuple, temperature: float, form: str):
        """``capgap.finetune.infonce_loss(scores, gold_mask, temperature, form, exclude_mask)``
        for ``masks`` (``GoldRows.masks``). The ``avg`` form is computed from the gold entries
        only: each gold entry's softplus(log-sum-exp over the negatives - its logit), averaged
        per query, then over the batch (the same terms as ``infonce_loss``, which evaluates the
        softplus on every entry and masks it: about a third of a step's time on NFCorpus)."""
        import torch

        gold, excl, rows, cols = masks
        if form != "avg":
            return infonce_loss(scores, gold, temperature, form, excl)
        logits = scores / temperature
        neg_inf = torch.finfo(logits.dtype).min
        out = gold if excl is None else gold | excl
        lse_neg = torch.logsumexp(logits.masked_fill(out, neg_inf), dim=1)
        per = torch.nn.functional.softplus(lse_neg[rows] - logits[rows, cols])
        per_q = torch.zeros(len(logits), dtype=per.dtype, device=per.device).index_add(0, rows, per)
        return (per_q / gold.sum(1)).mean()


class FitObjective:
    """The objective a head is fit to: the mean InfoNCE loss of ``head(X)`` (L2-normalised) over
    every query against every document row (``candidates: full``; excluded rows out of the
    softmax; ``GoldRows.loss``), in blocks of at most ``max_scores`` query x document scores.
    The masks are built once (kept while they fit in ``max_cached`` booleans, else rebuilt per
    call)."""

    def __init__(
        self,
        X,
        doc_tensor,
        rows: GoldRows,
        temperature: float,
        form: str,
        max_scores: int = 1 << 22,
        max_cached: int = 1 << 27,
    ):
        self.X, self.doc_tensor, self.rows = X, doc_tensor, rows
        self.temperature, self.form = temperature, form
        n, n_docs = len(rows.gold), doc_tensor.shape[0]
        self.n, self.block = n, max(1, min(n, max_scores // max(1, n_docs)))
        self.cached = [self._masks(a) for a in range(0, n, self.block)] if n * n_docs <= max_cached else None

    def _masks(self, a: int):
        return self.rows.masks(np.arange(a, min(self.n, a + self.block)), self.doc_tensor.device)

    def __call__(self, head):
        """The objective as a 0-d tensor (differentiable when grad is enabled)."""
        import torch

        total = None
        for i, a in enumerate(range(0, self.n, self.block)):
            b = min(self.n, a + self.block)
            masks = self.cached[i] if self.cached is not None else self._masks(a)
            q = torch.nn.functional.normalize(head(self.X[a:b]), dim=-1)
            part = GoldRows.loss(q @ self.doc_tensor.T, masks, self.temperature, self.form) * (b - a)
            total = part if total is None else total + part
        return total / self.n


class _LBFGS:
    """``torch.optim.LBFGS`` (strong-Wolfe line search, ``lr`` 1) as ``run_loop``'s optimiser:
    ``step()`` runs one L-BFGS iteration. Its first evaluation (the objective and gradient at
    the current weights) is the one ``run_loop`` just did (``loss.backward()``); the weights an
    iteration ends on are always a point its line search evaluated, so ``ready()`` hands the
    next step that evaluation (value and gradient) instead of computing it again."""

    def __init__(self, params, objective: Callable[[], object], history_size: int, max_evals: int = 25):
        import torch

        self.params = list(params)
        self.objective = objective
        self.opt = torch.optim.LBFGS(
            self.params,
            lr=1.0,
            max_iter=1,
            max_eval=max_evals,
            history_size=history_size,
            tolerance_grad=0.0,
            tolerance_change=0.0,
            line_search_fn="strong_wolfe",
        )
        self.last_loss = None  # run_loop's loss at the current weights (set by the batch loss)
        self.cache = None  # (flat weights, loss, gradients) of the point the last step ended on
        self.evals = 0

    def _flat(self):
        import torch

        return torch.cat([p.detach().reshape(-1) for p in self.params])

    def ready(self):
        """A 0-d tensor with the objective's value at the current weights and, through
        ``backward``, its gradient (a linear surrogate of the last line-search evaluation);
        None when the weights are not such a point."""
        import torch

        if self.cache is None or not torch.equal(self.cache[0], self._flat()):
            return None
        _, loss, grads = self.cache
        return loss + sum(((p - p.detach()) * g).sum() for p, g in zip(self.params, grads))

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        import torch

        seen, first = [], [True]

        def closure():
            if first[0]:  # run_loop's evaluation at these weights (gradients in .grad)
                first[0] = False
                return self.last_loss
            self.opt.zero_grad(set_to_none=True)
            with torch.enable_grad():
                loss = self.objective()
                loss.backward()
            self.evals += 1
            seen.append((self._flat(), loss.detach(), [p.grad.detach().clone() for p in self.params]))
            return loss.detach()

        self.opt.step(closure)
        at = self._flat()
        self.cache = next((s for s in seen if torch.equal(s[0], at)), None)

    def state_dict(self) -> dict:
        return self.opt.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.opt.load_state_dict(state)
        self.cache = None


class _Scheduled:
    """An optimiser whose learning rate follows ``factor(step)`` x its base rate (step: the
    optimiser steps done), set before every step."""

    def __init__(self, opt, factor: Callable[[int], float]):
        self.opt, self.factor, self.t = opt, factor, 0
        self.base = [g["lr"] for g in opt.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for g, lr in zip(self.opt.param_groups, self.base):
            g["lr"] = lr * self.factor(self.t)
        self.opt.step()
        self.t += 1

    def state_dict(self) -> dict:
        return {"opt": self.opt.state_dict(), "t": self.t}

    def load_state_dict(self, state: dict) -> None:
        self.opt.load_state_dict(state["opt"])
        self.t = state["t"]


class _KeepBest:
    """The weights of the best validation point so far (the highest value, the earliest of equal
    ones), put back on the head by ``restore``."""

    def __init__(self, head):
        self.head, self.value, self.step, self.state = head, -math.inf, None, None

    def observe(self, step: int, value: float) -> float:
        if value > self.value:
            self.value, self.step = value, step
            self.state = {k: v.detach().clone() for k, v in self.head.state_dict().items()}
        return value

    def restore(self) -> None:
        if self.state is not None:
            self.head.load_state_dict(self.state)


def lr_factor(schedule: str, steps: int) -> Callable[[int], float]:
    """The learning-rate factor at optimiser step t (0-based) of a run capped at ``steps``:
    ``constant`` and ``stable-decay`` (until the rule converges: ``decay_factor`` then takes
    over) 1; ``cosine`` 0.5 (1 + cos(pi t / steps)), from 1 down to 0 at the cap."""
    if schedule in ("constant", "stable-decay"):
        return lambda t: 1.0
    if schedule == "cosine":
        return lambda t: 0.5 * (1.0 + math.cos(math.pi * min(t, steps) / steps))
    raise ValueError(f"lr_factor: schedule must be one of {SCHEDULES}, got {schedule!r}")


def decay_factor(start: int, length: int) -> Callable[[int], float]:
    """``stable-decay``'s second phase: the factor at optimiser step t, 0.5 (1 + cos(pi (t -
    start) / length)), from 1 at ``start`` down to 0 ``length`` steps later (warmup-stable-decay
    schedules without the warmup: Hu et al. 2024, MiniCPM, section 4)."""
    return lambda t: 0.5 * (1.0 + math.cos(math.pi * min(max(t - start, 0), length) / length))


def fit_head(
    kind: str,
    X: np.ndarray,
    documents: np.ndarray,
    gold: Sequence[Sequence[int]],
    excluded: Sequence[Sequence[int]] | None,
    cfg: LadderConfig,
    threads: int | None = None,
    progress: bool = False,
    validate: Callable[[object], float] | None = None,
    evaluate: Callable[[object, int], dict] | None = None,
    name: str | None = None,
) -> tuple[object, LoopResult]:
    """Train one head of ``kind`` on the queries ``X`` ``(n, dim) float32`` (their pre-trained
    embeddings), ``gold[i]`` / ``excluded[i]``: row indices of query i's gold and excluded
    documents in ``documents`` ``(n_docs, dim) float32`` (the frozen index; read only).

    Seeds everything with ``cfg.seed`` first (the mlp's random rows come from it), then trains
    with ``cfg.optimizer`` (docs/ladder.md) under ``cfg.convergence()``: a curve point every
    ``cfg.eval_every`` steps and at the end holds the objective on all ``n`` queries
    (``FitObjective``); training stops at convergence or at the cap ``cfg.steps``.

    ``validate(head)`` (optional) -> float, higher is better (e.g. R-precision of the head on
    validation queries; called in eval mode, no grad): called on the initial head (step 0) and
    at each curve point, which records it as ``validation``; the weights of the best of these
    (the earliest of equal values) are put back at the end, and training stops after
    ``cfg.patience`` curve points without a new best among them (counted from the initial head
    when it is the best). ``name``: the learner's name in the log and its warnings (e.g.
    ``nfcorpus/minilm head-mlp-all``; default ``head-<kind>``). ``evaluate(head, step)`` (optional) ->
    dict of extra curve metrics (benchmarks). Runs on CUDA when available, else on CPU
    (``threads``: torch threads). Returns ``(head, LoopResult)``: the head in eval mode on the
    CPU, the result's ``convergence`` the run's ``ConvergenceState`` (logged). Raises
    ``ValueError`` without queries or when a query has no gold row (InfoNCE needs one)."""
    import torch

    X = np.asarray(X, dtype=np.float32)
    if len(X) == 0:
        raise ValueError("fit_head: no queries to fit")
    empty = [i for i, g in enumerate(gold) if len(g) == 0]
    if empty:
        raise ValueError(f"fit_head: {len(empty)} queries without a gold row (first: item {empty[0]})")
    if threads:
        torch.set_num_threads(int(threads))
    sampler = seed_everything(cfg.seed)
    head = make_head(kind, X.shape[1], cfg.width_factor)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    head.to(device)
    Xt = torch.from_numpy(X).to(device)
    # a private copy (may be a memory map)
    doc_tensor = torch.from_numpy(np.array(documents, dtype=np.float32, copy=True)).to(device)
    rows = GoldRows(gold, excluded, doc_tensor.shape[0])
    full = FitObjective(Xt, doc_tensor, rows, cfg.temperature, cfg.loss)
    params = list(head.parameters())
    n = len(X)
    if cfg.optimizer == "lbfgs":
        opt = _LBFGS(params, lambda: full(head), cfg.history_size)

        def batch_loss(batch):
            loss = opt.ready()
            if loss is None:
                loss = full(head)
                opt.evals += 1
            opt.last_loss = loss.detach()
            return loss

        batch_size = n
    else:
        opt = _Scheduled(
            torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay), lr_factor(cfg.schedule, cfg.steps)
        )
        batch_size = min(cfg.batch_size, n)

        def batch_loss(batch):
            if cfg.candidates == "full":
                if batch_size == n:
                    return full(head)  # the whole fit set, masks built once
                q = torch.nn.functional.normalize(
                    head(Xt[torch.from_numpy(np.asarray(batch, dtype=np.int64)).to(device)]), dim=-1
                )
                return GoldRows.loss(q @ doc_tensor.T, rows.masks(batch, device), cfg.temperature, cfg.loss)
            cand, mask, excl = candidate_masks(
                batch, gold, excluded, doc_tensor.shape[0], cfg.candidates, cfg.n_negatives, sampler
            )
            q = torch.nn.functional.normalize(
                head(Xt[torch.from_numpy(np.asarray(batch, dtype=np.int64)).to(device)]), dim=-1
            )
            return infonce_loss(
                q @ doc_tensor[torch.from_numpy(cand).to(device)].T,
                mask.to(device),
                cfg.temperature,
                cfg.loss,
                None if excl is None else excl.to(device),
            )

    keep = _KeepBest(head) if validate is not None else None
    curve_metrics = None
    if validate is not None or evaluate is not None:

        def curve_metrics(step):
            out = dict(evaluate(head, step)) if evaluate is not None else {}
            if keep is not None:
                out["validation"] = keep.observe(step, float(validate(head)))
            return out

    desc = name or f"head-{kind}"
    t = time.perf_counter()
    start = None
    if keep is not None:  # the start (the identity: the pre-trained encoder) is a candidate too
        head.eval()
        with torch.no_grad():
            start = keep.observe(0, float(validate(head)))
    res = run_loop(
        batch_loss,
        head,
        opt,
        cfg.steps,
        n,
        batch_size,
        sampler,
        progress=progress,
        desc=desc,
        evaluate=curve_metrics,
        eval_every=cfg.eval_every,
        convergence=cfg.convergence(),
        objective=lambda: full(head),
        patience=cfg.patience if keep is not None and cfg.patience else None,
        monitor=(lambda point: point["validation"]) if keep is not None else None,
        validation=keep is not None,
        monitor_start=start,
    )
    if cfg.optimizer == "adamw" and cfg.schedule == "stable-decay" and res.converged_at is not None:
        # converged at the constant rate: the objective no longer falls at that rate; now decay it
        # to 0 over decay_fraction of the steps so far, to settle into the minimum it found
        length = max(1, math.ceil(cfg.decay_fraction * res.converged_at))
        opt.factor = decay_factor(opt.t, length)
        tail = run_loop(
            batch_loss,
            head,
            opt,
            length,
            n,
            batch_size,
            sampler,
            progress=progress,
            desc=f"{desc} decay",
            evaluate=(lambda step: curve_metrics(res.converged_at + step)) if curve_metrics else None,
            eval_every=cfg.eval_every,
            objective=lambda: full(head),
        )
        res.curve.extend({**p, "step": res.converged_at + p["step"], "decay": True} for p in tail.curve)
        res.steps_run += tail.steps_run
        res.convergence = replace(res.convergence, objective=res.curve[-1]["objective"], decay_steps=length)
    seconds = time.perf_counter() - t
    kept = ""
    if keep is not None:
        keep.restore()
        head.eval()
        with torch.no_grad():  # the state describes the kept weights: their objective on the fit set
            res.convergence = replace(
                res.convergence,
                objective=float(full(head)),  # early stopping: patience (or the
                early_stopped=keep.step != res.curve[-1]["step"]  # rule) ended it, an earlier
                and (res.stopped_at is not None or res.converged_at is not None),
            )  # point kept
        kept = f"; kept the best validation point: step {keep.step} ({keep.value:.4f})"
    how = f"lbfgs, {opt.evals} evaluations" if cfg.optimizer == "lbfgs" else f"adamw, batch {batch_size}"
    log.info(
        "ladder: %s on %d queries (%s): %s in %.1f s, objective %.4f%s",
        desc,
        n,
        how,
        res.convergence.describe(),
        seconds,
        res.convergence.objective,
        kept,
    )
    return head.cpu().eval(), res


def apply_head(head, X: np.ndarray, block: int = 8192) -> np.ndarray:
    """The head's L2-normalised query vectors for ``X`` ``(n, dim) float32``: ``(n, dim)
    float32`` (normalising leaves every ranking as it is; it is the vector the loss scored)."""
    import torch

    X = np.asarray(X, dtype=np.float32)
    device = next(head.parameters()).device
    out = []
    with torch.no_grad():
        for a in range(0, len(X), block):
            out.append(
                torch.nn.functional.normalize(head(torch.from_numpy(X[a : a + block]).to(device)), dim=-1).cpu().numpy()
            )
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, X.shape[1]), dtype=np.float32)
