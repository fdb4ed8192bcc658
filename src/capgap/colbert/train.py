"""ColBERT fine-tuning (both towers, as ColBERT is trained) with PyLate's contrastive loss.

Each step: ``batch_size`` train queries; per query one gold document (the positive) and
``n_negatives`` random non-gold documents; ``pylate.losses.Contrastive`` over all the batch's
documents. LIMIT's gold sets overlap across queries, so an in-batch document that is gold for a
query is masked out of its softmax (a false negative), never pushed away. The loop (batches,
checkpoints, curve, progress) is ``capgap.training.run_loop``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..training import json_digest, run_loop, seed_everything
from .models import ColbertConfig


class _MaskedScores:
    """``pylate.scores.ColBERTScores`` with the batch's false negatives set to -inf: an in-batch
    document that is gold for a query (other than its own positive) leaves that query's softmax."""

    def __init__(self):
        from pylate.scores import ColBERTScores

        self.inner = ColBERTScores()
        self.mask = None  # (B, B*N) bool, set before each loss call

    def __call__(self, queries_embeddings, documents_embeddings, queries_mask=None, documents_mask=None):
        s = self.inner(
            queries_embeddings, documents_embeddings, queries_mask=queries_mask, documents_mask=documents_mask
        )
        return s if self.mask is None else s.masked_fill(self.mask.to(s.device), float("-inf"))


def false_negative_mask(batch_gold: list[set[int]], slots: list[list[int]]) -> np.ndarray:
    """``(B, B*N) bool``: True where slot ``t`` of doc group ``j`` is gold for query ``i`` but is
    not query ``i``'s own positive (group ``i``, slot 0). ``slots[j][t]``: a document index."""
    B, N = len(slots), len(slots[0])
    m = np.zeros((B, B * N), dtype=bool)
    for i, gold in enumerate(batch_gold):
        for j in range(B):
            for t in range(N):
                if (i, t) != (j, 0) and slots[j][t] in gold:
                    m[i, j * N + t] = True
    return m


