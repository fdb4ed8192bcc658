"""What ``diagnose`` does to its inputs before anything is probed: the query rows matched to the
qrels, the ANN run's ids checked against them, the rows of norm 0 under cosine, and the
scoring matrices whose inner products rank by the metric (module docstring of
``capgap.diagnosis``). Each problem is a ``ValueError`` naming the ids or rows, or a note: a
message for the summary, also logged as a warning (``_note``).
"""

from __future__ import annotations

import logging
from typing import Mapping, Sequence

import numpy as np

from ..retrieval import describe_rows, zero_norm_rows
from .inputs import _block_rows

log = logging.getLogger(__name__)
ZERO_NORM_POLICIES = ("error", "set-apart")  # diagnose(zero_norm=...): what a norm-0 row does under cosine


def _note(notes: list[str], msg: str) -> None:
    """A note for the summary, also logged as a warning (the console, under the CLI)."""
    log.warning(msg)
    notes.append(msg)


def _match_queries(
    query_ids: Sequence[str], qrels: Mapping[str, Mapping[str, int]], notes: list[str]
) -> tuple[list[int], dict]:
    """Which query rows have judgements, and the ids on either side that meet nothing.

    Returns ``(keep, unmatched)``: ``keep``, the row indices whose id the qrels judge (row
    order); ``unmatched``, ``{"rows_without_judgements": ..., "judged_queries_without_row": ...}``,
    each ``{"count": int, "examples": [first 5 ids]}``. A partial mismatch becomes a note (and a
    logged warning). Raises ``ValueError`` when no query row is judged, naming ids of both sides."""
    keep = [i for i, q in enumerate(query_ids) if q in qrels]
    if not keep:
        if not qrels:
            raise ValueError("the qrels judge no query")
        raise ValueError(
            f"none of the {len(query_ids)} query ids (e.g. {list(query_ids[:3])}) appears in the qrels, "
            f"whose query ids look like {list(qrels)[:3]}"
        )
    rows = set(query_ids)
    unjudged = [q for q in query_ids if q not in qrels]
    rowless = [q for q in qrels if q not in rows]
    unmatched = {}
    for key, ids, total, what in (
        ("rows_without_judgements", unjudged, len(query_ids), "query rows have no judgements in the qrels (left out)"),
        (
            "judged_queries_without_row",
            rowless,
            len(qrels),
            "judged queries have no query embedding row (not evaluated)",
        ),
    ):
        unmatched[key] = {"count": len(ids), "examples": list(ids[:5])}
        if ids:
            _note(notes, f"{len(ids)} of the {total} {what}, e.g. {ids[:3]}")
    return keep, unmatched


SCORE_RANGE = 2.0**64  # _score_scales: the largest |q| |d| scored as given (and 1 / this, the smallest)


def _log2_max_norm(M: np.ndarray | None) -> float:
    """``log2`` of the largest row L2 norm of ``M`` ``(n, dim)`` (``-inf`` for None or all zeros),
    blockwise in float64. Each block is first brought to a largest ``|x|`` in ``[0.5, 1)`` by a
    power of two, so no square underflows or overflows (float64 values ~1e-200 or ~1e200 keep
    their norms), and inputs that differ by a power of two give results that differ by exactly
    its exponent."""
    if M is None:
        return -np.inf
    out = -np.inf
    step = _block_rows(M.shape[1])
    for a in range(0, M.shape[0], step):
        x = np.asarray(M[a : a + step], dtype=np.float64)
        m = float(np.abs(x).max()) if x.size else 0.0
        if m > 0:
            e = int(np.frexp(m)[1])
            y = np.ldexp(x, -e)  # a power of two: exact
            out = max(out, float(np.log2(np.sqrt(np.einsum("ij,ij->i", y, y).max()))) + e)
    return out


def _unit_scale(log2_norm: float) -> float:
    """``2^-e``, ``e`` the integer with ``2^(e-1) <= 2^log2_norm < 2^e``: a largest norm scaled by
    it lies in ``[0.5, 1)``. Norms that differ by a power of two give scales that differ by its
    inverse exactly, so the scaled rows are identical (1.0 for ``-inf``: all zeros)."""
    if not np.isfinite(log2_norm):
        return 1.0
    return float(np.ldexp(1.0, -(int(np.floor(log2_norm)) + 1)))


