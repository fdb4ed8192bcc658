"""Near-miss edit rules: minimal edits that flip a statement's meaning (negation, role swap,
spatial/order flip). Near-miss twins are data: a retrieval set's twins are made by these rules
(``capgap.data.twins.add_twins``, ``capgap.generate.generate_near_miss``) and measured by
every method (``capgap.evaluate.twin_rows``; the study behind them: ``capgap.nearmiss``).

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
"""

from __future__ import annotations

import re
from typing import Callable

TYPES = ("negation", "role_swap", "spatial_flip")
AUXILIARIES = (
    "is",
    "are",
    "was",
    "were",
    "can",
    "could",
    "will",
    "would",
    "shall",
    "should",
    "may",
    "might",
    "must",
    "does",
    "do",
    "did",
)
NEGATORS = ("not", "never", "no", "nobody", "nothing", "none")
# capitalised words that start a sentence without being a name (determiners, prepositions,
# pronouns, time adverbs): a sentence starting with one has no name subject
NOT_NAMES = frozenset(
    """a an the this that these those my your his her its our their some any every each no in on at
by for from with to of into onto over under after before during since until about as if when while then there here it
he she they we i you yesterday today tomorrow tonight now later soon once meanwhile however therefore also maybe
perhaps sometimes always often usually never""".split()
)
# lower-case words ending in -s that are not third-person verbs (adverbs, pronouns, ...)
NOT_VERBS = frozenset(
    """as was is his its this thus yes plus less unless across always sometimes perhaps besides
nevertheless towards afterwards backwards forwards whereas alias ours yours hers theirs whose series news species
various famous serious""".split()
)
# -ies verbs whose base form keeps the "ie": the "-ies" -> "-y" rule would be wrong
IE_VERBS = frozenset({"unties", "belies", "vies", "dies", "lies", "ties"})
# auxiliaries of the perfect: "has seen" is negated as "has not seen", not "does not have seen"
PERFECT = ("has", "have", "had")
PARTICIPLES = frozenset(
    """met seen done gone made said told paid sent left lost kept held brought bought taught thought
found heard hit hurt let put read run set shut beaten become begun bitten blown broken chosen come drawn driven eaten
fallen flown forgotten forgiven frozen given grown hidden known ridden risen shaken shown spoken stolen sworn taken
thrown woken worn written""".split()
)
_PAIRS = (
    ("left of", "right of"),
    ("above", "below"),
    ("over", "under"),
    ("in front of", "behind"),
    ("before", "after"),
    ("north of", "south of"),
    ("east of", "west of"),
    ("inside", "outside"),
    ("earlier than", "later than"),
)
OPPOSITES = {**{a: b for a, b in _PAIRS}, **{b: a for a, b in _PAIRS}}
_PHRASES = sorted(OPPOSITES, key=lambda p: (-len(p.split()), p))


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
        if n == 0 or m == len(toks) - 1 or n > m or any(t != t.lower() for t in toks[n : m + 1]):
            return "not '<Name> <lower-case words> <Name>'"
        if toks[:n] == toks[m + 1 :]:
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
            if low[i : i + len(words)] == words and not any(taken[i : i + len(words)]):
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
        return " ".join(toks[: n + 1] + ["not"] + toks[n + 1 :]) + end
    return " ".join(toks[:n] + ["does", "not", _base_form(toks[n])] + toks[n + 1 :]) + end


def swap_roles(sentence: str) -> str | None:
    """The ``role_swap`` twin of ``sentence`` (module docstring), or None."""
    if why_not(sentence, "role_swap"):
        return None
    toks, end = _split(sentence)
    n, m = _arguments(toks)
    return " ".join(toks[m + 1 :] + toks[n : m + 1] + toks[:n]) + end


def flip_spatial(sentence: str) -> str | None:
    """The ``spatial_flip`` twin of ``sentence`` (module docstring), or None. The replaced
    phrase keeps the capitalisation of its first letter."""
    if why_not(sentence, "spatial_flip"):
        return None
    toks, end = _split(sentence)
    ((i, phrase),) = _spatial_matches([t.lower() for t in toks])
    k = len(phrase.split())
    new = OPPOSITES[phrase].split()
    if toks[i][:1].isupper():
        new[0] = new[0].capitalize()
    return " ".join(toks[:i] + new + toks[i + k :]) + end


EDITS: dict[str, Callable[[str], str | None]] = {
    "negation": negate,
    "role_swap": swap_roles,
    "spatial_flip": flip_spatial,
}
