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
(``twin_negative_rows``; rule ``twin_negatives``' stage, ``twin_negatives_stage``).

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

from pathlib import Path
from typing import Sequence

from .data import load_canonical
from .encoders import encoder_from_params
from .evaluate import evaluate_encoder, write_rows
from .finetune import load_adapter
from .finetune.stage import train_adapter
from .index import index_fingerprint, load_index, load_with_encoder


def twin_negative_rows(
    rs,
    index,
    without_twins,
    with_twins,
    targets,
    ks: Sequence[int],
    ndcg_k: int,
    encoder_name: str,
    threads: int | None = 1,
) -> list[dict]:
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


def twin_negatives_stage(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``twin_negatives`` (``stage(inputs, outputs, params, threads)``, see
    ``capgap.stages``): near-miss twins as hard negatives or not (``twin_negative_rows``).
    Fine-tunes the query encoder on the near-miss set ``inputs.data`` exactly as rule
    ``finetune`` (settings ``params.finetune``; ``capgap.finetune.stage.train_adapter``) but with
    the twins left out of the InfoNCE softmax, resuming from ``params.checkpoint``; writes its
    ``outputs.curve`` and ``outputs.adapter``. Rows (``outputs.metrics``): that adapter on the
    near-miss set (method ``finetuned-no-twins``, twin rows included), and on every transfer
    target (``inputs.targets`` data folders, ``inputs.target_indexes`` fingerprints, same
    encoder) both adapters: ``finetuned-no-twins@<set>`` and, loaded from ``inputs.adapter``
    (rule ``finetune``: twins as negatives), ``finetuned@<set>``."""
    rs, enc, idx = load_with_encoder(inputs, params, threads)
    targets = []
    for folder, fp in zip(inputs.targets, inputs.target_indexes):
        t = load_canonical(folder)
        targets.append((t, load_index(Path(fp).parent, index_fingerprint(enc.fingerprint(), t.corpus))))
    res = train_adapter(rs, enc, idx, params, outputs, threads, twin_negatives=False)
    with_twins = encoder_from_params(params, threads)
    load_adapter(with_twins, inputs.adapter)
    rows = twin_negative_rows(rs, idx, enc, with_twins, targets, params.ks, params.ndcg_k, params.encoder_name, threads)
    rows += res.convergence.rows(rs.name, params.encoder_name, "finetuned-no-twins")
    write_rows(outputs.metrics, rows)
    Path(params.checkpoint).unlink(missing_ok=True)  # the adapter is saved: the checkpoint has served
    return rows