def train_colbert(
    model,
    cfg: ColbertConfig,
    doc_texts: Sequence[str],
    train_queries: Sequence[str],
    train_gold: Sequence[Sequence[int]],
    ckpt_path: str | Path | None = None,
    evaluate: Callable[[int], dict] | None = None,
    stop_after: int | None = None,
    progress: bool = False,
    train_excluded: Sequence[Sequence[int]] | None = None,
    name: str = "colbert",
) -> dict:
    """Fine-tune ``model`` (``pylate.models.ColBERT``) in place with PyLate's contrastive loss.

    Each step: ``cfg.batch_size`` train queries from a seeded per-epoch permutation; per query
    one gold document drawn uniformly as the positive and ``cfg.n_negatives`` documents drawn
    uniformly from its non-gold documents; the loss is ``pylate.losses.Contrastive``
    (temperature ``cfg.temperature``) over all the batch's documents with false negatives
    masked (``false_negative_mask``). AdamW. Checkpoints (weights, optimiser, RNG states, sampler
    position, curve) are written atomically every ``cfg.checkpoint_every`` steps and resumed
    only when ``cfg.training_digest()`` and a digest of the training data (document texts,
    train queries, gold sets, exclusions) match. ``evaluate(step)``: curve metrics every
    ``cfg.eval_every`` steps and at the end (without it the curve holds the loss only).
    ``train_excluded[i]``: documents that are neither gold nor negative for query i (never drawn
    as its negatives, masked like false negatives). ``stop_after``: raise ``KeyboardInterrupt``
    after that many steps of this call (tests simulate a kill with it). ``name``: the learner in
    the log and its warnings (e.g. ``limit-small colbert``).

    ``cfg.patience``: stop once that many curve points bring no new best ``heldout_recall``
    (the paper trains ColBERT until held-out recall stops rising).

    Training stops at convergence (``cfg.convergence()``: the loss of fixed batches, the first
    ``cfg.eval_max_queries`` train queries with documents drawn once, in eval mode, improved by
    less than ``cfg.tol`` over ``cfg.n_iter_no_change`` curve points) or at the cap
    ``cfg.steps``.

    Returns ``{"curve", "steps_per_s", "resumed_from", "stopped_at", "convergence"}``
    (``stopped_at``: the step early stopping ended at, or None; ``convergence``: the
    ``capgap.training.ConvergenceState``). Raises ``ValueError`` without train queries.
    """
    import torch
    from pylate import losses

    n_train, n_docs = len(train_queries), len(doc_texts)
    if n_train == 0:
        raise ValueError("colbert: no train queries")
    sampler = seed_everything(cfg.seed)
    scorer = _MaskedScores()
    loss_fn = losses.Contrastive(model=model, score_metric=scorer, temperature=cfg.temperature)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gold_sets = [set(int(g) for g in gs) for gs in train_gold]
    avoid = (
        [g | set(int(e) for e in train_excluded[i]) for i, g in enumerate(gold_sets)] if train_excluded else gold_sets
    )

    def draw(batch, rng) -> list[list[int]]:  # per query: a gold document, then its negatives
        slots = []
        for qi in batch:
            gold = sorted(gold_sets[qi])
            row = [gold[int(rng.integers(len(gold)))]]
            while len(row) < 1 + cfg.n_negatives and len(avoid[qi]) < n_docs:
                d = int(rng.integers(n_docs))
                if d not in avoid[qi]:
                    row.append(d)
            slots.append(row)
        return slots

    def loss_of(batch, slots):
        scorer.mask = torch.from_numpy(false_negative_mask([avoid[qi] for qi in batch], slots))
        feats = [model.tokenize([train_queries[qi] for qi in batch], is_query=True)]
        feats += [
            model.tokenize([doc_texts[row[t]] for row in slots], is_query=False, pad=True) for t in range(len(slots[0]))
        ]
        feats = [{k: v.to(model.device) for k, v in f.items()} for f in feats]
        return loss_fn(feats)

    def batch_loss(batch):
        return loss_of(batch, draw(batch, sampler))

    # The convergence rule's objective: the loss of fixed batches (the first eval_max_queries
    # train queries, their documents drawn once from a generator of their own, so the training
    # sampler's draws stay as they were), in eval mode: free of the batches' sampling noise.
    fixed_rng = np.random.default_rng([cfg.seed, 1])
    sample = np.arange(min(n_train, cfg.eval_max_queries), dtype=np.int64)
    fixed = [
        (b, draw(b, fixed_rng)) for b in (sample[a : a + cfg.batch_size] for a in range(0, len(sample), cfg.batch_size))
    ]

    def objective() -> float:
        return sum(float(loss_of(b, slots)) * len(b) for b, slots in fixed) / len(sample)

    digest = {}
    if ckpt_path:
        data = [
            list(doc_texts),
            list(train_queries),
            [sorted(g) for g in gold_sets],
            [sorted(int(e) for e in ex) for ex in (train_excluded or [])],
        ]
        digest = {"ColBERT training settings": cfg.training_digest(), "training data": json_digest(data)}
    res = run_loop(
        batch_loss,
        model,
        opt,
        cfg.steps,
        n_train,
        cfg.batch_size,
        sampler,
        ckpt_path=ckpt_path,
        digest=digest,
        checkpoint_every=cfg.checkpoint_every,
        evaluate=evaluate,
        eval_every=cfg.eval_every,
        progress=progress,
        desc=name,
        stop_after=stop_after,
        patience=cfg.patience,
        monitor=heldout_recall,
        convergence=cfg.convergence(),
        objective=objective,
    )
    return {
        "curve": res.curve,
        "steps_per_s": res.steps_per_s,
        "resumed_from": res.resumed_from,
        "stopped_at": res.stopped_at,
        "convergence": res.convergence,
    }


def heldout_recall(point: dict) -> float:
    """The early-stopping signal of a curve point: the mean held-out recall over the curve's
    cut-offs (``heldout_recall@k`` keys of ``capgap.training.curve_evaluator``). ``ValueError``
    when the point has none (no held-out split, or a curve without recall)."""
    values = [v for k, v in point.items() if k.startswith("heldout_recall@")]
    if not values:
        raise ValueError("colbert.patience: the learning curve has no held-out recall to watch")
    return float(np.mean(values))
