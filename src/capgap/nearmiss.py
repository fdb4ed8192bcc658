"""Near-miss twins: minimal edits that flip a statement's meaning (negation, role swap,
spatial/order flip), the rules that make them, and how every method is measured on them.

The study this follows (Ralev et al. 2026, "Training for Compositional Sensitivity Reduces
Dense Retrieval Generalization") measured how similar pooled embeddings find a statement and
its near-miss. capgap asks the capacity question instead: does the frozen index still
*separate* the gold document from its twin (the probe's margin), and does a query encoder
find it (pre-trained, fine-tuned, BM25, ColBERT)?

Edit rules (each a pure function of one sentence; ``None`` = the edit does not apply, and the
caller counts it as skipped with the reason ``why_not`` gives, never fakes it):

``negation``
    The sentence is one sentence (no ``.``, ``!``, ``?`` or ``;`` before its last character)
    and holds no negation yet (a token ``not``, ``never``, ``no``, ``nobody``, ``nothing``,
    ``none`` or ending in ``n't``). The subject is the leading run of name tokens
    (``_is_name``: capitalised letters-only words such as "Alice", "O'Brien", "Jean-Luc", not
    "The", "In", "LEFT" or "Alice's"); the token right after it decides: (a) an auxiliary or
    copula (``AUXILIARIES``: is, are, was, were, can, could, will, would, shall, should, may,
    might, must, does, do, did), or has/have/had before a past participle, gets ``not`` after
    it: "Alice is left of Bob." -> "Alice is not left of Bob.", "Alice has seen Bob." -> "Alice
    has not seen Bob."; (b) a lower-case third-person-singular verb (ends in ``s``, not in
    ``ss``, ``us`` or ``is``, not one of ``NOT_VERBS`` such as "always", "perhaps", "as")
    becomes ``does not`` + its base form (``has`` -> ``have``, ``goes`` -> ``go``; ``-ies`` ->
    ``-y`` except ``IE_VERBS``; ``-sses``/``-shes``/``-ches``/``-xes`` drop ``es``; other
    ``-ses``/``-zes``/``-oes`` are ambiguous (uses / focuses, shoes / echoes) and skipped; else
    drop ``s``); when the next token could be a verb too ("Alice sometimes helps Bob.") the
    sentence is skipped. "Alice trusts Bob." -> "Alice does not trust Bob.".
``role_swap``
    The sentence (one sentence) is ``<X> <middle> <Y>`` where X is the leading and Y the trailing
    run of name tokens (``_is_name``), the middle is non-empty and all lower-case, and X != Y; the
    result is ``<Y> <middle> <X>``: "Alice trusts Bob Smith." -> "Bob Smith trusts Alice.". A
    role swap has the same bag of words as its statement, so BM25 must tie them.
``spatial_flip``
    The sentence (one sentence) holds exactly one spatial or order phrase of ``OPPOSITES``
    (whole words, matched case-insensitively, longest phrase first); it is replaced by its
    opposite in lower case, the first letter's case kept: "Alice is left of Bob." -> "Alice is
    right of Bob.".

Twins of a dataset live in ``RetrievalSet.twins`` (document id -> ``((twin id, type), ...)``),
in the data folder's ``twins.tsv``, and are non-gold for every query whose gold set holds
their statement. ``add_twins`` applies the rules to a user's corpus (the ``near_miss`` key of a
dataset); ``capgap.generate.generate_near_miss`` builds a whole seeded data set with them.

Measured per method and twin type (``twin_rows``; the metric names carry the type after a
colon, e.g. ``twin_win:role_swap``): over every (query, gold document, twin of that gold
document) triple of a split, ``twin_win`` = fraction where the gold document scores strictly
above its twin (a tie counts as a loss: the evaluation's pessimistic tie rule ranks the twin
first), ``twin_tie`` = fraction of exact ties, ``twin_gap`` / ``twin_gap_p25`` /
``twin_gap_p75`` = median and quartiles of score(gold) - score(twin) in the method's score
units (for the probe: with its witness scaled to unit norm, the geometric margin), and
``twin_pairs`` = how many triples.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from .config import item_defaults

TYPES = ("negation", "role_swap", "spatial_flip")
AUXILIARIES = ("is", "are", "was", "were", "can", "could", "will", "would", "shall", "should", "may", "might", "must",
               "does", "do", "did")
NEGATORS = ("not", "never", "no", "nobody", "nothing", "none")
# capitalised words that start a sentence without being a name (determiners, prepositions,
# pronouns, time adverbs): a sentence starting with one has no name subject
NOT_NAMES = frozenset("""a an the this that these those my your his her its our their some any every each no in on at
by for from with to of into onto over under after before during since until about as if when while then there here it
he she they we i you yesterday today tomorrow tonight now later soon once meanwhile however therefore also maybe
perhaps sometimes always often usually never""".split())
# lower-case words ending in -s that are not third-person verbs (adverbs, pronouns, ...)
NOT_VERBS = frozenset("""as was is his its this thus yes plus less unless across always sometimes perhaps besides
nevertheless towards afterwards backwards forwards whereas alias ours yours hers theirs whose series news species
various famous serious""".split())
# -ies verbs whose base form keeps the "ie": the "-ies" -> "-y" rule would be wrong
IE_VERBS = frozenset({"unties", "belies", "vies", "dies", "lies", "ties"})
# auxiliaries of the perfect: "has seen" is negated as "has not seen", not "does not have seen"
PERFECT = ("has", "have", "had")
PARTICIPLES = frozenset("""met seen done gone made said told paid sent left lost kept held brought bought taught thought
found heard hit hurt let put read run set shut beaten become begun bitten blown broken chosen come drawn driven eaten
fallen flown forgotten forgiven frozen given grown hidden known ridden risen shaken shown spoken stolen sworn taken
thrown woken worn written""".split())
_PAIRS = (("left of", "right of"), ("above", "below"), ("over", "under"), ("in front of", "behind"),
          ("before", "after"), ("north of", "south of"), ("east of", "west of"), ("inside", "outside"),
          ("earlier than", "later than"))
OPPOSITES = {**{a: b for a, b in _PAIRS}, **{b: a for a, b in _PAIRS}}
_PHRASES = sorted(OPPOSITES, key=lambda p: (-len(p.split()), p))
_DEFAULTS = item_defaults("datasets", "near_miss")
_TWIN_SEP = "~"


def _split(sentence: str) -> tuple[list[str], str] | None:
    """Tokens and terminal punctuation of one sentence, or None when it is not one sentence."""
    s = " ".join(sentence.split())
    end = s[-1] if s and s[-1] in ".!?" else ""
    body = s[:-1] if end else s
    if not body or re.search(r"[.!?;]", body):
        return None
    return body.split(" "), end


def _is_name(tok: str) -> bool:
    """A name token: letters only, each hyphen/apostrophe part capitalised with the rest lower
    case ("Alice", "O'Brien", "Jean-Luc", "Zoë"; not "LEFT", "McDonald", "Alice's", "Bob,"),
    and not a capitalised function word ("The", "In", "Yesterday": ``NOT_NAMES``)."""
    if tok.lower() in NOT_NAMES:
        return False
    parts = re.split(r"[-'’]", tok)
    return all(p.isalpha() and p[0].isupper() and (len(p) == 1 or p[1:].islower()) for p in parts)


def _base_form(verb: str) -> str | None:
    if verb in NOT_VERBS:
        return None
    if verb == "has":
        return "have"
    if verb in IE_VERBS:
        return verb[:-1]
    if not verb.isalpha() or not verb.islower() or not verb.endswith("s") or verb.endswith(("ss", "us", "is")):
        return None
    if verb in ("goes", "does"):
        return verb[:-2]
    if verb.endswith(("ses", "zes", "oes")) and not verb.endswith("sses"):
        return None  # uses/focuses, freezes/quizzes, shoes/echoes: no spelling rule decides
    if verb.endswith("ies") and len(verb) > 4:
        return verb[:-3] + "y"
    if verb.endswith(("sses", "shes", "ches", "xes", "zes", "oes")):
        return verb[:-2]
    return verb[:-1]


def _arguments(toks: list[str]) -> tuple[int, int]:
    """``(n, m)``: the leading run of name tokens is ``toks[:n]`` (the subject), the trailing
    run ``toks[m + 1:]`` (the object); ``n = len(toks)`` / ``m = -1`` when every token is a name."""
    n = next((i for i, t in enumerate(toks) if not _is_name(t)), len(toks))
    m = next((i for i in range(len(toks) - 1, -1, -1) if not _is_name(toks[i])), -1)
    return n, m


def _perfect(low: list[str], n: int) -> bool:
    """``has``/``have``/``had`` at ``n`` followed by a past participle (ends in -ed or -en, or
    an irregular one of ``PARTICIPLES``): the auxiliary of the perfect."""
    return low[n] in PERFECT and n + 1 < len(low) and (low[n + 1].endswith(("ed", "en")) or low[n + 1] in PARTICIPLES)


def why_not(sentence: str, kind: str) -> str | None:
    """Why edit ``kind`` (one of ``TYPES``) does not apply to ``sentence``, or None when it
    does. The reasons are the counters ``add_twins`` reports. Raises ``ValueError`` for an
    unknown kind."""
    if kind not in TYPES:
        raise ValueError(f"unknown near-miss type {kind!r}; expected one of {TYPES}")
    parts = _split(sentence)
    if parts is None:
        return "not one sentence"
    toks, _ = parts
    low = [t.lower() for t in toks]
    if kind == "negation":
        if any(t in NEGATORS or t.endswith("n't") for t in low):
            return "already negated"
        n, _ = _arguments(toks)
        aux = 0 < n < len(toks) and (low[n] in AUXILIARIES or _perfect(low, n))
        if n == 0 or n == len(toks) or (not aux and _base_form(toks[n]) is None):
            if 0 < n < len(toks) and toks[n].endswith(("ses", "zes", "oes")) and not toks[n].endswith("sses"):
                return "ambiguous verb ending (-ses, -zes, -oes)"
            return "no auxiliary or third-person verb right after a capitalised subject"
        if not aux and n + 1 < len(toks) and _base_form(toks[n + 1]) is not None:  # lower case only: not "Charles"
            return "two verb candidates after the subject (an adverb before the verb?)"
        return None
    if kind == "role_swap":
        n, m = _arguments(toks)
        if n == 0 or m == len(toks) - 1 or n > m or any(t != t.lower() for t in toks[n:m + 1]):
            return "not '<Name> <lower-case words> <Name>'"
        if toks[:n] == toks[m + 1:]:
            return "both arguments are the same"
        return None
    found = _spatial_matches(low)
    if not found:
        return "no spatial or order phrase"
    if len(found) > 1:
        return "several spatial or order phrases"
    return None


def _spatial_matches(low: list[str]) -> list[tuple[int, str]]:
    """(start token, phrase) of every OPPOSITES phrase, longest first, non-overlapping."""
    taken = [False] * len(low)
    out = []
    for phrase in _PHRASES:
        words = phrase.split()
        for i in range(len(low) - len(words) + 1):
            if low[i:i + len(words)] == words and not any(taken[i:i + len(words)]):
                out.append((i, phrase))
                for j in range(i, i + len(words)):
                    taken[j] = True
    return sorted(out)


def negate(sentence: str) -> str | None:
    """The ``negation`` twin of ``sentence`` (module docstring), or None when the rule does not
    apply (``why_not``)."""
    if why_not(sentence, "negation"):
        return None
    toks, end = _split(sentence)
    n, _ = _arguments(toks)
    low = [t.lower() for t in toks]
    if low[n] in AUXILIARIES or _perfect(low, n):
        return " ".join(toks[:n + 1] + ["not"] + toks[n + 1:]) + end
    return " ".join(toks[:n] + ["does", "not", _base_form(toks[n])] + toks[n + 1:]) + end


def swap_roles(sentence: str) -> str | None:
    """The ``role_swap`` twin of ``sentence`` (module docstring), or None."""
    if why_not(sentence, "role_swap"):
        return None
    toks, end = _split(sentence)
    n, m = _arguments(toks)
    return " ".join(toks[m + 1:] + toks[n:m + 1] + toks[:n]) + end


def flip_spatial(sentence: str) -> str | None:
    """The ``spatial_flip`` twin of ``sentence`` (module docstring), or None. The replaced
    phrase keeps the capitalisation of its first letter."""
    if why_not(sentence, "spatial_flip"):
        return None
    toks, end = _split(sentence)
    (i, phrase), = _spatial_matches([t.lower() for t in toks])
    k = len(phrase.split())
    new = OPPOSITES[phrase].split()
    if toks[i][:1].isupper():
        new[0] = new[0].capitalize()
    return " ".join(toks[:i] + new + toks[i + k:]) + end


EDITS: dict[str, Callable[[str], str | None]] = {"negation": negate, "role_swap": swap_roles, "spatial_flip": flip_spatial}


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
    from dataclasses import replace

    from .data import Corpus

    for t in types:
        if t not in TYPES:
            raise ValueError(f"near_miss.types: unknown type {t!r}; expected some of {TYPES}")
    types = [t for t in TYPES if t in types]  # a set: the order of the config list changes nothing
    from .retrieval import text_key

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
                raise ValueError(f"{rs.name}: near-miss twin id {tid!r} is already a document id; rename that document "
                                 f"or leave {t!r} out of near_miss.types")
            pos[tid] = len(ids)
            ids.append(tid)
            titles.append(title)
            bodies.append(new)
            seen.add(key)
            twins.setdefault(d, []).append((tid, t))
            added[t] += 1
    out = replace(rs, corpus=Corpus(tuple(ids), tuple(titles), tuple(bodies)), twins={d: tuple(v) for d, v in twins.items()})
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
        the set has no twins; a twin excluded from the query's ranking is left out). Raises ``KeyError`` for a document not in ``doc_ids``."""
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


