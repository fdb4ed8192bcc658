"""The LIMIT-style generator: the construction's invariants, checked on its output."""

import re

import pytest

from capgap.generate import generate_limit_style


def test_construction_invariants():
    corpus, queries, qrels = generate_limit_style(n_queries=60, pool_size=15, n_distractors=40, attributes_per_doc=10, seed=3)
    assert len(corpus) == 55 and len(queries) == 60
    text = dict(zip(corpus.ids, corpus.texts))
    pairs = set()
    pool = set()
    for qid, qtext in zip(queries.ids, queries.texts):
        attr = re.fullmatch(r"Who likes (.+)\?", qtext).group(1)
        gold = qrels.relevant(qid)
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
