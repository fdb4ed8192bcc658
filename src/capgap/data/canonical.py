"""The normalised copy of a retrieval set the later pipeline stages read: ``write_canonical`` /
``load_canonical`` (``corpus.jsonl``, ``queries.jsonl``, ``qrels.tsv``, ``split.tsv``,
``excluded.tsv``, ``twins.tsv``, ``unfindable.tsv``) and ``describe`` (its ``status.json``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from ..errors import DataFormatError
from ..io import atomic_open, write_jsonl
from ..retrieval import duplicate_summary, text_key
from .corpus import (
    SPLITS,
    UNFINDABLE_REASONS,
    Corpus,
    Queries,
    RetrievalSet,
    Split,
    _parse_score,
    load_corpus,
    load_qrels,
    load_queries,
    unfindable_counts,
)
from .edits import TYPES
from .tsv import check_id, iter_lines, split_tsv


def write_canonical(rs: RetrievalSet, folder: str | Path) -> None:
    """Write the normalised dataset the later pipeline stages read (each file atomically)."""
    folder = Path(folder)
    write_jsonl(
        folder / "corpus.jsonl",
        ({"_id": d, "title": t, "text": x} for d, t, x in zip(rs.corpus.ids, rs.corpus.titles, rs.corpus.texts)),
    )
    write_jsonl(folder / "queries.jsonl", ({"_id": q, "text": t} for q, t in zip(rs.queries.ids, rs.queries.texts)))
    with atomic_open(folder / "qrels.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for q in rs.queries.ids:
            for d, s in rs.qrels.judgements[q].items():
                fh.write(f"{q}\t{d}\t{s}\n")
    with atomic_open(folder / "split.tsv", "w", encoding="utf-8") as fh:
        fh.write(f"# {' '.join(rs.split.rule.split())}\nquery-id\tsplit\n")  # one line, no TAB: not an id line
        for name in SPLITS:
            for q in rs.split.ids(name):
                fh.write(f"{q}\t{name}\n")
    with atomic_open(folder / "excluded.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\n")
        for q in rs.queries.ids:
            for d in rs.excluded.get(q, ()):
                fh.write(f"{q}\t{d}\n")
    with atomic_open(folder / "unfindable.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\treason\n")
        for q in rs.queries.ids:
            for d, g, reason in rs.unfindable.get(q, ()):
                fh.write(f"{q}\t{d}\t{g}\t{reason}\n")
    with atomic_open(folder / "twins.tsv", "w", encoding="utf-8") as fh:
        fh.write("corpus-id\ttwin-id\ttype\n")
        for d in rs.corpus.ids:
            for t, kind in rs.twins.get(d, ()):
                fh.write(f"{d}\t{t}\t{kind}\n")


def _tsv_pairs(path: Path, header: tuple[str, str], comments: bool = False) -> Iterator[tuple[int | None, str, str]]:
    """``(line, first, second)`` per line of a two-column TSV capgap writes (``iter_lines``),
    skipping blank lines and the ``header``; with ``comments``, a line starting with ``#`` and
    holding no TAB is yielded as ``(None, text, "")`` (an id line always has a TAB). Raises
    ``DataFormatError`` naming the line for any other column count."""
    for lineno, line in iter_lines(path):
        if comments and line.startswith("#") and "\t" not in line:
            yield None, line[1:].strip(), ""
            continue
        if not line.strip() or tuple(line.split("\t")) == header:
            continue
        cols = split_tsv(path, lineno, line)
        if len(cols) != 2:
            raise DataFormatError(path, lineno, None, "expected 2 tab-separated columns")
        yield lineno, cols[0], cols[1]


def load_split(path: str | Path, queries: Queries) -> Split:
    """Read ``split.tsv`` (``query-id<TAB>split``, ``iter_lines``); every id must be a known query.
    A line starting with ``#`` and holding no TAB is the split rule (so an id may start with
    ``#``: its line has a TAB).

    Raises ``DataFormatError`` naming the line for bad UTF-8, a wrong column count, an id with
    a control character (``check_id``), an unknown query id, an unknown split name, or a query
    listed twice (naming both lines)."""
    path = Path(path)
    known = set(queries.ids)
    parts: dict[str, list[str]] = {s: [] for s in SPLITS}
    seen: dict[str, tuple[int, str]] = {}
    rule = ""
    for lineno, q, name in _tsv_pairs(path, ("query-id", "split"), comments=True):
        if lineno is None:  # the rule comment
            rule = q
            continue
        if check_id(path, lineno, "query-id", q) not in known:
            raise DataFormatError(path, lineno, "query-id", f"unknown query id {q!r}")
        if name not in parts:
            raise DataFormatError(path, lineno, "split", f"expected one of {SPLITS}, got {name!r}")
        if q in seen:
            first, was = seen[q]
            raise DataFormatError(
                path, lineno, "query-id", f"query {q!r} listed twice: {was} (line {first}) and {name}"
            )
        seen[q] = (lineno, name)
        parts[name].append(q)
    return Split(tuple(parts["train"]), tuple(parts["heldout"]), rule)


def load_excluded(path: str | Path, corpus: Corpus, queries: Queries) -> dict[str, tuple[str, ...]]:
    """Read ``excluded.tsv`` (``query-id<TAB>corpus-id``, header line; ``iter_lines``): query id ->
    excluded document ids, in file order. Bad UTF-8, a wrong column count, an id with a control
    character (``check_id``) or an unknown id raise ``DataFormatError`` naming the line."""
    path = Path(path)
    qids, dids = set(queries.ids), set(corpus.ids)
    out: dict[str, list[str]] = {}
    for lineno, q, d in _tsv_pairs(path, ("query-id", "corpus-id")):
        if check_id(path, lineno, "query-id", q) not in qids:
            raise DataFormatError(path, lineno, "query-id", f"unknown query id {q!r}")
        if check_id(path, lineno, "corpus-id", d) not in dids:
            if d in corpus.empty_ids:
                continue  # an empty document left out of the corpus is never ranked anyway
            raise DataFormatError(path, lineno, "corpus-id", f"unknown document id {d!r}")
        out.setdefault(q, []).append(d)
    return {q: tuple(v) for q, v in out.items()}


def load_twins(path: str | Path, corpus: Corpus) -> dict[str, tuple[tuple[str, str], ...]]:
    """Read ``twins.tsv`` (``corpus-id<TAB>twin-id<TAB>type``, header line; ``iter_lines``):
    document id -> ``((twin id, type), ...)`` in file order. Bad UTF-8, a wrong column count,
    an id with a control character (``check_id``), an unknown document id, an unknown type
    (``capgap.data.edits.TYPES``) or a pair listed twice raise ``DataFormatError`` naming the
    line and field."""
    path = Path(path)
    dids = set(corpus.ids)
    out: dict[str, list[tuple[str, str]]] = {}
    for lineno, line in iter_lines(path):
        if not line.strip() or tuple(line.split("\t")) == ("corpus-id", "twin-id", "type"):
            continue
        cols = split_tsv(path, lineno, line)
        if len(cols) != 3:
            raise DataFormatError(path, lineno, None, "expected 3 tab-separated columns")
        d, t, kind = cols
        for field_name, v in (("corpus-id", d), ("twin-id", t)):
            if check_id(path, lineno, field_name, v) not in dids:
                raise DataFormatError(path, lineno, field_name, f"unknown document id {v!r}")
        if kind not in TYPES:
            raise DataFormatError(path, lineno, "type", f"expected one of {TYPES}, got {kind!r}")
        if (t, kind) in out.get(d, []):
            raise DataFormatError(path, lineno, "twin-id", f"twin {t!r} of {d!r} listed twice")
        out.setdefault(d, []).append((t, kind))
    return {d: tuple(v) for d, v in out.items()}


def load_canonical(folder: str | Path, name: str | None = None) -> RetrievalSet:
    """Load a folder written by ``write_canonical`` (``excluded.tsv`` and ``twins.tsv`` are
    optional: folders prepared before they existed have no exclusions and no twins). The set's
    name is ``name``, else the ``dataset`` its ``status.json`` records (the data stage writes
    it), else the folder's name."""
    folder = Path(folder)
    status = folder / "status.json"
    if name is None and status.is_file():
        name = json.loads(status.read_text(encoding="utf-8")).get("dataset")
    corpus = load_corpus(folder / "corpus.jsonl")
    queries = load_queries(folder / "queries.jsonl")
    qrels = load_qrels(folder / "qrels.tsv", corpus, queries)
    split = load_split(folder / "split.tsv", queries)
    excluded = load_excluded(folder / "excluded.tsv", corpus, queries) if (folder / "excluded.tsv").is_file() else {}
    twins = load_twins(folder / "twins.tsv", corpus) if (folder / "twins.tsv").is_file() else {}
    unf = load_unfindable(folder / "unfindable.tsv", queries) if (folder / "unfindable.tsv").is_file() else {}
    return RetrievalSet(
        name or folder.name, corpus, queries, qrels, split, excluded=excluded, twins=twins, unfindable=unf
    )


