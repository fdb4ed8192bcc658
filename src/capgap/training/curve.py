"""The learning curve's evaluator and the validation split carved from the train queries."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..config import section_defaults
from ..evaluate import Judged
from ..metrics import recall_from_ranks
from ..retrieval import rank_queries


def curve_ks(ks: Sequence[int]) -> list[int]:
    """The curve's cut-offs: every k <= 10 of ``ks``, else the smallest."""
    return [k for k in ks if k <= 10] or [min(ks)]


def curve_evaluator(
    rs,
    doc_ids: Sequence[str],
    scorer: Callable[[], Callable],
    ks: Sequence[int],
    groups: Sequence[np.ndarray] = (),
    max_queries: int | None = None,
) -> Callable[[int], dict]:
    """The learning curve's ``evaluate(step)`` for ``run_loop``.

    Parameters
    ----------
    rs : capgap.data.RetrievalSet
        Queries, qrels, splits and exclusions.
    doc_ids : sequence of str
        Document ids in score-column order (the index order).
    scorer : callable
        Called once per curve point (e.g. to encode the documents with the model as it is
        then); returns ``score(texts)`` -> a ``capgap.retrieval.rank_queries`` ``score_block``
        over the query ``texts``: ``score_block(a, b)`` -> ``(b - a, len(doc_ids)) float``.
    ks : sequence of int
        The evaluation cut-offs; the curve uses ``curve_ks(ks)``.
    groups : sequence of arrays
        Duplicate groups (``capgap.retrieval.document_groups``) tied before ranking.
    max_queries : int, optional
        The first ``max_queries`` queries of each split (all when None).

    Returns
    -------
    callable
        ``evaluate(step)`` -> ``{"train_recall@k": float, "heldout_recall@k": float, ...}`` for
        each non-empty split (train first) and each curve k; the mean recall@k over the split's
        sampled queries, from full rankings (``capgap.metrics.recall_from_ranks``).
    """
    text = dict(zip(rs.queries.ids, rs.queries.texts))
    cks = curve_ks(ks)
    judged = {}
    for split in ("train", "heldout"):
        ids = list(rs.split.ids(split))[:max_queries]
        if ids:
            judged[split] = Judged.of(rs, ids, doc_ids)

    def evaluate(step: int) -> dict:
        score = scorer()
        out = {}
        for split, j in judged.items():
            ranks = rank_queries(
                score([text[q] for q in j.query_ids]),
                len(j.query_ids),
                j.gold,
                j.grades,
                j.excluded,
                0,
                len(doc_ids),
                groups,
            )[0]
            ranks, _ = j.full_ranks(ranks)  # unfindable gold: in the denominator, never found
            for k in cks:
                out[f"{split}_recall@{k}"] = float(recall_from_ranks(ranks, k).mean())
        return out

    return evaluate


_VALIDATION_SEED = section_defaults("finetune")["validation_seed"]  # the schema holds every default


def validation_split(
    train_ids: Sequence[str], fraction: float, seed: int = _VALIDATION_SEED
) -> tuple[list[str], list[str]]:
    """Carve a validation split out of the train queries for early stopping (never out of the
    held-out ones): a seeded permutation of ``sorted(train_ids)`` (so the data's order does not
    matter), its first ``round(fraction * n)`` ids (at least 1, at most n - 1) the validation
    queries. Returns ``(fit_ids, validation_ids)``, each in the order of ``train_ids``; they
    are disjoint and together are ``train_ids``. Raises ``ValueError`` for fewer than two
    train queries or ``fraction`` outside (0, 1)."""
    ids = list(train_ids)
    if len(ids) < 2 or not 0.0 < fraction < 1.0:
        raise ValueError(
            f"validation_split: need two train queries and 0 < fraction < 1 ({len(ids)} queries, {fraction})"
        )
    n_val = min(max(1, round(fraction * len(ids))), len(ids) - 1)
    order = sorted(ids)
    val = {order[i] for i in np.random.default_rng(seed).permutation(len(order))[:n_val]}
    return [q for q in ids if q not in val], [q for q in ids if q in val]
