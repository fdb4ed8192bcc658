"""The frozen records of a retrieval set (``Corpus``, ``Queries``, ``Qrels``, ``Split``,
``RetrievalSet``), the readers of one BEIR file each (``load_corpus``, ``load_queries``,
``iter_qrels`` / ``load_qrels``) and the per-set helpers the methods use (``query_records``,
``excluded_positions``, ``self_retrieval_exclusions``, ``corpus_hash``, ``unfindable_counts``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

from ..errors import DataFormatError
from .tsv import _iter_jsonl, _nfc, _str_field, check_id, iter_lines, split_tsv

log = logging.getLogger("capgap.data")


SPLITS = ("train", "heldout")
UNFINDABLE_REASONS = ("absent", "empty", "excluded")


# --------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Corpus:
    """Documents: ``ids``, ``titles``, ``texts`` are parallel tuples of str (length n_docs);
    ``empty_ids``: documents the file holds with empty title and text, left out (no method can
    find them; a gold one is counted by ``gold_rule``)."""

    ids: tuple[str, ...]
    titles: tuple[str, ...]
    texts: tuple[str, ...]
    empty_ids: tuple[str, ...] = field(default=(), compare=False)  # documents left out for empty title and text

    def __post_init__(self):
        if not (len(self.ids) == len(self.titles) == len(self.texts)):
            raise ValueError("Corpus: ids, titles and texts must have the same length")
        if len(set(self.ids)) != len(self.ids):
            raise ValueError("Corpus: duplicate document ids")
        if not self.ids:
            raise ValueError("Corpus: no documents")

    def __len__(self) -> int:
        return len(self.ids)

    def passages(self) -> list[str]:
        """Text to embed per document: ``title + " " + text`` (BEIR convention), stripped."""
        return [f"{t} {x}".strip() for t, x in zip(self.titles, self.texts)]


@dataclass(frozen=True)
class Queries:
    """Queries: ``ids`` and ``texts`` are parallel tuples of str (length n_queries)."""

    ids: tuple[str, ...]
    texts: tuple[str, ...]

    def __post_init__(self):
        if len(self.ids) != len(self.texts):
            raise ValueError("Queries: ids and texts must have the same length")
        if len(set(self.ids)) != len(self.ids):
            raise ValueError("Queries: duplicate query ids")

    def __len__(self) -> int:
        return len(self.ids)

    def subset(self, ids) -> "Queries":
        """The queries whose id is in ``ids``, in this object's order."""
        keep = set(ids)
        pairs = [(q, t) for q, t in zip(self.ids, self.texts) if q in keep]
        return Queries(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))


@dataclass(frozen=True)
class Qrels:
    """Relevance judgements ``judgements[query_id][doc_id] = score`` (int; <= 0 not gold).

    ``path`` and ``lines`` (``lines[query_id][doc_id]`` = 1-based line) say where each
    judgement was read, when it was read from a file (``load_qrels``), so an error about a
    judgement (``assemble``'s cross-file grade conflict) can name its file and line. Neither
    takes part in equality."""

    judgements: Mapping[str, Mapping[str, int]]
    path: str = field(default="", compare=False)
    lines: Mapping[str, Mapping[str, int]] = field(default_factory=dict, compare=False, repr=False)

    def gold(self, query_id: str) -> dict[str, int]:
        """The gold set of one query: ``{doc_id: score}`` for score > 0."""
        return {d: s for d, s in self.judgements.get(query_id, {}).items() if s > 0}

    def query_ids(self) -> list[str]:
        return list(self.judgements)

    def n_judgements(self) -> int:
        return sum(len(v) for v in self.judgements.values())


@dataclass(frozen=True)
class Split:
    """Train / held-out partition of query ids (disjoint tuples of str)."""

    train: tuple[str, ...]
    heldout: tuple[str, ...]
    rule: str = ""

    def __post_init__(self):
        both = set(self.train) & set(self.heldout)
        if both:
            raise ValueError(f"Split: {len(both)} queries are both train and held-out, e.g. {sorted(both)[:3]}")

    def ids(self, name: str) -> tuple[str, ...]:
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; expected one of {SPLITS}")
        return getattr(self, name)


