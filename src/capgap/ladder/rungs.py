"""The ladder's shared rungs on one dataset x encoder, as the DAG reports them: every rung's
query vectors ranked and evaluated by ``capgap.evaluate.evaluate_queries`` (the tie rule and
metrics of every method: recall@k, nDCG, R-precision, capped recall on train, held-out, all)."""

from __future__ import annotations

import logging
import time
from typing import Sequence

import numpy as np

from ..evaluate import Judged, evaluate_queries
from ..io import load_query_embeddings, load_witnesses  # noqa: F401 (re-exported by capgap.ladder)
from ..metrics import rprec_from_ranks
from ..retrieval import dense_scores, document_groups, rank_queries
from ..training import validation_split
from .config import LadderConfig
from .heads import HEADS, apply_head, fit_head
from .transfer import nearest_train, transfer_vectors

log = logging.getLogger(__name__)


def method_names(cfg: LadderConfig) -> list[str]:
    """The rungs' method names in results.csv, in the order ``evaluate_ladder`` writes them:
    ``head-linear-all``, ``head-mlp-all`` (fit on all queries), ``head-linear``, ``head-mlp``
    (trained on train queries), ``nn-transfer``, ``nn-transfer-top<m>``."""
    return (
        [f"head-{k}-all" for k in HEADS] + [f"head-{k}" for k in HEADS] + ["nn-transfer", f"nn-transfer-top{cfg.top_m}"]
    )


SMALL_VALIDATION = 10  # validation splits under this many queries are named in a warning


def evaluate_ladder(
    rs,
    queries: np.ndarray,
    documents: np.ndarray,
    doc_ids: Sequence[str],
    W: np.ndarray | None,
    cfg: LadderConfig,
    ks: Sequence[int],
    ndcg_k: int,
    encoder_name: str,
    threads: int | None = 1,
    progress: bool = False,
) -> tuple[list[dict], dict]:
    """Rungs 2-4 of the learnability ladder (issue 29) on one frozen index.

    ``rs``: a ``capgap.data.RetrievalSet``; ``queries``: ``(n_queries, dim) float32`` the
    pre-trained query embeddings, one row per ``rs.queries`` id in order; ``documents``: the
    frozen index ``(n_docs, dim) float32`` in the order of ``doc_ids``; ``W``: the probe's w per
    query ``(n_queries, dim)`` in the same order (``load_witnesses``), or None (no transfer rows).

    Heads (``capgap.ladder.heads``): linear and mlp, each fit on every query with a gold row
    (``head-<kind>-all``) and on the train queries only (``head-<kind>``), under the convergence
    rule (``cfg.convergence()``); then every query's head output is evaluated, and the head's
    convergence state follows its rows (``ConvergenceState.rows``: converged, steps, max_steps,
    train_loss, loss_improvement; split train). The train-only heads fit the train queries less
    a validation split (``cfg.validation_fraction`` of them, ``capgap.finetune.validation_split``
    seeded by ``cfg.seed``; none when 0 or fewer than two train queries) and keep the weights
    with the best R-precision on it (the initial head included; ``fit_head(validate=...)``). The
    log has each head's state (``describe()``) and wall time. Transfer
    (``capgap.ladder.transfer``): ``nn-transfer`` (the nearest train query's w) and
    ``nn-transfer-top<m>``. A set without train queries gets no train-only rows, one with
    fewer than two no transfer rows (logged). Returns ``(rows, seconds)``: the result rows,
    method by method (``method_names``), and the wall time of each method's training and
    evaluation."""
    qids = list(rs.queries.ids)
    X = np.asarray(queries, dtype=np.float32)
    if X.shape != (len(qids), documents.shape[1]):
        raise ValueError(f"evaluate_ladder: queries {X.shape}, expected ({len(qids)}, {documents.shape[1]})")
    j = Judged.of(rs, qids, doc_ids)
    excluded = [list(e) for e in j.excluded] if any(len(e) for e in j.excluded) else None
    at = {q: i for i, q in enumerate(qids)}
    train = [at[q] for q in rs.split.train]
    gold_train = [i for i in train if len(j.gold[i])]
    validation: list[int] = []
    if cfg.validation_fraction > 0 and len(gold_train) >= 2:
        fit_ids, val_ids = validation_split([qids[i] for i in gold_train], cfg.validation_fraction, cfg.seed)
        gold_train, validation = [at[q] for q in fit_ids], [at[q] for q in val_ids]
    elif cfg.validation_fraction > 0 and gold_train:
        log.warning(
            "ladder: no validation split for the train-only heads: %d train queries with gold (two needed)",
            len(gold_train),
        )
    if 0 < len(validation) < SMALL_VALIDATION:
        log.warning(
            "ladder: the train-only heads' validation split has %d queries (under %d): early stopping's "
            "choice of weights rests on few queries",
            len(validation),
            SMALL_VALIDATION,
        )
    fits = {"-all": [i for i in range(len(qids)) if len(j.gold[i])], "": gold_train}
    groups = document_groups(rs.corpus, documents)
    rows, seconds = [], {}

    def evaluate(method, vectors):
        rows.extend(evaluate_queries(rs, vectors, documents, doc_ids, ks, ndcg_k, encoder_name, method, threads)[0])

    def validate(head) -> float:
        """Mean R-precision of the head on the validation queries (the evaluation's tie rule)."""
        V = apply_head(head, X[validation])
        ranks = rank_queries(
            dense_scores(V, documents, threads),
            len(validation),
            [j.gold[i] for i in validation],
            [j.grades[i] for i in validation],
            [j.excluded[i] for i in validation],
            0,
            len(doc_ids),
            groups,
        )[0]
        if j.unfindable:  # unfindable gold: in the denominator, never found (Judged.full_ranks)
            ranks = [np.concatenate([r, np.full(len(j.unfindable[i]), np.inf)]) for r, i in zip(ranks, validation)]
        return float(rprec_from_ranks(ranks).mean())

    for suffix, items in fits.items():
        for kind in HEADS:
            method = f"head-{kind}{suffix}"
            if not items:
                log.warning("ladder: %s skipped: %d queries to fit on", method, len(items))
                continue
            t = time.perf_counter()
            head, res = fit_head(
                kind,
                X[items],
                documents,
                [j.gold[i] for i in items],
                None if excluded is None else [excluded[i] for i in items],
                cfg,
                threads,
                progress,
                validate=validate if suffix == "" and validation else None,
                name=f"{rs.name}/{encoder_name} {method}",
            )
            evaluate(method, apply_head(head, X))
            rows.extend(res.convergence.rows(rs.name, encoder_name, method))
            seconds[method] = time.perf_counter() - t
            log.info("ladder: %s %s (%.1f s)", method, res.convergence.describe(), seconds[method])
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