def _score_scales(
    D: np.ndarray, Q: np.ndarray, U: np.ndarray | None, metric: str, notes: list[str]
) -> tuple[float, float]:
    """The powers of two ``(documents, queries)`` the vectors are scored at. A positive scale of
    the documents (or of each query) changes no inner-product ranking, and a common one of both
    no L2 ranking (``|s q - s d|^2 = s^2 |q - d|^2``); a power of two changes no mantissa, so the
    scores are the unscaled float32 scores times an exact factor, ties included.

    ``ip``: while ``max|q| max|d|`` and each of ``max|q|``, ``max|d|`` (rows of ``D``
    ``(n_docs, dim)``, ``U`` likewise, ``Q`` ``(n_queries, dim)``; float64, as logarithms, so
    float64 inputs far outside float32's range are measured too) lie in ``[1 / SCORE_RANGE,
    SCORE_RANGE]``, ``(1.0, 1.0)``; else each side is scaled to a largest norm in ``[0.5, 1)``.
    ``l2``: always one common scale bringing ``max(max|q|, max|d|)`` into ``[0.5, 1)``: the
    lifted rows ``(d, -|d|^2/2)`` are then balanced (their two parts of like size) whatever the
    units of the vectors, and inputs that differ by a power of two give bit-identical scoring
    matrices, hence identical verdicts. ``cosine``: ``(1.0, 1.0)`` (unit rows). A scale forced
    by float32's range adds a note to ``notes`` (and logs it); the ``l2`` unit scale alone is
    recorded in the summary (``score_scale``) only."""
    if metric == "cosine":
        return 1.0, 1.0
    ld, lq = max(_log2_max_norm(D), _log2_max_norm(U)), _log2_max_norm(Q)
    lim = np.log2(SCORE_RANGE)

    def inside(v):
        return not np.isfinite(v) or -lim <= v <= lim

    if metric == "l2":
        r = max(ld, lq)
        forced = not inside(2 * r)
        sd = sq = _unit_scale(r)
    else:
        forced = not (inside(ld + lq) and inside(ld) and inside(lq))
        sd, sq = (_unit_scale(ld), _unit_scale(lq)) if forced else (1.0, 1.0)
    if forced:
        big = ld + lq if metric == "ip" else 2 * max(ld, lq)
        _note(
            notes,
            f"metric {metric}: scores of these vectors would leave float32's range (largest "
            f"{'|q| |d|' if metric == 'ip' else 'squared norm'} = 2^{big:.1f}): scored the documents times "
            f"2^{int(np.log2(sd))} and the queries times 2^{int(np.log2(sq))}, which changes no ranking",
        )
    return sd, sq


# the smallest norm a non-zero row may have, at the scale its side is scored at (largest row
# norm in [0.5, 1) where float32's range forced a scale): its inner products (ip) or squared
# distances (l2, ~ norm^2) then stay above 2^-100, 26 bits above float32's smallest normal number
MIN_ROW_NORM = {"ip": 2.0**-100, "l2": 2.0**-50}


def _check_row_norms(x: np.ndarray, metric: str, side: str, first: int, scale: float) -> None:
    """``ValueError`` naming the first non-zero row of the block ``x`` ``(rows, dim) float64`` (rows
    ``first``... of ``side``, already times ``scale``) whose norm is below ``MIN_ROW_NORM[metric]``:
    scored in float32 beside the largest rows, its scores or squared distances would underflow and
    tie at 0 (a row 1e-44 times the largest gave every query recall 0, exit 0)."""
    big = np.abs(x).max(axis=1)
    with np.errstate(under="ignore"):
        norms = big * np.linalg.norm(x / np.where(big > 0, big, 1.0)[:, None], axis=1)  # no square underflows
    low = np.flatnonzero((big > 0) & (norms < MIN_ROW_NORM[metric]))
    if len(low):
        r = int(low[0])
        beside = f"beside rows of norm up to 2^{-np.log2(scale):.0f}" if scale != 1.0 else "in float32"
        raise ValueError(
            f"{side}: row {first + r} (0-based) has norm 2^{np.log2(norms[r] / scale):.0f}: {beside} its "
            f"{'inner products' if metric == 'ip' else 'squared distances'} underflow float32 and would "
            f"tie at 0 (the rows' norms span more than float32 scores hold under {metric}); rescale or "
            "drop the outlying rows"
        )