class TwinScores:
    """Collects score(gold) and score(twin) of every ``TwinPairs`` triple while a method's
    score blocks go by (``observe``), then turns them into result rows (``rows``)."""

    def __init__(self, pairs: TwinPairs):
        self.pairs = pairs
        self.gold = np.full(len(pairs), np.nan)
        self.twin = np.full(len(pairs), np.nan)

    def observe(self, a: int, S: np.ndarray, retrieved: np.ndarray | None = None) -> None:
        """Record the scores of queries ``a:a+len(S)`` (``S``: ``(b - a, n_docs)`` float; a
        document not ``retrieved`` scores ``-inf``)."""
        p = self.pairs
        sel = np.flatnonzero((p.query >= a) & (p.query < a + len(S)))
        if not len(sel):
            return
        r = p.query[sel] - a
        g = np.asarray(S[r, p.gold[sel]], dtype=np.float64)
        t = np.asarray(S[r, p.twin[sel]], dtype=np.float64)
        if retrieved is not None:
            g = np.where(retrieved[r, p.gold[sel]], g, -np.inf)
            t = np.where(retrieved[r, p.twin[sel]], t, -np.inf)
        self.gold[sel], self.twin[sel] = g, t

    def rows(self, query_ids: Sequence[str], split_ids: Mapping[str, Sequence[str]], base: Mapping) -> list[dict]:
        """``twin_rows`` of the collected scores."""
        if np.isnan(self.gold).any() or np.isnan(self.twin).any():
            raise RuntimeError("TwinScores.rows: some triples were never scored")
        return twin_rows(self.pairs, self.gold, self.twin, query_ids, split_ids, base)


