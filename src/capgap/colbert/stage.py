"""Rule ``colbert`` (``workflow/scripts/colbert.py``): late interaction end to end; the signature
is every stage's, ``stage(inputs, outputs, params, threads=1)`` (see ``capgap.stages``)."""

from __future__ import annotations

from ..data import load_canonical
from ..evaluate import write_curve, write_outputs
from .models import ColbertConfig
from .run import run_colbert


def colbert_stage(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``colbert``: late interaction (``capgap.colbert.run_colbert``, settings ``params.colbert``):
    fine-tune a PyLate ColBERT on the train queries, encode the corpus, retrieve by MaxSim
    (exact, or index candidates re-scored exactly) and evaluate train/held-out with the same
    metrics code as every method (method ``colbert``). ``params.work`` (not an output, so a
    killed job keeps it) holds, per training digest, the checkpoint, the fine-tuned model, the
    encoded documents and the PLAID index; ``params.extensions``: where PLAID compiles its C++
    extensions. With an ANN backend, rows ``ann_recall@k`` (split ``all``) give the index's
    recall against exact MaxSim top-k on ``ann_sample`` queries. Writes ``outputs.metrics``,
    ``outputs.curve`` and ``outputs.run``."""
    rs = load_canonical(inputs.data)
    cfg = ColbertConfig.from_config(dict(params.colbert))
    res = run_colbert(rs, cfg, params.work, params.extensions, params.ks, params.ndcg_k, threads=threads)
    write_curve(outputs.curve, res.curve)
    return write_outputs(outputs, res.rows, res.run)
