"""The order of a run file's documents when its score and rank columns disagree
(``load_run_file``): a TREC run's rank column is the search's own order, and a search
that writes distances (faiss L2, hnswlib) gives scores that *ascend* with it, which trec_eval's
score-descending convention reads backwards. Where no rank column tells the order (``qid docid
score`` lines, ranks all equal), ``orient_run`` compares the scores with the query and document
vectors: scores that rise with their L2 distance are distances, read lowest first.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..data import check_id, iter_lines, split_tsv
from ..errors import DataFormatError
from ..trec import decode_id, note_run_pair


class RunFile(dict):
    """A run as ``load_run_file`` read it: query id -> document ids in rank order (a ``dict``).

    Attributes
    ----------
    notes : list of str
        What was decided about the order (``diagnose`` copies them into its summary).
    scored : dict or None
        Query id -> ``(score, line, doc id)`` in file order, kept when the order was taken from
        the scores alone (highest first: no rank column told an order), so that ``orient_run``
        can check that reading against the vectors; None otherwise.
    """

    def __init__(self, *args, notes: Sequence[str] = (), scored: Mapping[str, list] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.notes = list(notes)
        self.scored = dict(scored) if scored is not None else None


def parse_rank(text: str) -> float | None:
    """A TREC rank field as a number, or None when it is none (the field is then ignored, as
    trec_eval ignores it)."""
    try:
        return float(text)
    except ValueError:
        return None


def _direction(entries: Sequence[tuple]) -> str | None:
    """How the scores move as the ranks ascend in one query's ``entries`` ``(-score, line, doc,
    rank)``: ``"descend"`` (similarities: the convention), ``"ascend"`` (distances), ``"mixed"``,
    or None when the ranks or the scores cannot tell (fewer than two ranked lines, every rank
    equal, e.g. all 0, or every score equal)."""
    ranked = sorted((e for e in entries if e[3] is not None), key=lambda e: (e[3], e[1]))
    if len(ranked) < 2 or len({e[3] for e in ranked}) < 2 or len({e[0] for e in ranked}) < 2:
        return None
    steps = [(-b[0]) - (-a[0]) for a, b in zip(ranked, ranked[1:]) if b[3] > a[3]]
    if all(x <= 0 for x in steps):
        return "descend"
    if all(x >= 0 for x in steps):
        return "ascend"
    return "mixed"


def run_in_order(path: Path, rows: Mapping[str, Sequence[tuple]], scored: bool = True) -> RunFile:
    """Each query's documents in the search's order, from ``rows``: query id -> entries
    ``(-score, line, doc id, rank or None)`` in file order.

    The rule: by score, highest first (trec_eval's convention; ties by line), unless the rank
    column contradicts the scores on every query where both tell an order (scores ascend as
    ranks ascend: distances). Then the rank column decides (ties by ascending score, then
    line) and a note says so. Raises ``DataFormatError`` naming ``path``, the first
    contradicting line and field ``rank`` when some queries' scores ascend with rank and others'
    descend or go both ways: similarities cannot be told from distances.

    ``scored``: every line gave a score (False for ``qid docid`` lines, ordered by line). When
    it is True and no query's ranks tell an order, the result keeps the scores
    (``RunFile.scored``) for ``orient_run``."""
    seen = {q: _direction(v) for q, v in rows.items()}
    asc = [q for q, d in seen.items() if d == "ascend"]
    other = [q for q, d in seen.items() if d in ("descend", "mixed")]
    if not asc:
        kept = {q: [(-e[0], e[1], e[2]) for e in v] for q, v in rows.items()} if scored and not other else None
        return RunFile({q: [e[2] for e in sorted(v)] for q, v in rows.items()}, scored=kept)
    first, second = _example_steps(rows[asc[0]])
    example = (
        f"{asc[0]!r}: rank {first[3]:g} score {-first[0]:g} (line {first[1]}), rank {second[3]:g} score "
        f"{-second[0]:g} (line {second[1]})"
    )
    if other:
        desc = [q for q in other if seen[q] == "descend"]
        raise DataFormatError(
            path,
            first[1],
            "rank",
            f"the scores ascend as the ranks ascend on {len(asc)} queries (e.g. {example}) but not "
            f"on {len(other)} ({len(desc)} descend, {len(other) - len(desc)} go both ways; e.g. "
            f"{other[0]!r}): similarities cannot be told from distances; write scores that descend "
            "with rank (negate distances)",
        )
    note = (
        f"{path}: on every query whose ranks and scores tell an order ({len(asc)}) the scores ascend as the ranks "
        f"ascend (e.g. {example}): distances, not similarities; the documents are taken in rank order"
    )

    def by_rank(e):
        return (e[3] if e[3] is not None else float("inf"), -e[0], e[1])

    return RunFile({q: [e[2] for e in sorted(v, key=by_rank)] for q, v in rows.items()}, notes=[note])


def _example_steps(entries: Sequence[tuple]) -> tuple[tuple, tuple]:
    """Two of a query's ``entries`` ``(-score, line, doc, rank)`` whose ranks differ and whose
    scores ascend with them (the first such consecutive pair in rank order), for a message."""
    ranked = sorted((e for e in entries if e[3] is not None), key=lambda e: (e[3], e[1]))
    for a, b in zip(ranked, ranked[1:]):
        if b[3] > a[3] and -b[0] > -a[0]:
            return a, b
    return ranked[0], ranked[-1]


def _power_of_two(X: np.ndarray) -> float:
    """A power of two near the largest |x| of ``X`` (1 when it is 0 or not finite): dividing by
    it is exact and keeps squares in float64's range."""
    m = float(np.max(np.abs(X))) if X.size else 0.0
    return float(2.0 ** np.floor(np.log2(m))) if m > 0 and np.isfinite(m) else 1.0


def _rank_correlation(s: np.ndarray, x: np.ndarray) -> float:
    """Spearman's rank correlation of ``s`` and ``x`` (ties get their mean rank); 0 when either
    is constant. Approximate scores (a compressed index's) keep its sign: one inversion does not
    turn a run around."""
    from scipy.stats import rankdata  # lazy: only for runs ordered by their scores alone

    rs, rx = rankdata(s), rankdata(x)
    rs, rx = rs - rs.mean(), rx - rx.mean()
    den = float(np.sqrt((rs * rs).sum() * (rx * rx).sum()))
    return float((rs * rx).sum() / den) if den > 0 else 0.0


_MIXED = 0.1  # more than this fraction of the telling queries read the other way: the run is refused


def orient_run(
    run: dict,
    path: str | Path,
    D: np.ndarray,
    Q: np.ndarray,
    doc_ids: Sequence[str],
    query_ids: Sequence[str],
    metric: str,
) -> dict:
    """A run whose order was taken from its scores alone, checked against the vectors: read as
    similarities (highest first, as loaded) or as distances (lowest first).

    For each query of ``run.scored`` with at least two distinct scores among documents with a
    row, the metric's own similarity of the query and each document is computed in float64
    (``ip``: the inner product; ``cosine``: of the L2-normalised rows; ``l2``: minus the squared
    distance), and Spearman's rank correlation of the scores with it tells the query's reading:
    positive, similarities; negative, distances (an L2 distance, its square, ``1 - cosine``).
    A rank correlation keeps its sign under approximate scores (a compressed index's), where an
    exact order would not. The run is read as the telling queries' majority; more than 10% of
    them the other way is refused.

    Parameters
    ----------
    run : dict
        From ``load_run_file`` (a ``RunFile``); any other mapping, or a ``RunFile``
        whose order a rank column gave (``scored`` None), is returned as is.
    path : str or pathlib.Path
        The run file, for the note and errors.
    D, Q : numpy.ndarray
        ``(n_docs, dim)`` and ``(n_queries, dim)``: the vectors searched.
    doc_ids, query_ids : sequence of str
        The ids of their rows; run lines naming other ids are left out of the check.
    metric : str
        ``"ip"``, ``"cosine"`` or ``"l2"``.

    Returns
    -------
    dict
        ``run`` itself when its scores are similarities (or no query tells), else a
        ``RunFile`` with each query's documents lowest score first (ties by line) and a note
        saying so.

    Raises
    ------
    DataFormatError
        Naming ``path``, a line and field ``score``: more than 10% of the telling queries' scores
        read as distances and the others' as similarities, or the other way round.
    """
    if not isinstance(run, RunFile) or run.scored is None:
        return run
    drow = {d: i for i, d in enumerate(doc_ids)}
    qrow = {q: i for i, q in enumerate(query_ids)}
    kinds: dict[str, list[str]] = {"distance": [], "similarity": []}
    for q, entries in run.scored.items():
        known = [e for e in entries if e[2] in drow]
        if q not in qrow or len({e[0] for e in known}) < 2:
            continue
        x = np.asarray(Q[qrow[q]], dtype=np.float64)
        R = np.asarray(D[[drow[e[2]] for e in known]], dtype=np.float64)
        c = _power_of_two(np.concatenate([x, R.ravel()]))  # one common power of two: exact, no ranking changes
        x, R = x / c, R / c
        if metric == "cosine":
            x = x / (np.linalg.norm(x) or 1.0)
            R = R / np.where((n := np.linalg.norm(R, axis=1, keepdims=True)) > 0, n, 1.0)
        sim = -((R - x) ** 2).sum(1) if metric == "l2" else R @ x  # the metric's own similarity
        rho = _rank_correlation(np.array([e[0] for e in known], dtype=np.float64), sim)
        if rho > 0:
            kinds["similarity"].append(q)
        elif rho < 0:
            kinds["distance"].append(q)
    dq, sq = kinds["distance"], kinds["similarity"]
    if min(len(dq), len(sq)) > _MIXED * (len(dq) + len(sq)):
        bad = sq[0]
        line = min(e[1] for e in run.scored[bad])
        raise DataFormatError(
            path,
            line,
            "score",
            f"the scores fall as the query and document vectors' similarity (--metric {metric}) "
            f"rises on {len(dq)} queries (e.g. {dq[0]!r}: distances) and rise with it on {len(sq)} "
            f"(e.g. {bad!r}: similarities), and no rank column gives the order: capgap cannot tell "
            "similarities (highest first) from distances (lowest first); write a rank column 1..n "
            "(TREC: qid Q0 docid rank score tag)",
        )
    if len(dq) <= len(sq):
        return run
    eg = sorted(e for e in run.scored[dq[0]] if e[2] in drow)
    lo, hi = eg[0], eg[-1]
    note = (
        f"{path}: no rank column gives the order, and on {len(dq)} of the {len(dq) + len(sq)} queries whose "
        f"scores differ the scores rise with the distance between the query and document vectors (e.g. {dq[0]!r}: "
        f"{lo[2]!r} score {lo[0]:g} (line {lo[1]}), {hi[2]!r} score {hi[0]:g} (line {hi[1]})): distances, not "
        "similarities; the documents are taken lowest score first"
    )
    return RunFile(
        {q: [e[2] for e in sorted(v, key=lambda e: (e[0], e[1]))] for q, v in run.scored.items()},
        notes=[*run.notes, note],
    )


def load_run_file(path: str | Path, percent_encoded: bool = False) -> dict[str, list[str]]:
    """A run as query id -> document ids in rank order: TREC (``qid Q0 docid rank score tag``) or
    tsv ``qid docid [score]`` (ordered by score when given, else by file order). A TREC run whose
    scores ascend as its ranks ascend on every query where both tell an order (distances, e.g. a
    faiss L2 search) is taken in rank order, with a note (``runs.run_in_order``; the result is a
    ``runs.RunFile``, a dict with ``notes``). Where no rank column tells the order, the scores are
    kept (``RunFile.scored``) for ``runs.orient_run``, which reads them as distances when the
    vectors say so. A line holding a
    TAB is split on TABs (so ids may contain spaces), any other on whitespace; ids are taken as
    written, or percent-decoded with ``percent_encoded`` (the run files capgap writes:
    ``capgap.trec.decode_id``); lines are read by ``capgap.data.iter_lines`` (UTF-8, a leading
    BOM skipped).

    Raises ``DataFormatError`` naming file and line for bad UTF-8, a wrong column count, an id
    with a control character (``capgap.data.check_id``) or a malformed percent escape, and
    (field ``score``) a score that is not a number (except on line 1, a header) or is not finite
    (``nan``, ``inf``), (field ``doc-id``) a (query, document) pair on two lines (``run.tsv:2:
    field 'doc-id': document 'd0' of query 'q0' repeats line 1``: trec_eval refuses it too), and
    (field ``rank``) a run whose scores ascend with rank on some queries and not on others."""
    path = Path(path)
    rows: dict[str, list[tuple[float, int, str, float | None]]] = {}
    first: dict[tuple[str, str], int] = {}  # (query, document) -> its line
    scored = True  # every line gave a score
    for i, line in iter_lines(path):
        if not line.strip():
            continue
        cols = split_tsv(path, i, line) if "\t" in line else line.split()
        rank = None
        if len(cols) == 6:
            q, d, score, rank = cols[0], cols[2], cols[4], parse_rank(cols[3])
        elif len(cols) in (2, 3):
            q, d, score = cols[0], cols[1], cols[2] if len(cols) == 3 else None
        else:
            raise DataFormatError(
                path, i, None, f"expected 6 (TREC) or 2-3 (qid docid [score]) columns, got {len(cols)}"
            )
        scored = scored and score is not None
        try:
            s = float(score) if score is not None else -float(i)
        except ValueError:
            if i == 1:
                continue  # header
            raise DataFormatError(path, i, "score", f"{score!r} is not a number") from None
        if not math.isfinite(s):
            raise DataFormatError(path, i, "score", f"not a finite number: {score!r}")
        if percent_encoded:
            try:
                q, d = decode_id(q), decode_id(d)
            except ValueError as e:
                raise DataFormatError(path, i, None, f"not a percent-encoded id: {e}") from None
        check_id(path, i, "query-id", q)
        check_id(path, i, "doc-id", d)
        note_run_pair(first, path, i, q, d)
        rows.setdefault(q, []).append((-s, i, d, rank))
    return run_in_order(path, rows, scored)