def twin_rows(pairs: TwinPairs, gold_scores: np.ndarray, twin_scores: np.ndarray, query_ids: Sequence[str],
              split_ids: Mapping[str, Sequence[str]], base: Mapping) -> list[dict]:
    """Result rows (``k`` empty) per split of ``split_ids`` (name -> query ids) and twin type
    present: ``twin_pairs``, ``twin_win``, ``twin_tie``, ``twin_gap``, ``twin_gap_p25``,
    ``twin_gap_p75`` with the type after a colon (module docstring). ``gold_scores`` /
    ``twin_scores``: ``(len(pairs),) float64``, aligned with ``pairs``; ``-inf`` = not
    retrieved (a gap with an infinity is left out of the quantiles, not of win/tie). ``base``:
    the dataset / encoder / method columns. No rows when there are no pairs."""
    if not len(pairs):
        return []
    at = {q: i for i, q in enumerate(query_ids)}
    gold_scores = np.asarray(gold_scores, dtype=np.float64)
    twin_scores = np.asarray(twin_scores, dtype=np.float64)
    out = []
    for split, ids in split_ids.items():
        members = np.zeros(len(query_ids), dtype=bool)
        members[[at[q] for q in ids if q in at]] = True
        for k, kind in enumerate(TYPES):
            sel = members[pairs.query] & (pairs.kind == k)
            if not sel.any():
                continue
            g, t = gold_scores[sel], twin_scores[sel]
            gap = g - t
            finite = gap[np.isfinite(gap)]
            b = {**base, "split": split, "k": ""}
            out.append({**b, "metric": f"twin_pairs:{kind}", "value": int(sel.sum())})
            out.append({**b, "metric": f"twin_win:{kind}", "value": float(np.mean(g > t))})
            out.append({**b, "metric": f"twin_tie:{kind}", "value": float(np.mean(g == t))})
            for name, qn in (("twin_gap", 50), ("twin_gap_p25", 25), ("twin_gap_p75", 75)):
                out.append({**b, "metric": f"{name}:{kind}", "value": float(np.percentile(finite, qn)) if len(finite) else ""})
    return out