@dataclass(frozen=True)
class RetrievalSet:
    """One dataset: corpus, queries (only those with >= 1 gold document), qrels, split;
    ``excluded``: query id -> documents removed from its ranking; ``twins``: document id ->
    ``((twin id, type), ...)``, its near-miss twins (``capgap.data.twins``), never gold for a
    query whose gold set holds the document. ``dropped_queries``: queries without gold in any
    qrels file; ``dropped_unused``: qrels file stem -> queries dropped because their gold is
    only in that file, which the split does not use (``assemble``; BEIR's ``dev``).
    ``unfindable``: query id -> ``((doc id, grade, reason), ...)``, gold that no method can find
    (``gold_rule``: reason ``absent``, ``empty`` or ``excluded``); it stays in the query's gold
    set for every metric (recall's and nDCG's denominators), never ranked. ``qrels`` holds the
    findable judgements only. ``dropped_unfindable``: queries dropped because none of their gold
    can be found."""

    name: str
    corpus: Corpus
    queries: Queries
    qrels: Qrels
    split: Split
    dropped_queries: int = 0
    source: dict = field(default_factory=dict)
    excluded: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    twins: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    dropped_unused: Mapping[str, int] = field(default_factory=dict)
    unfindable: Mapping[str, tuple[tuple[str, int, str], ...]] = field(default_factory=dict)
    dropped_unfindable: int = 0

    def __post_init__(self):
        doc_ids = set(self.corpus.ids)
        qids = set(self.queries.ids)
        gold_of: dict[str, set[str]] = {}
        for q in self.queries.ids:
            for d in self.qrels.gold(q):
                gold_of.setdefault(d, set()).add(q)
        for d, pairs in self.twins.items():
            for t, kind in pairs:
                if d not in doc_ids or t not in doc_ids:
                    raise ValueError(f"{self.name}: near-miss twin ({d!r}, {t!r}) names an unknown document")
                if gold_of.get(d, set()) & gold_of.get(t, set()):
                    q = sorted(gold_of[d] & gold_of[t])[0]
                    raise ValueError(f"{self.name}: query {q!r} has both {d!r} and its {kind} twin {t!r} as gold")
        for q, docs in self.excluded.items():
            if q not in qids:
                raise ValueError(f"{self.name}: excluded documents for unknown query {q!r}")
            both = set(docs) & set(self.qrels.gold(q))
            if both:
                raise ValueError(f"{self.name}: query {q!r} has documents both gold and excluded: {sorted(both)[:3]}")
            unknown = [d for d in docs if d not in doc_ids]
            if unknown:
                raise ValueError(f"{self.name}: query {q!r} excludes unknown documents {unknown[:3]}")
        for q in self.queries.ids:
            gold = self.qrels.gold(q)
            if not gold:
                raise ValueError(f"{self.name}: query {q!r} has no gold document")
            missing = [d for d in gold if d not in doc_ids]
            if missing:
                raise ValueError(f"{self.name}: query {q!r} judges unknown documents {missing[:3]}")
        for q, items in self.unfindable.items():
            if q not in qids:
                raise ValueError(f"{self.name}: unfindable gold for unknown query {q!r}")
            for d, grade, reason in items:
                if reason not in UNFINDABLE_REASONS or grade <= 0 or d in self.qrels.gold(q):
                    raise ValueError(f"{self.name}: query {q!r}: ({d!r}, {grade}, {reason!r}) is no unfindable gold")
                if reason != "excluded" and d in doc_ids:
                    raise ValueError(f"{self.name}: query {q!r}: {d!r} is in the corpus, not {reason}")
        extra = (set(self.split.train) | set(self.split.heldout)) - qids
        if extra:
            raise ValueError(f"{self.name}: split names unknown queries, e.g. {sorted(extra)[:3]}")


