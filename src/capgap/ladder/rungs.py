"""The ladder's shared rungs on one dataset x encoder, as the DAG reports them: every rung's
query vectors ranked and evaluated by ``capgap.evaluate.evaluate_queries`` (the tie rule and
metrics of every method: recall@k, nDCG, R-precision, capped recall on train, held-out, all)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from ..evaluate import Judged, evaluate_queries
from ..io import load_query_embeddings, load_witnesses  # noqa: F401 (re-exported by capgap.ladder)
from .config import LadderConfig
from .heads import HEADS, apply_head, fit_head
from .transfer import nearest_train, transfer_vectors

log = logging.getLogger(__name__)


def method_names(cfg: LadderConfig) -> list[str]:
    """The rungs' method names in results.csv, in the order ``evaluate_ladder`` writes them:
    ``head-linear-all``, ``head-mlp-all`` (fit on all queries), ``head-linear``, ``head-mlp``
    (trained on train queries), ``nn-transfer``, ``nn-transfer-top<m>``."""
    return ([f"head-{k}-all" for k in HEADS] + [f"head-{k}" for k in HEADS]
            + ["nn-transfer", f"nn-transfer-top{cfg.top_m}"])


def evaluate_ladder(rs, queries: np.ndarray, documents: np.ndarray, doc_ids: Sequence[str], W: np.ndarray | None,
                    cfg: LadderConfig, ks: Sequence[int], ndcg_k: int, encoder_name: str, threads: int | None = 1,
                    progress: bool = False) -> tuple[list[dict], dict]:
    """Rungs 2-4 of the learnability ladder (issue 29) on one frozen index.

    ``rs``: a ``capgap.data.RetrievalSet``; ``queries``: ``(n_queries, dim) float32`` the
    pre-trained query embeddings, one row per ``rs.queries`` id in order; ``documents``: the
    frozen index ``(n_docs, dim) float32`` in the order of ``doc_ids``; ``W``: the probe's w per
    query ``(n_queries, dim)`` in the same order (``load_witnesses``), or None (no transfer rows).

    Heads (``capgap.ladder.heads``): linear and mlp, each fit on every query with a gold row
    (``head-<kind>-all``) and on the train queries only (``head-<kind>``); then every query's head
    output is evaluated. Transfer (``capgap.ladder.transfer``): ``nn-transfer`` (the nearest train
    query's w) and ``nn-transfer-top<m>``. A set without train queries gets no train-only rows,
    one with fewer than two no transfer rows (logged). Returns ``(rows, seconds)``: the result rows, method
    by method (``method_names``), and the wall time of each method's training and evaluation."""
    qids = list(rs.queries.ids)
    X = np.asarray(queries, dtype=np.float32)
    if X.shape != (len(qids), documents.shape[1]):
        raise ValueError(f"evaluate_ladder: queries {X.shape}, expected ({len(qids)}, {documents.shape[1]})")
    j = Judged.of(rs, qids, doc_ids)
    excluded = [list(e) for e in j.excluded] if any(len(e) for e in j.excluded) else None
    at = {q: i for i, q in enumerate(qids)}
    train = [at[q] for q in rs.split.train]
    fits = {"-all": [i for i in range(len(qids)) if len(j.gold[i])], "": [i for i in train if len(j.gold[i])]}
    rows, seconds = [], {}

    def evaluate(method, vectors):
        rows.extend(evaluate_queries(rs, vectors, documents, doc_ids, ks, ndcg_k, encoder_name, method, threads)[0])

    for suffix, items in fits.items():
        for kind in HEADS:
            method = f"head-{kind}{suffix}"
            if not items:
                log.warning("ladder: %s skipped: %d queries to fit on", method, len(items))
                continue
            t = time.perf_counter()
            head, _ = fit_head(kind, X[items], documents, [j.gold[i] for i in items],
                               None if excluded is None else [excluded[i] for i in items], cfg, threads, progress)
            evaluate(method, apply_head(head, X))
            seconds[method] = time.perf_counter() - t
    if W is None:
        return rows, seconds
    if len(train) < 2:
        log.warning("ladder: nn-transfer skipped: %d train queries (two needed)", len(train))
        return rows, seconds
    W = np.asarray(W, dtype=np.float32)
    if W.shape != X.shape:
        raise ValueError(f"evaluate_ladder: W {W.shape}, expected {X.shape}")
    t = time.perf_counter()
    nn = nearest_train(X, train, cfg.top_m)
    for method, neighbours in (("nn-transfer", nn[:, :1]), (f"nn-transfer-top{cfg.top_m}", nn)):
        evaluate(method, transfer_vectors(W, neighbours))
    seconds["nn-transfer"] = time.perf_counter() - t
    return rows, seconds
