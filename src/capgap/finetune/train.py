"""The training loop's batches and loss, early stopping, and the pipeline's fine-tuning step."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..data import Split, excluded_positions, query_records
from ..io import atomic_open
from ..retrieval import dense_scores, document_groups
from ..training import (  # noqa: F401
    ConvergenceState,
    PartialState,
    curve_evaluator,
    curve_ks,
    json_digest,
    run_loop,
    seed_everything,
    validation_split,  # validation_split: re-exported (capgap.finetune's API)
)
from .adapter import add_lora
from .config import FinetuneConfig
from .loss import candidate_masks, infonce_loss

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """``curve``: list of dicts (step, loss, train/held-out recall@k); ``steps_per_s``;
    ``resumed_from``: the step a checkpoint restored (0 if none); ``trainable``: parameter count;
    ``adapted_modules``: the module names LoRA wraps; ``queries``: ``(n_queries, dim) float32``
    every query of the retrieval set (in its order) encoded by the final weights at the last
    curve point, which the final evaluation reuses instead of encoding them again
    (``finetune_encoder``; None when the loop ended otherwise, e.g. with early stopping, whose
    best weights are put back after the last point); ``convergence``: the
    ``capgap.training.ConvergenceState`` (converged or stopped at the cap ``cfg.steps``)."""

    curve: list
    steps_per_s: float
    resumed_from: int
    trainable: int
    adapted_modules: list
    early_stopping: dict | None = None
    queries: np.ndarray | None = None
    convergence: "ConvergenceState | None" = None


class EarlyStop:
    """Early stopping on a validation split carved from the train queries (``validation_split``):
    every curve point also evaluates the validation queries (``validation_recall@k``, k the
    first curve cut-off); the trainable weights of the best point (highest value, the earliest
    of equal ones) are kept in memory and, beside a checkpoint, in ``<checkpoint>.best``
    (written atomically, so a resumed run keeps them), and put back on the model at the end."""

    def __init__(self, model, validation_ids: Sequence[str], key: str):
        self.model, self.validation_ids, self.key = model, list(validation_ids), key
        self.best, self.best_step, self.state, self.weights, self.path = -np.inf, None, None, None, None

    def attach(self, weights, ckpt_path, digest=None) -> None:
        """The weights to snapshot (a ``PartialState``) and where to keep them beside the checkpoint;
        ``digest``: the checkpoint's digest parts (``run_loop``'s): a ``.best`` file is taken up
        only when its validation ids and digest equal these (a run under other settings or data
        starts over, as its checkpoint does)."""
        import torch

        self.weights, self.digest = weights, json_digest(digest) if digest is not None else None
        self.path = Path(f"{ckpt_path}.best") if ckpt_path else None
        if self.path and self.path.is_file() and self.digest is not None:  # no digest: nothing to match, start over
            saved = torch.load(self.path, weights_only=False)
            if saved.get("validation_ids") == self.validation_ids and saved.get("digest") == self.digest:
                self.best, self.best_step, self.state = saved["value"], saved["step"], saved["weights"]
            else:
                log.warning(
                    "finetune: ignoring %s: it was written under other settings, data or validation queries", self.path
                )

    def monitor(self, point: dict) -> float:
        return float(point[self.key])

    def wrap(self, evaluate, on_validation):
        """``evaluate`` plus the validation metric (renamed ``validation_*``), snapshotting a new best."""

        def both(step: int) -> dict:
            out = dict(evaluate(step))
            out.update({k.replace("train_", "validation_", 1): v for k, v in on_validation(step).items()})
            if out[self.key] > self.best and self.weights is not None:
                self.best, self.best_step, self.state = out[self.key], step, self.weights.state_dict()
                if self.path:
                    import torch

                    with atomic_open(self.path, "wb") as fh:
                        torch.save(
                            {
                                "step": step,
                                "value": self.best,
                                "weights": self.state,
                                "validation_ids": self.validation_ids,
                                "digest": self.digest,
                            },
                            fh,
                        )
            return out

        return both

    def restore(self, curve) -> None:
        """Put the best point's weights back on the model (nothing when no point was evaluated)."""
        if self.state is not None:
            self.weights.load_state_dict(self.state)
            log.info("finetune: early stopping keeps step %s (%s %.4f)", self.best_step, self.key, self.best)
        if self.path:
            self.path.unlink(missing_ok=True)

    def record(self, res) -> dict:
        """What the run recorded: the validation ids, the best step and value, where it stopped."""
        return {
            "validation_ids": self.validation_ids,
            "best_step": self.best_step,
            "best_value": float(self.best),
            "monitor": self.key,
            "stopped_at": res.stopped_at,
        }


