"""Seeded structured indexes and query sets at the paper's scale, for measuring the probe
(``benchmarks/scale.py``) where no real 500k-document index is at hand.

The paper probes corpora of up to about 500k documents (arXiv 2610.02749, "The empirical half":
BRIGHT's categories at 8k-120k, TREC-COVID at 171k, Quora at 523k documents). Random unit vectors
would make every gold set trivially separable; real embeddings are not like that. The index
here has the structure that makes a probe work:

- **clusters** on the unit sphere (topics: ``n_docs / cluster_size`` centres, sizes drawn from a
  Zipf-like law, so some topics are large);
- **anisotropy**: a common direction every document shares (real sentence embeddings occupy a
  narrow cone: mean pairwise cosine about 0.1) and a shared low-rank topic component with a
  power-law spectrum (a few directions carry most of the variance);
- isotropic noise, then every row L2-normalised (float32);
- **near-duplicates** at ``dup_rate`` (a copy of an earlier row of the same block plus noise of
  norm ~1e-3) and exact duplicates at ``dup_rate / 10`` (bit-identical copies, as a corpus with
  repeated texts gives).

Rows are generated in blocks of ``BLOCK`` from generators seeded by ``(seed, block)``, so the same
arguments give the same bytes, whether written to a file (a ``.npy`` memory map) or held in
memory, and the index never exists in float64 whole.

Query sets (``query_set``) have the shapes of the paper's datasets, drawn from the clusters:

- ``"bright"``: ``n_queries`` = 100, 2-8 gold documents, most from one topic and one or two
  from another (BRIGHT's reasoning queries cite documents across topics), 0-5 excluded documents
  from the main topic (BRIGHT's ``excluded_ids``);
- ``"trec-covid"``: 50 queries with ~500 gold documents: two topics' documents (up to 225 of
  each) and 50 scattered over the index;
- ``"quora"``: 10,000 queries with 1-2 gold documents of one topic (Quora's duplicate
  questions: one or two earlier questions asking the same).

Public API: ``structured_index``, ``query_set``, ``QUERY_SHAPES``, ``BLOCK``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

BLOCK = 65_536  # rows per generated block (each from its own seeded generator)
QUERY_SHAPES = ("bright", "trec-covid", "quora")


def _centres(n_clusters: int, dim: int, rank: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cluster centres ``(k, dim)`` (each with the common direction added), the topic basis
    ``(rank, dim)`` scaled by a power-law spectrum and the cluster weights ``(k,)`` (Zipf-like,
    exponent 0.8, normalised)."""
    rng = np.random.default_rng([seed, 2**31 - 1])
    C = rng.standard_normal((n_clusters, dim))
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    mu = rng.standard_normal(dim)
    C += 0.45 * mu / np.linalg.norm(mu)
    T = np.linalg.qr(rng.standard_normal((dim, rank)))[0].T * (np.arange(1, rank + 1) ** -0.5)[:, None]
    p = np.arange(1, n_clusters + 1, dtype=np.float64) ** -0.8
    return C, T, p / p.sum()


