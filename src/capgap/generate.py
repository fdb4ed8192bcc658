"""A LIMIT-style retrieval set generator (Weller et al. 2025, "On the Theoretical Limitations
of Embedding-Based Retrieval", Section 4: the LIMIT construction), seeded and sized by config.

Documents are people who "like" attributes; each query asks "Who likes X?"; its gold set is
a distinct *pair* of documents drawn from a small pool, and no other document likes X.
Distractor documents like only filler attributes that no query asks about. Names come from
Faker (en_US), attribute words from Faker's English word list, so no data file is needed.
"""

from __future__ import annotations

import itertools
import random

from .config import item_defaults
from .data import Corpus, Qrels, Queries

_STOP = {
    "about", "above", "after", "again", "against", "also", "because", "before", "being", "below",
    "between", "both", "could", "does", "doing", "down", "during", "each", "from", "further",
    "have", "having", "here", "into", "just", "like", "likes", "more", "most", "must", "only",
    "other", "over", "same", "should", "some", "such", "than", "that", "their", "them", "then",
    "there", "these", "they", "this", "those", "through", "under", "until", "very", "what",
    "when", "where", "which", "while", "whom", "will", "with", "would", "your", "yourself",
}


def _vocabulary(rng: random.Random, need: int, exclude: set[str]) -> list[str]:
    from faker.providers.lorem.en_US import Provider

    from bm25s.stopwords import STOPWORDS_EN, STOPWORDS_EN_PLUS

    bad = _STOP | exclude | {w.lower() for w in (*STOPWORDS_EN, *STOPWORDS_EN_PLUS)}
    words = sorted({w.lower() for w in Provider.word_list if w.isalpha() and len(w) >= 4 and w.lower() not in bad})
    rng.shuffle(words)
    vocab = [w.title() for w in words]
    if need > len(vocab):  # two-word attributes, still distinct phrases
        combos = [f"{a} {b}" for a, b in itertools.permutations(vocab[:200], 2)]
        rng.shuffle(combos)
        vocab += combos
    if need > len(vocab):
        raise ValueError(f"generator: cannot make {need} distinct attributes")
    return vocab[:need]


def generate_limit_style(
    n_queries: int = 100,
    pool_size: int = 16,
    n_distractors: int = 100,
    attributes_per_doc: int = 20,
    seed: int = 0,
) -> tuple[Corpus, Queries, Qrels]:
    """Generate a LIMIT-style set.

    Parameters: ``n_queries`` queries, each with a distinct gold pair out of the
    ``pool_size`` pool documents (so ``n_queries <= pool_size*(pool_size-1)/2``);
    ``n_distractors`` documents that never like a query's attribute; every document lists at
    least ``attributes_per_doc`` attributes (query attributes first, padded with filler).
    Returns ``(corpus, queries, qrels)`` with ``pool_size + n_distractors`` documents whose ids
    are the people's names, queries ``query_0..`` and exactly 2 gold documents (score 1)
    per query. Same arguments, same output. Raises ``ValueError`` on impossible sizes.
    """
    if pool_size < 2 or n_queries < 1 or n_distractors < 0 or attributes_per_doc < 1:
        raise ValueError("generator: need pool_size >= 2, n_queries >= 1, n_distractors >= 0, attributes_per_doc >= 1")
    pairs = list(itertools.combinations(range(pool_size), 2))
    if n_queries > len(pairs):
        raise ValueError(f"generator: {n_queries} queries need distinct gold pairs but a pool of {pool_size} has only {len(pairs)}")
    rng = random.Random(seed)
    from faker import Faker

    fake = Faker("en_US")
    fake.seed_instance(seed)
    n_docs = pool_size + n_distractors
    names: list[str] = []
    seen: set[str] = set()
    while len(names) < n_docs:
        name = f"{fake.first_name()} {fake.last_name()}"
        if name not in seen:
            seen.add(name)
            names.append(name)
    n_filler = max(2 * attributes_per_doc, 40)
    # no attribute word may equal a name token, so an attribute is matched only where liked
    name_tokens = {t.lower() for n in names for t in n.split()}
    vocab = _vocabulary(rng, n_queries + n_filler, name_tokens)
    query_attrs, filler = vocab[:n_queries], vocab[n_queries:]
    gold_pairs = rng.sample(pairs, n_queries)
    liked: list[list[str]] = [[] for _ in range(n_docs)]
    for attr, (a, b) in zip(query_attrs, gold_pairs):
        liked[a].append(attr)
        liked[b].append(attr)
    texts = []
    for i in range(n_docs):
        pad = max(0, attributes_per_doc - len(liked[i]))
        attrs = liked[i] + rng.sample(filler, min(pad, len(filler)))
        rng.shuffle(attrs)
        body = attrs[0] if len(attrs) == 1 else ", ".join(attrs[:-1]) + f", and {attrs[-1]}"
        texts.append(f"{names[i]} likes {body}.")
    order = list(range(n_docs))
    rng.shuffle(order)
    corpus = Corpus(tuple(names[i] for i in order), tuple("" for _ in order), tuple(texts[i] for i in order))
    qids = tuple(f"query_{j}" for j in range(n_queries))
    queries = Queries(qids, tuple(f"Who likes {a}?" for a in query_attrs))
    qrels = Qrels({q: {names[a]: 1, names[b]: 1} for q, (a, b) in zip(qids, gold_pairs)})
    return corpus, queries, qrels


