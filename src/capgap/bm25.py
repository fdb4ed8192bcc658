"""BM25 baseline: ``bm25s`` (sparse-matrix, fast; the default) or ``rank-bm25`` (selectable).

Both backends share one tokeniser (``bm25s.tokenize``: lower-case, ``\\b\\w\\w+\\b`` tokens,
English stopwords removed) and one top-k rule (``capgap.retrieval.topk_from_scores``: score
descending, ties by lower document index), so they differ only in scoring.

Methods: ``bm25s`` supports ``lucene`` (default; idf = log(1 + (N - df + .5)/(df + .5))),
``robertson``, ``atire``, ``bm25l``, ``bm25+``. ``rank-bm25`` supports ``robertson``
(``BM25Okapi``; negative idf floored at ``epsilon * mean idf``), ``bm25l`` and ``bm25+``.
Robertson et al. 1994; Kamphuis et al. 2020 ("Which BM25 do you mean?") for the variants.
"""

from __future__ import annotations

import numpy as np

from .retrieval import topk_from_scores

BACKENDS = ("bm25s", "rank-bm25")


def tokenize(texts: list[str], stopwords: str | None = "en") -> list[list[str]]:
    """Tokenise for both backends: ``list`` (per text) of ``list[str]`` tokens."""
    import bm25s

    return bm25s.tokenize(list(texts), lower=True, stopwords=stopwords or [], return_ids=False, show_progress=False)


class BM25:
    """A BM25 index over a corpus.

    ``BM25(doc_texts, backend="bm25s", method="lucene", k1=1.5, b=0.75, stopwords="en")``;
    ``.scores(query_texts)`` -> ``(n_queries, n_docs) float32``; ``.search(query_texts, k)`` ->
    ``(indices (n_queries, k) int64, scores float32)``. Raises ``ValueError`` for an unknown
    backend or a method the backend lacks.
    """

    def __init__(self, doc_texts: list[str], backend: str = "bm25s", method: str = "lucene", k1: float = 1.5, b: float = 0.75, stopwords: str | None = "en"):
        if backend not in BACKENDS:
            raise ValueError(f"bm25 backend must be one of {BACKENDS}, got {backend!r}")
        self.backend, self.method, self.stopwords = backend, method, stopwords
        self.n_docs = len(doc_texts)
        tokens = tokenize(doc_texts, stopwords)
        if backend == "bm25s":
            import bm25s

            self._index = bm25s.BM25(k1=k1, b=b, method=method)
            self._index.index(tokens, show_progress=False)
        else:
            import rank_bm25

            classes = {"robertson": rank_bm25.BM25Okapi, "bm25l": rank_bm25.BM25L, "bm25+": rank_bm25.BM25Plus}
            if method not in classes:
                raise ValueError(f"rank-bm25 implements {sorted(classes)}, not {method!r}; set bm25.method accordingly")
            self._index = classes[method]([t if t else [""] for t in tokens], k1=k1, b=b)

    def scores(self, query_texts: list[str]) -> np.ndarray:
        """BM25 score of every document for every query: ``(n_queries, n_docs) float32``."""
        out = np.zeros((len(query_texts), self.n_docs), dtype=np.float32)
        for i, toks in enumerate(tokenize(query_texts, self.stopwords)):
            if not toks:
                continue
            if self.backend == "bm25s":
                known = [t for t in toks if t in self._index.vocab_dict]
                if known:
                    out[i] = self._index.get_scores(known)
            else:
                out[i] = self._index.get_scores(toks)
        return out

    def search(self, query_texts: list[str], k: int, block: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Top-k documents per query (see ``topk_from_scores`` for order and ties)."""
        k = min(k, self.n_docs)
        idx = np.empty((len(query_texts), k), dtype=np.int64)
        sc = np.empty((len(query_texts), k), dtype=np.float32)
        for s in range(0, len(query_texts), block):
            idx[s : s + block], sc[s : s + block] = topk_from_scores(self.scores(query_texts[s : s + block]), k)
        return idx, sc