def _scoring_matrix(M: np.ndarray, metric: str, side: str, scale: float = 1.0) -> tuple[np.ndarray, float]:
    """``M`` ``(n, dim)`` as float32 rows whose inner products rank by ``metric``; ``M`` is never
    written to.

    ``ip``: ``M`` itself (float32 C-contiguous input, e.g. a memory map, is read in place; other
    dtypes are cast to a new array). ``cosine``: a new array of L2-normalised rows (rows of norm
    0 never get here: ``_zero_norm_rows`` refuses or removes them first). ``l2``: a new ``(n,
    dim + 1)`` array, documents ``(d, -|d|^2/2)`` and queries ``(q, 1)`` (``side``
    ``"queries"``; any other side is a document matrix), since ``q.d - |d|^2/2 = (|q|^2 - |q -
    d|^2)/2`` ranks each query's documents as ``-|q - d|^2`` does; the documents' last
    coordinate is shifted by their median ``|d|^2/2`` (a constant for all of a query's
    documents: no ranking changes) so that it keeps its digits in float32. Built block by block
    (norms in float64). A nonzero row every value of which underflows float32 at ``scale`` (one
    outlying row forced a scale the others cannot take) is refused with ``ValueError`` naming
    the row. Returns the array and, for cosine, the largest ``|norm - 1|`` of the input rows
    (else 0.0). ``scale``: a power of two the rows are multiplied by first (``_score_scales``;
    exact, ignored under cosine). Raises ``ValueError`` when a document's ``|d|^2/2`` overflows
    float32 (``l2``)."""
    n, dim = M.shape
    if metric == "ip" and scale == 1.0:
        if M.dtype == np.float64:  # values float32 cannot hold: checked before the cast
            for a in range(0, n, _block_rows(dim)):
                _check_row_norms(np.asarray(M[a : a + _block_rows(dim)]), metric, side, a, 1.0)
        return np.ascontiguousarray(M, dtype=np.float32), 0.0
    out = np.empty((n, dim + (metric == "l2")), dtype=np.float32)
    dev = 0.0
    step = _block_rows(dim)
    shift = 0.0
    if metric == "l2" and side != "queries":
        # the median |d|^2/2, subtracted from every document's last coordinate in float64: a shift
        # common to a query's documents changes no ranking, and what is left of |d|^2/2 keeps its
        # digits in float32 when the norms are alike and far larger than the products q.d
        half = (
            np.concatenate(
                [
                    0.5 * np.einsum("ij,ij->i", x, x)
                    for x in (np.asarray(M[a : a + step], dtype=np.float64) * scale for a in range(0, n, step))
                ]
            )
            if n
            else np.zeros(0)
        )
        shift = float(np.median(half)) if n and np.isfinite(half).all() else 0.0
    for a in range(0, n, step):
        x = np.asarray(M[a : a + step], dtype=np.float64)
        if metric != "cosine":
            x = x * scale  # a power of two: exact
            _check_row_norms(x, metric, side, a, scale)
        if metric == "ip":
            out[a : a + step] = x
        elif metric == "cosine":
            with np.errstate(over="ignore"):  # a norm beyond float64 reads as inf: not unit length
                dev = max(dev, float(np.abs(np.linalg.norm(x, axis=1) - 1).max()))
            # each row divided by a power of two near its largest |x| first (exact; cosine ignores a
            # row's scale), so its norm neither overflows nor underflows float64
            big = np.abs(x).max(axis=1)
            x = x / np.where(big > 0, np.exp2(np.floor(np.log2(np.where(big > 0, big, 1.0)))), 1.0)[:, None]
            norms = np.linalg.norm(x, axis=1)
            out[a : a + step] = x / np.maximum(norms, 1e-12)[:, None]
        else:
            out[a : a + step, :dim] = x
            out[a : a + step, dim] = 1.0 if side == "queries" else shift - 0.5 * np.einsum("ij,ij->i", x, x)
            if not np.isfinite(out[a : a + step, dim]).all():
                r = a + int(np.flatnonzero(~np.isfinite(out[a : a + step, dim]))[0])
                raise ValueError(f"{side}: row {r} (0-based): |d|^2/2 overflows float32 (metric l2)")
    return out, dev


