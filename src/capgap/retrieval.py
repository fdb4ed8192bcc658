"""Exact ranking and the evaluation tie rule that every method shares.

- ``rank_queries`` with ``dense_scores``: exact search that ranks every document (one BLAS
  product per block of queries, then the tie rule below per query); as fast as ``faiss.knn``'s
  top-k heap here (benchmarks/topk_and_bm25.py) while giving every gold document's exact rank.
- ``topk_from_scores``: top-k of an explicit score matrix, with a fixed tie rule: higher score
  first, then lower document index (used where no gold set is known: ANN candidates, hardness).

**The evaluation tie rule** (one rule for every method: probe, pre-trained, fine-tuned, BM25,
ColBERT, ``capgap diagnose``; docs/evaluation.md, "Ranking and ties"), implemented once here:
identical documents score identically (``document_groups``, ``tie_duplicates``); ties are
pessimistic, non-gold first, then gold by increasing grade, then by row (``rank_gold``,
``rank_top``); a document a method does not retrieve has no rank (``inf``); metrics come from
the gold documents' ranks in the full ranking.

**Undefined scores.** Cosine similarity q.d / (|q| |d|) is undefined (0/0) when either vector is
zero. A row whose L2 norm (in float64) is at most ``ZERO_NORM`` = 1e-12 counts as zero: the
same epsilon that ``torch.nn.functional.normalize`` (and so sentence-transformers) clamps a norm
to, so such a row is exactly the one a normaliser leaves unnormalised. ``zero_norm_rows`` finds
them; wherever capgap scores by cosine (``capgap diagnose --metric cosine``, an encoder that
normalises its embeddings, an index built by one, compression that re-normalises) such a row is
an error naming the file or dataset/encoder and the rows, never a silent score of 0 (which
would rank it above every document whose cosine is negative).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

ZERO_NORM = 1e-12  # an L2 norm <= this is zero: cosine with that row is undefined (module docstring)


def zero_norm_rows(M: np.ndarray, block: int = 4096, exact: bool = False) -> np.ndarray:
    """Rows whose cosine with anything is undefined.

    Parameters
    ----------
    M : numpy.ndarray
        ``(n, dim)`` float; read in blocks (a memory map is never loaded whole), never written.
    block : int
        Rows per block.
    exact : bool
        False: rows whose L2 norm, computed in float64, is ``<= ZERO_NORM`` (the norm torch's
        normaliser clamps to, for embeddings a normaliser has already been through). True: rows
        whose every value is 0, for vectors capgap normalises itself with a power-of-two
        prescale per row (``capgap diagnose``), which gives any non-zero row, of norm 1e-30
        too, its direction exactly.

    Returns
    -------
    numpy.ndarray
        ``(z,) int64`` row indices, ascending (empty when none).
    """
    M = np.asarray(M) if not isinstance(M, np.memmap) else M
    out = []
    for b0 in range(0, M.shape[0], block):
        x = np.asarray(M[b0 : b0 + block], dtype=np.float64)
        zero = ~x.any(axis=1) if exact else np.sqrt(np.einsum("ij,ij->i", x, x)) <= ZERO_NORM
        out.append(b0 + np.flatnonzero(zero))
    return np.concatenate(out).astype(np.int64) if out else np.zeros(0, dtype=np.int64)


def describe_rows(rows: Sequence[int], ids: Sequence[str] | None = None, limit: int = 5) -> str:
    """Rows named for an error message.

    ``"rows [4, 9] (0-based; ids ['d4', 'd9'])"``; one row: ``"row 4 (0-based; ids ['d4'])"``.
    At most ``limit`` rows are named, then ``", ..."`` and the total; ``ids`` (row -> id) adds
    their ids.
    """
    rows = [int(r) for r in rows]
    shown = rows[:limit]
    more = f", ... ({len(rows)} in all)" if len(rows) > limit else ""
    named = f"; ids {[ids[r] for r in shown]}" if ids is not None else ""
    return f"row{'s' if len(rows) != 1 else ''} {shown[0] if len(rows) == 1 else shown}{more} (0-based{named})"


def topk_from_scores(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of each row of a score matrix, without a gold set.

    Parameters
    ----------
    scores : numpy.ndarray
        ``(n_queries, n_docs)`` float.
    k : int
        Documents per query, at least 1.

    Returns
    -------
    indices : numpy.ndarray
        ``(n_queries, k') int64`` with ``k' = min(k, n_docs)``, by score descending, ties
        broken by lower index (a stable sort, so a tie group cut by k keeps its lowest
        indices: ``[1]*10 + [2]``, k = 3 gives ``[10, 0, 1]``).
    scores : numpy.ndarray
        ``(n_queries, k') float32``, the scores of ``indices``.

    Raises
    ------
    ValueError
        k < 1.
    """
    scores = np.asarray(scores)
    n = scores.shape[1]
    k = min(int(k), n)
    if k <= 0:
        raise ValueError("k must be >= 1")
    idx = np.argsort(-scores, axis=1, kind="stable")[:, :k].astype(np.int64)
    return idx, np.take_along_axis(scores, idx, axis=1).astype(np.float32)