def load_corpus(path: str | Path) -> Corpus:
    """Read a BEIR ``corpus.jsonl`` (``_id``, ``title`` optional, ``text``).

    Returns a ``Corpus`` in file order, title and text NFC-normalised, ids as written
    (docs/data.md). A document whose title and text are both empty is left out
    (``Corpus.empty_ids``, logged): no method can find it, and a gold judgement of it stays gold
    (``gold_rule``). Raises ``DataFormatError`` on bad UTF-8, malformed JSON, a missing ``_id``
    or ``text``, an id with a control character (``check_id``), a duplicate ``_id``, or no
    document with text.
    """
    path = Path(path)
    ids, titles, texts, seen, empty = [], [], [], {}, []
    for lineno, obj in _iter_jsonl(path):
        did = _record_id(path, lineno, obj, seen)
        title = _nfc(_str_field(path, lineno, obj, "title", required=False))
        text = _nfc(_str_field(path, lineno, obj, "text"))
        seen[did] = lineno
        if not (title.strip() or text.strip()):
            empty.append(did)  # nothing to embed or match: left out; gold pointing here stays gold (gold_rule)
            continue
        ids.append(did)
        titles.append(title)
        texts.append(text)
    if not ids:
        raise DataFormatError(path, None, None, "no documents" + (f" with text ({len(empty)} empty)" if empty else ""))
    if empty:
        log.warning(
            "%s: %d documents with empty title and text left out (no method can find them), e.g. %s",
            path,
            len(empty),
            empty[:3],
        )
    return Corpus(tuple(ids), tuple(titles), tuple(texts), tuple(empty))


def _record_id(path: Path, lineno: int, obj: dict, seen: Mapping[str, int]) -> str:
    """A BEIR record's ``_id`` (``check_id``), refused when empty or already on an earlier line
    (``seen``: id -> line), as ``DataFormatError`` naming file, line and field."""
    rid = check_id(path, lineno, "_id", _str_field(path, lineno, obj, "_id"))
    if not rid:
        raise DataFormatError(path, lineno, "_id", "empty id")
    if rid in seen:
        raise DataFormatError(path, lineno, "_id", f"duplicate id {rid!r} (first on line {seen[rid]})")
    return rid


def load_queries(path: str | Path) -> Queries:
    """Read a BEIR ``queries.jsonl`` (``_id``, ``text``); texts NFC-normalised, ids as written.

    Raises ``DataFormatError`` on bad UTF-8, malformed JSON, a missing field, an id with a
    control character (``check_id``), a duplicate id, or empty text.
    """
    path = Path(path)
    ids, texts, seen = [], [], {}
    for lineno, obj in _iter_jsonl(path):
        qid = _record_id(path, lineno, obj, seen)
        text = _nfc(_str_field(path, lineno, obj, "text"))
        if not text.strip():
            raise DataFormatError(path, lineno, "text", f"query {qid!r} has empty text")
        seen[qid] = lineno
        ids.append(qid)
        texts.append(text)
    if not ids:
        raise DataFormatError(path, None, None, "no queries")
    return Queries(tuple(ids), tuple(texts))


def _parse_score(path: Path, lineno: int, raw) -> int:
    """A qrels grade: an integer, written as int or integral float (``1``, ``1.0``, ``"2"``).

    Raises ``DataFormatError(path, lineno, "score", ...)`` for a non-number, a non-finite number
    (``nan``, ``inf``, or too large for a float) and a fractional number."""
    try:
        f = float(raw)
    except (TypeError, ValueError):
        raise DataFormatError(path, lineno, "score", f"not a number: {raw!r}") from None
    except OverflowError:  # an int too large for a float (JSON allows any length)
        raise DataFormatError(path, lineno, "score", f"not a finite number: {raw!r}") from None
    if not math.isfinite(f):
        raise DataFormatError(path, lineno, "score", f"not a finite number: {raw!r}")
    if f != int(f):
        raise DataFormatError(path, lineno, "score", f"expected an integer grade, got {raw!r}")
    return int(f)


