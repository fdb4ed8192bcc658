"""Nearest-train-query transfer (issue 29, rung 4): does capacity transfer through query
similarity? Each query borrows the probe's w (the oracle vector, ``capgap.probe``) of its most
similar train query, similarity being the cosine of the pre-trained query embeddings; the
top-m variant averages the unit-normalised w's of the m most similar train queries.

A train query never borrows its own w (leave-one-out: its nearest *other* train query), so its
rows measure transfer as the held-out rows do, not the oracle again. Ties in similarity go to the
train query that comes first in index order (a stable sort).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def _unit(M: np.ndarray) -> np.ndarray:
    M = np.asarray(M, dtype=np.float64)
    return M / np.maximum(np.linalg.norm(M, axis=1, keepdims=True), 1e-300)


def nearest_train(X: np.ndarray, train_rows: Sequence[int], m: int, block: int = 2048) -> np.ndarray:
    """The ``m`` train queries most similar to each query, most similar first.

    ``X``: ``(n_queries, dim)`` pre-trained query embeddings; ``train_rows``: the rows of ``X``
    that are train queries. Similarity: cosine (float64); a query that is itself a train query
    is left out of its own list; ties go to the lower row. Returns ``(n_queries, m')`` int64
    rows of ``X``, ``m' = min(m, len(train_rows) - 1)`` (every train query leaves itself out, so
    every query gets the same number). Raises ``ValueError`` for ``m < 1`` or fewer than two
    train queries."""
    train = np.array(sorted(int(r) for r in train_rows), dtype=np.int64)
    n = len(X)
    if m < 1 or len(train) < 2:
        raise ValueError(f"nearest_train: need m >= 1 and two train queries (m={m}, {len(train)} train queries)")
    is_train = np.full(n, -1, dtype=np.int64)
    is_train[train] = np.arange(len(train))
    m_eff = min(m, len(train) - 1)
    U, T = _unit(X), _unit(X)[train]
    out = np.empty((n, m_eff), dtype=np.int64)
    for a in range(0, n, block):
        S = U[a : a + block] @ T.T
        rows = np.arange(a, min(a + block, n))
        own = is_train[rows]
        S[np.flatnonzero(own >= 0), own[own >= 0]] = -np.inf  # leave-one-out
        out[a : a + block] = train[np.argsort(-S, axis=1, kind="stable")[:, :m_eff]]
    return out


def transfer_vectors(W: np.ndarray, neighbours: np.ndarray) -> np.ndarray:
    """Query vectors borrowed from the neighbours' w: ``W`` ``(n_queries, dim)`` (the probe's
    w per query), ``neighbours`` ``(n_queries, m)`` rows of ``W`` (``nearest_train``). With
    m = 1 each query gets its neighbour's w itself; with m > 1 the mean of the neighbours'
    unit-normalised w's (a w's scale does not change its ranking, so none dominates by its
    norm). Returns ``(n_queries, dim) float32``."""
    neighbours = np.asarray(neighbours, dtype=np.int64)
    if neighbours.shape[1] == 1:
        return np.asarray(W, dtype=np.float32)[neighbours[:, 0]]
    return _unit(W)[neighbours].mean(axis=1).astype(np.float32)
