"""BM25 baseline: ``bm25s`` (sparse-matrix, fast; the default) or ``rank-bm25`` (selectable).

Both backends share one tokeniser (``bm25s.tokenize`` after NFC normalisation: lower-case,
``\\b\\w\\w+\\b`` tokens, English stopwords removed) and capgap's evaluation tie rule
(``capgap.retrieval``): only documents containing at least one query term are retrieved
(``BM25.matches``), so a query whose terms match nothing retrieves nothing, and documents with
equal scores are ranked pessimistically. The backends differ only in scoring.

Variants are named, not assumed (Kamphuis et al., "Which BM25 do you mean?", ECIR 2020;
``BM25.variant`` says which one ran and is logged with the results):

- ``bm25s`` ``lucene`` (default): idf = ln(1 + (N - df + .5)/(df + .5)), always positive;
  also ``atire``, ``bm25l``, ``bm25+``.
- ``bm25s`` ``robertson``: idf = ln((N - df + .5)/(df + .5)) **clipped at 0**: a term in more
  than half the documents adds nothing.
- ``rank-bm25`` ``robertson`` (``BM25Okapi``): the same idf, but a negative idf is **replaced by
  epsilon x mean idf** (``epsilon``, rank-bm25's default 0.25), so such a term adds a positive
  amount to every document containing it. With ``epsilon: 0`` it is ``bm25s`` ``robertson``
  times the constant (k1 + 1) that rank-bm25 keeps in the tf part (so the same rankings);
  with any other epsilon the two rank differently as soon as a query term has df > N/2 (a
  warning says how many such terms the corpus has).
- ``rank-bm25`` ``bm25l`` and ``bm25+`` (``BM25L``, ``BM25Plus``).
"""

from __future__ import annotations

import logging
import unicodedata
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from .config import section_defaults
from .data import load_canonical
from .evaluate import evaluate_scores, write_outputs
from .retrieval import document_groups, topk_from_scores

if TYPE_CHECKING:
    from .trec import Run

log = logging.getLogger(__name__)
_D = section_defaults("bm25")  # the schema holds every default (capgap.config)
BACKENDS = ("bm25s", "rank-bm25")
IDF_RULES = {
    ("bm25s", "lucene"): "idf = ln(1 + (N - df + .5)/(df + .5)), always positive",
    ("bm25s", "robertson"): "idf = ln((N - df + .5)/(df + .5)) clipped at 0",
    ("bm25s", "atire"): "idf = ln(N/df)",
    ("bm25s", "bm25l"): "idf = ln((N + 1)/(df + .5))",
    ("bm25s", "bm25+"): "idf = ln((N + 1)/df)",
    ("rank-bm25", "robertson"): "idf = ln((N - df + .5)/(df + .5)), a negative idf replaced by epsilon x mean idf",
    ("rank-bm25", "bm25l"): "idf = ln((N + 1)/(df + .5))",
    ("rank-bm25", "bm25+"): "idf = ln((N + 1)/df)",
}


def tokenize(texts: list[str], stopwords: str | None = _D["stopwords"]) -> list[list[str]]:
    """Tokenise texts for both backends (``bm25s.tokenize``, lower-cased).

    Texts are NFC-normalised first, so a decomposed accent (NFD) cannot split a word.

    Parameters
    ----------
    texts : list of str
        The texts.
    stopwords : str, optional
        A bm25s stopword list name (e.g. ``"en"``); None: none removed.

    Returns
    -------
    list of list of str
        The tokens of each text.
    """
    import bm25s

    texts = [unicodedata.normalize("NFC", t) for t in texts]
    return bm25s.tokenize(texts, lower=True, stopwords=stopwords or [], return_ids=False, show_progress=False)


