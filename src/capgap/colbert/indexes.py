"""Approximate indexes that propose candidate documents for exact MaxSim re-scoring.

``FaissTokenIndex``: ColBERT v1's end-to-end retrieval (Khattab & Zaharia 2020, Sec. 3.6) on a
faiss IVF index over every document token. ``PlaidIndex``: PyLate's PLAID (Santhanam et al.
2022; ``use_fast=False``, the Stanford backend). Both take packed documents
(``capgap.colbert.scores.pack_documents``) and return per-query candidate document indices,
which the caller re-scores exactly (``capgap.colbert.scores.rescore`` /
``candidate_score_block``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from ..config import section_defaults

_D = section_defaults("colbert")  # the schema holds every default (capgap.config)


class FaissTokenIndex:
    """Candidate generation as in ColBERT v1 (Khattab & Zaharia 2020, Sec. 3.6), with faiss.

    A ``faiss.IndexIVFFlat`` (inner product) over every document token embedding; each query
    token retrieves its ``k_tokens`` nearest document tokens probing ``nprobe`` of ``nlist``
    cells, and the documents owning them are the query's candidates (their union, typically
    hundreds), which the caller re-scores exactly. IVF-Flat stores the vectors uncompressed, so
    within the probed cells the token scores are exact. ``nlist`` defaults to the power of two
    nearest 4·sqrt(n_tokens); k-means is seeded and trained on ``64 * nlist`` sampled tokens.
    """

    def __init__(
        self,
        nlist: int | None = _D["faiss_nlist"],
        nprobe: int = _D["faiss_nprobe"],
        k_tokens: int = _D["faiss_k_tokens"],
        seed: int = _D["seed"],
    ):
        self.nlist, self.nprobe, self.k_tokens, self.seed = nlist, nprobe, k_tokens, seed
        self._index = None
        self._doc_of_token = None

    def build(self, tokens: np.ndarray, offsets: np.ndarray) -> None:
        """Index the packed documents (``pack_documents`` layout): ``tokens`` ``(n_tokens, dim)``,
        ``offsets`` ``(n_docs + 1,) int64``. Sets ``nlist`` to the number of cells used (at most
        ``n_tokens // 39``: faiss wants 39 training points per cell)."""
        import faiss

        n, dim = tokens.shape
        nlist = self.nlist or int(2 ** round(np.log2(max(1.0, 4 * np.sqrt(n)))))
        nlist = max(1, min(nlist, n // 39 or 1))  # faiss wants >= 39 training points per cell
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = int(self.seed)
        index.cp.niter = 10
        rng = np.random.default_rng(self.seed)
        sample = np.sort(rng.choice(n, size=min(n, 64 * nlist), replace=False))
        index.train(np.ascontiguousarray(tokens[sample], dtype=np.float32))
        for a in range(0, n, 1 << 19):
            index.add(np.ascontiguousarray(tokens[a : a + (1 << 19)], dtype=np.float32))
        self._index = index
        self._doc_of_token = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets)).astype(np.int64)
        self.nlist = nlist

    def search(self, queries: np.ndarray, k: int | None = None) -> list[np.ndarray]:
        """Candidate documents per query: the union of the documents owning each query token's
        ``k_tokens`` nearest document tokens (inner product, ``nprobe`` cells probed).

        Parameters
        ----------
        queries : ndarray
            Shape ``(n_queries, query_tokens, dim)``, float (converted to float32).
        k : int, optional
            Unused: the union is what ColBERT v1 re-ranks (accepted so both indexes are called
            alike).

        Returns
        -------
        list of ndarray
            One ``(c_i,) int64`` array per query: candidate document indices, ascending, unique.

        Raises
        ------
        RuntimeError
            When called before ``build``.
        """
        if self._index is None:
            raise RuntimeError("FaissTokenIndex.search called before build: build(tokens, offsets) first")
        q = np.ascontiguousarray(np.asarray(queries, dtype=np.float32))
        nq, lq, dim = q.shape
        self._index.nprobe = self.nprobe
        _, ids = self._index.search(q.reshape(nq * lq, dim), self.k_tokens)
        ids = ids.reshape(nq, lq * self.k_tokens)
        return [np.unique(self._doc_of_token[row[row >= 0]]) for row in ids]


STALE_LOCK_S = 900  # a C++ extension build takes ~2.5 min here: a lock this old is a killed build's


def clear_stale_build_locks(extensions_dir: str | Path, max_age_s: float = STALE_LOCK_S) -> list[Path]:
    """Remove the build locks (``<extension>/lock``) that torch's ``cpp_extension`` leaves in
    ``extensions_dir`` when a build is killed: the next build would otherwise wait on them
    forever (torch's ``FileBaton`` records no owner). A lock whose modification time is more
    than ``max_age_s`` seconds old is a dead build's and is removed, with a warning; a younger
    one may be a live build in another process and stays. Returns the removed paths."""
    import logging
    import time

    removed = []
    for lock in sorted(Path(extensions_dir).glob("*/lock")):
        try:
            age = time.time() - lock.stat().st_mtime
            if age > max_age_s:
                lock.unlink()
                removed.append(lock)
                logging.getLogger(__name__).warning(
                    "removed a stale C++ extension build lock %s (%.0f s old: a killed build's)", lock, age
                )
        except FileNotFoundError:  # another process finished or removed it meanwhile
            continue
    return removed


class PlaidIndex:
    """PyLate's PLAID index (Stanford backend, CPU) over packed documents, used for candidates.

    ``nbits`` (residual compression), ``ncells`` (IVF cells probed per query token), ``ndocs``
    (documents scored in PLAID's last stage) and ``centroid_score_threshold`` (centroid pruning)
    are PLAID's own parameters (Santhanam et al. 2022), PyLate's defaults.

    ``folder``: where the index lives; ``extensions_dir``: ``TORCH_EXTENSIONS_DIR`` for its C++
    extensions (compiled once, ~2.5 min on 2 cores, then loaded in seconds). Constructing the
    index sets ``TORCH_EXTENSIONS_DIR`` in this process's environment and creates the folder.
    """

    def __init__(
        self,
        folder: str | Path,
        extensions_dir: str | Path,
        nbits: int = _D["plaid_nbits"],
        candidates: int = _D["candidates"],
        ncells: int = _D["plaid_ncells"],
        ndocs: int = _D["plaid_ndocs"],
        centroid_score_threshold: float = _D["plaid_centroid_score_threshold"],
    ):
        os.environ["TORCH_EXTENSIONS_DIR"] = str(Path(extensions_dir).resolve())
        Path(extensions_dir).mkdir(parents=True, exist_ok=True)
        clear_stale_build_locks(extensions_dir)
        self.folder = Path(folder)
        self.nbits, self.candidates = nbits, candidates
        self.search_args = {"ncells": ncells, "ndocs": ndocs, "centroid_score_threshold": centroid_score_threshold}
        self._index = None

    def build(self, tokens: np.ndarray, offsets: np.ndarray) -> None:
        """Index every document (document i gets the PLAID id ``str(i)``); replaces any old index
        in ``folder``. ``tokens`` ``(n_tokens, dim)``, ``offsets`` ``(n_docs + 1,) int64``."""
        from pylate import indexes

        if self.folder.exists():
            shutil.rmtree(self.folder)
        self.folder.mkdir(parents=True)
        self._index = indexes.PLAID(
            index_folder=str(self.folder),
            index_name="plaid",
            override=True,
            use_fast=False,
            nbits=self.nbits,
            embedding_size=int(tokens.shape[1]),
            **self.search_args,
        )
        docs = [np.asarray(tokens[offsets[i] : offsets[i + 1]], dtype=np.float32) for i in range(len(offsets) - 1)]
        self._index.add_documents(documents_ids=[str(i) for i in range(len(docs))], documents_embeddings=docs)

    def search(self, queries: np.ndarray, k: int) -> list[np.ndarray]:
        """Candidate documents per query: PLAID's own top-``k`` (approximate).

        Parameters
        ----------
        queries : ndarray
            Shape ``(n_queries, query_tokens, dim)``, float (converted to float32).
        k : int
            Candidates per query (fewer when PLAID finds fewer).

        Returns
        -------
        list of ndarray
            One ``(c_i,) int64`` array per query, ``c_i <= k``: document indices in PLAID's
            order (best first).

        Raises
        ------
        RuntimeError
            When called before ``build``.
        """
        if self._index is None:
            raise RuntimeError("PlaidIndex.search called before build: build(tokens, offsets) first")
        res = self._index([np.asarray(q, dtype=np.float32) for q in queries], k=k)
        return [np.array([int(r["id"]) for r in row], dtype=np.int64) for row in res]