def load_unfindable(path: str | Path, queries: Queries) -> dict[str, tuple[tuple[str, int, str], ...]]:
    """Read ``unfindable.tsv`` (``query-id<TAB>corpus-id<TAB>score<TAB>reason``, header line;
    ``write_canonical``): query id -> ``((doc id, grade, reason), ...)``. Bad UTF-8, a wrong
    column count, an id with a control character, an unknown query id, a grade that is not a
    positive integer or an unknown reason raise ``DataFormatError`` naming the line and field."""
    path = Path(path)
    qids = set(queries.ids)
    out: dict[str, list] = {}
    for lineno, line in iter_lines(path):
        cols = line.split("\t")
        if tuple(cols) == ("query-id", "corpus-id", "score", "reason") or not line.strip():
            continue
        if len(cols) != 4:
            raise DataFormatError(path, lineno, None, "expected 4 tab-separated columns")
        q, d, g, reason = cols
        if check_id(path, lineno, "query-id", q) not in qids:
            raise DataFormatError(path, lineno, "query-id", f"unknown query id {q!r}")
        check_id(path, lineno, "corpus-id", d)
        grade = _parse_score(path, lineno, g)
        if grade <= 0:
            raise DataFormatError(path, lineno, "score", f"expected a gold grade > 0, got {g!r}")
        if reason not in UNFINDABLE_REASONS:
            raise DataFormatError(path, lineno, "reason", f"expected one of {UNFINDABLE_REASONS}, got {reason!r}")
        out.setdefault(q, []).append((d, grade, reason))
    return {q: tuple(v) for q, v in out.items()}