def _zero_norm_rows(D, Q, U, doc_ids, query_ids, keep, qrels, policy: str, paths: Mapping[str, str], notes: list[str]):
    """Under cosine: find the rows of norm 0 (``capgap.retrieval.zero_norm_rows``) of the
    documents ``D`` ``(n_docs, dim)``, the judged query rows ``keep`` of ``Q`` ``(n_queries, dim)``
    and the uncompressed documents ``U`` (``D``'s shape, or None), and apply
    ``policy`` (``diagnose``'s ``zero_norm``). Returns ``(D, U, doc_ids, keep, summary)``: with
    ``"set-apart"`` the matrices and ids without the zero document rows (a row zero in either
    document matrix leaves both) and ``keep`` without zero query rows or queries whose gold is
    only zero documents; ``summary`` = per side ``{"count", "rows", "ids"}`` (input rows,
    0-based) and the policy. Raises ``ValueError`` naming the file and rows with ``"error"``."""
    if policy not in ZERO_NORM_POLICIES:
        raise ValueError(f"zero_norm must be one of {list(ZERO_NORM_POLICIES)}, got {policy!r}")
    found = {
        "documents": (zero_norm_rows(D, exact=True), doc_ids),
        "queries": (np.asarray(keep, dtype=np.int64)[zero_norm_rows(Q[keep], exact=True)], query_ids),
    }
    if U is not None:
        found["uncompressed documents"] = (zero_norm_rows(U, exact=True), doc_ids)
    bad = {side: rows for side, (rows, _) in found.items() if len(rows)}
    summary = {
        "policy": policy,
        "threshold": 0.0,
        **{
            side: {"count": len(rows), "rows": rows.tolist()[:20], "ids": [ids[r] for r in rows[:20]]}
            for side, (rows, ids) in found.items()
        },
    }
    if not bad:
        return D, U, doc_ids, keep, summary
    if policy == "error":
        side, rows = next(iter(bad.items()))
        more = "".join(
            f"; so {'does' if len(r) == 1 else 'do'} {paths.get(s, s)}: {describe_rows(r, found[s][1])}"
            for s, r in list(bad.items())[1:]
        )
        raise ValueError(
            f"{paths.get(side, side)}: {describe_rows(rows, found[side][1])} "
            f"{'has' if len(rows) == 1 else 'have'} norm 0 (every value 0): cosine is undefined for "
            f"{'it' if len(rows) == 1 else 'them'} (an empty or failed text embedded as a zero vector is "
            f"the usual cause){more}. Fix the embeddings, or pass --zero-norm set-apart to leave such "
            "rows out, counted"
        )
    zd = np.union1d(found["documents"][0], found.get("uncompressed documents", (np.zeros(0, np.int64),))[0])
    dkeep = np.setdiff1d(np.arange(D.shape[0]), zd)
    if not len(dkeep):
        raise ValueError(f"{paths.get('documents', 'documents')}: every row has norm 0: cosine is undefined")
    left = set(doc_ids[i] for i in dkeep)
    zq = set(found["queries"][0].tolist())
    no_gold = [i for i in keep if i not in zq and not any(g > 0 and d in left for d, g in qrels[query_ids[i]].items())]
    new_keep = [i for i in keep if i not in zq and i not in set(no_gold)]
    if not new_keep:
        raise ValueError("metric cosine: no query is left once the rows of norm 0 are set apart")
    summary["queries_with_only_zero_gold"] = {"count": len(no_gold), "ids": [query_ids[i] for i in no_gold[:20]]}
    for side, rows in bad.items():
        _note(
            notes,
            f"metric cosine: {paths.get(side, side)}: {len(rows)} {'row has' if len(rows) == 1 else 'rows have'} "
            f"norm 0 (cosine undefined), set apart: {describe_rows(rows, found[side][1])}",
        )
    if no_gold:
        _note(
            notes,
            f"metric cosine: {len(no_gold)} queries whose every gold document has norm 0 are set apart too, "
            f"e.g. {[query_ids[i] for i in no_gold[:3]]}",
        )
    sub = (lambda M: None if M is None else np.asarray(M)[dkeep]) if len(zd) else (lambda M: M)
    return sub(D), sub(U), [doc_ids[i] for i in dkeep], new_keep, summary


def _run_mismatch(run: Mapping[str, Sequence[str]], qids: Sequence[str], pos: Mapping[str, int]) -> list[str]:
    """Notes (also logged) on ANN-run ids that meet nothing: run queries that are not judged
    queries, judged queries missing from the run, run documents not among the document ids.
    Raises ``ValueError`` when no run query is a judged query, or no run document is a known
    document: every verdict would then be an artefact of the ids."""
    notes = []
    known_q = set(qids)
    extra_q = [q for q in run if q not in known_q]
    missing_q = [q for q in qids if q not in run]
    run_docs = {d for v in run.values() for d in v}
    extra_d = sorted(d for d in run_docs if d not in pos)
    hint = "percent-encoded ids (capgap's run files) need --ann-run-percent-encoded"
    if run and len(extra_q) == len(run):
        raise ValueError(
            f"none of the ANN run's {len(run)} query ids (e.g. {list(run)[:3]}) is a judged query; "
            f"the query ids look like {list(qids)[:3]} ({hint})"
        )
    if run_docs and len(extra_d) == len(run_docs):
        raise ValueError(
            f"none of the ANN run's {len(run_docs)} document ids (e.g. {extra_d[:3]}) is a document id; "
            f"the document ids look like {list(pos)[:3]} ({hint})"
        )
    for what, ids in (
        ("ANN-run queries are not judged queries (ignored)", extra_q),
        ("judged queries are missing from the ANN run (nothing retrieved)", missing_q),
        ("ANN-run documents are not in the document ids (count as misses)", extra_d),
    ):
        if ids:
            _note(notes, f"{len(ids)} {what}, e.g. {ids[:3]}; {hint}")
    return notes