def variant_name(
    backend: str = _D["backend"],
    method: str = _D["method"],
    k1: float = _D["k1"],
    b: float = _D["b"],
    epsilon: float = _D["epsilon"],
    stopwords: str | None = _D["stopwords"],
) -> str:
    """A one-line name of the BM25 function a config selects.

    E.g. ``"bm25s robertson (idf = ... clipped at 0), k1=1.5, b=0.75, stopwords=en"``; the
    parameters are the config's ``bm25`` keys.

    Raises
    ------
    ValueError
        An unknown backend/method pair.
    """
    if (backend, method) not in IDF_RULES:
        raise ValueError(
            f"bm25: backend {backend!r} has no method {method!r}; choose one of "
            f"{sorted(m for bk, m in IDF_RULES if bk == backend) or BACKENDS}"
        )
    eps = f", epsilon={epsilon:g}" if (backend, method) == ("rank-bm25", "robertson") else ""
    return (
        f"{backend} {method} ({IDF_RULES[backend, method]}), k1={k1:g}, b={b:g}{eps}, stopwords={stopwords or 'none'}"
    )


class BM25:
    """A BM25 index over a corpus.

    ``BM25(doc_texts, backend="bm25s", method="lucene", k1=1.5, b=0.75, epsilon=0.25,
    stopwords="en")``; ``.scores(query_texts)`` -> ``(n_queries, n_docs) float32``;
    ``.matches(query_texts)`` -> ``(n_queries, n_docs) bool`` (document holds a query term);
    ``.search(query_texts, k)`` -> ``(indices (n_queries, k) int64, scores float32)``.
    ``epsilon`` applies to rank-bm25's ``robertson`` only. Raises ``ValueError`` for an unknown
    backend or a method the backend lacks.
    """

    def __init__(
        self,
        doc_texts: list[str],
        backend: str = _D["backend"],
        method: str = _D["method"],
        k1: float = _D["k1"],
        b: float = _D["b"],
        epsilon: float = _D["epsilon"],
        stopwords: str | None = _D["stopwords"],
    ):
        if backend not in BACKENDS:
            raise ValueError(f"bm25 backend must be one of {BACKENDS}, got {backend!r}")
        self.variant = variant_name(backend, method, k1, b, epsilon, stopwords)
        self.backend, self.method, self.stopwords = backend, method, stopwords
        self.n_docs = len(doc_texts)
        tokens = tokenize(doc_texts, stopwords)
        self._vocab: dict[str, int] = {}
        rows, cols = [], []
        for i, toks in enumerate(tokens):
            for t in set(toks):
                rows.append(i)
                cols.append(self._vocab.setdefault(t, len(self._vocab)))
        from scipy.sparse import csr_matrix

        self._terms = csr_matrix(
            (np.ones(len(rows), dtype=np.int32), (rows, cols)), shape=(self.n_docs, max(1, len(self._vocab)))
        )
        df = np.asarray(self._terms.sum(axis=0)).ravel()
        common = int((df > self.n_docs / 2).sum())
        if common and method == "robertson":
            log.warning(
                "bm25 %s: %d terms occur in more than half the documents (negative Robertson idf); "
                "bm25s clips their idf at 0, rank-bm25 replaces it by epsilon x mean idf (epsilon=%g): the two "
                "backends rank differently unless epsilon = 0",
                backend,
                common,
                epsilon,
            )
        if backend == "bm25s":
            import bm25s

            self._index = bm25s.BM25(k1=k1, b=b, method=method)
            self._index.index(tokens, show_progress=False)
        else:
            import rank_bm25

            classes = {"robertson": rank_bm25.BM25Okapi, "bm25l": rank_bm25.BM25L, "bm25+": rank_bm25.BM25Plus}
            kw = {"epsilon": epsilon} if method == "robertson" else {}
            self._index = classes[method]([list(t) for t in tokens], k1=k1, b=b, **kw)  # empty documents stay empty

    def scores(self, query_texts: list[str]) -> np.ndarray:
        """BM25 score of every document for every query: ``(n_queries, n_docs) float32``."""
        return self.scores_and_matches(query_texts)[0]

    def matches(self, query_texts: list[str]) -> np.ndarray:
        """``(n_queries, n_docs) bool``: the document contains at least one query term (after
        tokenisation and stopword removal). Only these documents are retrieved."""
        return self.scores_and_matches(query_texts)[1]

    def scores_and_matches(self, query_texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(scores (n_queries, n_docs) float32, matches (n_queries, n_docs) bool)``: a
        ``score_block`` result for ``capgap.retrieval.rank_queries``."""
        out = np.zeros((len(query_texts), self.n_docs), dtype=np.float32)
        match = np.zeros((len(query_texts), self.n_docs), dtype=bool)
        for i, toks in enumerate(tokenize(query_texts, self.stopwords)):
            known = [t for t in toks if t in self._vocab]
            if not known:
                continue  # nothing matches: nothing retrieved
            match[i] = np.asarray(self._terms[:, sorted({self._vocab[t] for t in known})].sum(axis=1)).ravel() > 0
            out[i] = self._index.get_scores(known)  # same call in both backends
        return out, match

    def search(self, query_texts: list[str], k: int, block: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Top-k documents per query by BM25 score, ties by lower index (``topk_from_scores``),
        for inspection; evaluation uses ``scores_and_matches`` with the evaluation tie rule.

        Parameters
        ----------
        query_texts : the queries (tokenised as the corpus: NFC, lower case, stopwords).
        k : documents per query; capped at the corpus size.
        block : queries scored per ``(block, n_docs)`` float32 score matrix (memory bound).

        Returns
        -------
        ``(indices, scores)``: ``(n_queries, min(k, n_docs)) int64`` row indices into the corpus
        and their ``float32`` scores (unnormalised BM25 units), best first. A document holding
        no query term scores ``-inf`` (it is not retrieved).
        """
        k = min(k, self.n_docs)
        idx = np.empty((len(query_texts), k), dtype=np.int64)
        sc = np.empty((len(query_texts), k), dtype=np.float32)
        for s in range(0, len(query_texts), block):
            S, M = self.scores_and_matches(query_texts[s : s + block])
            S[~M] = -np.inf
            idx[s : s + block], sc[s : s + block] = topk_from_scores(S, k)
        return idx, sc


def evaluate(rs, cfg: Mapping, ks: Sequence[int], ndcg_k: int) -> tuple[list[dict], Run]:
    """BM25 on a retrieval set: index its passages, rank every query, evaluate every split.

    Ranking follows the evaluation tie rule (only documents sharing a query term are
    retrieved; identical texts tie).

    Parameters
    ----------
    rs : capgap.data.RetrievalSet
        The set; its passages are indexed.
    cfg : mapping
        Config ``bm25`` minus ``enabled``: backend, method, k1, b, epsilon, stopwords.
    ks : sequence of int
        Recall cut-offs.
    ndcg_k : int
        nDCG cut-off.

    Returns
    -------
    rows : list of dict
        Result rows, method ``bm25``.
    run : Run
        Tag ``bm25``, depth ``eval_depth(ks, ndcg_k)``.
    """
    bm = BM25(rs.corpus.passages(), **dict(cfg))
    log.info("bm25: %s", bm.variant)
    texts = list(rs.queries.texts)
    return evaluate_scores(
        rs,
        lambda a, b: bm.scores_and_matches(texts[a:b]),
        rs.corpus.ids,
        document_groups(rs.corpus),
        ks,
        ndcg_k,
        "",
        "bm25",
        "bm25",
        block=256,
    )


def bm25_stage(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``bm25`` (``stage(inputs, outputs, params, threads)``, see ``capgap.stages``): BM25
    with settings ``params.bm25`` (``evaluate``) on the dataset of ``inputs.data``; writes
    ``outputs.run`` and ``outputs.metrics``."""
    return write_outputs(outputs, *evaluate(load_canonical(inputs.data), params.bm25, params.ks, params.ndcg_k))
