"""Near-miss twins, the study: is a failure to tell a statement from its minimal edit
(negation, role swap, spatial/order flip) geometric, learned, or lexical?

The study this follows (Ralev et al. 2026, "Training for Compositional Sensitivity Reduces
Dense Retrieval Generalization") measured how similar pooled embeddings find a statement and
its near-miss. capgap asks the capacity question instead: does the frozen index still
*separate* the gold document from its twin (the probe's margin), and does a query encoder
find it (pre-trained, fine-tuned, BM25, ColBERT)?

The twins themselves are data (``capgap.data.edits``: the edit rules; ``capgap.data.twins``:
``add_twins``, ``twin_id``, ``TwinPairs``); every method measures them while it ranks
(``capgap.evaluate.twin_rows``, fed by the ``observe`` hook of ``capgap.retrieval.rank_queries``).
This module is the method layer's part: the twins as hard negatives or not
(``twin_negative_rows``).

Measured per method and twin type (``twin_rows``; the metric names carry the type after a
colon, e.g. ``twin_win:role_swap``): over every (query, gold document, twin of that gold
document) triple of a split, ``twin_win`` = fraction where the gold document scores strictly
above its twin (a tie counts as a loss: the evaluation's pessimistic tie rule ranks the twin
first), ``twin_tie`` = fraction of exact ties, ``twin_gap`` / ``twin_gap_p25`` /
``twin_gap_p75`` = median and quartiles of score(gold) - score(twin) in the method's score
units (for the probe: with its witness scaled to unit norm, the geometric margin), and
``twin_pairs`` = how many triples.
"""

from __future__ import annotations

from typing import Sequence

from .evaluate import evaluate_encoder


def twin_negative_rows(rs, index, without_twins, with_twins, targets, ks: Sequence[int], ndcg_k: int, encoder_name: str,
                       threads: int | None = 1) -> list[dict]:
    """Twins as hard negatives or not, measured (Ralev et al. 2026, Table 1: structure-targeted
    negatives cut MiniLM-L6's zero-shot NanoBEIR nDCG@10 from 0.439 to 0.401; here in capgap's
    setting, a LoRA query adapter against a frozen index).

    ``without_twins`` / ``with_twins``: ``capgap.encoders.Encoder`` s fine-tuned on the train
    queries of the near-miss set ``rs`` (its frozen ``index``) with the twins left out of the
    InfoNCE softmax / in it (``capgap.finetune.finetune_encoder``'s ``twin_negatives``).
    ``targets``: ``[(RetrievalSet, FrozenIndex), ...]`` other data sets with indexes of the same
    document encoder, on which both adapters are evaluated zero-shot (neither saw them).

    Returns rows (``capgap.evaluate``): ``without_twins`` on ``rs`` as method
    ``finetuned-no-twins`` (with the twin rows; ``with_twins`` there is rule ``finetune``'s
    ``finetuned``), and on each target methods ``finetuned-no-twins@<rs.name>`` and
    ``finetuned@<rs.name>`` (recall@k, nDCG; the target's ``pretrained`` rows are the
    encoder before any fine-tuning).
    """
    rows, _ = evaluate_encoder(rs, without_twins, index, ks, ndcg_k, encoder_name, "finetuned-no-twins", threads)
    for target, tindex in targets:
        for method, enc in ((f"finetuned-no-twins@{rs.name}", without_twins), (f"finetuned@{rs.name}", with_twins)):
            rows += evaluate_encoder(target, enc, tindex, ks, ndcg_k, encoder_name, method, threads)[0]
    return rows
