"""Retrieval sets in BEIR layout: corpus, queries, qrels, and the train/held-out split.

Public API
----------
- ``Corpus``, ``Queries``, ``Qrels``, ``Split``, ``RetrievalSet``: frozen records, validated
  in one constructor each.
- ``load_corpus(path)``, ``load_queries(path)``, ``load_qrels(path)``: read one BEIR file
  (``corpus.jsonl``, ``queries.jsonl``, ``qrels/*.tsv`` or LIMIT's ``qrels.jsonl``), raising
  ``DataFormatError(path, line, field)`` on bad input.
- ``iter_lines(path)``: the one text-line reader every input reader uses (UTF-8, BOM skipped,
  a bad byte reported with its line and column); ``check_id(path, line, field, value)``: the
  one id check every reader applies; ``split_tsv(path, line, text)``: the TAB split every TSV
  reader applies, naming an empty column (a trailing TAB) as such.
- ``load_beir_dir(folder, split_cfg)``: a whole dataset folder, qrels resolved against the
  corpus and queries, split into train / held-out.
- ``split_queries(query_ids, heldout_fraction, seed)``: the seeded, stable fraction rule.
- ``write_canonical(rs, folder)`` / ``load_canonical(folder)``: the normalised copy the
  pipeline's later stages read (``corpus.jsonl``, ``queries.jsonl``, ``qrels.tsv``,
  ``split.tsv``, ``excluded.tsv``, ``twins.tsv``).
- ``RetrievalSet.twins``: near-miss twins of gold documents (``capgap.nearmiss``).
- ``RetrievalSet.excluded``: per query, documents removed from every method's ranking before
  top-k (BRIGHT's ``excluded_ids``; BEIR's self-retrieval convention, where a document whose id
  equals the query id is ignored). They are neither gold nor non-gold, for the probe too.

Conventions (BEIR, Thakur et al. 2021): a qrels score <= 0 is *not gold*; a query with no gold
document is dropped and counted (``RetrievalSet.dropped_queries``), never silently kept; a
query with empty text is an error. Gold that no method can find (a document absent from the
corpus, empty, or excluded for that query) follows one rule for every loader, the benchmarks'
own (``gold_rule``): it stays gold, never found, counted in status.json (``unfindable_gold``).
Grades are kept as written (NFCorpus: 2 and 1). Under the files split rule a qrels file in
neither ``train_qrels`` nor ``heldout_qrels`` (BEIR's ``dev``) is not used: its queries are in
neither split, dropped and counted apart (``RetrievalSet.dropped_unused``). One fact stated twice
differently is an error naming both places: a pair judged with two different grades, in one file
or in any two qrels files of the dataset (used by the split or not); a query with gold in both a
train and a held-out qrels file; two qrels files for one split name.

- Encoding: input files are UTF-8; a byte-order mark at the start of a file is skipped; any
  other undecodable byte is a ``DataFormatError`` naming line and column.
- Text: every document title and text and every query text is NFC-normalised
  (``unicodedata.normalize("NFC", ...)``) once, at load. The canonical copy, the corpus
  fingerprint (``corpus_hash``), BM25 and the encoders therefore all see the same characters:
  "café" typed with a combining accent (NFD) and with a precomposed "é" (NFC) are one word.
- Ids are never normalised or rewritten: an id matches only the same code points, and every
  reader keeps ids exactly as the file format delimits them (JSON strings as is; TSV columns
  split on TAB only, not stripped). An id containing a control character (Unicode category Cc,
  e.g. TAB, LF, CR, NUL, DEL, U+0085) or a line/paragraph separator (U+2028, U+2029) is a
  ``DataFormatError``: ids are written to TSV and TREC files, where such characters would
  split a line or column and silently change the data. Spaces are allowed; TREC run files
  percent-encode them (``capgap.trec``).
- Numbers: a qrels score must be a finite integer grade; JSON's non-standard ``NaN`` /
  ``Infinity`` constants are rejected.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import logging
import math
import re
import unicodedata
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator, Mapping

from .config import item_defaults
from .errors import DataFormatError
from .io import atomic_open, write_jsonl

log = logging.getLogger(__name__)

SPLITS = ("train", "heldout")
_SPLIT = item_defaults("datasets", "split")  # the schema holds every default (capgap.config)


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
    ``((twin id, type), ...)``, its near-miss twins (``capgap.nearmiss``), never gold for a
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


# --------------------------------------------------------------------------- gold no method can find
UNFINDABLE_REASONS = ("absent", "empty", "excluded")


def gold_rule(corpus: Corpus, judgements: Mapping[str, Mapping[str, int]],
              excluded: Mapping[str, tuple[str, ...]] | None = None) -> tuple[dict, dict, int]:
    """The one rule for gold that no method can find, applied by every loader (``assemble``:
    BEIR, BRIGHT, LIMIT, local folders, the generator) as the benchmarks' own evaluators apply
    it: BRIGHT's run.py (``ground_truth[q][gid] = 1`` for every ``gold_ids`` entry, excluded ids
    removed from the scores, pytrec_eval), BEIR's ``EvaluateRetrieval`` and MTEB (pytrec_eval on
    the qrels as written): such a gold document **stays in the query's gold set and is never
    retrieved**, so recall@k and nDCG@k keep the full gold set as denominator / ideal DCG.

    A gold judgement (grade > 0) is unfindable when its document is ``empty`` (in
    ``corpus.empty_ids``: empty title and text, left out of the corpus), ``absent`` (not in the
    corpus at all) or ``excluded`` (in ``excluded[q]``: removed from q's ranking). A non-gold
    judgement (grade <= 0) of a document not in the corpus changes no metric and is dropped
    (counted).

    Returns ``(findable, unfindable, dropped_non_gold)``: the judgements whose document can be
    ranked (query -> {doc: grade}), query -> ``((doc, grade, reason), ...)`` in judgement order,
    and the number of non-gold judgements of documents not in the corpus."""
    ids, empty = set(corpus.ids), set(corpus.empty_ids)
    excluded = excluded or {}
    findable: dict[str, dict[str, int]] = {}
    unfindable: dict[str, list] = {}
    dropped = 0
    for q, docs in judgements.items():
        ex = set(excluded.get(q, ()))
        into = findable.setdefault(q, {})
        for d, g in docs.items():
            if d not in ids:
                if g > 0:
                    unfindable.setdefault(q, []).append((d, g, "empty" if d in empty else "absent"))
                else:
                    dropped += 1
            elif g > 0 and d in ex:
                unfindable.setdefault(q, []).append((d, g, "excluded"))
            else:
                into[d] = g
    return findable, {q: tuple(v) for q, v in unfindable.items()}, dropped


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


# --------------------------------------------------------------------------- readers
def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    r"""Yield ``(line number, line)`` of a UTF-8 text file, 1-based, every line (blank ones too).

    Lines end at ``\n`` only; the ``\n`` and one ``\r`` before it (CRLF files) are removed, and
    nothing else: a ``\r``, U+0085, U+2028 or U+2029 inside a line stays in it (``check_id``
    then rejects it in an id) instead of splitting the line. A UTF-8 byte-order mark at the start
    of the file is skipped. Reads the file as a stream, so large files are fine.

    Raises ``DataFormatError(path, line, None, "not valid UTF-8 (byte 0xe9 at column 5); ...")``
    for a line that is not valid UTF-8 (the column counts bytes from 1), and ``OSError`` if the
    file cannot be read.
    """
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            if raw.endswith(b"\n"):
                raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataFormatError(path, lineno, None, f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1}); "
                                                          "save the file as UTF-8") from None


# names of the control characters users meet (unicodedata.name has none for category Cc)
_CONTROL_NAMES = {"\x00": "NUL", "\t": "TAB", "\n": "LF", "\x0b": "VT", "\x0c": "FF", "\r": "CR", "\x1b": "ESC",
                  "\x7f": "DEL", "\x85": "NEL"}


# Unicode categories Cc (U+0000-001F, U+007F-009F), Zl (U+2028) and Zp (U+2029), as one regex:
# a scan per id at C speed instead of a category lookup per character
_BAD_ID_CHAR = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def check_id(path: str | Path, lineno: int | None, field: str | None, value: str) -> str:
    r"""Return ``value`` unchanged if it is usable as an id; otherwise raise ``DataFormatError``.

    An id may not contain a control character (Unicode category Cc: TAB, LF, CR, NUL, DEL,
    U+0085, ...) or a line/paragraph separator (U+2028, U+2029, categories Zl/Zp): ids are
    written to TSV and TREC files, where these would split a column or a line. The error names
    ``path``, ``lineno``, ``field`` and the character, e.g. ``id 'piano\td9' contains a control
    character U+0009 (TAB)``. Ids are never rewritten (module docstring, "Conventions").
    """
    m = _BAD_ID_CHAR.search(value)
    if m:
        ch = m.group()
        name = _CONTROL_NAMES.get(ch) or unicodedata.name(ch, "")
        named = f" ({name})" if name else ""
        raise DataFormatError(path, lineno, field, f"id {value!r} contains a control character U+{ord(ch):04X}{named}; "
                                                   "ids are written to TSV and TREC files")
    return value


def split_tsv(path: str | Path, lineno: int, line: str) -> list[str]:
    r"""The TAB-separated columns of one line (split on TAB only, nothing stripped), refusing an
    empty column: a line ending in a TAB (``q1\td1\t1\t``) would otherwise give an empty last
    column that a reader misreads as a bad score or a wrong column count. A last column of only
    spaces counts as empty too (the line ends in a TAB and spaces); elsewhere an id may be spaces.

    Raises ``DataFormatError(path, lineno, "column N", ...)`` naming the first empty column,
    e.g. ``column 4 (of 4) is empty: the line ends in a TAB; remove the trailing TAB``."""
    cols = line.split("\t")
    for i, c in enumerate(cols, start=1):
        if c == "" or (i == len(cols) and not c.strip()):
            if i == len(cols) and i > 1:
                why = "the line ends in a TAB; remove the trailing TAB" if c == "" else "the line ends in a TAB and spaces"
            elif i == 1:
                why = "the line starts with a TAB"
            else:
                why = f"two TABs in a row after column {i - 1}"
            raise DataFormatError(path, lineno, f"column {i}", f"column {i} (of {len(cols)}) is empty: {why}")
    return cols


class _NonFiniteJSON(ValueError):
    """Raised by ``json.loads`` (``parse_constant``) on ``NaN``, ``Infinity`` or ``-Infinity``."""


def _reject_constant(name: str):
    raise _NonFiniteJSON(name)


def _iter_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` per non-blank line of a JSON Lines file (``iter_lines``).

    Raises ``DataFormatError`` naming the line for bad UTF-8, malformed JSON, the non-standard
    constants ``NaN`` / ``Infinity`` / ``-Infinity``, or a value that is not a JSON object."""
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            # parse_float keeps a number's literal text, so a numeric id 1.50 stays "1.50" (a score
            # is parsed from that text later)
            obj = json.loads(line, parse_constant=_reject_constant, parse_float=str)
        except _NonFiniteJSON as e:
            raise DataFormatError(path, lineno, None, f"{e} is not valid JSON (non-finite numbers are not allowed)") from None
        except json.JSONDecodeError as e:
            raise DataFormatError(path, lineno, None, f"malformed JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise DataFormatError(path, lineno, None, "expected a JSON object")
        yield lineno, obj


def _str_field(path: Path, lineno: int, obj: dict, name: str, required: bool = True) -> str:
    if name not in obj or obj[name] is None:
        if required:
            raise DataFormatError(path, lineno, name, "missing")
        return ""
    val = obj[name]
    if isinstance(val, (int, float)) and not isinstance(val, bool):
        val = str(val)  # numeric ids occur in the wild (ints; floats keep their literal text: _iter_jsonl)
    if not isinstance(val, str):
        raise DataFormatError(path, lineno, name, f"expected a string, got {type(val).__name__}")
    return val


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def load_corpus(path: str | Path) -> Corpus:
    """Read a BEIR ``corpus.jsonl`` (``_id``, ``title`` optional, ``text``).

    Returns a ``Corpus`` in file order, title and text NFC-normalised, ids as written (module
    docstring, "Conventions"). A document whose title and text are both empty is left out
    (``Corpus.empty_ids``, logged): no method can find it, and a gold judgement of it stays gold
    (``gold_rule``). Raises ``DataFormatError`` on bad UTF-8, malformed JSON, a missing ``_id``
    or ``text``, an id with a control character (``check_id``), a duplicate ``_id``, or no
    document with text.
    """
    path = Path(path)
    ids, titles, texts, seen, empty = [], [], [], {}, []
    for lineno, obj in _iter_jsonl(path):
        did = check_id(path, lineno, "_id", _str_field(path, lineno, obj, "_id"))
        if not did:
            raise DataFormatError(path, lineno, "_id", "empty id")
        if did in seen:
            raise DataFormatError(path, lineno, "_id", f"duplicate id {did!r} (first on line {seen[did]})")
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
        log.warning("%s: %d documents with empty title and text left out (no method can find them), e.g. %s", path,
                    len(empty), empty[:3])
    return Corpus(tuple(ids), tuple(titles), tuple(texts), tuple(empty))


def load_queries(path: str | Path) -> Queries:
    """Read a BEIR ``queries.jsonl`` (``_id``, ``text``); texts NFC-normalised, ids as written.

    Raises ``DataFormatError`` on bad UTF-8, malformed JSON, a missing field, an id with a
    control character (``check_id``), a duplicate id, or empty text.
    """
    path = Path(path)
    ids, texts, seen = [], [], {}
    for lineno, obj in _iter_jsonl(path):
        qid = check_id(path, lineno, "_id", _str_field(path, lineno, obj, "_id"))
        if not qid:
            raise DataFormatError(path, lineno, "_id", "empty id")
        if qid in seen:
            raise DataFormatError(path, lineno, "_id", f"duplicate id {qid!r} (first on line {seen[qid]})")
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


def iter_qrels(path: str | Path, pairs: bool = False) -> Iterator[tuple[int, str, str, int]]:
    """Yield ``(line, query_id, doc_id, score)`` from a qrels file.

    Formats: BEIR tsv (``query-id corpus-id score``, header optional), TREC 4 columns
    (``qid 0 docid rel``), or JSONL objects with ``query-id``, ``corpus-id``, ``score``
    (LIMIT); with ``pairs`` also two columns ``qid docid`` (grade 1: ``capgap diagnose``
    accepts what users have). Files are read by ``iter_lines`` (UTF-8, a leading BOM skipped).
    Tab-separated columns are split on TAB only and ids are kept exactly (spaces included);
    whitespace-separated (TREC) ids cannot contain whitespace. Raises ``DataFormatError``
    naming the line and field: bad UTF-8, wrong column count, an empty id or one with a
    control character (``check_id``), a score that is not a finite integer grade.
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
    # The first non-blank line decides the delimiter: tab (BEIR) or whitespace (TREC); it is a
    # header when its first column is a header name and its last is not a number.
    delim, first = None, True
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        if first:
            delim = "\t" if "\t" in line else None
        cols = line.split(delim)
        if first:
            first = False
            if cols[0].strip().lower() in ("query-id", "query_id", "qid", "query") and not _is_number(cols[-1]):
                continue  # header
        if delim == "\t":
            cols = split_tsv(path, lineno, line)  # an empty column (a trailing TAB) is named as such
        if len(cols) == 3:
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
            raise DataFormatError(path, lineno, "score", f"({qid!r}, {did!r}) judged twice: {prev} (line {lines[qid][did]}) and {score}")
        out[qid][did] = score
        lines.setdefault(qid, {}).setdefault(did, lineno)
    return Qrels(out, str(path), lines)


# --------------------------------------------------------------------------- split
def _stable_key(seed: int, qid: str) -> str:
    return hashlib.sha256(f"{seed}\x00{qid}".encode()).hexdigest()


def split_queries(query_ids, heldout_fraction: float = _SPLIT["heldout_fraction"], seed: int = _SPLIT["seed"]) -> Split:
    """Seeded, stable train/held-out split.

    Queries are ordered by ``sha256(seed, query_id)`` and the first
    ``round(heldout_fraction * n)`` are held out. The assignment depends only on the ids and
    the seed, not on file order. Raises ``ValueError`` for a fraction outside [0, 1].
    """
    if not 0.0 <= heldout_fraction <= 1.0:
        raise ValueError(f"heldout_fraction must be in [0, 1], got {heldout_fraction}")
    ids = sorted(set(query_ids), key=lambda q: _stable_key(seed, q))
    n_held = int(round(heldout_fraction * len(ids)))
    held = set(ids[:n_held])
    order = list(query_ids)
    return Split(
        train=tuple(q for q in order if q not in held),
        heldout=tuple(q for q in order if q in held),
        rule=f"seeded fraction: heldout_fraction={heldout_fraction}, seed={seed}",
    )


# --------------------------------------------------------------------------- datasets
def _qrels_files(folder: Path) -> dict[str, Path]:
    """Qrels files of a dataset folder by split name (``train``, ``dev``, ``test``, or ``all``
    for a top-level ``qrels.jsonl`` / ``qrels.tsv``). Two files for one name (``qrels/test.tsv``
    and ``qrels/test.jsonl``; ``qrels.jsonl`` and ``qrels.tsv``; ``qrels/all.tsv`` and
    ``qrels.tsv``) are a ``DataFormatError`` naming both, never one silently dropped."""
    files: dict[str, Path] = {}

    def add(stem: str, p: Path) -> None:
        if stem in files:  # qrels/test.tsv and qrels/test.jsonl: two files claim one split
            raise DataFormatError(p, None, None, f"two qrels files for split {stem!r}: {files[stem]} and {p}; "
                                                 "keep one (which would win is not a choice capgap makes)")
        files[stem] = p

    sub = folder / "qrels"
    if sub.is_dir():
        for p in sorted(sub.iterdir()):
            if p.suffix in (".tsv", ".jsonl", ".txt"):
                add(p.stem, p)
    for name in ("qrels.jsonl", "qrels.tsv"):
        if (folder / name).is_file():
            add("all", folder / name)
    return files


def _where(qrels: Qrels, stem: str, q: str, d: str) -> str:
    """``path line N`` of judgement (q, d) in ``qrels`` (the file stem when it has no path)."""
    line = qrels.lines.get(q, {}).get(d)
    return f"{qrels.path or stem}" + (f" line {line}" if line is not None else "")


def _merge_qrels(name: str, qrels_by_file: Mapping[str, Qrels], files: list[str]) -> dict[str, dict[str, int]]:
    """The judgements of ``files`` (keys of ``qrels_by_file``) in one mapping. A (query,
    document) pair judged in two of them must have one grade: a different grade is a
    ``DataFormatError`` naming both files and lines (never a silent last-file-wins)."""
    merged: dict[str, dict[str, int]] = {}
    origin: dict[tuple[str, str], str] = {}  # (query, doc) -> the file it was first read from
    for f in files:
        qr = qrels_by_file[f]
        for q, docs in qr.judgements.items():
            into = merged.setdefault(q, {})
            for d, score in docs.items():
                prev = into.get(d)
                if prev is not None and prev != score:
                    first = origin[(q, d)]
                    raise DataFormatError(qr.path or f, qr.lines.get(q, {}).get(d), "score",
                                          f"{name}: ({q!r}, {d!r}) judged {prev} in {_where(qrels_by_file[first], first, q, d)} "
                                          f"and {score} in {_where(qr, f, q, d)}; a pair has one grade: fix one of the files")
                if prev is None:
                    into[d] = score
                    origin[(q, d)] = f
    return merged


def _first_line(qrels: Qrels, q: str) -> int | None:
    """The first line of ``qrels``'s file that judges query ``q`` (None when not read from a file)."""
    lines = [n for n in qrels.lines.get(q, {}).values() if n is not None]
    return min(lines) if lines else None


def _two_splits(name: str, both: list[str], qrels_by_file: Mapping[str, Qrels], train_files: list[str],
                held_files: list[str]) -> DataFormatError:
    """The error for queries with gold in both a train and a held-out qrels file: names the first
    such query, the two files and the first line of each that judges it, and the count."""
    q = both[0]

    def where(files: list[str]) -> tuple[str, int | None]:
        for f in files:
            qr = qrels_by_file[f]
            if any(s > 0 for s in qr.judgements.get(q, {}).values()):
                return qr.path or f, _first_line(qr, q)
        return "?", None

    (tp, tl), (hp, hl) = where(train_files), where(held_files)
    at = lambda p, n: p + (f" line {n}" if n is not None else "")  # noqa: E731
    more = f" ({len(both)} queries in all, e.g. {both[:3]})" if len(both) > 1 else ""
    return DataFormatError(hp, hl, "query-id", f"{name}: query {q!r} is claimed by two splits: train in {at(tp, tl)} and "
                                               f"held-out in {at(hp, hl)}{more}; a query belongs to one split: remove its "
                                               "judgements from one of the files")


def assemble(
    name: str,
    corpus: Corpus,
    queries: Queries,
    qrels_by_file: dict[str, Qrels],
    split_cfg: Mapping | None = None,
    source: dict | None = None,
    excluded: Mapping[str, tuple[str, ...]] | None = None,
) -> RetrievalSet:
    """Merge per-file qrels, drop queries without gold (counted), and split train/held-out.

    ``split_cfg`` keys: ``train_qrels`` / ``heldout_qrels`` (lists of qrels file stems, default
    ``["train"]`` / ``["test"]``) used when *both* exist; otherwise ``heldout_fraction``
    (default 0.5) and ``seed`` (default 0) over all judged queries.

    With the files rule, a qrels file named in neither list (BEIR's ``dev``) is not used: a
    query whose gold is only there is in neither split; it is dropped and counted per file in
    ``RetrievalSet.dropped_unused`` (status.json ``dropped_queries_unused_qrels``), apart from
    ``dropped_queries`` (no gold in any file), and the split rule names the unused files.
    One fact stated twice differently is an error naming both places (``DataFormatError``):
    a (query, document) pair judged with different grades in any two qrels files of the
    dataset, used by the split or not (``_merge_qrels``), and, under the files rule, a query
    with gold in both a train and a held-out file ("two splits claiming one query", which
    would put it in both sets). A query judged in a used file and in an unused one (BEIR's
    ``dev``) is not a conflict: the unused file's judgements take no part (logged).

    Gold that no method can find (``gold_rule``: absent, empty or ``excluded``) stays in its
    query's gold set (``RetrievalSet.unfindable``); a query none of whose gold can be found is
    dropped and counted (``dropped_unfindable``), as no probe or encoder can be asked about it.
    """
    split_cfg = {**_SPLIT, **dict(split_cfg or {})}
    train_files = [f for f in split_cfg["train_qrels"] if f in qrels_by_file]
    held_files = [f for f in split_cfg["heldout_qrels"] if f in qrels_by_file]
    use_files = bool(train_files and held_files)
    chosen = list(dict.fromkeys(train_files + held_files)) if use_files else list(qrels_by_file)
    unused = [f for f in qrels_by_file if f not in chosen]
    findable, unfindable, _ = gold_rule(corpus, _merge_qrels(name, qrels_by_file, chosen), excluded)
    qrels = Qrels(findable)
    if unused:  # one grade per pair across *every* qrels file of the dataset, used by the split or not
        _merge_qrels(name, qrels_by_file, chosen + unused)
    keep = [q for q in queries.ids if qrels.gold(q)]

    kept_set, known = set(keep), set(queries.ids)
    dropped_unused: dict[str, int] = {}
    only_unused: set[str] = set()
    for f in unused:
        judged = {q for q, d in qrels_by_file[f].judgements.items() if q in known and any(s > 0 for s in d.values())}
        if judged - kept_set:
            dropped_unused[f] = len(judged - kept_set)
            only_unused |= judged - kept_set
        if judged & kept_set:
            log.info("%s: %d kept queries also have judgements in unused qrels file %r; those are ignored", name,
                     len(judged & kept_set), f)
    only_unfindable = [q for q in queries.ids if not qrels.gold(q) and unfindable.get(q) and q not in only_unused]
    if only_unfindable:
        log.warning("%s: dropped %d queries none of whose gold documents can be found (absent, empty or excluded), e.g. %s",
                    name, len(only_unfindable), only_unfindable[:3])
    dropped = len(queries) - len(keep) - len(only_unused) - len(only_unfindable)
    if dropped:
        log.warning("%s: dropped %d of %d queries without any gold document", name, dropped, len(queries))
    if only_unused:
        log.warning("%s: dropped %d of %d queries judged only in qrels files the split does not use (%s): neither train nor "
                    "held-out", name, len(only_unused), len(queries), ", ".join(f"{f}: {n}" for f, n in dropped_unused.items()))
    kept = queries.subset(keep)
    if not len(kept):
        raise ValueError(f"{name}: no query has a gold document")
    if use_files:
        train_q = {q for f in train_files for q, d in qrels_by_file[f].judgements.items() if any(s > 0 for s in d.values())}
        held_q = {q for f in held_files for q, d in qrels_by_file[f].judgements.items() if any(s > 0 for s in d.values())}
        both = train_q & held_q
        if both:
            raise _two_splits(name, sorted(both, key=queries.ids.index), qrels_by_file, train_files, held_files)
        rule = f"dataset qrels files: train={train_files}, heldout={held_files}"
        if unused:
            rule += f", unused={unused} ({len(only_unused)} queries judged only there dropped)"
        split = Split(
            train=tuple(q for q in kept.ids if q in train_q),
            heldout=tuple(q for q in kept.ids if q in held_q),
            rule=rule,
        )
    else:
        split = split_queries(kept.ids, float(split_cfg["heldout_fraction"]), int(split_cfg["seed"]))
    # keep only judgements of kept queries
    qrels = Qrels({q: dict(qrels.judgements[q]) for q in kept.ids})
    unf = {q: unfindable[q] for q in kept.ids if q in unfindable}
    n_unf = sum(len(v) for v in unf.values())
    if n_unf:
        log.warning("%s: %d gold pairs name a document no method can find (%s); they stay gold, never found (gold_rule)",
                    name, n_unf, ", ".join(f"{r}: {sum(x[2] == r for v in unf.values() for x in v)}" for r in UNFINDABLE_REASONS))
    kept_ids = set(kept.ids)
    excl = {q: tuple(v) for q, v in (excluded or {}).items() if q in kept_ids and v}
    return RetrievalSet(name, corpus, kept, qrels, split, dropped, dict(source or {}), excluded=excl, dropped_unused=dropped_unused,
                        unfindable=unf, dropped_unfindable=len(only_unfindable))


def load_beir_dir(folder: str | Path, name: str | None = None, split_cfg: Mapping | None = None) -> RetrievalSet:
    """Load a dataset folder in BEIR layout (or LIMIT's, with ``qrels.jsonl``).

    Expects ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/{train,dev,test}.tsv`` or
    ``qrels.jsonl``; an optional ``excluded.tsv`` (query-id, corpus-id) lists documents removed
    from a query's ranking. A qrels line naming a document not in the corpus (or one left out
    as empty) is gold no method can find (``gold_rule``: kept, never found, logged with its file
    and line, counted). Raises ``DataFormatError`` for a missing file or any bad record (a
    qrels line naming an unknown query included).
    """
    folder = Path(folder)
    for f in ("corpus.jsonl", "queries.jsonl"):
        if not (folder / f).is_file():
            raise DataFormatError(folder / f, None, None, "file not found")
    files = _qrels_files(folder)
    if not files:
        raise DataFormatError(folder / "qrels", None, None, "no qrels file (qrels/*.tsv or qrels.jsonl)")
    corpus = load_corpus(folder / "corpus.jsonl")
    queries = load_queries(folder / "queries.jsonl")
    qrels = {k: load_qrels(p, None, queries) for k, p in files.items()}
    known = set(corpus.ids)
    for qr in qrels.values():  # gold of a document not in the corpus: kept, never found (gold_rule), each line named
        absent = [(q, d) for q, docs in qr.judgements.items() for d, g in docs.items() if g > 0 and d not in known]
        for q, d in absent[:5]:
            log.warning("%s line %s: gold document %r of query %r is %s corpus.jsonl: it stays gold and no method can find it",
                        qr.path, qr.lines.get(q, {}).get(d), d, q,
                        "empty in" if d in corpus.empty_ids else "not in")
        if len(absent) > 5:
            log.warning("%s: %d such gold judgements in all", qr.path, len(absent))
    excluded = load_excluded(folder / "excluded.tsv", corpus, queries) if (folder / "excluded.tsv").is_file() else None
    return assemble(name or folder.name, corpus, queries, qrels, split_cfg, excluded=excluded)


# --------------------------------------------------------------------------- canonical copy

def write_canonical(rs: RetrievalSet, folder: str | Path) -> None:
    """Write the normalised dataset the later pipeline stages read (each file atomically)."""
    folder = Path(folder)
    write_jsonl(folder / "corpus.jsonl", ({"_id": d, "title": t, "text": x} for d, t, x in zip(rs.corpus.ids, rs.corpus.titles, rs.corpus.texts)))
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
            raise DataFormatError(path, lineno, "query-id", f"query {q!r} listed twice: {was} (line {first}) and {name}")
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
    (``capgap.nearmiss.TYPES``) or a pair listed twice raise ``DataFormatError`` naming the
    line and field."""
    from .nearmiss import TYPES

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
    optional: folders prepared before they existed have no exclusions and no twins). The set's name is ``name``, else the
    ``dataset`` its ``status.json`` records (the data stage writes it), else the folder's name."""
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
    return RetrievalSet(name or folder.name, corpus, queries, qrels, split, excluded=excluded, twins=twins, unfindable=unf)


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
    from .retrieval import duplicate_summary, text_key

    return {
        "n_docs": len(rs.corpus), "n_queries": len(rs.queries), "n_train": len(rs.split.train),
        "n_heldout": len(rs.split.heldout), "dropped_queries_without_gold": rs.dropped_queries,
        "dropped_queries_unused_qrels": dict(rs.dropped_unused), "split_rule": rs.split.rule, "source": rs.source,
        "text_normalization": "NFC",
        "duplicate_documents": duplicate_summary(rs.corpus.ids, rs.corpus.passages()),
        "duplicate_queries": duplicate_summary(rs.queries.ids, [text_key(t) for t in rs.queries.texts]),
        **({"twins": twin_counts(rs)} if rs.twins else {}),
        "unfindable_gold": unfindable_counts(rs), "empty_documents_left_out": len(rs.corpus.empty_ids),
        "dropped_queries_gold_unfindable": rs.dropped_unfindable,
    }


def twin_counts(rs: RetrievalSet) -> dict[str, int]:
    """Near-miss twins of ``rs`` by type (``capgap.nearmiss.TYPES`` order, types present)."""
    from .nearmiss import TYPES

    kinds = [k for pairs in rs.twins.values() for _, k in pairs]
    return {t: kinds.count(t) for t in TYPES if t in kinds}


def query_records(rs: RetrievalSet) -> list[list]:
    """What a fine-tuning job learns from and evaluates its curve on, for checkpoint digests:
    one ``[split, query id, text, sorted (gold id, grade) pairs, excluded ids]`` per query, in
    split order (train, then held-out). A checkpoint or work folder made from other data is
    never resumed (a held-out edit changes the training curve)."""
    text = dict(zip(rs.queries.ids, rs.queries.texts))
    return [[split, q, text[q], sorted(rs.qrels.gold(q).items()), list(rs.excluded.get(q, ()))]
            for split in SPLITS for q in rs.split.ids(split)]


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
