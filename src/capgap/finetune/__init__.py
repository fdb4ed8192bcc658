"""Query-encoder fine-tuning against a frozen index: LoRA on the query side, InfoNCE.

The paper's second measurement (arXiv 2610.02749): how close does a *learned* query encoder get
to the capacity ceiling? Documents stay in the frozen index (``(n_docs, dim) float32``, never
re-encoded, no gradient); only LoRA adapters on the encoder's attention projections learn, and
only queries pass through the encoder.

Public API
----------
- ``FinetuneConfig``: steps, batch size, learning rate, temperature, LoRA rank/alpha/dropout,
  target modules per architecture, loss form, candidates, checkpointing, seed.
- ``infonce_loss(scores, gold_mask, temperature, form)``: the loss (its two forms).
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

Loss: InfoNCE over candidate documents in two multi-positive forms, ``avg`` (default) and
``set`` (``infonce_loss`` states both). Candidates: the full frozen index (default; a
(batch x n_docs) score matrix), or ``sampled``: the batch's gold documents plus
``n_negatives`` random documents shared by the batch. Details: docs/finetune.md.

Determinism: a fixed seed gives the same adapter on CPU (torch, numpy and Python RNGs seeded;
batches from a seeded permutation per epoch). Checkpoints (adapter weights, optimiser, RNG
states, sampler position, curve) are written atomically every ``checkpoint_every`` steps; a
killed run resumes from the last one and ends with the same weights as an uninterrupted run.
"""

from .adapter import add_lora, load_adapter, save_adapter
from .config import DEFAULT_TARGETS, FinetuneConfig
from .loss import candidate_masks, infonce_loss
from .train import EarlyStop, TrainResult, finetune_encoder, train_query_encoder, training_digest, validation_split

__all__ = [
    "DEFAULT_TARGETS",
    "EarlyStop",
    "FinetuneConfig",
    "TrainResult",
    "add_lora",
    "candidate_masks",
    "finetune_encoder",
    "infonce_loss",
    "load_adapter",
    "save_adapter",
    "train_query_encoder",
    "training_digest",
    "validation_split",
]