def duplicate_groups(keys) -> list[np.ndarray]:
    """Groups of exactly equal items: rows of an ``(n, dim)`` array (compared bit for bit) or
    entries of a sequence of hashable keys (e.g. document texts).

    Returns a list of ``int64`` arrays of row indices (ascending), one per group of two or
    more equal items; empty when all items differ. Rows are read in blocks (a memory map is
    fine). O(n) hashing (rows: a vectorised 64-bit hash); equal hashes are confirmed bit for bit.
    """
    buckets: dict = {}
    if isinstance(keys, np.ndarray) and keys.ndim == 2:
        # a 64-bit hash per row (its bytes as 64-bit words, or the widest that divides the row, times random odd
        # multipliers, summed mod 2^64), vectorised; only rows sharing a hash are compared byte for byte
        n, width = keys.shape[0], keys.shape[1] * keys.dtype.itemsize
        word = next(w for w in (np.uint64, np.uint32, np.uint16, np.uint8) if width % np.dtype(w).itemsize == 0)
        mult = np.random.default_rng(0).integers(
            1, 2**63, size=width // np.dtype(word).itemsize, dtype=np.uint64
        ) | np.uint64(1)
        h = np.empty(n, dtype=np.uint64)
        for b0 in range(0, n, 4096):
            block = np.ascontiguousarray(keys[b0 : b0 + 4096]).view(np.uint8).reshape(-1, width).view(word)
            with np.errstate(over="ignore"):
                h[b0 : b0 + len(block)] = (block.astype(np.uint64) * mult).sum(1, dtype=np.uint64)
        _, inverse, counts = np.unique(h, return_inverse=True, return_counts=True)
        for i in np.flatnonzero(counts[inverse] > 1).tolist():
            buckets.setdefault(np.ascontiguousarray(keys[i]).tobytes(), []).append(i)
    else:
        for i, key in enumerate(keys):
            buckets.setdefault(key, []).append(i)
    return [np.asarray(v, dtype=np.int64) for v in buckets.values() if len(v) > 1]


def text_key(text: str) -> str:
    """What a query encoder sees of a query, for text ties: NFC, whitespace runs collapsed.
    Queries with equal keys get one vector from any encoder, so the probe gives them one w."""
    import unicodedata

    return " ".join(unicodedata.normalize("NFC", text).split())


def document_groups(corpus, embeddings: np.ndarray | None = None) -> list[np.ndarray]:
    """Documents that must score identically (the tie rule; docs/evaluation.md, rule 1).

    Identical passage texts of ``corpus`` (a ``capgap.data.Corpus``), merged with bit-identical
    rows of ``embeddings`` ``(n_docs, dim)`` (index order = corpus order, which the index
    fingerprint guarantees). Returns groups of two or more row indices, ``int64`` ascending
    (``merge_groups``)."""
    groups = [duplicate_groups(corpus.passages())]
    if embeddings is not None:
        groups.append(duplicate_groups(embeddings))
    return merge_groups(len(corpus), *groups)


def duplicate_summary(ids: Sequence[str], texts: Sequence[str], examples: int = 5) -> dict:
    """Groups of identical ``texts`` for a dataset's status: ``{"groups": int, "items": int
    (items in groups), "examples": [[id, ...] (first 4 ids), ...] (first ``examples`` groups)}``."""
    groups = duplicate_groups(list(texts))
    return {
        "groups": len(groups),
        "items": int(sum(len(g) for g in groups)),
        "examples": [[ids[i] for i in g[:4]] for g in groups[:examples]],
    }


