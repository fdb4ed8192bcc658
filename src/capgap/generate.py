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
from typing import Sequence

from .config import item_defaults
from .data import Corpus, Qrels, Queries, RetrievalSet, Split
from .data.edits import EDITS, TYPES, _is_name
from .data.twins import twin_id

_NM = item_defaults("datasets", "near_miss")  # the schema holds every default (capgap.config)

_STOP = {
    "about",
    "above",
    "after",
    "again",
    "against",
    "also",
    "because",
    "before",
    "being",
    "below",
    "between",
    "both",
    "could",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "from",
    "further",
    "have",
    "having",
    "here",
    "into",
    "just",
    "like",
    "likes",
    "more",
    "most",
    "must",
    "only",
    "other",
    "over",
    "same",
    "should",
    "some",
    "such",
    "than",
    "that",
    "their",
    "them",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "under",
    "until",
    "very",
    "what",
    "when",
    "where",
    "which",
    "while",
    "whom",
    "will",
    "with",
    "would",
    "your",
    "yourself",
}


def _vocabulary(rng: random.Random, need: int, exclude: set[str]) -> list[str]:
    from bm25s.stopwords import STOPWORDS_EN, STOPWORDS_EN_PLUS
    from faker.providers.lorem.en_US import Provider

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
        raise ValueError(
            f"generator: {n_queries} queries need distinct gold pairs but a pool of {pool_size} has only {len(pairs)}"
        )
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
    relevant to any query, even loosely, and the qrels stay complete. The documents are
    shuffled together (seeded), so no position in the corpus marks a real document.

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
            raise ValueError(
                f"expand_limit: document {doc_id!r} does not follow the LIMIT template '<name> likes A, B and C.'"
            )
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
        raise ValueError(
            f"expand_limit: only {len(allowed)} attributes are liked by no query; need {per_doc} per distractor"
        )
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
    info = {
        "n_docs": n_docs,
        "n_real": n_real,
        "seed": seed,
        "attributes_per_doc": per_doc,
        "vocabulary": len(vocab),
        "allowed_attributes": len(allowed),
    }
    return out, info


# Near-miss statements (capgap.data.edits): (statement verb phrase, query paraphrase), both third
# person singular; the paraphrase shares no word with the statement's verb phrase but the function
# words "is" / "of" (English stopwords, which BM25 drops).
NEAR_MISS_RELATIONS = (
    ("trusts", "has faith in"),
    ("admires", "looks up to"),
    ("helps", "assists"),
    ("teaches", "instructs"),
    ("pays", "gives money to"),
    ("visits", "goes to see"),
    ("hires", "employs"),
    ("fears", "is afraid of"),
    ("thanks", "expresses gratitude to"),
    ("warns", "alerts"),
    ("envies", "is jealous of"),
    ("rescues", "saves"),
    ("calls", "phones"),
    ("ignores", "disregards"),
    ("forgives", "pardons"),
)
# Spatial / order relations, in families of two opposites (a pair of people is used once per
# family, so a flip or swap twin is never another statement).
NEAR_MISS_SPATIAL = (
    (("is left of", "is to the west of"), ("is right of", "is to the east of")),
    (("is above", "is higher up than"), ("is below", "is lower down than")),
    (("is in front of", "is ahead of"), ("is behind", "is at the back of")),
    (("arrives before", "gets there earlier than"), ("arrives after", "gets there later than")),
)