def training_digest(
    encoder,
    doc_embeddings: np.ndarray,
    train_queries: list[str],
    train_gold: list[list[int]],
    train_excluded: list[list[int]] | None,
    cfg: "FinetuneConfig",
    context=None,
) -> str:
    """sha256 (hex) of everything that determines training: the config, the encoder's
    fingerprint (model, weights, pooling, ...), the frozen index's bytes ``(n_docs, dim)``
    (hashed blockwise), every train query's text, gold rows and excluded rows, and ``context``
    (any JSON-able data the checkpoint's curve depends on, e.g. the held-out queries). A
    checkpoint whose digest differs is never resumed."""
    h = hashlib.sha256()
    fp = encoder.fingerprint() if hasattr(encoder, "fingerprint") else {}
    h.update(
        json.dumps(
            [
                cfg.digest(),
                fp,
                list(train_queries),
                [sorted(int(x) for x in g) for g in train_gold],
                [sorted(int(x) for x in e) for e in (train_excluded or [])],
                context,
            ],
            sort_keys=True,
        ).encode()
    )
    doc_matrix = np.asarray(doc_embeddings)
    h.update(f"{doc_matrix.shape}{doc_matrix.dtype}".encode())
    for b0 in range(0, doc_matrix.shape[0], 8192):
        h.update(np.ascontiguousarray(doc_matrix[b0 : b0 + 8192]).tobytes())
    return h.hexdigest()


