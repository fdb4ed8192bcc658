"""The LIMIT-style generator: the construction's invariants, checked on its output."""

import re

import pytest

from capgap.generate import generate_limit_style


def test_construction_invariants():
    corpus, queries, qrels = generate_limit_style(
        n_queries=60, pool_size=15, n_distractors=40, attributes_per_doc=10, seed=3
    )
    assert len(corpus) == 55 and len(queries) == 60
    text = dict(zip(corpus.ids, corpus.texts))
    pairs = set()
    pool = set()
    for qid, qtext in zip(queries.ids, queries.texts):
        attr = re.fullmatch(r"Who likes (.+)\?", qtext).group(1)
        gold = qrels.gold(qid)
        assert len(gold) == 2 and set(gold.values()) == {1}
        # exactly the gold documents like the attribute
        likers = {d for d, t in text.items() if re.search(rf"(likes |, |and ){re.escape(attr)}(,|\.)", t)}
        assert likers == set(gold)
        pairs.add(frozenset(gold))
        pool |= set(gold)
    assert len(pairs) == 60  # every gold pair is distinct
    assert len(pool) <= 15  # gold documents come from the pool only
    for d, t in text.items():
        assert t.startswith(f"{d} likes ")
        assert t.count(",") + 1 >= 10  # at least attributes_per_doc attributes listed


def test_seeded_and_deterministic():
    a = generate_limit_style(20, 8, 10, 5, seed=1)
    assert a == generate_limit_style(20, 8, 10, 5, seed=1)
    assert a[0].texts != generate_limit_style(20, 8, 10, 5, seed=2)[0].texts


def test_impossible_sizes():
    with pytest.raises(ValueError, match="only 6"):
        generate_limit_style(n_queries=7, pool_size=4)  # C(4,2) = 6 pairs


def test_parse_likes_both_templates():
    from capgap.generate import parse_likes

    assert parse_likes("Ann Lee likes Tea, Cats and Jazz.") == ("Ann Lee", ["Tea", "Cats", "Jazz"])
    assert parse_likes("Ann Lee likes Tea, Cats, and Jazz.") == ("Ann Lee", ["Tea", "Cats", "Jazz"])
    assert parse_likes("Ann Lee likes Tea.") == ("Ann Lee", ["Tea"])
    assert parse_likes("no template here") is None


def test_expand_limit_keeps_qrels_complete():
    from capgap.data import Corpus, Queries
    from capgap.generate import expand_limit, parse_likes

    attrs = [f"Thing{i}" for i in range(12)]
    liked = [[attrs[(3 * i + j) % 12] for j in range(6)] for i in range(4)]  # covers all 12
    texts = [f"P{i} Q{i} likes {', '.join(a[:-1])} and {a[-1]}." for i, a in enumerate(liked)]
    corpus = Corpus(tuple(f"P{i} Q{i}" for i in range(4)), ("",) * 4, tuple(texts))
    attrs[9] = "Big Thing7"  # contains the asked attribute "Thing7" as whole words: excluded too
    liked = [[attrs[(3 * i + j) % 12] for j in range(6)] for i in range(4)]
    texts = [f"P{i} Q{i} likes {', '.join(a[:-1])} and {a[-1]}." for i, a in enumerate(liked)]
    corpus = Corpus(tuple(f"P{i} Q{i}" for i in range(4)), ("",) * 4, tuple(texts))
    queries = Queries(("q0", "q1"), ("Who likes Thing1?", "Who likes Thing7?"))
    out, info = expand_limit(corpus, queries, 40, seed=3)
    again, _ = expand_limit(corpus, queries, 40, seed=3)
    assert out == again and len(out) == 40 and len(set(out.ids)) == 40
    # the real documents are kept verbatim, shuffled among the distractors
    real = dict(zip(corpus.ids, corpus.texts))
    assert {d: t for d, t in zip(out.ids, out.texts) if d in real} == real
    assert list(out.ids[:4]) != list(corpus.ids)
    # vocabulary: 12 attributes; Thing1 and Thing7 are asked about, "Big Thing7" contains an asked
    # attribute as whole words; Thing10/Thing11 merely share characters with "Thing1": allowed
    assert info["vocabulary"] == 12 and info["allowed_attributes"] == 12 - 3 and info["attributes_per_doc"] == 6
    for d, t in zip(out.ids, out.texts):
        if d not in real:
            name, liked = parse_likes(t)
            assert name == d and len(liked) == 6 and len(set(liked)) == 6
            assert not {"Thing1", "Thing7", "Big Thing7"} & set(liked)
    with pytest.raises(ValueError, match="smaller than the corpus"):
        expand_limit(corpus, queries, 3)
    with pytest.raises(ValueError, match="only 9 attributes"):
        expand_limit(corpus, queries, 40, attributes_per_doc=10)
    bad = Corpus(("x",), ("",), ("x enjoys tea.",))
    with pytest.raises(ValueError, match="does not follow the LIMIT template"):
        expand_limit(bad, queries, 5)
