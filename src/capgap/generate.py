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
    are the people's names, queries ``query_0..`` and exactly 2 relevant documents (score 1)
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
