"""The qrels file ``capgap diagnose`` reads: BEIR tsv, TREC or 'qid docid' lines, each pair
remembered with its line so that later errors can name it."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from ..data import iter_qrels
from ..errors import DataFormatError


class QrelsFile(dict):
    """Qrels as ``load_qrels_file`` read them: query id -> {document id: grade} (a ``dict``).

    Attributes
    ----------
    path : pathlib.Path
        The file, named by ``diagnose`` in errors about its judgements.
    lines : dict
        ``(query id, document id)`` -> the line (1-based) that first judged the pair.
    """

    def __init__(self, *args, path: str | Path, lines: Mapping[tuple[str, str], int], **kwargs):
        super().__init__(*args, **kwargs)
        self.path = Path(path)
        self.lines = dict(lines)


def load_qrels_file(path: str | Path) -> QrelsFile:
    """Qrels as query id -> {document id: grade}: BEIR tsv (``query-id corpus-id score``, header
    optional), TREC (``qid iter docid rel``, whitespace), or two columns (``qid docid``, grade 1),
    read by ``capgap.data.iter_qrels`` (no comment lines: a line ``# ...`` is an error). Grades
    <= 0 are judged non-gold. A pair repeated with the same grade is one judgement; with another
    grade it is an error naming both lines (as ``capgap.data.load_qrels``). The result is a
    ``QrelsFile``, a dict that keeps the file and each pair's line for ``diagnose``'s messages.

    Raises ``DataFormatError`` (file, line, field), and naming the file alone when it holds no
    judgement (empty, blank or only a header)."""
    out: dict[str, dict[str, int]] = {}
    first: dict[tuple[str, str], int] = {}
    for lineno, q, d, g in iter_qrels(path, pairs=True):
        prev = out.setdefault(q, {}).get(d)
        if prev is not None and prev != g:
            raise DataFormatError(
                path, lineno, "score", f"({q!r}, {d!r}) judged twice: {prev} (line {first[(q, d)]}) and {g}"
            )
        out[q][d] = g
        first.setdefault((q, d), lineno)
    if not out:
        raise DataFormatError(
            path, None, None, "judges no query: the file holds no judgement line (it is empty, blank or only a header)"
        )
    return QrelsFile(out, path=path, lines=first)