def structured_index(
    n_docs: int,
    dim: int,
    seed: int = 0,
    path: str | Path | None = None,
    cluster_size: int = 500,
    rank: int = 16,
    dup_rate: float = 0.002,
) -> tuple[np.ndarray, np.ndarray]:
    """A structured index (module docstring) and each document's topic.

    Parameters
    ----------
    n_docs, dim : int
        Rows and columns, each >= 1.
    seed : int
        Everything is a function of it (and the other arguments): same bytes twice.
    path : str or Path, optional
        Write the index there as a ``.npy`` file (float32, C order) and return it memory-mapped
        read-only; default: in memory.
    cluster_size : int
        Mean documents per topic (``n_docs // cluster_size`` topics, at least 1).
    rank : int
        Rank of the shared topic component (0: none).
    dup_rate : float
        Fraction of rows that are near-duplicates of an earlier row of their block; a tenth
        of that are exact (bit-identical) copies.

    Returns
    -------
    embeddings : numpy.ndarray
        ``(n_docs, dim) float32``, unit rows.
    labels : numpy.ndarray
        ``(n_docs,) int32``, each document's topic.

    Raises
    ------
    ValueError
        ``n_docs`` or ``dim`` below 1, ``dup_rate`` outside [0, 0.5].
    """
    if n_docs < 1 or dim < 1:
        raise ValueError(f"n_docs and dim must be >= 1, got {n_docs} x {dim}")
    if not 0.0 <= dup_rate <= 0.5:
        raise ValueError(f"dup_rate must lie in [0, 0.5], got {dup_rate}")
    k = max(1, n_docs // cluster_size)
    C, T, p = _centres(k, dim, rank, seed)
    if path is not None:
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        embeddings = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n_docs, dim))
    else:
        embeddings = np.empty((n_docs, dim), dtype=np.float32)
    labels = np.empty(n_docs, dtype=np.int32)
    for b, b0 in enumerate(range(0, n_docs, BLOCK)):
        m = min(BLOCK, n_docs - b0)
        rng = np.random.default_rng([seed, b])
        lab = rng.choice(k, size=m, p=p).astype(np.int32)
        x = 0.8 * C[lab] + 0.35 * rng.standard_normal((m, T.shape[0])) @ T if rank else 0.8 * C[lab]
        x = x + rng.standard_normal((m, dim)) * (0.45 / np.sqrt(dim))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        n_dup = int(round(dup_rate * m))
        if n_dup and m > 1:
            dst = rng.choice(np.arange(1, m), size=min(n_dup, m - 1), replace=False)
            src = (rng.random(len(dst)) * dst).astype(np.int64)  # an earlier row of the block
            exact = rng.random(len(dst)) < 0.1
            noise = rng.standard_normal((len(dst), dim)) * (1e-3 / np.sqrt(dim))
            x[dst] = x[src] + np.where(exact[:, None], 0.0, noise)
            lab[dst] = lab[src]
            near = ~exact
            x[dst[near]] /= np.linalg.norm(x[dst[near]], axis=1, keepdims=True)
        embeddings[b0 : b0 + m] = x.astype(np.float32)
        labels[b0 : b0 + m] = lab
    if path is not None:
        embeddings.flush()
        del embeddings
        tmp.replace(path)  # whole or absent
        embeddings = np.load(path, mmap_mode="r")
    return embeddings, labels


def query_set(
    kind: str, labels: np.ndarray, seed: int = 0, n_queries: int | None = None
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Gold sets (and excluded documents) of a query set shaped like ``kind`` (module docstring).

    ``labels``: ``(n_docs,) int`` the topics of ``structured_index``; ``n_queries``: default the
    shape's (100, 50, 10,000). Returns ``(golds, excluded)``: per query ``int64`` row arrays,
    sorted, disjoint. Raises ``ValueError`` for an unknown ``kind``."""
    if kind not in QUERY_SHAPES:
        raise ValueError(f"kind must be one of {QUERY_SHAPES}, got {kind!r}")
    n = len(labels)
    rng = np.random.default_rng([seed, 7, QUERY_SHAPES.index(kind)])
    order = np.argsort(labels, kind="stable")
    starts = np.searchsorted(labels[order], np.arange(labels.max() + 2))
    members = lambda t: order[starts[t] : starts[t + 1]]  # noqa: E731
    topics = np.flatnonzero(np.diff(starts) >= 2)
    nq = n_queries if n_queries is not None else {"bright": 100, "trec-covid": 50, "quora": 10_000}[kind]
    golds, excluded = [], []
    for _ in range(nq):
        t = int(rng.choice(topics))
        own = members(t)
        if kind == "bright":
            size = int(rng.integers(2, 9))
            other = members(int(rng.choice(topics)))
            n_other = min(int(rng.integers(1, 3)), size - 1, len(other))
            g = np.union1d(
                rng.choice(own, size=min(size - n_other, len(own)), replace=False),
                rng.choice(other, size=n_other, replace=False),
            )
            pool = np.setdiff1d(own, g)
            e = rng.choice(pool, size=min(int(rng.integers(0, 6)), len(pool)), replace=False)
        elif kind == "trec-covid":
            other = members(int(rng.choice(topics)))
            g = np.union1d(
                rng.choice(own, size=min(225, len(own)), replace=False),
                rng.choice(other, size=min(225, len(other)), replace=False),
            )
            g = np.union1d(g, rng.choice(n, size=50, replace=False))
            e = np.zeros(0, dtype=np.int64)
        else:
            g = rng.choice(own, size=1 + int(rng.random() < 0.5), replace=False)
            e = np.zeros(0, dtype=np.int64)
        golds.append(np.sort(g).astype(np.int64))
        excluded.append(np.setdiff1d(e, g).astype(np.int64))
    return golds, excluded