# Header names of qrels columns, compared lower-case without punctuation ("Query-ID" -> "queryid")
_QRELS_NAMES = {
    "query": {
        "q",
        "qid",
        "query",
        "queryid",
        "querynum",
        "querynumber",
        "qno",
        "topic",
        "topicid",
        "topicno",
        "topicnumber",
        "question",
        "questionid",
    },
    "document": {
        "d",
        "did",
        "doc",
        "docid",
        "docno",
        "docnum",
        "document",
        "documentid",
        "corpus",
        "corpusid",
        "pid",
        "passage",
        "passageid",
        "cid",
    },
    "score": {
        "score",
        "rel",
        "relevance",
        "relevancy",
        "label",
        "grade",
        "judgment",
        "judgement",
        "rating",
        "qrel",
        "gain",
    },
    "iteration": {"iter", "iteration", "q0", "0", "unused", "subtopic"},
}
_QRELS_ORDER = {
    2: ("query", "document"),
    3: ("query", "document", "score"),
    4: ("query", "iteration", "document", "score"),
}


def _qrels_role(name: str) -> str | None:
    """The column a qrels header name stands for (``_QRELS_NAMES``), or None when unknown."""
    key = re.sub(r"[^0-9a-z]", "", name.strip().lower())
    return next((role for role, names in _QRELS_NAMES.items() if key in names), None)


def _qrels_header(path: Path, lineno: int, cols: list[str]) -> tuple[bool, tuple[int, int, int | None] | None]:
    """Whether the first line ``cols`` is a header and, if so, where its names put the columns.

    A line of 3 or 4 columns is a header when its last column is not a number (the documented
    rule) and one of its names is known (``_QRELS_NAMES``), a line of 2 (``qid docid``) when both
    its names are known. Returns ``(is_header, layout)``: ``layout`` is None to read data lines by
    position (query, [iteration,] document, score), else the positions ``(query, document,
    score)`` the names give (score None for 2 columns), when every name is known and the order is
    another. Raises ``DataFormatError(path, lineno)`` when known names put a column where the
    format reads another and the others are unknown, or when two names claim one column: the
    order found is named; and (field ``score``) when the last column is not a number and no name
    is known: a judgement with a bad grade is as likely as a header, and is never dropped unread."""
    names = [c.strip() for c in cols]
    n = len(cols)
    roles = [_qrels_role(c) for c in names]
    roles = [None if r == "iteration" and n != 4 else r for r in roles]  # TREC's second column only
    if n not in _QRELS_ORDER or (n == 2 and None in roles) or (n > 2 and _is_number(names[-1])) or not names[-1]:
        return False, None  # (an empty last column: a data line's trailing TAB, named by the reader)
    expect = _QRELS_ORDER[n]
    found = " ".join(f"{c!r} ({r or 'unknown'})" for c, r in zip(names, roles))
    for r in set(roles) - {None}:
        if roles.count(r) > 1:
            raise DataFormatError(path, lineno, None, f"header {found}: {roles.count(r)} columns name the {r}")
    if tuple(roles) == expect or (n == 4 and None in roles and tuple(r or "iteration" for r in roles) == expect):
        return True, None
    # a judgement with a bad grade as likely as a header: never dropped unread
    if all(r in (None, "iteration") for r in roles):
        raise DataFormatError(
            path,
            lineno,
            "score",
            f"not a number: {names[-1]!r}, and as a header none of its names "
            "is a qrels column name (query-id, qid, topic, q; corpus-id, "
            "docid, docno, d; score, rel, relevance, label)",
        )
    wanted = {"query", "document", "score"} & set(expect)
    if wanted <= set(roles):
        pos = {r: roles.index(r) for r in wanted}
        log.info("%s:%d: header %s: columns read by name", path, lineno, found)
        return True, (pos["query"], pos["document"], pos.get("score"))
    if all(r is None or r == e for r, e in zip(roles, expect)):
        return True, None  # known names where the format reads them, the others unknown
    raise DataFormatError(
        path,
        lineno,
        None,
        f"header {found}: the columns are in another order than "
        f"{' '.join(expect)} and not every name is known; name them query-id, "
        "corpus-id, score (any order), or write them in the order " + ", ".join(expect),
    )