def parse_likes(text: str) -> tuple[str, list[str]] | None:
    """Split a LIMIT document ``"<name> likes A, B, ... and Z."`` into ``(name, [A, ..., Z])``.

    Accepts the Oxford comma (``", and Z"``) of ``generate_limit_style`` too. Returns ``None``
    when the text does not follow the template.
    """
    name, sep, body = text.partition(" likes ")
    if not sep or not name:
        return None
    body = body.strip().rstrip(".")
    items = [s.strip() for s in body.split(", ")]
    last = items.pop()
    head, sep, tail = last.rpartition(" and ")
    items += [head, tail] if sep and head else [last.removeprefix("and ").strip()]
    items = [s.removeprefix("and ").strip() for s in items]
    return (name, [s for s in items if s]) if all(items) else None


def expand_limit(
    corpus: Corpus,
    queries: Queries,
    n_docs: int,
    seed: int = item_defaults("datasets", "expand")["seed"],
    attributes_per_doc: int | None = None,
) -> tuple[Corpus, dict]:
    """Grow a LIMIT corpus to ``n_docs`` documents with seeded LIMIT-style distractors.

    The distractors mirror LIMIT's construction (Weller et al. 2025, Section 4: 50k people
    who like attributes, of whom only the 46 gold people like a query's attribute) but are not
    the official 50k LIMIT corpus: each is a new Faker name (distinct from every existing id
    and name) who likes ``attributes_per_doc`` attributes (default: the median count of the
    real documents) drawn from the attribute vocabulary of ``corpus`` itself, minus every
    attribute that occurs in any query text and every attribute that contains such an asked
    attribute as whole words ("Mangrove Forests" when "Forests" is asked), so no distractor is
    relevant to any query, even loosely, and the qrels stay complete. The documents are shuffled together (seeded), so no position in the
    corpus marks a real document.

    Returns ``(corpus, info)``; ``info`` records the vocabulary size, excluded attributes and
    the seed. Same arguments, same output. Raises ``ValueError`` when a real document does not
    follow the ``"<name> likes A, B and C."`` template, when ``n_docs`` is smaller than the
    corpus, or when fewer than ``attributes_per_doc`` attributes remain after the exclusion.
    """
    import statistics

    n_real = len(corpus)
    if n_docs < n_real:
        raise ValueError(f"expand_limit: n_docs={n_docs} is smaller than the corpus ({n_real} documents)")
    parsed = []
    for doc_id, text in zip(corpus.ids, corpus.texts):
        p = parse_likes(text)
        if p is None:
            raise ValueError(f"expand_limit: document {doc_id!r} does not follow the LIMIT template '<name> likes A, B and C.'")
        parsed.append(p)
    vocab = sorted({a for _, attrs in parsed for a in attrs})
    qtexts = [q.lower() for q in queries.texts]
    asked = [a for a in vocab if any(a.lower() in q for q in qtexts)]
    asked_words = {tuple(a.lower().split()) for a in asked}

    def contains_asked(attr: str) -> bool:  # "Mangrove Forests" contains the asked "Forests"
        w = attr.lower().split()
        return any(tuple(w[i:j]) in asked_words for i in range(len(w)) for j in range(i + 1, len(w) + 1))

    allowed = [a for a in vocab if not any(a.lower() in q for q in qtexts) and not contains_asked(a)]
    per_doc = attributes_per_doc or int(statistics.median(len(a) for _, a in parsed))
    if len(allowed) < per_doc:
        raise ValueError(f"expand_limit: only {len(allowed)} attributes are liked by no query; need {per_doc} per distractor")
    rng = random.Random(seed)
    from faker import Faker

    fake = Faker("en_US")
    fake.seed_instance(seed)
    taken = set(corpus.ids) | {n for n, _ in parsed}
    names: list[str] = []
    while len(names) < n_docs - n_real:
        name = f"{fake.first_name()} {fake.last_name()}"
        if name not in taken:
            taken.add(name)
            names.append(name)
    texts = []
    for name in names:
        attrs = rng.sample(allowed, per_doc)
        texts.append(f"{name} likes {', '.join(attrs[:-1])} and {attrs[-1]}.")
    ids = list(corpus.ids) + names
    titles = list(corpus.titles) + [""] * len(names)
    alltexts = list(corpus.texts) + texts
    order = list(range(len(ids)))
    rng.shuffle(order)
    out = Corpus(tuple(ids[i] for i in order), tuple(titles[i] for i in order), tuple(alltexts[i] for i in order))
    info = {"n_docs": n_docs, "n_real": n_real, "seed": seed, "attributes_per_doc": per_doc,
            "vocabulary": len(vocab), "allowed_attributes": len(allowed)}
    return out, info