def generate_near_miss(
    types: Sequence[str] = tuple(_NM["types"]),
    n_people: int = _NM["n_people"],
    n_train: int = _NM["n_train"],
    n_heldout: int = _NM["n_heldout"],
    spatial_fraction: float = _NM["spatial_fraction"],
    heldout_people_fraction: float = _NM["heldout_people_fraction"],
    seed: int = _NM["seed"],
):
    """A seeded near-miss retrieval set (``capgap.nearmiss``): short statements about two named
    people ("Alice trusts Bob.", "Alice is left of Bob."), each with its twins of ``types``
    made by the ``capgap.data.edits`` rules, and one query per statement that paraphrases
    it without the statement's relation words ("Alice has faith in Bob").

    Relations: ``NEAR_MISS_RELATIONS`` (15 verbs) and, for a ``spatial_fraction`` share of the
    statements, ``NEAR_MISS_SPATIAL`` (4 families of opposite spatial/order relations; only
    these have a ``spatial_flip`` twin). A pair of people is used at most once per relation
    family, so a twin's text is never another statement. Split by entity-relation combination:
    for each relation family a seeded ``heldout_people_fraction`` of the ``n_people`` people is
    reserved; a held-out statement uses two reserved people, a train statement two others, so
    no (person, relation) combination of a held-out query occurs in training, while its people
    and relation do (``info`` records how many).

    Returns ``(rs, info)``: a ``capgap.data.RetrievalSet`` named ``"near-miss"`` (statements
    ``s0000``.., twins ``twin_id(statement, type)``, queries ``q0000``.., one gold statement of
    grade 1 each, corpus shuffled) and a JSON-ready ``info`` dict. Same arguments, same output.
    Raises ``ValueError`` when a family has too few people pairs for its share of statements.
    """
    for t in types:
        if t not in TYPES:
            raise ValueError(f"near_miss.types: unknown type {t!r}; expected some of {TYPES}")
    types = [t for t in TYPES if t in types]  # a set: the order of the config list changes nothing
    rng = random.Random(seed)
    from faker import Faker

    fake = Faker("en_US")
    fake.seed_instance(seed)
    people: list[str] = []
    tries = 0
    while len(people) < n_people:
        name = fake.first_name()
        tries += 1
        if _is_name(name) and name not in people:  # a name token of the edit rules (capgap.data.edits._is_name)
            people.append(name)
        if tries > 100 * n_people:
            raise ValueError(f"generate_near_miss: Faker has fewer than {n_people} distinct single-word first names")
    families = [((v, p),) for v, p in NEAR_MISS_RELATIONS] + list(NEAR_MISS_SPATIAL)
    n_total = n_train + n_heldout
    n_spatial = int(round(spatial_fraction * n_total))
    reserved = {
        f: set(rng.sample(people, max(2, int(round(heldout_people_fraction * n_people))))) for f in range(len(families))
    }
    free = {}
    for f in range(len(families)):
        for split, pool in (("train", [p for p in people if p not in reserved[f]]), ("heldout", sorted(reserved[f]))):
            pairs = list(itertools.combinations(pool, 2))
            rng.shuffle(pairs)
            free[f, split] = pairs
    verb_f, spatial_f = list(range(len(NEAR_MISS_RELATIONS))), list(range(len(NEAR_MISS_RELATIONS), len(families)))
    statements = []  # (split, family, relation index within family, A, B)
    n_sp_train = int(round(n_spatial * n_train / max(n_total, 1)))
    for split, n, n_sp in (("train", n_train, n_sp_train), ("heldout", n_heldout, n_spatial - n_sp_train)):
        for i in range(n):
            f = spatial_f[i % len(spatial_f)] if i < n_sp else verb_f[(i - n_sp) % len(verb_f)]
            if not free[f, split]:
                raise ValueError(
                    f"generate_near_miss: relation family {families[f][0][0]!r} has no {split} pair of "
                    f"people left; raise n_people or lower n_{split}"
                )
            a, b = free[f, split].pop()
            if rng.random() < 0.5:
                a, b = b, a
            statements.append((split, f, rng.randrange(len(families[f])), a, b))
    rng.shuffle(statements)
    ids, texts, twins, qtexts, split_of = [], [], {}, [], {}
    for i, (split, f, r, a, b) in enumerate(statements):
        verb, para = families[f][r]
        sid, qid = f"s{i:04d}", f"q{i:04d}"
        text = f"{a} {verb} {b}."
        ids.append(sid)
        texts.append(text)
        qtexts.append(f"{a} {para} {b}")
        split_of[qid] = split
        for t in types:
            new = EDITS[t](text)
            if new is None and (t != "spatial_flip" or f >= len(NEAR_MISS_RELATIONS)):  # every rule applies by design
                raise RuntimeError(f"generate_near_miss: the {t} rule does not apply to {text!r}: a bug in the tables")
            if new is not None:
                twins.setdefault(sid, []).append((twin_id(sid, t), t))
                ids.append(twin_id(sid, t))
                texts.append(new)
    order = list(range(len(ids)))
    rng.shuffle(order)
    corpus = Corpus(tuple(ids[i] for i in order), tuple("" for _ in order), tuple(texts[i] for i in order))
    qids = tuple(f"q{i:04d}" for i in range(len(statements)))
    queries = Queries(qids, tuple(qtexts))
    qrels = Qrels({q: {f"s{i:04d}": 1} for i, q in enumerate(qids)})
    split = Split(
        tuple(q for q in qids if split_of[q] == "train"),
        tuple(q for q in qids if split_of[q] == "heldout"),
        rule=f"near-miss entity-relation split: per relation family a seeded {heldout_people_fraction} of "
        f"the people is reserved for held-out statements (seed={seed})",
    )
    train_people = {p for s, f, r, a, b in statements if s == "train" for p in (a, b)}
    train_fams = {f for s, f, *_ in statements if s == "train"}
    held = [(f, a, b) for s, f, r, a, b in statements if s == "heldout"]
    info = {
        "kind": "generated",
        "generator": "near-miss",
        "n_people": n_people,
        "n_train": n_train,
        "n_heldout": n_heldout,
        "spatial_fraction": spatial_fraction,
        "heldout_people_fraction": heldout_people_fraction,
        "seed": seed,
        "types": list(types),
        "heldout_people_seen_in_train": sum(a in train_people and b in train_people for _, a, b in held),
        "heldout_relations_seen_in_train": sum(f in train_fams for f, _, _ in held),
    }
    rs = RetrievalSet(
        "near-miss", corpus, queries, qrels, split, source=info, twins={d: tuple(v) for d, v in twins.items()}
    )
    return rs, info
