"""recall@k, nDCG@k, R-precision and capped recall: by hand, and against pytrec_eval
(trec_eval's reference code)."""

import numpy as np
import pytest
import pytrec_eval

from capgap.metrics import (
    ndcg_at_k,
    ndcg_from_ranks,
    recall_at_k,
    recall_cap_at_k,
    recall_cap_from_ranks,
    recall_from_ranks,
    rprec,
    rprec_from_ranks,
)
from capgap.retrieval import rank_gold, rank_top


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
    for fn in (recall_at_k, ndcg_at_k, recall_cap_at_k):
        with pytest.raises(ValueError, match="query 1"):
            fn([["a"], ["b"]], [{"a": 1}, {"b": 0}], 1)
    with pytest.raises(ValueError, match="query 1"):
        rprec([["a"], ["b"]], [{"a": 1}, {"b": 0}])
    for fn in (recall_from_ranks, recall_cap_from_ranks):
        with pytest.raises(ValueError, match="query 0"):
            fn([np.array([])], 1)
    with pytest.raises(ValueError, match="query 0"):
        rprec_from_ranks([np.array([])])
    with pytest.raises(ValueError, match="query 0"):
        ndcg_from_ranks([np.array([1.0])], [np.array([0.0])], 1)
    # one gold document at rank 2 (graded 2): recall@1 = 0, recall@2 = 1, nDCG@2 = (2 / log2 3) / 2
    assert recall_from_ranks([np.array([2.0])], 1).tolist() == [0.0]
    assert np.isclose(ndcg_from_ranks([np.array([2.0])], [np.array([2.0])], 2)[0], 1 / np.log2(3))


def test_rprec_and_recall_cap_by_hand():
    """Two queries, ranking a x b y c z (grade-0 d judged but not gold):
    q0 gold {a, b, c} (R = 3): top 3 = a x b -> 2 hits, R-precision 2/3;
       R_cap@1 = 1 / min(1, 3) = 1, R_cap@2 = 1 / 2, R_cap@5 = 3 / min(5, 3) = 1 (recall@5 = 1 too);
    q1 gold {y} (R = 1, d graded 0 is not gold): top 1 = a -> R-precision 0;
       R_cap@1 = 0, R_cap@5 = 1 / min(5, 1) = 1 (y at rank 4)."""
    ranked = [["a", "x", "b", "y", "c", "z"]] * 2
    gold = [{"a": 1, "b": 2, "c": 1}, {"y": 3, "d": 0}]
    assert np.allclose(rprec(ranked, gold), [2 / 3, 0.0])
    assert np.allclose(recall_cap_at_k(ranked, gold, 1), [1.0, 0.0])
    assert np.allclose(recall_cap_at_k(ranked, gold, 2), [0.5, 0.0])
    assert np.allclose(recall_cap_at_k(ranked, gold, 5), [1.0, 1.0])
    # the same from gold ranks (a=1, b=3, c=5; y=4), and an unretrieved gold document (inf)
    ranks = [np.array([1.0, 3.0, 5.0]), np.array([4.0])]
    assert np.allclose(rprec_from_ranks(ranks), [2 / 3, 0.0])
    assert np.allclose(recall_cap_from_ranks(ranks, 2), [0.5, 0.0])
    assert np.allclose(recall_cap_from_ranks(ranks, 5), [1.0, 1.0])
    assert rprec_from_ranks([np.array([2.0, np.inf])]).tolist() == [0.5]
    assert recall_cap_from_ranks([np.array([2.0, np.inf])], 1).tolist() == [0.0]