def train_query_encoder(
    encoder,
    doc_embeddings: np.ndarray,
    train_queries: list[str],
    train_gold: list[list[int]],
    cfg: FinetuneConfig,
    ckpt_path: str | Path | None = None,
    evaluate: Callable[[int], dict] | None = None,
    threads: int | None = None,
    stop_after: int | None = None,
    progress: bool = False,
    train_excluded: list[list[int]] | None = None,
    context=None,
    early: "EarlyStop | None" = None,
    name: str = "finetune",
) -> TrainResult:
    """Fine-tune ``encoder`` (a ``capgap.encoders.Encoder``) in place with LoRA + InfoNCE.

    ``doc_embeddings``: the frozen index ``(n_docs, dim) float32`` (read only, no gradient);
    ``train_queries[i]`` / ``train_gold[i]``: train-split query texts and their gold row indices.
    The loop (batches, checkpoints, curve, progress) is ``capgap.training.run_loop``:
    ``evaluate(step)`` -> dict of curve metrics, called every ``cfg.eval_every`` steps and at
    the end (the model is in eval mode meanwhile; without ``evaluate`` the curve holds the loss
    only). ``ckpt_path``: checkpoint file (the LoRA weights, optimiser, RNG states, sampler
    position, curve); resumed only when the config digest and the ``training_digest`` match
    (config, encoder, index, train queries, gold sets and exclusions, ``context``), else
    training starts over and the log says which differ. ``stop_after``: raise
    ``KeyboardInterrupt`` after that many steps of this call (tests simulate a kill with it).
    ``name``: the learner in the log and its warnings (e.g. ``nfcorpus/minilm finetuned``).
    ``train_excluded[i]``: row indices left out of query i's softmax (neither gold nor
    negative). ``context``: JSON-able data the curve also depends on (``evaluate``'s queries),
    part of the checkpoint digest. On CUDA the forward pass runs under bf16 autocast
    (``cfg.precision`` "auto" or "bf16"; the loss is computed in float32). Returns a
    ``TrainResult``; training stops at convergence (``cfg.convergence()``: the InfoNCE loss of a
    fixed sample, the first ``cfg.eval_max_queries`` train queries, against the whole index in
    eval mode, improved by less than ``cfg.tol`` over ``cfg.n_iter_no_change`` curve points) or
    at the cap ``cfg.steps``, and ``TrainResult.convergence`` says which. Raises
    ``ValueError`` without train queries or (``add_lora``) for an architecture without target
    modules.
    """
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    n_train = len(train_queries)
    if n_train == 0:
        raise ValueError("finetune: no train queries")
    sampler = seed_everything(cfg.seed)
    if cfg.mode == "full":  # every weight of the query encoder trains (the index stays frozen: it is a tensor here)
        for p in encoder.model.parameters():
            p.requires_grad = True
        adapted = ["*"]
    else:
        adapted = add_lora(encoder, cfg)  # LoRA's initial weights come from the seeded torch RNG
    model = encoder.model
    trained = (lambda k: True) if cfg.mode == "full" else (lambda k: "lora_" in k)
    device = next(model.parameters()).device
    bf16 = device.type == "cuda" and cfg.precision in ("auto", "bf16")
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    # a private copy (the index may be a read-only memory map); never given requires_grad
    doc_matrix = torch.from_numpy(np.array(doc_embeddings, dtype=np.float32, copy=True)).to(device)
    n_docs = doc_matrix.shape[0]

    def batch_loss(batch):
        cand, mask, excl = candidate_masks(
            batch, train_gold, train_excluded, n_docs, cfg.candidates, cfg.n_negatives, sampler
        )
        feats = model.tokenize([encoder.spec.query_prompt + train_queries[qi] for qi in batch])
        feats = {k: v.to(device) for k, v in feats.items()}
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            q = model(feats)["sentence_embedding"]
        q = q.float()
        if encoder.normalize and not encoder.extra.get("has_normalize_module", False):
            q = torch.nn.functional.normalize(q, dim=-1)
        docs = doc_matrix if cand is None else doc_matrix[torch.from_numpy(cand)]
        return infonce_loss(
            q @ docs.T, mask.to(device), cfg.temperature, cfg.loss, None if excl is None else excl.to(device)
        )

    # the fixed sample: the fit set's first queries
    sample = np.arange(min(n_train, cfg.eval_max_queries), dtype=np.int64)

    def objective() -> float:
        """The training loss (InfoNCE against the whole index, exclusions left out) of the fixed
        sample, in eval mode (no dropout): the convergence rule's objective, free of the batches'
        sampling noise."""
        total = 0.0
        for a in range(0, len(sample), cfg.batch_size):
            batch = sample[a : a + cfg.batch_size]
            _, mask, excl = candidate_masks(batch, train_gold, train_excluded, n_docs, "full")
            feats = {
                k: v.to(device)
                for k, v in model.tokenize([encoder.spec.query_prompt + train_queries[qi] for qi in batch]).items()
            }
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                q = model(feats)["sentence_embedding"]
            q = q.float()
            if encoder.normalize and not encoder.extra.get("has_normalize_module", False):
                q = torch.nn.functional.normalize(q, dim=-1)
            loss = infonce_loss(
                q @ doc_matrix.T, mask.to(device), cfg.temperature, cfg.loss, None if excl is None else excl.to(device)
            )
            total += float(loss) * len(batch)
        return total / len(sample)

    digest = {}
    if ckpt_path:
        digest = {
            "fine-tuning config": cfg.digest(),
            "data": training_digest(encoder, doc_embeddings, train_queries, train_gold, train_excluded, cfg, context),
        }
    weights = PartialState(model, trained)
    if early is not None:
        early.attach(weights, ckpt_path, {**digest, "number of training items": n_train})
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
        weights=weights,
        evaluate=evaluate,
        eval_every=cfg.eval_every,
        progress=progress,
        desc=name,
        stop_after=stop_after,
        patience=(cfg.patience or None) if early is not None else None,
        monitor=early.monitor if early is not None else None,
        convergence=cfg.convergence(),
        objective=objective,
        validation=early is not None,
    )
    convergence = res.convergence
    if early is not None:
        early.restore(res.curve)
        kept = next((p for p in res.curve if p["step"] == early.best_step), None)
        if kept is not None and convergence is not None:  # the state describes the weights kept: their objective
            convergence = replace(convergence, objective=float(kept["objective"]))
    return TrainResult(
        res.curve,
        res.steps_per_s,
        res.resumed_from,
        sum(p.numel() for p in params),
        adapted,
        early.record(res) if early is not None else None,
        convergence=convergence,
    )