def describe(rs: RetrievalSet) -> dict:
    """A dataset's sizes, split rule, source and duplicates, as its ``status.json`` records
    them: ``n_docs``, ``n_queries``, ``n_train``, ``n_heldout``, ``dropped_queries_without_gold``,
    ``dropped_queries_unused_qrels`` (qrels file -> queries judged only there, in neither
    split), ``split_rule``, ``source``, ``text_normalization`` and ``duplicate_documents`` /
    ``duplicate_queries`` (``capgap.retrieval.duplicate_summary``: identical passages, and
    queries identical after ``text_key``); ``twins`` (``twin_counts``) when it has any;
    ``unfindable_gold`` (``unfindable_counts``: per split, gold pairs whose document is absent,
    empty or excluded, which stay gold and are never found), ``empty_documents_left_out`` and
    ``dropped_queries_gold_unfindable``."""
    return {
        "n_docs": len(rs.corpus),
        "n_queries": len(rs.queries),
        "n_train": len(rs.split.train),
        "n_heldout": len(rs.split.heldout),
        "dropped_queries_without_gold": rs.dropped_queries,
        "dropped_queries_unused_qrels": dict(rs.dropped_unused),
        "split_rule": rs.split.rule,
        "source": rs.source,
        "text_normalization": "NFC",
        "duplicate_documents": duplicate_summary(rs.corpus.ids, rs.corpus.passages()),
        "duplicate_queries": duplicate_summary(rs.queries.ids, [text_key(t) for t in rs.queries.texts]),
        **({"twins": twin_counts(rs)} if rs.twins else {}),
        "unfindable_gold": unfindable_counts(rs),
        "empty_documents_left_out": len(rs.corpus.empty_ids),
        "dropped_queries_gold_unfindable": rs.dropped_unfindable,
    }


def twin_counts(rs: RetrievalSet) -> dict[str, int]:
    """Near-miss twins of ``rs`` by type (``capgap.data.edits.TYPES`` order, types present)."""
    kinds = [k for pairs in rs.twins.values() for _, k in pairs]
    return {t: kinds.count(t) for t in TYPES if t in kinds}