def test_rprec_and_recall_cap_against_pytrec_eval_with_ties():
    """Random graded qrels (grades 1-3, plus judged grade-0 rows), coarse scores (many ties, gold
    tied with non-gold) and some unretrieved documents. capgap's pessimistic tie rule
    (``rank_gold``) gives each gold document its rank; trec_eval breaks ties by document id, so
    it is given the pessimistic order itself (``rank_top``'s, the same rule) as strictly
    decreasing scores. R-precision must equal pytrec_eval's ``Rprec``; capped recall (no trec_eval
    measure) must equal its ``recall_k`` · |gold| / min(k, |gold|) -- BEIR's R_cap@k."""
    rng = np.random.default_rng(1)
    n_docs, docs = 50, [f"d{i}" for i in range(50)]
    ks = (1, 3, 10)
    qrels, run, ranked, gold, ranks = {}, {}, [], [], []
    tied_gold = 0
    for q in range(60):
        rows = rng.choice(n_docs, size=rng.integers(1, 9), replace=False)
        grades = rng.integers(1, 4, size=len(rows)).astype(np.float64)
        zero = [r for r in rng.choice(n_docs, size=4, replace=False) if r not in rows]  # judged non-gold (grade 0)
        scores = rng.integers(0, 6, size=n_docs).astype(np.float64)  # 6 levels over 50 documents: ties everywhere
        valid = rng.random(n_docs) > 0.15  # ~15% not retrieved (as BM25 without a query term)
        order = np.sort(rows)
        g_of = dict(zip(rows.tolist(), grades.tolist()))
        r = rank_gold(scores, order, np.array([g_of[i] for i in order]), valid)
        top, _ = rank_top(scores, n_docs, order, np.array([g_of[i] for i in order]), valid)
        top = [int(i) for i in top if i >= 0]
        tied_gold += sum(np.isin(scores[[i for i in top if i not in g_of]], scores[order]).tolist())
        qrels[f"q{q}"] = {**{docs[i]: int(g) for i, g in g_of.items()}, **{docs[i]: 0 for i in zero}}
        run[f"q{q}"] = {docs[i]: float(n_docs - pos) for pos, i in enumerate(top)}
        ranked.append([docs[i] for i in top])
        gold.append(qrels[f"q{q}"])
        ranks.append(r)
    assert tied_gold > 0  # the case the tie rule decides does occur
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"Rprec", "recall.1,3,10"}).evaluate(run)
    ref = np.array([ev[f"q{q}"]["Rprec"] for q in range(60)])
    assert np.allclose(rprec_from_ranks(ranks), ref)
    assert np.allclose(rprec(ranked, gold), ref)
    n_gold = np.array([sum(g > 0 for g in qrels[f"q{q}"].values()) for q in range(60)])
    for k in ks:
        cap = np.array([ev[f"q{q}"][f"recall_{k}"] for q in range(60)]) * n_gold / np.minimum(k, n_gold)
        assert np.allclose(recall_cap_from_ranks(ranks, k), cap)
        assert np.allclose(recall_cap_at_k(ranked, gold, k), cap)
    # and R-precision is recall at each query's own k = |gold|
    assert np.allclose(rprec_from_ranks(ranks), [recall_from_ranks([r], len(r))[0] for r in ranks])


def test_rows_from_ranks_adds_rprec_and_recall_cap_after_the_older_rows():
    """Every split's rows: n_queries, recall@k, nDCG (as before), then rprec (k empty) and
    recall_cap@k; the values are the means of the per-query functions over the split's queries
    (tests/data/tie-handling-inconsistent: gold sets of 1 to 3 documents)."""
    from pathlib import Path

    from capgap.data import load_beir_dir
    from capgap.evaluate import EVAL_SPLITS, Judged, rows_from_ranks

    rs = load_beir_dir(
        Path(__file__).parents[1] / "data" / "tie-handling-inconsistent", split_cfg={"heldout_fraction": 0.5, "seed": 0}
    )
    qids, dids = list(rs.queries.ids), list(rs.corpus.ids)
    j = Judged.of(rs, qids, dids)
    rng = np.random.default_rng(2)
    ranks = [rank_gold(rng.integers(0, 4, size=len(dids)).astype(np.float64), g, gr) for g, gr in zip(j.gold, j.grades)]
    ks = [1, 2, 5]
    rows = rows_from_ranks(rs, j, ranks, ks, ndcg_k=3, encoder="e", method="m")
    at = {q: i for i, q in enumerate(qids)}
    for split in EVAL_SPLITS:
        mine = [(r["metric"], r["k"]) for r in rows if r["split"] == split]
        assert mine == [
            ("n_queries", ""),
            *(("recall", k) for k in ks),
            ("ndcg", 3),
            ("rprec", ""),
            *(("recall_cap", k) for k in ks),
        ]
        sel = [ranks[at[q]] for q in (qids if split == "all" else rs.split.ids(split))]
        got = {(r["metric"], r["k"]): r["value"] for r in rows if r["split"] == split}
        assert got[("rprec", "")] == pytest.approx(rprec_from_ranks(sel).mean())
        for k in ks:
            assert got[("recall_cap", k)] == pytest.approx(recall_cap_from_ranks(sel, k).mean())
            assert got[("recall_cap", k)] >= got[("recall", k)] - 1e-12  # min(k, |gold|) <= |gold|
    assert len({len(g) for g in j.gold}) > 1  # gold-set sizes vary here
