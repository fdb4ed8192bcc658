"""Late interaction (ColBERT via PyLate): the paper's multi-vector comparison point.

The paper (arXiv 2610.02749, Sec. 5, LIMIT) contrasts a fine-tuned single-vector encoder
(held-out recall 0.068) with a fine-tuned late-interaction model, GTE-ModernColBERT (0.998);
capgap runs the same comparison with PyLate: ``pylate.models.ColBERT`` fine-tuned on both
towers (``pylate.losses.Contrastive``, a document gold for the query masked out of its
softmax), scored by MaxSim, s(q, d) = sum_i max_j <q_i, d_j> over L2-normalised token
embeddings (Khattab & Zaharia 2020, Eq. 3), exactly (``maxsim_topk``) or, above
``exact_max_docs`` documents, on candidates from a ``faiss`` token index (Khattab & Zaharia
2020, Sec. 3.6) or PLAID, re-scored exactly; the index's own recall against exact MaxSim (ANN
recall) is reported apart. Model, loss, backends and their costs: docs/colbert.md.

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
    "BACKENDS",
    "ColbertConfig",
    "ColbertRun",
    "FaissTokenIndex",
    "PlaidIndex",
    "ann_recall",
    "ann_recall_rows",
    "candidate_score_block",
    "encode_documents",
    "encode_queries",
    "false_negative_mask",
    "fine_tuned_model",
    "load_colbert",
    "maxsim_scores",
    "maxsim_topk",
    "pack_documents",
    "prepare_work_dir",
    "rescore",
    "resolve_backend",
    "run_colbert",
    "train_colbert",
    "work_key",
]
