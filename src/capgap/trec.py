"""TREC run and qrels files, with ids that round-trip exactly.

TREC files separate columns by whitespace, so an id containing a space (LIMIT's document
names, e.g. ``"doc 0"``) cannot be written as is. capgap percent-encodes ids in every TREC
file it writes: ``%`` and every character for which ``str.isspace()`` is true are replaced by
``%XX`` per UTF-8 byte (upper-case hex); nothing else changes. So ``doc 0`` -> ``doc%200``,
``doc_0`` stays ``doc_0`` and ``a%b`` -> ``a%25b``: distinct ids stay distinct, most ids are
written unchanged, and ``decode_id`` restores the original exactly. (Ids with control
characters never get here: ``capgap.data.check_id`` rejects them at load.)

Run files (``write_run``) and qrels (``write_qrels_trec``) use the same encoding, so an external
evaluator (``trec_eval``, ``pytrec_eval``) scores capgap's run files against
``write_qrels_trec`` output directly and agrees with capgap's own metrics, up to ties: those
evaluators order a run by score and break ties by document id, not by capgap's rank column.

Public API: ``encode_id(s)``, ``decode_id(s)``, ``Run``, ``write_run(path, query_ids, indices, scores,
doc_ids, tag)``, ``read_run(path)``, ``write_qrels_trec(path, qrels)``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .data import iter_lines
from .errors import DataFormatError
from .io import atomic_open

_ESCAPES = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


def note_run_pair(first: dict, path, lineno: int, q: str, d: str) -> None:
    """Record that run file ``path``'s line ``lineno`` ranks document ``d`` for query ``q`` in
    ``first`` (``(query, document)`` -> its line), or raise ``DataFormatError`` (field ``doc-id``)
    naming the line it repeats: trec_eval refuses a repeated docno, which would take two places
    in the ranking. One rule for every run reader (``read_run``, ``diagnosis.load_run_file``)."""
    if (q, d) in first:
        raise DataFormatError(path, lineno, "doc-id", f"document {d!r} of query {q!r} repeats line {first[q, d]}")
    first[q, d] = lineno


def _needs_escape(ch: str) -> bool:
    return ch == "%" or ch.isspace()


def encode_id(s: str) -> str:
    """``s`` with ``%`` and every whitespace character (``str.isspace``) percent-encoded
    (``%XX`` per UTF-8 byte): ``"doc 0"`` -> ``"doc%200"``, ``"a%b"`` -> ``"a%25b"``; any
    other character is kept. ``decode_id(encode_id(s)) == s`` for every str ``s``."""
    if not any(_needs_escape(ch) for ch in s):
        return s
    return "".join("".join(f"%{b:02X}" for b in ch.encode("utf-8")) if _needs_escape(ch) else ch for ch in s)


def decode_id(s: str) -> str:
    """The inverse of ``encode_id``: every ``%XX`` sequence is decoded as UTF-8 bytes.

    Raises ``ValueError`` for a ``%`` not followed by two hex digits or escapes that are not
    valid UTF-8 (text ``encode_id`` cannot have produced)."""
    if "%" not in s:
        return s
    if "%" in _ESCAPES.sub("", s):
        raise ValueError(f"{s!r}: '%' not followed by two hex digits (ids in TREC files are percent-encoded)")
    try:
        return _ESCAPES.sub(lambda m: bytes.fromhex(m.group().replace("%", "")).decode("utf-8"), s)
    except UnicodeDecodeError:
        raise ValueError(f"{s!r}: percent-escapes are not valid UTF-8") from None


@dataclass(frozen=True)
class Run:
    """A method's ranking of every query, as a TREC run file holds it (``write_run``).

    ``query_ids``: the queries in order; ``rows``: ``(n_queries, depth) int64`` row indices into
    ``doc_ids``, best first (-1: padding); ``scores``: their ``(n_queries, depth)`` scores in the
    method's own units; ``tag``: the run's name (no whitespace)."""

    query_ids: Sequence[str]
    rows: np.ndarray
    scores: np.ndarray
    doc_ids: Sequence[str]
    tag: str

    def write(self, path: str | Path) -> None:
        """Atomically write the run file (``write_run``)."""
        write_run(path, self.query_ids, self.rows, self.scores, self.doc_ids, self.tag)


def write_run(
    path: str | Path,
    query_ids: Sequence[str],
    indices: np.ndarray,
    scores: np.ndarray,
    doc_ids: Sequence[str],
    tag: str,
) -> None:
    """Atomically write a TREC run file: one ``qid Q0 docid rank score tag`` line per result.

    ``indices``/``scores``: ``(n_queries, k) int64`` row indices into ``doc_ids`` and their
    ``float32``/``float64`` scores (the method's own units),
    best first; index -1 (padding of a query with fewer than k candidates) is skipped. Ids are
    percent-encoded (``encode_id``); the rank column counts 1, 2, ... per query; each score is
    written with full precision (``repr(float(s))``), so distinct float32/float64 scores never
    become equal in the text and external evaluators see capgap's order.

    Raises ``ValueError`` for a ``tag`` containing whitespace (it would add a column) or a
    NaN score (a NaN has no place in an order).
    """
    if not tag or any(ch.isspace() for ch in tag):
        raise ValueError(f"run tag must be non-empty without whitespace, got {tag!r}")
    with atomic_open(path, "w", encoding="utf-8") as fh:
        for q, row, srow in zip(query_ids, indices, scores):
            qe = encode_id(q)
            for r, (i, s) in enumerate(((i, s) for i, s in zip(row, srow) if i >= 0), start=1):
                s = float(s)
                if math.isnan(s):
                    raise ValueError(f"query {q!r}: score of document {doc_ids[i]!r} is NaN")
                fh.write(f"{qe} Q0 {encode_id(doc_ids[i])} {r} {s!r} {tag}\n")


def read_run(path: str | Path) -> dict[str, list[tuple[str, float]]]:
    """Read a TREC run file (``qid Q0 docid rank score tag``, whitespace-separated) as query id ->
    ``[(doc id, score), ...]`` in file order (``write_run`` writes rank order), ids decoded
    (``decode_id``). Blank lines are skipped; lines are read by ``capgap.data.iter_lines``.

    Raises ``DataFormatError(path, line, field)`` for bad UTF-8, a line without 6 columns, a
    malformed percent-escape (field ``query-id`` / ``doc-id``), a document repeated for one query
    (field ``doc-id``, naming the line of its first appearance) or a score that is not a number
    or is NaN (field ``score``)."""
    out: dict[str, list[tuple[str, float]]] = {}
    first: dict[tuple[str, str], int] = {}  # (query, document) -> its line
    for lineno, line in iter_lines(path):
        cols = line.split()
        if not cols:
            continue
        if len(cols) != 6:
            raise DataFormatError(
                path, lineno, None, f"expected 6 columns (qid Q0 docid rank score tag), got {len(cols)}"
            )
        try:
            q = decode_id(cols[0])
        except ValueError as e:
            raise DataFormatError(path, lineno, "query-id", str(e)) from None
        try:
            d = decode_id(cols[2])
        except ValueError as e:
            raise DataFormatError(path, lineno, "doc-id", str(e)) from None
        try:
            s = float(cols[4])
        except ValueError:
            raise DataFormatError(path, lineno, "score", f"not a number: {cols[4]!r}") from None
        if math.isnan(s):
            raise DataFormatError(path, lineno, "score", f"not a number: {cols[4]!r}")
        note_run_pair(first, path, lineno, q, d)
        out.setdefault(q, []).append((d, s))
    return out


def write_qrels_trec(path: str | Path, qrels: Mapping[str, Mapping[str, int]]) -> None:
    """Atomically write qrels in TREC format, ``qid 0 docid grade`` per judgement, in mapping
    order, ids percent-encoded like ``write_run``'s, so ``trec_eval``/``pytrec_eval`` evaluate
    capgap's run files against it directly. Raises ``ValueError`` for a grade that is not an
    integer."""
    with atomic_open(path, "w", encoding="utf-8") as fh:
        for q, docs in qrels.items():
            qe = encode_id(q)
            for d, g in docs.items():
                if int(g) != g:
                    raise ValueError(f"({q!r}, {d!r}): grade {g!r} is not an integer")
                fh.write(f"{qe} 0 {encode_id(d)} {int(g)}\n")