def iter_qrels(path: str | Path, pairs: bool = False) -> Iterator[tuple[int, str, str, int]]:
    """Yield ``(line, query_id, doc_id, score)`` from a qrels file.

    Formats: BEIR tsv (``query-id corpus-id score``, header optional), TREC 4 columns
    (``qid 0 docid rel``), or JSONL objects with ``query-id``, ``corpus-id``, ``score``
    (LIMIT); with ``pairs`` also two columns ``qid docid`` (grade 1: ``capgap diagnose``
    accepts what users have). Files are read by ``iter_lines`` (UTF-8, a leading BOM skipped).
    Tab-separated columns are split on TAB only and ids are kept exactly (spaces included);
    whitespace-separated (TREC) ids cannot contain whitespace.

    Header: the first non-blank line is a header when its last column is not a number
    (``QueryID DocID Relevance``, ``topic docno rel``, ``q d score``, ``query-id corpus-id
    score``) and one of its names is a known column name (``_QRELS_NAMES``, matched case- and
    punctuation-blind); a two-column line when both names are known (``qid docid``). When every
    name is known and they put the columns in another order (``corpus-id query-id score``), each
    data line is read by name and must have the header's column count; otherwise by position.

    Qrels have no comment lines: a line whose first word is ``#`` (``# a comment``) is an error
    naming it, never a judgement of query ``'#'``; an id that merely starts with ``#`` (``#12``)
    is an id.

    Raises ``DataFormatError`` naming the line and field: bad UTF-8, wrong column count, an
    empty id or one with a control character (``check_id``), a first word ``#``, a score that is
    not a finite integer grade (on line 1 too when none of its names is known); and, on the header's line,
    names that put known columns out of the format's order beside unknown ones, or two names for
    one column (the order found is named).
    """
    path = Path(path)
    if path.suffix == ".jsonl":
        for lineno, obj in _iter_jsonl(path):
            qid = check_id(path, lineno, "query-id", _str_field(path, lineno, obj, "query-id"))
            did = check_id(path, lineno, "corpus-id", _str_field(path, lineno, obj, "corpus-id"))
            if "score" not in obj:
                raise DataFormatError(path, lineno, "score", "missing")
            yield lineno, qid, did, _parse_score(path, lineno, obj["score"])
        return
    # The first non-blank line decides the delimiter, tab (BEIR) or whitespace (TREC), and may be
    # a header (_qrels_header)
    delim, first, layout, width = None, True, None, 0
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        if re.match(r"\s*#(\s|$)", line):  # '# a comment' would read as a judgement of query '#'
            raise DataFormatError(
                path,
                lineno,
                None,
                f"{line.strip()[:40]!r} is a comment: qrels have no comment "
                "lines (it would be a judgement of query '#'); remove the line",
            )
        if first:
            delim = "\t" if "\t" in line else None
        cols = line.split(delim)
        if first:
            first = False
            is_header, layout = _qrels_header(path, lineno, cols)
            if is_header:
                width = len(cols)
                continue
        if delim == "\t":
            cols = split_tsv(path, lineno, line)  # an empty column (a trailing TAB) is named as such
        if layout is not None and (layout[2] is not None or pairs):
            if len(cols) != width:
                raise DataFormatError(
                    path, lineno, None, f"expected {width} columns, as the header names, got {len(cols)}"
                )
            qi, di, si = layout
            qid, did, score = cols[qi], cols[di], cols[si] if si is not None else "1"
        elif len(cols) == 3:
            qid, did, score = cols
        elif len(cols) == 4:
            qid, _, did, score = cols
        elif len(cols) == 2 and pairs:
            (qid, did), score = cols, "1"
        else:
            raise DataFormatError(path, lineno, None, f"expected 3 (BEIR) or 4 (TREC) columns, got {len(cols)}")
        if not qid:
            raise DataFormatError(path, lineno, "query-id", "empty")
        if not did:
            raise DataFormatError(path, lineno, "corpus-id", "empty")
        check_id(path, lineno, "query-id", qid)
        check_id(path, lineno, "corpus-id", did)
        yield lineno, qid, did, _parse_score(path, lineno, score.strip())


def _is_number(raw: str) -> bool:
    try:
        float(raw)
    except ValueError:
        return False
    return True


