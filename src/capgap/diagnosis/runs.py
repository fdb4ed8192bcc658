"""The order of a run file's documents when its score and rank columns disagree
(``inputs.load_run_file``): a TREC run's rank column is the search's own order, and a search
that writes distances (faiss L2, hnswlib) gives scores that *ascend* with it, which trec_eval's
score-descending convention reads backwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from ..errors import DataFormatError


class RunFile(dict):
    """A run as ``load_run_file`` read it: query id -> document ids in rank order (a ``dict``),
    and ``notes``: what was decided about the order (``diagnose`` copies them into its summary)."""

    def __init__(self, *args, notes: Sequence[str] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.notes = list(notes)


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


def run_in_order(path: Path, rows: Mapping[str, Sequence[tuple]]) -> RunFile:
    """Each query's documents in the search's order, from ``rows``: query id -> entries
    ``(-score, line, doc id, rank or None)`` in file order.

    The rule: by score, highest first (trec_eval's convention; ties by line), unless the rank
    column contradicts the scores on every query where both tell an order (scores ascend as
    ranks ascend: distances). Then the rank column decides (ties by ascending score, then
    line) and a note says so. Raises ``DataFormatError`` naming ``path``, the first
    contradicting line and field ``rank`` when some queries' scores ascend with rank and others'
    descend or go both ways: similarities cannot be told from distances."""
    seen = {q: _direction(v) for q, v in rows.items()}
    asc = [q for q, d in seen.items() if d == "ascend"]
    other = [q for q, d in seen.items() if d in ("descend", "mixed")]
    if not asc:
        return RunFile({q: [e[2] for e in sorted(v)] for q, v in rows.items()})
    first, second = sorted((e for e in rows[asc[0]] if e[3] is not None), key=lambda e: (e[3], e[1]))[:2]
    example = (f"{asc[0]!r}: rank {first[3]:g} score {-first[0]:g} (line {first[1]}), rank {second[3]:g} score "
               f"{-second[0]:g} (line {second[1]})")
    if other:
        desc = [q for q in other if seen[q] == "descend"]
        raise DataFormatError(path, first[1], "rank",
                              f"the scores ascend as the ranks ascend on {len(asc)} queries (e.g. {example}) but not on "
                              f"{len(other)} ({len(desc)} descend, {len(other) - len(desc)} go both ways; e.g. {other[0]!r}): "
                              "similarities cannot be told from distances; write scores that descend with rank (negate "
                              "distances)")
    note = (f"{path}: on every query whose ranks and scores tell an order ({len(asc)}) the scores ascend as the ranks "
            f"ascend (e.g. {example}): distances, not similarities; the documents are taken in rank order")
    return RunFile({q: [e[2] for e in sorted(v, key=lambda e: (e[3] if e[3] is not None else float("inf"), -e[0], e[1]))]
                    for q, v in rows.items()}, notes=[note])