def finetune_encoder(
    rs,
    encoder,
    index,
    cfg: FinetuneConfig,
    ks: Sequence[int],
    ckpt_path: str | Path | None = None,
    threads: int | None = None,
    progress: bool = True,
    twin_negatives: bool = True,
) -> TrainResult:
    """Fine-tune ``encoder`` on the train split of ``rs`` against its frozen ``index`` (the
    pipeline's ``finetune`` rule, before the final evaluation).

    Parameters
    ----------
    rs : capgap.data.RetrievalSet
        Train-split queries are the training data (texts, gold documents, exclusions); the
        curve evaluates the first ``cfg.eval_max_queries`` train and held-out queries.
    encoder : capgap.encoders.Encoder
        Trained in place (``add_lora``); the caller saves the adapter (``save_adapter``).
    index : capgap.index.FrozenIndex
        ``embeddings`` ``(n_docs, dim) float32`` (never changed) and ``doc_ids`` (corpus order).
    cfg : FinetuneConfig
    ks : sequence of int
        Evaluation cut-offs; the curve reports recall at every k <= 10
        (``capgap.training.curve_ks``).
    ckpt_path : path, optional
        Checkpoint to resume from and write (``train_query_encoder``); its digest covers the
        config, encoder, index and ``capgap.data.query_records(rs)``.
    threads : int, optional
        torch / BLAS threads.
    twin_negatives : bool
        True: the near-miss twins of a train query's gold documents (``rs.twins``,
        ``capgap.nearmiss``) are negatives in its InfoNCE softmax like every other non-gold
        document; False: they are left out of it (neither gold nor negative), so the adapter
        never learns from them (Ralev et al. 2026's "Model A" vs "Model B" contrast).

    Returns
    -------
    TrainResult
        Its ``curve`` has the loss and ``{split}_recall@{k}`` every ``cfg.eval_every`` steps and
        at the end. Raises ``ValueError`` without train queries; ``KeyError`` when a gold
        document is not in the index.
    """
    doc_matrix, doc_ids = index.embeddings, index.doc_ids
    pos = {d: i for i, d in enumerate(doc_ids)}
    text = dict(zip(rs.queries.ids, rs.queries.texts))
    train_ids = list(rs.split.train)

    final: dict = {}  # the last curve point's encoding of every query (TrainResult.queries)

    def scorer():  # inner products of the queries, encoded by the model as it is now
        if not final.get("last"):
            return lambda texts: dense_scores(encoder.encode_queries(texts), doc_matrix, threads)
        # the last curve point: every query once, as the final evaluation encodes them
        # (capgap.evaluate.evaluate_encoder), so that it need not encode them again
        all_texts = list(rs.queries.texts)
        q = encoder.encode_queries(all_texts, progress=progress, ids=rs.queries.ids, what=f"{rs.name} queries")
        final["queries"] = q
        row = {}
        for i, t in enumerate(all_texts):
            row.setdefault(t, i)
        return lambda texts: dense_scores(q[[row[t] for t in texts]], doc_matrix, threads)

    groups = document_groups(rs.corpus, doc_matrix)
    curve_at = curve_evaluator(rs, doc_ids, scorer, ks, groups, cfg.eval_max_queries)

    def evaluate(step: int) -> dict:
        final["last"] = step == cfg.steps and cfg.validation_fraction <= 0  # no best weights put back after it
        try:
            return curve_at(step)
        finally:
            final["last"] = False

    early = None
    if cfg.validation_fraction > 0:
        train_ids, val_ids = validation_split(train_ids, cfg.validation_fraction, cfg.validation_seed)
        on_val = curve_evaluator(replace(rs, split=Split(tuple(val_ids), ())), doc_ids, scorer, ks, groups)
        early = EarlyStop(encoder.model, val_ids, f"validation_recall@{curve_ks(ks)[0]}")
        evaluate = early.wrap(evaluate, on_val)
    excluded = excluded_positions(rs, train_ids, doc_ids) if rs.excluded else None  # train_ids: the fit part
    if not twin_negatives and rs.twins:
        twins = [[pos[t] for g in sorted(rs.qrels.gold(q)) for t, _ in rs.twins.get(g, ())] for q in train_ids]
        excluded = [list(e) + t for e, t in zip(excluded or [[] for _ in train_ids], twins)]
    res = train_query_encoder(
        encoder,
        doc_matrix,
        [text[q] for q in train_ids],
        [[pos[d] for d in rs.qrels.gold(q)] for q in train_ids],
        cfg,
        ckpt_path=ckpt_path,
        evaluate=evaluate,
        threads=threads,
        progress=progress,
        context=query_records(rs),
        train_excluded=excluded,
        early=early,
        name=f"{rs.name}/{encoder.spec.name} finetune",
    )
    log.info(
        "finetune: %d of at most %d steps at %.2f steps/s (resumed from %d), %d trainable parameters in %d modules",
        res.curve[-1]["step"] if res.curve else 0,
        cfg.steps,
        res.steps_per_s,
        res.resumed_from,
        res.trainable,
        len(res.adapted_modules),
    )
    res.queries = final.get("queries")
    return res
