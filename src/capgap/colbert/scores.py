"""MaxSim scoring over packed documents: exact top-k, re-scoring of candidates, ANN recall.

s(q, d) = sum_i max_j <q_i, d_j> over L2-normalised token embeddings (Khattab & Zaharia
2020, Eq. 3), the max over the document's own tokens. Documents are packed once
(``pack_documents``): one ``(n_tokens, dim)`` token matrix plus ``(n_docs + 1,) int64``
offsets, document i owning rows ``offsets[i]:offsets[i+1]``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..retrieval import topk_from_scores


def pack_documents(doc_embeddings: Sequence[np.ndarray], dtype=np.float16) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate per-document token embeddings ``[(n_tokens_i, dim)]`` into
    ``(tokens (sum n_tokens_i, dim) dtype, offsets (n_docs + 1,) int64)``.

    Raises ``ValueError`` if there is no document, a document has no token or the dimensions
    differ.
    """
    if not len(doc_embeddings):
        raise ValueError("pack_documents: no documents")
    dims = {np.asarray(d).shape[1] for d in doc_embeddings}
    if len(dims) != 1:
        raise ValueError(f"pack_documents: documents have different dimensions {sorted(dims)}")
    lengths = np.array([len(d) for d in doc_embeddings], dtype=np.int64)
    if (lengths == 0).any():
        raise ValueError(f"pack_documents: document {int(np.argmin(lengths))} has no token embedding")
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return np.concatenate([np.asarray(d, dtype=dtype) for d in doc_embeddings]), offsets


def _padded_block(tokens: np.ndarray, offsets: np.ndarray, docs: np.ndarray):
    """Documents ``docs`` as a zero-padded ``(len(docs), max_len, dim) float32`` tensor and a
    ``(len(docs), max_len) bool`` mask of real tokens."""
    import torch

    lens = offsets[docs + 1] - offsets[docs]
    L = int(lens.max())
    out = np.zeros((len(docs), L, tokens.shape[1]), dtype=np.float32)
    mask = np.zeros((len(docs), L), dtype=bool)
    for r, (d, n) in enumerate(zip(docs, lens)):
        out[r, :n] = tokens[offsets[d] : offsets[d] + n]
        mask[r, :n] = True
    return torch.from_numpy(out), torch.from_numpy(mask)


