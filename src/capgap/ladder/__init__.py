"""The learnability ladder (issue 29): between the oracle (the probe's one vector per query) and a
fine-tuned encoder, what can one *shared* query map reach on the frozen index, and does capacity
transfer through query similarity? Each rung's query vectors are evaluated with the same metrics
code as every method (``capgap.evaluate.evaluate_queries``), on train and held-out queries.

Rungs (method names in results.csv):

- ``head-linear-all``, ``head-mlp-all``: a linear head (W, dim x dim, from the identity) and a
  one-hidden-layer ReLU head on the frozen pre-trained query embeddings, trained with InfoNCE
  against the frozen index on *all* queries (train and held-out) under the convergence rule
  (``capgap.training.Convergence``): what one shared map of that family can fit, a
  representational ceiling, not a generalisation result.
- ``head-linear``, ``head-mlp``: the same heads trained on train queries only, less a
  validation split whose best point is kept.
- ``nn-transfer``, ``nn-transfer-top<m>``: each query uses the probe's w of its most similar train
  query (cosine of pre-trained embeddings; train queries leave themselves out), or the mean of
  the m most similar ones' unit w's.

Public API
----------
- ``LadderConfig``: settings (config ``ladder``; defaults in the schema).
- ``make_head``, ``fit_head``, ``apply_head``, ``HEADS``, ``GoldRows``, ``FitObjective`` (``capgap.ladder.heads``).
- ``nearest_train``, ``transfer_vectors`` (``capgap.ladder.transfer``).
- ``evaluate_ladder``, ``load_witnesses``, ``load_query_embeddings``, ``method_names`` (``capgap.ladder.rungs``).
"""

from .config import LadderConfig
from .heads import HEADS, apply_head, fit_head, make_head
from .rungs import evaluate_ladder, load_query_embeddings, load_witnesses, method_names
from .transfer import nearest_train, transfer_vectors

__all__ = [
    "HEADS",
    "LadderConfig",
    "apply_head",
    "evaluate_ladder",
    "fit_head",
    "load_query_embeddings",
    "load_witnesses",
    "make_head",
    "method_names",
    "nearest_train",
    "transfer_vectors",
]
