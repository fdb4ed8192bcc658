"""Late interaction (ColBERT via PyLate): the paper's multi-vector comparison point.

The paper (arXiv 2610.02749, Sec. 5, LIMIT) contrasts a fine-tuned single-vector encoder
(held-out recall 0.068) with a fine-tuned late-interaction model, GTE-ModernColBERT (0.998).
capgap runs the same comparison with PyLate:

- **Model**: ``pylate.models.ColBERT`` from the config (``lightonai/GTE-ModernColBERT-v1`` in
  the paper setting; offline, a ColBERT built on the bundled MiniLM backbone, to which PyLate
  adds the [Q]/[D] marker tokens and a randomly initialised linear projection to
  ``embedding_size`` dims, seeded here by ``torch.manual_seed(seed)`` before construction).
- **Fine-tuning** (both towers, as ColBERT is trained): ``pylate.losses.Contrastive`` over the
  batch's documents (in-batch negatives plus ``n_negatives`` random non-gold documents per
  query). Because LIMIT's gold sets overlap across queries, an in-batch document that is gold
  for the query is masked out of its softmax (a false negative), never pushed away.
- **Scoring**: MaxSim, s(q, d) = sum_i max_j <q_i, d_j> over L2-normalised token embeddings
  (Khattab & Zaharia 2020, Eq. 3). ``maxsim_topk`` is exact (blocked torch, float32). For
  corpora above ``exact_max_docs`` documents an index proposes candidate documents, which are
  re-scored exactly: ``faiss`` (default; ColBERT v1's end-to-end retrieval, Khattab & Zaharia
  2020, Sec. 3.6: a faiss IVF index over every document token, each query token's nearest
  tokens nominate their documents) or ``plaid`` (PyLate's PLAID, ``use_fast=False``: the
  Stanford backend, whose C++ extensions are compiled once into ``TORCH_EXTENSIONS_DIR``; its
  k-means over 32,768 centroids is estimated at most of an hour for LIMIT's 6M token
  embeddings on 2 CPU cores, so it suits a GPU or a smaller corpus). The index's own recall
  against exact MaxSim top-k (ANN recall) is measured on a query sample and reported apart
  from gold-document recall.

Documents are stored once per run as one ``(n_tokens, dim) float16`` token matrix plus
``(n_docs + 1,) int64`` offsets (document i owns rows ``offsets[i]:offsets[i+1]``).

Modules (split by concept as PyLate splits them):

- ``models``: ``ColbertConfig``, ``load_colbert``, ``encode_documents``, ``encode_queries``;
- ``scores``: ``pack_documents``, ``maxsim_scores``, ``maxsim_topk``, ``rescore``,
  ``candidate_score_block``, ``ann_recall``;
- ``indexes``: ``FaissTokenIndex``, ``PlaidIndex``;
- ``train``: ``false_negative_mask``, ``train_colbert`` (the loop is ``capgap.training``);
- ``run``: the pipeline step, ``run_colbert`` (work folder, train or reuse, backend choice,
  candidate scoring, ANN-recall rows).

Every public name is re-exported here (``from capgap import colbert as cb; cb.maxsim_scores``).
"""

from .indexes import FaissTokenIndex, PlaidIndex
from .models import BACKENDS, ColbertConfig, encode_documents, encode_queries, load_colbert
from .run import (
    ColbertRun,
    ann_recall_rows,
    fine_tuned_model,
    prepare_work_dir,
    resolve_backend,
    run_colbert,
    work_key,
)
from .scores import ann_recall, candidate_score_block, maxsim_scores, maxsim_topk, pack_documents, rescore
from .train import false_negative_mask, train_colbert

__all__ = [
    "BACKENDS", "ColbertConfig", "ColbertRun", "FaissTokenIndex", "PlaidIndex", "ann_recall", "ann_recall_rows",
    "candidate_score_block", "encode_documents", "encode_queries", "false_negative_mask", "fine_tuned_model",
    "load_colbert", "maxsim_scores", "maxsim_topk", "pack_documents", "prepare_work_dir", "rescore", "resolve_backend",
    "run_colbert", "train_colbert", "work_key",
]