def maxsim_scores(
    queries: np.ndarray, tokens: np.ndarray, offsets: np.ndarray, docs: np.ndarray | None = None, block_docs: int = 1024
) -> np.ndarray:
    """Exact MaxSim scores ``(n_queries, len(docs)) float32``.

    ``queries``: ``(n_queries, query_tokens, dim)`` (every query token counts, as with PyLate's
    query expansion); ``tokens``/``offsets``: packed documents (``pack_documents``); ``docs``:
    document indices to score (default all). s(q, d) = sum_i max_j <q_i, d_j> (ColBERT, Eq. 3),
    the max over the document's own tokens (as Stanford ColBERT/PLAID; PyLate's masked
    ``colbert_scores`` zeroes padding instead, i.e. max(best token, 0), which differs only when
    every token of a document has a negative similarity), computed in float32 in blocks of
    ``block_docs`` documents.
    """
    import torch

    q = torch.as_tensor(np.asarray(queries, dtype=np.float32))
    nq, lq, dim = q.shape
    docs = np.arange(len(offsets) - 1) if docs is None else np.asarray(docs, dtype=np.int64)
    qf = q.reshape(nq * lq, dim)
    out = np.empty((nq, len(docs)), dtype=np.float32)
    if not len(docs):
        return out
    # bound the (query tokens x block tokens) score matrix to ~2**26 floats (256 MB)
    max_len = int((offsets[docs + 1] - offsets[docs]).max())
    block_docs = max(1, min(block_docs, (1 << 26) // max(1, nq * lq * max_len)))
    for a in range(0, len(docs), block_docs):
        blk = docs[a : a + block_docs]
        doc_tokens, mask = _padded_block(tokens, offsets, blk)
        s = (qf @ doc_tokens.reshape(-1, dim).T).reshape(nq * lq, len(blk), -1)
        s = s.masked_fill_(~mask.unsqueeze(0), float("-inf")).amax(dim=2)
        out[:, a : a + len(blk)] = s.reshape(nq, lq, len(blk)).sum(dim=1).numpy()
    return out


def maxsim_topk(
    queries: np.ndarray,
    tokens: np.ndarray,
    offsets: np.ndarray,
    k: int,
    block_docs: int = 1024,
    block_queries: int = 256,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact MaxSim top-k over the whole packed corpus.

    Returns ``(indices (n_queries, k') int64, scores (n_queries, k') float32)``, ``k' =
    min(k, n_docs)``, scores descending, ties broken by lower document index
    (``capgap.retrieval.topk_from_scores``).
    """
    n_docs = len(offsets) - 1
    k = min(int(k), n_docs)
    idx_out, sc_out = [], []
    for a in range(0, len(queries), block_queries):
        q = queries[a : a + block_queries]
        best_i = np.zeros((len(q), 0), dtype=np.int64)
        best_s = np.zeros((len(q), 0), dtype=np.float32)
        for b in range(0, n_docs, block_docs * 8):
            docs = np.arange(b, min(n_docs, b + block_docs * 8))
            s = maxsim_scores(q, tokens, offsets, docs, block_docs)
            cand_i = np.concatenate([best_i, np.broadcast_to(docs, s.shape)], axis=1)
            cand_s = np.concatenate([best_s, s], axis=1)
            top, top_s = topk_from_scores(cand_s, k)
            # ties: topk_from_scores prefers the lower *column*; columns are in document order
            best_i, best_s = np.take_along_axis(cand_i, top, axis=1), top_s
        idx_out.append(best_i)
        sc_out.append(best_s)
    return np.concatenate(idx_out), np.concatenate(sc_out)


def rescore(queries: np.ndarray, tokens: np.ndarray, offsets: np.ndarray, candidates: Sequence[np.ndarray], k: int):
    """Exact MaxSim re-scoring of per-query candidate documents (what an ANN index proposed).

    Parameters
    ----------
    queries : ndarray
        Shape ``(n_queries, query_tokens, dim)``, float; ``queries[i]`` is scored against
        ``candidates[i]`` only.
    tokens, offsets : ndarray
        The packed documents (``pack_documents``): ``(n_tokens, dim)`` and ``(n_docs + 1,) int64``.
    candidates : sequence of ndarray
        One ``(c_i,)`` array of document indices per query (in ``[0, n_docs)``; duplicates and
        order do not matter; may be empty).
    k : int
        Documents kept per query.

    Returns
    -------
    indices : ndarray
        Shape ``(n_queries, k) int64``: each query's best candidates by MaxSim, descending, ties
        broken by lower document index (as ``maxsim_topk``); padded with -1 when a query has
        fewer than k candidates.
    scores : ndarray
        Shape ``(n_queries, k) float32``: their MaxSim scores (sums of inner products, no unit),
        padded with ``-inf``.

    Raises ``IndexError`` when a candidate index is outside ``[0, n_docs)``.
    """
    idx = np.full((len(queries), k), -1, dtype=np.int64)
    sc = np.full((len(queries), k), -np.inf, dtype=np.float32)
    for i, cand in enumerate(candidates):
        cand = np.unique(np.asarray(cand, dtype=np.int64))
        if not len(cand):
            continue
        if cand[0] < 0 or cand[-1] >= len(offsets) - 1:
            raise IndexError(f"rescore: candidate documents of query {i} outside [0, {len(offsets) - 1})")
        s = maxsim_scores(queries[i : i + 1], tokens, offsets, cand)[0]
        order = np.lexsort((cand, -s))[:k]
        idx[i, : len(order)] = cand[order]
        sc[i, : len(order)] = s[order]
    return idx, sc


def candidate_score_block(
    queries: np.ndarray, tokens: np.ndarray, offsets: np.ndarray, candidates: Sequence[np.ndarray]
):
    """A ``capgap.retrieval.rank_queries`` ``score_block`` for candidate retrieval: each query's
    candidate documents scored by exact MaxSim, every other document not retrieved.

    ``queries``: ``(n_queries, query_tokens, dim)``; ``tokens``/``offsets``: packed documents;
    ``candidates[i]``: ``(c_i,)`` document indices of query i. ``score_block(a, b)`` returns
    ``(scores (b - a, n_docs) float32, -inf where not retrieved; retrieved (b - a, n_docs) bool)``.
    """
    n_docs = len(offsets) - 1

    def score_block(a: int, b: int):
        S = np.full((b - a, n_docs), -np.inf, dtype=np.float32)
        R = np.zeros((b - a, n_docs), dtype=bool)
        for r, c in enumerate(candidates[a:b]):
            c = np.unique(np.asarray(c, dtype=np.int64))
            if len(c):
                S[r, c] = maxsim_scores(queries[a + r : a + r + 1], tokens, offsets, c)[0]
                R[r, c] = True
        return S, R

    return score_block


def ann_recall(approx: np.ndarray, exact: np.ndarray, k: int) -> float:
    """Mean over queries of |approx top-k ∩ exact top-k| / k (ANN recall against exact search,
    not gold-document recall). ``approx``/``exact``: ``(n_queries, >=k) int64``."""
    k = min(k, exact.shape[1])
    return float(np.mean([len(set(a[:k]) & set(e[:k])) / k for a, e in zip(approx, exact)]))
