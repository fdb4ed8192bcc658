"""recall@k and nDCG@k: by hand, and against pytrec_eval (trec_eval's reference code)."""

import numpy as np
import pytrec_eval

from capgap.metrics import ndcg_at_k, recall_at_k


def test_by_hand():
    ranked = [["a", "x", "b", "y"]]
    gold = [{"a": 1, "b": 1, "c": 1}]
    assert recall_at_k(ranked, gold, 1)[0] == 1 / 3
    assert recall_at_k(ranked, gold, 3)[0] == 2 / 3
    # DCG@3 = 1/log2(2) + 1/log2(4) = 1.5; IDCG@3 = 1 + 1/log2(3) + 1/2
    assert np.isclose(ndcg_at_k(ranked, gold, 3)[0], 1.5 / (1 + 1 / np.log2(3) + 0.5))


def test_against_pytrec_eval():
    rng = np.random.default_rng(0)
    docs = [f"d{i}" for i in range(60)]
    qrels, run, ranked, gold = {}, {}, [], []
    for q in range(40):
        g = {d: int(rng.integers(1, 4)) for d in rng.choice(docs, size=rng.integers(1, 6), replace=False)}
        g.update({d: 0 for d in rng.choice(docs, size=3, replace=False) if d not in g})  # judged non-gold
        scores = rng.random(len(docs))  # continuous: no ties, so trec_eval's order is ours
        order = [docs[i] for i in np.argsort(-scores)]
        qrels[f"q{q}"] = g
        run[f"q{q}"] = {d: float(s) for d, s in zip(docs, scores)}
        ranked.append(order)
        gold.append(g)
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"recall.2,10,20", "ndcg_cut.10"}).evaluate(run)
    for k in (2, 10, 20):
        ref = np.array([ev[f"q{q}"][f"recall_{k}"] for q in range(40)])
        assert np.allclose(recall_at_k(ranked, gold, k), ref)
    ref = np.array([ev[f"q{q}"]["ndcg_cut_10"] for q in range(40)])
    assert np.allclose(ndcg_at_k(ranked, gold, 10), ref)


def test_every_metric_refuses_a_query_without_gold():
    """recall and nDCG agree: a query with no document of grade > 0 is an error in all four
    functions (not 0 in one and an error in the other)."""
    import pytest

    from capgap.metrics import ndcg_from_ranks, recall_from_ranks

    for fn in (recall_at_k, ndcg_at_k):
        with pytest.raises(ValueError, match="query 1"):
            fn([["a"], ["b"]], [{"a": 1}, {"b": 0}], 1)
    with pytest.raises(ValueError, match="query 0"):
        recall_from_ranks([np.array([])], 1)
    with pytest.raises(ValueError, match="query 0"):
        ndcg_from_ranks([np.array([1.0])], [np.array([0.0])], 1)
    # one gold document at rank 2 (graded 2): recall@1 = 0, recall@2 = 1, nDCG@2 = (2 / log2 3) / 2
    assert recall_from_ranks([np.array([2.0])], 1).tolist() == [0.0]
    assert np.isclose(ndcg_from_ranks([np.array([2.0])], [np.array([2.0])], 2)[0], 1 / np.log2(3))