def load_qrels(path: str | Path, corpus: Corpus | None = None, queries: Queries | None = None) -> Qrels:
    """Read a qrels file (see ``iter_qrels``) into ``Qrels``.

    With ``corpus``/``queries`` given, every judgement must name a known document and query,
    else ``DataFormatError`` (field ``corpus-id`` / ``query-id``). A repeated
    (query, document) pair with a different score is an error.
    """
    path = Path(path)
    doc_ids = set(corpus.ids) if corpus is not None else None
    qids = set(queries.ids) if queries is not None else None
    out: dict[str, dict[str, int]] = {}
    lines: dict[str, dict[str, int]] = {}
    for lineno, qid, did, score in iter_qrels(path):
        if qids is not None and qid not in qids:
            raise DataFormatError(path, lineno, "query-id", f"unknown query id {qid!r}")
        if doc_ids is not None and did not in doc_ids:
            raise DataFormatError(path, lineno, "corpus-id", f"unknown document id {did!r}")
        prev = out.setdefault(qid, {}).get(did)
        if prev is not None and prev != score:
            raise DataFormatError(
                path, lineno, "score", f"({qid!r}, {did!r}) judged twice: {prev} (line {lines[qid][did]}) and {score}"
            )
        out[qid][did] = score
        lines.setdefault(qid, {}).setdefault(did, lineno)
    return Qrels(out, str(path), lines)


def query_records(rs: RetrievalSet) -> list[list]:
    """What a fine-tuning job learns from and evaluates its curve on, for checkpoint digests:
    one ``[split, query id, text, sorted (gold id, grade) pairs, excluded ids]`` per query, in
    split order (train, then held-out). A checkpoint or work folder made from other data is
    never resumed (a held-out edit changes the training curve)."""
    text = dict(zip(rs.queries.ids, rs.queries.texts))
    return [
        [split, q, text[q], sorted(rs.qrels.gold(q).items()), list(rs.excluded.get(q, ()))]
        for split in SPLITS
        for q in rs.split.ids(split)
    ]


def excluded_positions(rs: RetrievalSet, query_ids, doc_ids) -> list[list[int]]:
    """Each query's excluded documents (BRIGHT ``excluded_ids``, BEIR self-retrieval) as row
    indices into ``doc_ids`` (the index order): one ``list[int]`` per id of ``query_ids``, empty
    when ``rs`` has no exclusions. Raises ``KeyError`` for an excluded id not in ``doc_ids``."""
    if not rs.excluded:
        return [[] for _ in query_ids]
    pos = {d: i for i, d in enumerate(doc_ids)}
    return [[pos[d] for d in rs.excluded.get(q, ())] for q in query_ids]


def self_retrieval_exclusions(corpus: Corpus, queries: Queries) -> dict[str, tuple[str, ...]]:
    """BEIR's ``ignore_identical_ids`` convention (ArguAna, Quora): a document whose id equals
    the query id is removed from that query's ranking (Thakur et al. 2021, beir
    ``EvaluateRetrieval``). Returns query id -> (that id,) for every such query."""
    dids = set(corpus.ids)
    return {q: (q,) for q in queries.ids if q in dids}


def corpus_hash(corpus: Corpus) -> str:
    """sha256 over (id, title, text) of every document, in order: the index's corpus fingerprint."""
    h = hashlib.sha256()
    for d, t, x in zip(corpus.ids, corpus.titles, corpus.texts):
        h.update(json.dumps([d, t, x], ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()


def unfindable_counts(rs: "RetrievalSet") -> dict[str, dict[str, int]]:
    """Per split (``train``, ``heldout``, ``all``): gold pairs no method can find, by reason
    (``UNFINDABLE_REASONS``), and ``gold_pairs`` (all gold pairs of the split's queries, findable
    or not): what status.json (``describe``) and the report's dataset section show."""
    members = {"train": rs.split.train, "heldout": rs.split.heldout, "all": rs.queries.ids}
    out = {}
    for split, qids in members.items():
        c = {r: 0 for r in UNFINDABLE_REASONS}
        n = 0
        for q in qids:
            items = rs.unfindable.get(q, ())
            for _, _, reason in items:
                c[reason] += 1
            n += len(rs.qrels.gold(q)) + len(items)
        out[split] = {"gold_pairs": n, **c}
    return out
