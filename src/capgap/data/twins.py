"""Near-miss twins of a retrieval set, as data: a twin's id (``twin_id``), the twins the edit
rules (``capgap.data.edits``) add to a corpus (``add_twins``), and every (query, gold
document, twin) triple of a set in index row terms (``TwinPairs``).

Twins of a dataset live in ``RetrievalSet.twins`` (document id -> ``((twin id, type), ...)``),
in the data folder's ``twins.tsv``, and are non-gold for every query whose gold set holds
their statement. ``add_twins`` applies the rules to a user's corpus (the ``near_miss`` key of a
dataset); ``capgap.generate.generate_near_miss`` builds a whole seeded data set with them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from ..config import item_defaults
from ..retrieval import text_key
from .corpus import Corpus
from .edits import EDITS, TYPES, why_not

_DEFAULTS = item_defaults("datasets", "near_miss")
_TWIN_SEP = "~"


def twin_id(doc_id: str, kind: str) -> str:
    """The id of document ``doc_id``'s twin of type ``kind``: ``<doc_id>~<kind>``."""
    return f"{doc_id}{_TWIN_SEP}{kind}"


def add_twins(rs, types: Sequence[str] = tuple(_DEFAULTS["types"])):
    """Add near-miss twins of every gold document of ``rs`` (a ``capgap.data.RetrievalSet``)
    to its corpus, by the rules of the module docstring applied to the document's text (its
    title is kept).

    A twin gets the id ``twin_id(doc, type)``, the document's title and the edited text, and
    is gold for no query. An edit that does not apply is skipped and counted by reason, and a
    twin whose passage (title and text, NFC, whitespace collapsed: what an encoder sees) equals
    an existing document's is skipped too ("same text as a document": it would be that
    document's duplicate, tied with it by every method).
    Returns ``(rs, info)``: the set with the twins appended to the corpus and recorded in
    ``rs.twins``, and ``info = {"types": [...], "added": {type: n}, "skipped": {type: {reason:
    n}}}``. Raises ``ValueError`` for an unknown type or when a twin id is already a document id.
    """
    for t in types:
        if t not in TYPES:
            raise ValueError(f"near_miss.types: unknown type {t!r}; expected some of {TYPES}")
    types = [t for t in TYPES if t in types]  # a set: the order of the config list changes nothing
    gold_docs = sorted({d for q in rs.queries.ids for d in rs.qrels.gold(q)})
    pos = {d: i for i, d in enumerate(rs.corpus.ids)}
    seen = {text_key(p) for p in rs.corpus.passages()}
    ids, titles, bodies = list(rs.corpus.ids), list(rs.corpus.titles), list(rs.corpus.texts)
    twins = {d: list(v) for d, v in getattr(rs, "twins", {}).items()}
    added = {t: 0 for t in types}
    skipped: dict[str, dict[str, int]] = {t: {} for t in types}
    for d in gold_docs:
        text, title = rs.corpus.texts[pos[d]], rs.corpus.titles[pos[d]]
        for t in types:
            new = EDITS[t](text)
            key = None if new is None else text_key(f"{title} {new}")
            reason = why_not(text, t) if new is None else ("same text as a document" if key in seen else None)
            if reason:
                skipped[t][reason] = skipped[t].get(reason, 0) + 1
                continue
            tid = twin_id(d, t)
            if tid in pos:
                raise ValueError(
                    f"{rs.name}: near-miss twin id {tid!r} is already a document id; rename that document "
                    f"or leave {t!r} out of near_miss.types"
                )
            pos[tid] = len(ids)
            ids.append(tid)
            titles.append(title)
            bodies.append(new)
            seen.add(key)
            twins.setdefault(d, []).append((tid, t))
            added[t] += 1
    out = replace(
        rs, corpus=Corpus(tuple(ids), tuple(titles), tuple(bodies)), twins={d: tuple(v) for d, v in twins.items()}
    )
    return out, {"types": list(types), "added": added, "skipped": skipped}


@dataclass(frozen=True)
class TwinPairs:
    """Every (query, gold document, twin) triple of a set, in index row terms.

    ``query``: ``(n,) int64`` positions into the evaluated query ids; ``gold`` / ``twin``:
    ``(n,) int64`` rows into the index's ``doc_ids``; ``kind``: ``(n,) int64`` positions into
    ``TYPES``.
    """

    query: np.ndarray
    gold: np.ndarray
    twin: np.ndarray
    kind: np.ndarray

    @classmethod
    def of(cls, rs, query_ids: Sequence[str], doc_ids: Sequence[str]) -> "TwinPairs":
        """The triples of ``rs.twins`` for ``query_ids`` against ``doc_ids`` (empty arrays when
        the set has no twins; a twin excluded from the query's ranking is left out). Raises
        ``KeyError`` for a document not in ``doc_ids``."""
        pos = {d: i for i, d in enumerate(doc_ids)}
        rows = []
        twins = getattr(rs, "twins", {}) or {}
        for qi, q in enumerate(query_ids):
            excluded = set(rs.excluded.get(q, ()))
            for g in sorted(rs.qrels.gold(q)):
                for t, kind in twins.get(g, ()):
                    if t not in excluded:  # removed from this query's ranking: not a near miss of it
                        rows.append((qi, pos[g], pos[t], TYPES.index(kind)))
        a = np.array(rows, dtype=np.int64).reshape(-1, 4)
        return cls(a[:, 0].copy(), a[:, 1].copy(), a[:, 2].copy(), a[:, 3].copy())

    def __len__(self) -> int:
        return len(self.query)