def twin_negative_rows(rs, index, without_twins, with_twins, targets, ks: Sequence[int], ndcg_k: int, encoder_name: str,
                       threads: int | None = 1) -> list[dict]:
    """Twins as hard negatives or not, measured (Ralev et al. 2026, Table 1: structure-targeted
    negatives cut MiniLM-L6's zero-shot NanoBEIR nDCG@10 from 0.439 to 0.401; here in capgap's
    setting, a LoRA query adapter against a frozen index).

    ``without_twins`` / ``with_twins``: ``capgap.encoders.Encoder`` s fine-tuned on the train
    queries of the near-miss set ``rs`` (its frozen ``index``) with the twins left out of the
    InfoNCE softmax / in it (``capgap.finetune.finetune_encoder``'s ``twin_negatives``).
    ``targets``: ``[(RetrievalSet, FrozenIndex), ...]`` other data sets with indexes of the same
    document encoder, on which both adapters are evaluated zero-shot (neither saw them).

    Returns rows (``capgap.evaluate``): ``without_twins`` on ``rs`` as method
    ``finetuned-no-twins`` (with the twin rows; ``with_twins`` there is rule ``finetune``'s
    ``finetuned``), and on each target methods ``finetuned-no-twins@<rs.name>`` and
    ``finetuned@<rs.name>`` (recall@k, nDCG; the target's ``pretrained`` rows are the
    encoder before any fine-tuning).
    """
    from .evaluate import evaluate_encoder

    rows, _ = evaluate_encoder(rs, without_twins, index, ks, ndcg_k, encoder_name, "finetuned-no-twins", threads)
    for target, tindex in targets:
        for method, enc in ((f"finetuned-no-twins@{rs.name}", without_twins), (f"finetuned@{rs.name}", with_twins)):
            rows += evaluate_encoder(target, enc, tindex, ks, ndcg_k, encoder_name, method, threads)[0]
    return rows