def qrels_order_ids(
    n_rows: int, qrels: Mapping[str, Mapping[str, int]], qrels_path, queries_path
) -> tuple[list[str], dict]:
    """The CLI's default query ids when none are given: row i is the i-th query id of the qrels,
    in order of first appearance (``load_qrels_file``'s order).

    Parameters
    ----------
    n_rows : int
        The query embedding rows.
    qrels : mapping
        Query id -> {doc id: grade}, in the file's order.
    qrels_path, queries_path : str or pathlib.Path
        The two files, for messages.

    Returns
    -------
    (ids, how)
        ``ids``: ``n_rows`` query ids; ``how``: ``{"rule": str, "first": [the ids of rows 0-2]}``
        for ``diagnose(id_defaults=...)``, which prints it and records it in summary.json.

    Raises
    ------
    ValueError
        When the row count differs from the number of queries the qrels judge: the pairing
        would then be wrong for some rows, and nothing tells which; or when the judged query
        ids are the row numbers ``'0'``..``'n-1'`` in another order (``'2'``, ``'0'``, ``'1'``):
        ids that look like row numbers, which the default would pair with other rows.
    """
    ids = list(qrels)
    if n_rows != len(ids):
        raise ValueError(
            f"--query-ids not given, so query row i would be the i-th query id of {qrels_path} (in order "
            f"of first appearance), but {queries_path} has {n_rows} rows and {qrels_path} judges "
            f"{len(ids)} queries: the rows cannot be paired with the ids; give --query-ids (one id per "
            "query row)"
        )
    rows = [str(i) for i in range(n_rows)]
    if ids != rows and set(ids) == set(rows):
        raise ValueError(
            f"--query-ids not given, so query row i would be the i-th query id of {qrels_path} (in order "
            f"of first appearance), but its query ids are the row numbers 0..{n_rows - 1} in another "
            f"order (first {ids[:3]}): they look like row numbers, and row 0 would be query {ids[0]!r}; "
            "give --query-ids (one id per query row)"
        )
    return ids, {
        "rule": f"query row i is the i-th query id of {qrels_path}, in order of first appearance",
        "first": ids[:3],
    }


def document_id_default(doc_ids: Sequence[str], faiss_ids: bool) -> dict:
    """How the CLI named the document rows when no ids were given (``document_ids``): row i is
    document ``"i"``, or a faiss index's own ids (``faiss_ids``). Returns ``{"rule": str,
    "first": [the ids of rows 0-2]}`` for ``diagnose(id_defaults=...)``. Qrels that name other
    documents are refused by ``diagnose`` (``"qrels name ... documents not in the document ids"``)."""
    rule = (
        "document row i is the faiss index's i-th id in ascending order, as a decimal string"
        if faiss_ids
        else "document row i is document id 'i' (the row number, 0-based)"
    )
    return {"rule": rule, "first": list(doc_ids[:3])}


def refuse_contradicting_column(path, ids, paired: Sequence[str | None], rule: str, what: str, option: str) -> None:
    """Refuse a default pairing of a table's rows with ids that the table's own ids contradict.

    Parameters
    ----------
    path : str or pathlib.Path
        The embeddings file; only a Parquet or Arrow table is looked into
        (``capgap.diagnosis.tables.id_columns``), any other file passes.
    ids : iterable of str
        The ids a column must include to be the table's id column (the judged query ids, the
        documents the qrels name).
    paired : sequence of str or None
        The id the default gives each row of the table (None: no document, a row left unpaired).
    rule : str
        The default, for the message (``"no query ids given (...), so query row i would be ..."``).
    what : str
        What the column holds, for the message (``"the judged query ids"``).
    option : str
        The option that pairs the rows by a column (``--query-id-column``), named in the message.

    Raises
    ------
    ValueError
        A string or integer column holding ``ids`` that names a paired row otherwise than the
        default: naming the file, the column, the first such row and the option to pass.
    """
    from .tables import id_columns  # lazy: pyarrow only for a table

    for name, col in id_columns(path, ids).items():
        r = next((r for r, (a, b) in enumerate(zip(paired, col)) if a is not None and a != b), None)
        if r is not None:
            raise ValueError(
                f"{path}: {rule}, but its column {name!r} holds {what} and names row {r} {col[r]!r}, not "
                f"{paired[r]!r}: pass {option} {name} to pair the rows by that column"
            )
