"""Query-encoder fine-tuning against a frozen index: LoRA on the query side, InfoNCE.

The paper's second measurement (arXiv 2610.02749): how close does a *learned* query encoder get
to the capacity ceiling? Documents stay in the frozen index (``(n_docs, dim) float32``, never
re-encoded, no gradient); only LoRA adapters on the encoder's attention projections learn, and
only queries pass through the encoder.

Public API
----------
- ``FinetuneConfig``: steps, batch size, learning rate, temperature, LoRA rank/alpha/dropout,
  target modules per architecture, loss form, candidates, checkpointing, seed.
- ``infonce_loss(scores, gold_mask, temperature, form)``: the loss (see below).
- ``candidate_masks(batch, gold, excluded, n_docs, candidates, n_negatives, sampler)``: one batch's
  candidates and gold / excluded masks (shared with the ladder's heads, ``capgap.ladder``).
- ``add_lora(encoder, cfg)``: wraps the encoder's attention projections with LoRA adapters.
- ``train_query_encoder(encoder, doc_embeddings, train_queries, train_gold, cfg, ckpt_path,
  ...)`` -> ``TrainResult``: trains in place, resumable from ``ckpt_path`` (the loop is
  ``capgap.training.run_loop``; this module owns the batches and the loss).
- ``training_digest(...)``: what a checkpoint must match to be resumed.
- ``finetune_encoder(rs, encoder, index, cfg, ks, ckpt_path, ...)`` -> ``TrainResult``: the
  pipeline's fine-tuning step on a retrieval set's train split, with its learning curve
  (``capgap.training.curve_evaluator``).
- ``save_adapter(model, out_dir)``: the LoRA adapter (peft ``save_pretrained``) written
  atomically, with an ``adapter_config.json`` that does not depend on ``PYTHONHASHSEED``.

Loss (InfoNCE = multiclass cross-entropy over candidate documents, temperature tau; van den
Oord et al. 2018, as dual-encoder retrieval uses it, e.g. Karpukhin et al. 2020). With logits l_j = s_j / tau, gold set P of the query, and N the
candidates that are not gold (other gold documents of the query are never negatives):

- ``avg`` (default): L_avg = -(1/|P|) sum_{p in P} log( e^{l_p} / (e^{l_p} + sum_{j in N} e^{l_j}) )
  — every gold document must win against all non-gold candidates (what recall@k asks);
- ``set``: L_set = -log( sum_{p in P} e^{l_p} / (sum_{p in P} e^{l_p} + sum_{j in N} e^{l_j}) )
  = -log sum_{p in P} p_j — finding one gold document suffices.

Candidates: the full frozen index (default; a (batch x n_docs) score matrix), or ``sampled``:
the batch's gold documents plus ``n_negatives`` random documents shared by the batch.

Determinism: a fixed seed gives the same adapter on CPU (torch, numpy and Python RNGs seeded;
batches from a seeded permutation per epoch). Checkpoints (adapter weights, optimiser, RNG
states, sampler position, curve) are written atomically every ``checkpoint_every`` steps; a
killed run resumes from the last one and ends with the same weights as an uninterrupted run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .config import section_defaults
from .data import Split, excluded_positions, query_records
from .io import atomic_open
from .retrieval import dense_scores, document_groups
from .training import PartialState, curve_evaluator, curve_ks, json_digest, run_loop, seed_everything

log = logging.getLogger(__name__)

_D = section_defaults("finetune")  # the schema holds every default (capgap.config)
DEFAULT_TARGETS = _D["target_modules"]


@dataclass(frozen=True)
class FinetuneConfig:
    """Training settings (config ``finetune``). ``steps``: optimiser steps (the paper: 3,000,
    final checkpoint); ``lr``: AdamW learning rate; ``temperature``: InfoNCE tau; ``lora_*``:
    LoRA rank, alpha, dropout; ``target_modules``: attention projections to adapt, per
    ``model_type`` (BERT: query/key/value; a bare ``dense`` would also wrap BERT's pooler);
    ``loss``: ``avg`` or ``set``; ``candidates``: ``full`` or ``sampled`` (``n_negatives``);
    ``checkpoint_every``, ``eval_every`` (training-curve points), ``eval_max_queries`` (per split
    for curve points; the final evaluation uses all queries); ``seed``; ``precision``: ``auto``
    (bf16 autocast on CUDA, float32 on CPU), ``bf16`` or ``fp32``; ``mode``: ``lora`` (the
    paper's) or ``full`` (every weight of the query encoder trains; LoRA settings unused);
    ``validation_fraction``: 0 (the paper's protocol: train on every train query, keep the
    final checkpoint) or the fraction of train queries carved out (``validation_split``, seed
    ``validation_seed``) for early stopping: the weights of the best validation curve point are
    kept, and training stops after ``patience`` points without a new best (0: never stops)."""

    steps: int = _D["steps"]
    batch_size: int = _D["batch_size"]
    lr: float = _D["lr"]
    weight_decay: float = _D["weight_decay"]
    temperature: float = _D["temperature"]
    lora_rank: int = _D["lora_rank"]
    lora_alpha: int = _D["lora_alpha"]
    lora_dropout: float = _D["lora_dropout"]
    target_modules: dict = field(default_factory=lambda: {k: list(v) for k, v in DEFAULT_TARGETS.items()})
    loss: str = _D["loss"]
    candidates: str = _D["candidates"]
    n_negatives: int = _D["n_negatives"]
    checkpoint_every: int = _D["checkpoint_every"]
    eval_every: int = _D["eval_every"]
    eval_max_queries: int = _D["eval_max_queries"]
    seed: int = _D["seed"]
    precision: str = _D["precision"]
    mode: str = _D["mode"]
    validation_fraction: float = _D["validation_fraction"]
    validation_seed: int = _D["validation_seed"]
    patience: int = _D["patience"]

    def __post_init__(self):
        if self.mode not in ("lora", "full"):
            raise ValueError(f"finetune.mode must be 'lora' or 'full', got {self.mode!r}")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"finetune.validation_fraction must be in [0, 1), got {self.validation_fraction}")
        if self.validation_fraction > 0 and self.eval_every < 1:
            raise ValueError("finetune: early stopping (validation_fraction > 0) needs eval_every >= 1")
        if self.precision not in ("auto", "bf16", "fp32"):
            raise ValueError(f"finetune.precision must be 'auto', 'bf16' or 'fp32', got {self.precision!r}")
        if self.loss not in ("avg", "set"):
            raise ValueError(f"finetune.loss must be 'avg' or 'set', got {self.loss!r}")
        if self.candidates not in ("full", "sampled"):
            raise ValueError(f"finetune.candidates must be 'full' or 'sampled', got {self.candidates!r}")
        if self.steps < 1 or self.batch_size < 1 or self.temperature <= 0:
            raise ValueError("finetune: steps and batch_size must be >= 1 and temperature > 0")

    @classmethod
    def from_config(cls, cfg: dict) -> "FinetuneConfig":
        known = set(cls.__dataclass_fields__)
        unknown = set(cfg) - known
        if unknown:
            raise ValueError(f"finetune: unknown keys {sorted(unknown)}")
        return cls(**cfg)

    def digest(self) -> str:
        return json_digest(asdict(self))[:16]


def infonce_loss(scores, gold_mask, temperature: float, form: str = _D["loss"], exclude_mask=None):
    """InfoNCE over candidates (module docstring for the two multi-positive forms).

    ``scores``: ``(batch, n_candidates) float`` inner products; ``gold_mask``: ``(batch,
    n_candidates) bool``, at least one True per row; ``exclude_mask`` (optional, same shape,
    disjoint from ``gold_mask``): candidates that are neither gold nor negative (BRIGHT's
    excluded documents), left out of the softmax. Returns the mean loss over the batch (a 0-d
    tensor). Computed with log-sum-exp, stable for large scores.
    """
    import torch

    logits = scores / temperature
    neg_inf = torch.finfo(logits.dtype).min
    if exclude_mask is not None:
        logits = logits.masked_fill(exclude_mask, neg_inf)
    lse_neg = torch.logsumexp(logits.masked_fill(gold_mask, neg_inf), dim=1)  # (batch,)
    # -log(e^a / (e^a + e^b)) = softplus(b - a): computed from the difference, so large scores
    # cannot cancel (subtract the maximum and compute the loss directly: log-sum-exp)
    softplus = torch.nn.functional.softplus
    if form == "avg":
        per = softplus(lse_neg[:, None] - logits)
        per_q = (per * gold_mask).sum(1) / gold_mask.sum(1)
    elif form == "set":
        lse_pos = torch.logsumexp(logits.masked_fill(~gold_mask, neg_inf), dim=1)
        per_q = softplus(lse_neg - lse_pos)
    else:
        raise ValueError(f"unknown loss form {form!r}")
    return per_q.mean()


def candidate_masks(batch: np.ndarray, gold: Sequence[Sequence[int]], excluded: Sequence[Sequence[int]] | None, n_docs: int,
                    candidates: str = _D["candidates"], n_negatives: int = _D["n_negatives"],
                    sampler: np.random.Generator | None = None):
    """One batch's InfoNCE candidates and masks (module docstring, "Candidates").

    ``batch``: ``(b,) int64`` item indices; ``gold[i]`` / ``excluded[i]``: item i's gold and
    excluded row indices into the frozen index of ``n_docs`` rows (``excluded`` None: none).
    ``candidates``: ``full`` (every row; ``cand`` is None) or ``sampled`` (the batch's gold rows
    plus ``n_negatives`` rows drawn without replacement from ``sampler``, ascending and unique:
    ``cand`` ``(c,) int64``). Returns ``(cand, gold_mask, exclude_mask)``: ``gold_mask`` ``(b,
    n_docs or c) bool`` torch tensor, ``exclude_mask`` the same shape or None when no item of
    the batch has exclusions. Raises ``ValueError`` for ``sampled`` without a ``sampler``."""
    import torch

    excl = None
    if candidates == "full":
        cand = None
        mask = torch.zeros((len(batch), n_docs), dtype=torch.bool)
        for r, qi in enumerate(batch):
            mask[r, list(gold[qi])] = True
        if excluded is not None and any(len(excluded[qi]) for qi in batch):
            excl = torch.zeros((len(batch), n_docs), dtype=torch.bool)
            for r, qi in enumerate(batch):
                excl[r, list(excluded[qi])] = True
        return cand, mask, excl
    if sampler is None:
        raise ValueError("candidate_masks: candidates 'sampled' needs a sampler")
    gold_rows = np.unique(np.concatenate([np.asarray(gold[qi], dtype=np.int64) for qi in batch]))
    extra = sampler.choice(n_docs, size=min(n_negatives, n_docs), replace=False)
    cand = np.unique(np.concatenate([gold_rows, extra]))
    where = {d: i for i, d in enumerate(cand)}
    mask = torch.zeros((len(batch), len(cand)), dtype=torch.bool)
    for r, qi in enumerate(batch):
        mask[r, [where[d] for d in gold[qi]]] = True
    if excluded is not None and any(len(excluded[qi]) for qi in batch):
        excl = torch.zeros((len(batch), len(cand)), dtype=torch.bool)
        for r, qi in enumerate(batch):
            excl[r, [where[d] for d in excluded[qi] if d in where]] = True
    return cand, mask, excl


def add_lora(encoder, cfg: FinetuneConfig) -> list[str]:
    """Wrap the encoder's transformer with LoRA adapters (peft); freeze everything else.

    Returns the adapted module names. Raises ``ValueError`` when the architecture has no
    ``target_modules`` entry or a name matches nothing.
    """
    from peft import LoraConfig, get_peft_model

    st = encoder.model
    auto = st[0].auto_model
    mtype = auto.config.model_type
    if mtype not in cfg.target_modules:
        raise ValueError(f"finetune.target_modules has no entry for model_type {mtype!r}; add its attention projections")
    targets = list(cfg.target_modules[mtype])
    lcfg = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, target_modules=targets, bias="none")
    st[0].auto_model = get_peft_model(auto, lcfg)
    for name, p in st.named_parameters():
        p.requires_grad = "lora_" in name
    wrapped = sorted({n.rsplit(".lora_", 1)[0] for n, _ in st.named_parameters() if "lora_" in n})
    if not wrapped:
        raise ValueError(f"LoRA target modules {targets} matched nothing in {mtype}")
    return wrapped


@dataclass
class TrainResult:
    """``curve``: list of dicts (step, loss, train/held-out recall@k); ``steps_per_s``;
    ``resumed_from``: the step a checkpoint restored (0 if none); ``trainable``: parameter count;
    ``adapted_modules``: the module names LoRA wraps; ``queries``: ``(n_queries, dim) float32``
    every query of the retrieval set (in its order) encoded by the final weights at the last
    curve point, which the final evaluation reuses instead of encoding them again
    (``finetune_encoder``; None when the loop ended otherwise, e.g. with early stopping, whose
    best weights are put back after the last point)."""

    curve: list
    steps_per_s: float
    resumed_from: int
    trainable: int
    adapted_modules: list
    early_stopping: dict | None = None
    queries: np.ndarray | None = None


class EarlyStop:
    """Early stopping on a validation split carved from the train queries (``validation_split``):
    every curve point also evaluates the validation queries (``validation_recall@k``, k the
    first curve cut-off); the trainable weights of the best point (highest value, the earliest
    of equal ones) are kept in memory and, beside a checkpoint, in ``<checkpoint>.best``
    (written atomically, so a resumed run keeps them), and put back on the model at the end."""

    def __init__(self, model, validation_ids: Sequence[str], key: str):
        self.model, self.validation_ids, self.key = model, list(validation_ids), key
        self.best, self.best_step, self.state, self.weights, self.path = -np.inf, None, None, None, None

    def attach(self, weights, ckpt_path) -> None:
        """The weights to snapshot (a ``PartialState``) and where to keep them beside the checkpoint."""
        import torch

        self.weights = weights
        self.path = Path(f"{ckpt_path}.best") if ckpt_path else None
        if self.path and self.path.is_file():
            saved = torch.load(self.path, weights_only=False)
            if saved.get("validation_ids") == self.validation_ids:
                self.best, self.best_step, self.state = saved["value"], saved["step"], saved["weights"]

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
                        torch.save({"step": step, "value": self.best, "weights": self.state,
                                    "validation_ids": self.validation_ids}, fh)
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
        return {"validation_ids": self.validation_ids, "best_step": self.best_step, "best_value": float(self.best),
                "monitor": self.key, "stopped_at": res.stopped_at}


def training_digest(encoder, doc_embeddings: np.ndarray, train_queries: list[str], train_gold: list[list[int]],
                    train_excluded: list[list[int]] | None, cfg: "FinetuneConfig", context=None) -> str:
    """sha256 (hex) of everything that determines training: the config, the encoder's
    fingerprint (model, weights, pooling, ...), the frozen index's bytes ``(n_docs, dim)``
    (hashed blockwise), every train query's text, gold rows and excluded rows, and ``context``
    (any JSON-able data the checkpoint's curve depends on, e.g. the held-out queries). A
    checkpoint whose digest differs is never resumed."""
    h = hashlib.sha256()
    fp = encoder.fingerprint() if hasattr(encoder, "fingerprint") else {}
    h.update(json.dumps([cfg.digest(), fp, list(train_queries), [sorted(int(x) for x in g) for g in train_gold],
                         [sorted(int(x) for x in e) for e in (train_excluded or [])], context], sort_keys=True).encode())
    D = np.asarray(doc_embeddings)
    h.update(f"{D.shape}{D.dtype}".encode())
    for b0 in range(0, D.shape[0], 8192):
        h.update(np.ascontiguousarray(D[b0 : b0 + 8192]).tobytes())
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
    ``train_excluded[i]``: row indices left out of query i's softmax (neither gold nor
    negative). ``context``: JSON-able data the curve also depends on (``evaluate``'s queries),
    part of the checkpoint digest. On CUDA the forward pass runs under bf16 autocast
    (``cfg.precision`` "auto" or "bf16"; the loss is computed in float32). Returns a
    ``TrainResult``. Raises ``ValueError`` without train queries or (``add_lora``) for an
    architecture without target modules.
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
    D = torch.from_numpy(np.array(doc_embeddings, dtype=np.float32, copy=True)).to(device)
    n_docs = D.shape[0]

    def batch_loss(batch):
        cand, mask, excl = candidate_masks(batch, train_gold, train_excluded, n_docs, cfg.candidates, cfg.n_negatives, sampler)
        feats = model.tokenize([encoder.spec.query_prompt + train_queries[qi] for qi in batch])
        feats = {k: v.to(device) for k, v in feats.items()}
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            q = model(feats)["sentence_embedding"]
        q = q.float()
        if encoder.normalize and not encoder.extra.get("has_normalize_module", False):
            q = torch.nn.functional.normalize(q, dim=-1)
        docs = D if cand is None else D[torch.from_numpy(cand)]
        return infonce_loss(q @ docs.T, mask.to(device), cfg.temperature, cfg.loss, None if excl is None else excl.to(device))

    digest = {}
    if ckpt_path:
        digest = {"fine-tuning config": cfg.digest(),
                  "data": training_digest(encoder, doc_embeddings, train_queries, train_gold, train_excluded, cfg, context)}
    weights = PartialState(model, trained)
    if early is not None:
        early.attach(weights, ckpt_path)
    res = run_loop(batch_loss, model, opt, cfg.steps, n_train, cfg.batch_size, sampler, ckpt_path=ckpt_path, digest=digest,
                   checkpoint_every=cfg.checkpoint_every, weights=weights,
                   evaluate=evaluate, eval_every=cfg.eval_every, progress=progress, desc="finetune", stop_after=stop_after,
                   patience=(cfg.patience or None) if early is not None else None,
                   monitor=early.monitor if early is not None else None)
    if early is not None:
        early.restore(res.curve)
    return TrainResult(res.curve, res.steps_per_s, res.resumed_from, sum(p.numel() for p in params), adapted,
                       early.record(res) if early is not None else None)


def finetune_encoder(rs, encoder, index, cfg: FinetuneConfig, ks: Sequence[int], ckpt_path: str | Path | None = None,
                     threads: int | None = None, progress: bool = True, twin_negatives: bool = True) -> TrainResult:
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
    D, doc_ids = index.embeddings, index.doc_ids
    pos = {d: i for i, d in enumerate(doc_ids)}
    text = dict(zip(rs.queries.ids, rs.queries.texts))
    train_ids = list(rs.split.train)

    final: dict = {}  # the last curve point's encoding of every query (TrainResult.queries)

    def scorer():  # inner products of the queries, encoded by the model as it is now
        if not final.get("last"):
            return lambda texts: dense_scores(encoder.encode_queries(texts), D, threads)
        # the last curve point: every query once, as the final evaluation encodes them
        # (capgap.evaluate.evaluate_encoder), so that it need not encode them again
        all_texts = list(rs.queries.texts)
        q = encoder.encode_queries(all_texts, progress=progress, ids=rs.queries.ids, what=f"{rs.name} queries")
        final["queries"] = q
        row = {}
        for i, t in enumerate(all_texts):
            row.setdefault(t, i)
        return lambda texts: dense_scores(q[[row[t] for t in texts]], D, threads)

    groups = document_groups(rs.corpus, D)
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
        encoder, D, [text[q] for q in train_ids], [[pos[d] for d in rs.qrels.gold(q)] for q in train_ids],
        cfg, ckpt_path=ckpt_path, evaluate=evaluate, threads=threads, progress=progress, context=query_records(rs),
        train_excluded=excluded, early=early,
    )
    log.info("finetune: %d steps at %.2f steps/s (resumed from %d), %d trainable parameters in %d modules",
             cfg.steps, res.steps_per_s, res.resumed_from, res.trainable, len(res.adapted_modules))
    res.queries = final.get("queries")
    return res


def validation_split(train_ids: Sequence[str], fraction: float, seed: int = _D["validation_seed"]) -> tuple[list[str], list[str]]:
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


def load_adapter(encoder, folder: str | Path) -> None:
    """Put the LoRA adapter saved in ``folder`` (``save_adapter``) on ``encoder``'s transformer
    (a ``capgap.encoders.Encoder``, in place, eval mode, nothing trainable): its query vectors
    are then those of the fine-tuned encoder that saved it. Raises ``FileNotFoundError`` when
    ``folder`` holds no ``adapter_config.json``."""
    from peft import PeftModel

    folder = Path(folder)
    if not (folder / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{folder}: no adapter_config.json (not a saved LoRA adapter)")
    st = encoder.model
    st[0].auto_model = PeftModel.from_pretrained(st[0].auto_model, str(folder), is_trainable=False)
    st.eval()


def _sort_key(x):
    """Numbers numerically, then everything else by its canonical JSON text."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return (0, x, "")
    return (1, 0, json.dumps(x, sort_keys=True))


def _sorted_like(saved, live):
    """``saved`` (a value read back from the JSON) with every list that was a set or frozenset
    in ``live`` (the in-memory config value) sorted; other lists keep their order."""
    if isinstance(live, (set, frozenset)) and isinstance(saved, list):
        return sorted(saved, key=_sort_key)
    if isinstance(live, dict) and isinstance(saved, dict):
        return {k: _sorted_like(v, live.get(k)) for k, v in saved.items()}
    if isinstance(live, (list, tuple)) and isinstance(saved, list) and len(live) == len(saved):
        return [_sorted_like(v, lv) for v, lv in zip(saved, live)]
    return saved


def _peft_model(model):
    """The peft model inside ``model``: itself, a SentenceTransformer's first module's
    ``auto_model``, or a ``capgap.encoders.Encoder``'s."""
    inner = getattr(model, "model", None)
    if inner is not None and not hasattr(model, "peft_config") and hasattr(inner, "__getitem__"):  # an Encoder
        model = inner
    if not hasattr(model, "peft_config") and hasattr(model, "__getitem__"):  # a SentenceTransformer
        model = getattr(model[0], "auto_model", model)
    if not hasattr(model, "peft_config") or not hasattr(model, "save_pretrained"):
        raise TypeError(f"save_adapter: {type(model).__name__} holds no peft adapter (no peft_config)")
    return model


def _sibling(path: Path, kind: str) -> Path:
    """A fresh hidden name beside ``path``: ``.<name>.<pid>.<random>.<kind>``."""
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.{kind}")


def save_adapter(model, out_dir: str | Path) -> Path:
    """Save the LoRA adapter of ``model`` to the folder ``out_dir``, atomically and byte-stable.

    ``model``: a peft ``PeftModel`` (``encoder.model[0].auto_model`` after ``add_lora``), or the
    ``SentenceTransformer`` / ``capgap.encoders.Encoder`` holding it. Writes what peft's
    ``save_pretrained`` writes (``adapter_config.json``, ``adapter_model.safetensors``,
    ``README.md``; one sub-folder per non-default adapter) into a temporary sibling folder
    ``.<name>.*`` next to ``out_dir``, then renames it over ``out_dir`` (a previous ``out_dir`` is
    moved aside first and deleted after): a reader sees the old adapter or the new one, never
    a half-written folder, and a failed save leaves ``out_dir`` as it was and no temporary
    folder behind.

    Every ``adapter_config.json`` is rewritten with the lists that peft holds as sets
    (``target_modules``, ``exclude_modules``, ... whichever fields are sets in memory, nested
    ones included) sorted, and keys sorted (``indent=2``, trailing newline), so the file is
    byte-identical whatever ``PYTHONHASHSEED`` (peft writes ``list(set)``, whose order follows
    the string hash). Returns ``Path(out_dir)``. Raises ``TypeError`` when ``model`` holds no
    peft adapter; errors from ``save_pretrained`` and the file system propagate.
    """
    peft_model = _peft_model(model)
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(out, "tmp")
    tmp.mkdir()  # not mkdtemp: the adapter folder keeps the umask's permissions, as peft's own
    old = None
    try:
        peft_model.save_pretrained(str(tmp))
        for name, config in peft_model.peft_config.items():
            path = (tmp if name == "default" else tmp / name) / "adapter_config.json"
            if not path.is_file():
                continue
            saved = json.loads(path.read_text(encoding="utf-8"))
            live = {k: getattr(config, k) for k in saved if hasattr(config, k)}
            stable = _sorted_like(saved, live)
            path.write_text(json.dumps(stable, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if out.exists() or out.is_symlink():
            old = _sibling(out, "old")
            old.mkdir()
            os.replace(out, old / "adapter")
            try:
                os.replace(tmp, out)
            except BaseException:
                os.replace(old / "adapter", out)  # put the previous adapter back
                raise
        else:
            os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return out