def merge_groups(n: int, *group_lists: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The union of several groupings of ``n`` items (e.g. bit-identical index rows and
    identical document texts): items linked by any group end in one group. Returns groups of
    two or more, each ``int64`` ascending, ordered by their first item."""
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for groups in group_lists:
        for g in groups:
            r0 = root(int(g[0]))
            for j in g[1:]:
                rj = root(int(j))
                if rj != r0:
                    parent[max(rj, r0)] = min(rj, r0)
                    r0 = min(rj, r0)
    out: dict[int, list[int]] = {}
    for g in group_lists:
        for grp in g:
            for i in grp:
                out.setdefault(root(int(i)), []).append(int(i))
    return sorted(
        (np.unique(np.asarray(v, dtype=np.int64)) for v in out.values() if len(set(v)) > 1), key=lambda a: a[0]
    )


def tie_duplicates(
    scores: np.ndarray, groups: Sequence[np.ndarray], index: tuple[np.ndarray, np.ndarray] | None = None
) -> np.ndarray:
    """Give every member of each duplicate group its first member's score, in place.

    Identical documents can otherwise differ by one ulp when a BLAS kernel treats their rows
    differently.

    Parameters
    ----------
    scores : numpy.ndarray
        ``(n_queries, n_docs)`` or ``(n_docs,)`` float; written in place.
    groups : sequence of numpy.ndarray
        From ``duplicate_groups`` (groups sharing a row are merged: ``tie_index``).
    index : tuple of numpy.ndarray, optional
        ``tie_index(groups)`` when already computed.

    Returns
    -------
    numpy.ndarray
        ``scores``.
    """
    src, dst = tie_index(groups) if index is None else index
    if len(dst):
        scores[..., dst] = scores[..., src]  # one gather and scatter: the groups are disjoint
    return scores


def tie_index(groups: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` ``int64`` arrays for ``tie_duplicates``: every member but the first of each
    duplicate group (``dst``) and its group's first member (``src``), so that
    ``scores[..., dst] = scores[..., src]`` ties every group at once. Groups that share a row
    (a caller's own; ``duplicate_groups`` / ``merge_groups`` give disjoint ones) are merged
    first (``merge_groups``: rows linked by any group are one document, scored as the merged
    group's first row). Computed once where the same groups tie many score matrices (the
    probe's cutting plane)."""
    groups = [np.asarray(g, dtype=np.int64) for g in groups if len(g) > 1]
    if not groups:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    rows = np.concatenate(groups)
    if len(np.unique(rows)) < len(rows):  # overlapping groups (a caller's own): one group per connected set of rows
        groups = merge_groups(int(rows.max()) + 1, groups)
    return np.concatenate([np.repeat(g[:1], len(g) - 1) for g in groups]), np.concatenate([g[1:] for g in groups])


def _order_keys(s: np.ndarray, rows: np.ndarray, is_gold: np.ndarray, grade: np.ndarray):
    """``np.lexsort`` keys of the pessimistic total order (last key is primary)."""
    return (rows, grade, is_gold, -s.astype(np.float64))


def rank_gold(
    scores: np.ndarray, gold: np.ndarray, grades: np.ndarray | None = None, valid: np.ndarray | None = None
) -> np.ndarray:
    """1-based rank of each gold document under the pessimistic tie rule (module docstring).

    A gold document's rank is 1 + the valid non-gold documents scoring at least as high + the
    valid gold documents ahead of it (higher score; or equal score and (grade, row) smaller).

    Parameters
    ----------
    scores : numpy.ndarray
        ``(n_docs,)`` float32 or float64.
    gold : numpy.ndarray
        ``(g,)`` int row indices.
    grades : numpy.ndarray, optional
        ``(g,)`` relevance grades (> 0); default 1.
    valid : numpy.ndarray, optional
        ``(n_docs,) bool``: documents that are retrieved and not excluded; default all.

    Returns
    -------
    numpy.ndarray
        ``(g,) float64``: rank among valid documents, ``inf`` for a gold document that is not
        valid.

    Raises
    ------
    ValueError
        A gold document's score is NaN.
    """
    s = np.asarray(scores)
    gold = np.asarray(gold, dtype=np.int64)
    grades = np.ones(len(gold)) if grades is None else np.asarray(grades, dtype=np.float64)
    sg = s[gold]
    if np.isnan(sg).any():
        raise ValueError("NaN score for a gold document")
    ok = np.ones(len(gold), dtype=bool) if valid is None else np.asarray(valid)[gold]
    ng_mask = np.ones(len(s), dtype=bool) if valid is None else np.array(valid, dtype=bool)
    ng_mask[gold] = False
    ng = s[ng_mask]
    if len(gold) <= 16:
        above_ng = np.array([np.count_nonzero(ng >= v) for v in sg], dtype=np.int64)
    else:
        ng = np.sort(ng)
        above_ng = len(ng) - np.searchsorted(ng, sg, side="left")
    sv, gv, rv = sg[ok], grades[ok], gold[ok]
    ahead = (sv[None, :] > sv[:, None]) | (
        (sv[None, :] == sv[:, None])
        & ((gv[None, :] < gv[:, None]) | ((gv[None, :] == gv[:, None]) & (rv[None, :] < rv[:, None])))
    )
    ranks = np.full(len(gold), np.inf)
    ranks[ok] = above_ng[ok] + ahead.sum(1) + 1
    return ranks


def rank_top(
    scores: np.ndarray,
    depth: int,
    gold: np.ndarray | None = None,
    grades: np.ndarray | None = None,
    valid: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The first ``depth`` valid documents under the pessimistic tie rule (module docstring).

    A gold document's position here + 1 equals its ``rank_gold``.

    Parameters
    ----------
    scores : numpy.ndarray
        ``(n_docs,)`` float.
    depth : int
        Documents to return.
    gold, grades, valid : numpy.ndarray, optional
        As in ``rank_gold``.

    Returns
    -------
    rows : numpy.ndarray
        ``(depth,) int64``, padded with -1 where fewer documents are valid.
    scores : numpy.ndarray
        ``(depth,) float64``, padded with -inf.
    """
    s = np.asarray(scores)
    n = len(s)
    valid = np.ones(n, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    rows = np.flatnonzero(valid)
    out_i = np.full(depth, -1, dtype=np.int64)
    out_s = np.full(depth, -np.inf, dtype=np.float64)
    if not len(rows) or depth <= 0:
        return out_i, out_s
    sv = s[rows]
    if len(rows) > depth:
        kth = np.partition(sv, len(sv) - depth)[len(sv) - depth]  # depth-th largest score
        keep = sv >= kth  # the whole tie group at the boundary comes along
        rows, sv = rows[keep], sv[keep]
    is_gold = np.zeros(n, dtype=np.int8)
    grade = np.zeros(n, dtype=np.float64)
    if gold is not None and len(gold):
        gold = np.asarray(gold, dtype=np.int64)
        is_gold[gold] = 1
        grade[gold] = 1.0 if grades is None else np.asarray(grades, dtype=np.float64)
    order = np.lexsort(_order_keys(sv, rows, is_gold[rows], grade[rows]))[:depth]
    out_i[: len(order)] = rows[order]
    out_s[: len(order)] = sv[order]
    return out_i, out_s


def rank_queries(
    score_block,
    n_queries: int,
    gold: Sequence[np.ndarray],
    grades: Sequence[np.ndarray],
    excluded: Sequence[Sequence[int]] | None,
    depth: int,
    n_docs: int,
    groups: Sequence[np.ndarray] = (),
    block: int | None = None,
    observe=None,
):
    """Rank every query's documents with the evaluation tie rule, block by block.

    Parameters
    ----------
    score_block : callable
        ``score_block(a, b)``: the scores of queries ``a:b``, ``(b - a, n_docs)`` float, or a
        pair ``(scores, retrieved)`` with ``retrieved (b - a, n_docs) bool`` (documents the
        method did not retrieve are left out of the ranking).
    n_queries, n_docs : int
        Queries to rank; documents per score row.
    gold, grades : sequence of numpy.ndarray
        Per query q: row indices and grades of its gold documents.
    excluded : sequence of sequence of int, optional
        Per query: rows removed from its ranking.
    depth : int
        Documents kept per query (the run file's depth).
    groups : sequence of numpy.ndarray
        Duplicate groups (``duplicate_groups``), tied before ranking.
    block : int, optional
        Queries per call; default about 64 M scores in memory.
    observe : callable, optional
        ``observe(a, S, R)``, called with each block's scores as ranked (duplicates tied;
        ``R`` the retrieved mask or None), for measures that need more than the ranking
        (``capgap.nearmiss.TwinScores.observe``).

    Returns
    -------
    ranks : list of numpy.ndarray
        ``ranks[q]`` ``(g,) float64``: gold ranks (``rank_gold``).
    rows : numpy.ndarray
        ``(n_queries, depth) int64``: the top of each ranking (``rank_top``; -1 padding).
    scores : numpy.ndarray
        ``(n_queries, depth) float64``: their scores (-inf padding). ``rows`` and ``scores``
        are what a run file holds.

    Raises
    ------
    ValueError
        ``score_block`` returned another shape than ``(b - a, n_docs)``.
    """
    block = block or max(1, min(1024, (1 << 26) // max(1, n_docs)))
    ranks: list[np.ndarray] = []
    rows = np.full((n_queries, depth), -1, dtype=np.int64)
    top_s = np.full((n_queries, depth), -np.inf, dtype=np.float64)
    for a in range(0, n_queries, block):
        b = min(n_queries, a + block)
        got = score_block(a, b)
        S, R = got if isinstance(got, tuple) else (got, None)
        S = np.asarray(S)
        if S.shape != (b - a, n_docs):
            raise ValueError(f"score_block({a}, {b}) returned shape {S.shape}, expected {(b - a, n_docs)}")
        if len(groups):  # tie on a copy: the block may be the caller's array
            S = tie_duplicates(S.copy(), groups)
        if observe is not None:
            observe(a, S, None if R is None else np.asarray(R, dtype=bool))
        for r, q in enumerate(range(a, b)):
            valid = np.ones(n_docs, dtype=bool) if R is None else np.array(R[r], dtype=bool)
            if excluded is not None and len(excluded[q]):
                valid[np.asarray(excluded[q], dtype=np.int64)] = False
            ranks.append(rank_gold(S[r], gold[q], grades[q], valid))
            rows[q], top_s[q] = rank_top(S[r], depth, gold[q], grades[q], valid)
    return ranks, rows, top_s


def dense_scores(queries: np.ndarray, docs: np.ndarray, threads: int | None = None):
    """A ``score_block`` for ``rank_queries``: inner products ``queries[a:b] @ docs.T``.

    Parameters
    ----------
    queries : numpy.ndarray
        ``(n_queries, dim) float32``.
    docs : numpy.ndarray
        ``(n_docs, dim) float32``; a memory map is read in place.
    threads : int, optional
        BLAS threads of each block's product; default all.

    Returns
    -------
    callable
        ``score_block(a, b) -> (b - a, n_docs) float32``.

    Raises
    ------
    ValueError
        On a dimension mismatch; and from the block, on a score that overflows float32
        (``"scores overflow float32 (max |score| inf): rescale the vectors"``: a ranking of
        infinities is decided by the tie rule alone; ``capgap diagnose`` rescales its inputs
        first).
    """
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    if queries.ndim != 2 or docs.ndim != 2 or queries.shape[1] != docs.shape[1]:
        raise ValueError(f"dimension mismatch: queries {queries.shape}, docs {docs.shape}")

    docs32 = np.asarray(docs, dtype=np.float32)
    step = docs32.shape[0] if docs32.flags.aligned else 65536  # BLAS copies an unaligned operand whole (a faiss
    # flat file's vectors start at byte 45): such a memory map is read a block of rows at a time

    def score_block(a: int, b: int) -> np.ndarray:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(int(threads) if threads else None), np.errstate(over="ignore", invalid="ignore"):
            if step >= docs32.shape[0]:
                S = queries[a:b] @ docs32.T
            else:
                S = np.empty((b - a, docs32.shape[0]), dtype=np.float32)
                for r0 in range(0, docs32.shape[0], step):
                    S[:, r0 : r0 + step] = queries[a:b] @ np.ascontiguousarray(docs32[r0 : r0 + step]).T
        if not np.isfinite(S).all():
            raise ValueError(
                f"scores overflow float32 (max |score| {float(np.nanmax(np.abs(S))):g}): rescale the vectors"
            )
        return S

    return score_block
