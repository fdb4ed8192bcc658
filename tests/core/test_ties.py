"""One evaluation rule for every method: ties, cut-offs, unretrieved documents, BM25 variants,
text-tied queries and duplicate documents (the small inputs of the issue's cases, under
tests/data/). Right values are derived by hand or by pytrec_eval on full rankings."""

import csv
import json
import math
from types import SimpleNamespace as NS

import numpy as np
import pytest

from capgap import stages
from capgap.bm25 import BM25
from capgap.probe import probe
from capgap.retrieval import (
    document_groups,
    duplicate_groups,
    rank_gold,
    rank_queries,
    rank_top,
    tie_duplicates,
    tie_index,
    topk_from_scores,
)

DATA = __import__("pathlib").Path(__file__).parents[1] / "data"
MINILM = {"model": "sentence-transformers/all-MiniLM-L6-v2", "batch_size": 64}
BM25_CFG = {"backend": "bm25s", "method": "lucene", "k1": 1.5, "b": 0.75, "stopwords": "en"}
PROBE_CFG = {"C": 1000.0, "C_max": 1.0e8, "eps": 1e-3, "max_iter": 2000, "lp_check_max_docs": 2000}


def values(path, split="all"):
    """{(metric, k): value} of one metrics.csv."""
    with open(path, encoding="utf-8") as fh:
        return {(r["metric"], r["k"]): float(r["value"]) for r in csv.DictReader(fh) if r["split"] == split}


def pipeline(tmp, case, ks, ndcg_k, methods=("probe", "pretrained", "bm25")):
    """Run the DAG's stage functions on tests/data/<case>: {method: metrics.csv path}."""
    data = tmp / "data"
    stages.data(
        None,
        [data],
        NS(
            dataset=case,
            spec={"source": "local", "path": str(DATA / case), "split": {"heldout_fraction": 0.5, "seed": 0}},
        ),
    )
    index = NS(data=data, fingerprint=tmp / "index" / "fingerprint.json")
    enc = dict(encoder_name="minilm", encoder=MINILM, ks=ks, ndcg_k=ndcg_k)
    out = {}
    if {"probe", "pretrained"} & set(methods):
        stages.index(NS(data=data), NS(fingerprint=index.fingerprint), NS(**enc))
    if "pretrained" in methods:
        out["pretrained"] = tmp / "pretrained.csv"
        stages.pretrained(index, NS(metrics=out["pretrained"], run=tmp / "pretrained.trec"), NS(**enc))
    if "probe" in methods:
        out["probe"] = tmp / "probe.csv"
        stages.probe(
            index,
            NS(metrics=out["probe"], per_query=tmp / "probe.jsonl", run=tmp / "probe.trec", w=tmp / "probe_w.npz"),
            NS(**enc, probe=PROBE_CFG),
        )
    if "bm25" in methods:
        out["bm25"] = tmp / "bm25.csv"
        stages.bm25(
            NS(data=data), NS(metrics=out["bm25"], run=tmp / "bm25.trec"), NS(bm25=BM25_CFG, ks=ks, ndcg_k=ndcg_k)
        )
    return out


# --------------------------------------------------------------------------- the rule itself
def test_topk_from_scores_stable_ties():
    idx, _ = topk_from_scores(np.array([[1.0] * 10 + [2.0]]), 3)
    assert idx.tolist() == [[10, 0, 1]]  # the README's rule: score, then lower index


def test_rank_gold_pessimistic_by_hand():
    s = np.array([3.0, 2.0, 2.0, 1.0, 2.0])
    # gold row 2 ties with non-gold rows 1 and 4: both rank first -> rank 4
    assert rank_gold(s, np.array([2])).tolist() == [4.0]
    # two tied gold rows with grades 2 and 1: the lower grade first, then the other
    assert rank_gold(s, np.array([1, 2]), np.array([2.0, 1.0])).tolist() == [4.0, 3.0]
    # a gold document that is not retrieved has no rank
    valid = np.array([True, True, False, True, True])
    assert rank_gold(s, np.array([2, 3]), None, valid).tolist() == [np.inf, 4.0]


def test_rank_top_agrees_with_rank_gold():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(2, 30))
        s = rng.integers(0, 4, n).astype(np.float32)  # many ties
        gold = np.sort(rng.choice(n, int(rng.integers(1, n + 1)), replace=False))
        grades = rng.integers(1, 3, len(gold)).astype(float)
        valid = rng.random(n) < 0.8
        ranks = rank_gold(s, gold, grades, valid)
        rows, _ = rank_top(s, n, gold, grades, valid)
        pos = {int(r): i + 1 for i, r in enumerate(rows) if r >= 0}
        assert [pos.get(int(g), np.inf) for g in gold] == ranks.tolist()
        # an independent statement of the rule: sorted() with the documented keys
        is_gold = dict(zip(gold.tolist(), grades.tolist()))
        order = sorted((i for i in range(n) if valid[i]), key=lambda i: (-s[i], i in is_gold, is_gold.get(i, 0), i))
        assert rows[: len(order)].tolist() == order


def test_identical_rows_score_identically():
    rng = np.random.default_rng(1)
    D = rng.standard_normal((50, 33)).astype(np.float32)
    D[40] = D[7]
    D[41] = D[7]
    groups = duplicate_groups(D)
    assert [g.tolist() for g in groups] == [[7, 40, 41]]
    S = tie_duplicates(rng.standard_normal((3, 50)).astype(np.float32), groups)
    assert (S[:, 40] == S[:, 7]).all() and (S[:, 41] == S[:, 7]).all()


def test_tie_index_ties_every_group_in_one_step():
    """``tie_index`` (one gather/scatter for all groups) gives each group's first member's score
    to the others, as a loop over the groups does by hand, for 1-d and 2-d scores; no groups:
    the scores are untouched."""
    rng = np.random.default_rng(3)
    groups = [np.array([2, 9, 30]), np.array([4, 5]), np.array([11, 40, 41, 47])]
    src, dst = tie_index(groups)
    assert src.tolist() == [2, 2, 4, 11, 11, 11] and dst.tolist() == [9, 30, 5, 40, 41, 47]
    for shape in ((50,), (4, 50)):
        S = rng.standard_normal(shape)
        want = S.copy()
        for g in groups:
            for j in g[1:]:
                want[..., j] = S[..., g[0]]
        assert np.array_equal(tie_duplicates(S.copy(), groups), want)
        assert np.array_equal(tie_duplicates(S.copy(), groups, (src, dst)), want)
    S = rng.standard_normal(50)
    assert np.array_equal(tie_duplicates(S.copy(), []), S) and [len(x) for x in tie_index([])] == [0, 0]
    # groups sharing a row (a caller's own) are one document: every row takes the merged group's first
    S = np.array([[1.0, 2.0, 3.0, 0.0, 5.0, 6.0]])
    assert tie_duplicates(S.copy(), [np.array([1, 2]), np.array([0, 1]), np.array([4, 5])]).tolist() == [
        [1.0, 1.0, 1.0, 0.0, 5.0, 5.0]
    ]


def test_duplicate_groups_compare_bits_whatever_the_row_width():
    """Rows are grouped when bit-identical (the vectorised hash only proposes candidates): -0.0
    and 0.0 differ, rows differing in one last bit differ; checked against a dict of the rows'
    bytes for row widths of 8, 4, 2 and 1 byte multiples."""
    rng = np.random.default_rng(2)
    for dtype, dim in ((np.float32, 6), (np.float32, 5), (np.float16, 3), (np.uint8, 7)):
        D = (rng.standard_normal((300, dim)) * 3).astype(dtype)
        D[100] = D[3]
        D[200] = D[3]
        D[150] = D[149]
        D[10] = D[11]
        D.view(np.uint8).reshape(300, -1)[10, -1] ^= 1  # one bit differs
        if dtype != np.uint8:
            D[20, 0], D[21] = -0.0, D[20]
            D[21, 0] = 0.0
        ref: dict = {}
        for i, row in enumerate(D):
            ref.setdefault(row.tobytes(), []).append(i)
        expected = sorted(v for v in ref.values() if len(v) > 1)
        assert sorted(g.tolist() for g in duplicate_groups(D)) == expected
        assert [3, 100, 200] in expected and [149, 150] in expected


def test_unretrieved_documents_never_count():
    # scores exist for every row, but only rows 0 and 1 are retrieved: gold row 3 has no rank
    S = np.array([[0.0, 0.0, 0.0, 0.0]])
    ranks, rows, _ = rank_queries(
        lambda a, b: (S[a:b], np.array([[True, True, False, False]])), 1, [np.array([3])], [np.array([1.0])], None, 4, 4
    )
    assert ranks[0].tolist() == [np.inf] and rows[0].tolist() == [0, 1, -1, -1]


# --------------------------------------------------------------------------- item 1: nDCG cut-off
def test_ndcg_deeper_than_ks(tmp_path):
    out = pipeline(tmp_path, "ndcg-cutoff-beyond-ks", [1], 5, methods=("pretrained", "probe"))
    # q1's gold is at rank 2 of the MiniLM ranking: nDCG@5 = 1/log2(3); q2..q4 at rank 1
    q1 = 1 / math.log2(3)
    pre = values(out["pretrained"])
    assert pre["ndcg", "5"] == pytest.approx((q1 + 3) / 4, abs=1e-12)  # 0.9077
    assert values(out["pretrained"], "train")["ndcg", "5"] == pytest.approx((q1 + 1) / 2, abs=1e-12)  # 0.8155 (q1, q3)
    run = (tmp_path / "pretrained.trec").read_text().splitlines()
    assert sum(line.startswith("q1 ") for line in run) == 5  # deep enough for nDCG@5
    assert values(out["probe"])["ndcg", "5"] == 1.0  # 6 docs in 384-d: every gold set separable


# --------------------------------------------------------------------------- item 2: ties
def test_exact_duplicates_pessimistic_in_every_method(tmp_path):
    out = pipeline(tmp_path, "tie-handling-inconsistent", [1, 2, 5, 10], 10)
    assert values(out["probe"])["recall", "1"] == pytest.approx(0.625, abs=1e-12)
    assert values(out["pretrained"])["recall", "1"] == pytest.approx(0.625, abs=1e-12)
    assert values(out["bm25"])["recall", "1"] == pytest.approx(13 / 24, abs=1e-12)  # 0.5417
    lines = {json.loads(x)["query_id"]: json.loads(x) for x in (tmp_path / "probe.jsonl").read_text().splitlines()}
    for q in ("q6", "q12"):  # gold d5 / d22 have identical non-gold copies d24 / c22
        assert lines[q]["recall@1"] == 0.0 and lines[q]["cause"] == "duplicate" and lines[q]["escalations"] == 0
    probe_rows = values(out["probe"])
    assert probe_rows["uncertified_duplicate", ""] == pytest.approx(2 / 12)
    status = json.loads((tmp_path / "data" / "status.json").read_text())
    assert status["duplicate_documents"]["groups"] == 2 and status["duplicate_documents"]["items"] == 4
    assert sorted(map(sorted, status["duplicate_documents"]["examples"])) == [["c22", "d22"], ["d24", "d5"]]


# --------------------------------------------------------------------------- item 3: no match, no hit
def test_bm25_documents_without_a_query_term_are_not_retrieved(tmp_path):
    out = pipeline(tmp_path, "bm25-zero-score-hits", [1, 2, 5, 10], 10, methods=("bm25",))
    v = values(out["bm25"])
    assert v["recall", "5"] == pytest.approx(0.625, abs=1e-12)
    assert v["recall", "10"] == pytest.approx(0.625, abs=1e-12)
    run = (tmp_path / "bm25.trec").read_text().splitlines()
    assert not [x for x in run if x.split()[0] in ("s1", "s2", "s3", "s4")]  # nothing matched: nothing retrieved
    bm = BM25(["cat sat", "dog ran"])
    assert bm.matches(["the of and", "cat"]).tolist() == [[False, False], [True, False]]


# --------------------------------------------------------------------------- item 4: BM25 variants
def test_bm25_robertson_variants_named_and_aligned():
    from capgap.data import load_beir_dir

    rs = load_beir_dir(DATA / "bm25-robertson-backends-diverge")
    docs, queries = rs.corpus.passages(), list(rs.queries.texts)
    a = BM25(docs, backend="bm25s", method="robertson")
    b0 = BM25(docs, backend="rank-bm25", method="robertson", epsilon=0.0)
    b = BM25(docs, backend="rank-bm25", method="robertson")  # rank-bm25's epsilon 0.25
    # epsilon = 0: the same function up to rank-bm25's constant factor (k1 + 1) on the tf part,
    # so the same ranking
    assert np.allclose(2.5 * a.scores(queries), b0.scores(queries), rtol=1e-5, atol=1e-6)
    # 'common' is in 18 of 24 documents: Okapi idf = ln(6.5/18.5) < 0; bm25s clips it at 0,
    # rank-bm25 replaces it with 0.25 x mean idf > 0
    common = BM25(["common"], backend="bm25s")  # noqa: F841  (tokeniser keeps the word)
    s_a, s_b = a.scores(["common"])[0], b.scores(["common"])[0]
    assert (s_a == 0).all() and (s_b > 0).sum() == 18
    assert "clipped at 0" in a.variant and "epsilon=0.25" in b.variant

    def recall10(bm):
        qids = list(rs.queries.ids)
        S, M = bm.scores_and_matches(queries)
        got = []
        for i, q in enumerate(qids):
            gold = sorted(rs.corpus.ids.index(d) for d in rs.qrels.gold(q))
            got.append(float(np.mean(rank_gold(S[i], np.array(gold), None, M[i]) <= 10)))
        return float(np.mean(got))

    assert recall10(b) == pytest.approx(0.75)  # as the case measured
    assert recall10(a) == pytest.approx(recall10(b0))


# --------------------------------------------------------------------------- item 5: Unicode
def test_bm25_nfd_text_matches_nfc_queries(tmp_path):
    out = pipeline(tmp_path, "nfd-unicode", [1], 5, methods=("bm25",))
    v = values(out["bm25"])
    assert v["recall", "1"] == 1.0 and v["ndcg", "5"] == 1.0
    from capgap.bm25 import tokenize

    assert tokenize(["cafe\u0301 cre\u0300me"]) == tokenize(["café crème"]) == [["café", "crème"]]


# --------------------------------------------------------------------------- item 10: tied queries
def test_tied_queries_share_one_w():
    D = np.eye(6, dtype=np.float32)[:, :4].copy()  # rows 4, 5 are zero vectors
    D[4] = [0.5, 0.5, 0.0, 0.0]
    D[5] = [0.0, 0.0, 0.5, 0.5]
    gold = [[0], [1]]  # two queries with identical text, different single gold documents
    untied = probe(D, gold, **PROBE_CFG)
    assert [r.recall_at(1) for r in untied] == [1.0, 1.0]
    tied = probe(D, gold, tie_groups=["same text", "same text"], **PROBE_CFG)
    assert np.array_equal(tied[0].w, tied[1].w)
    assert np.mean([r.recall_at(1) for r in tied]) == 0.5  # at most one can rank its gold first
    assert sorted(str(r.cause) for r in tied) == ["None", "tied"] and all(r.tied == 2 for r in tied)
    assert all(r.extra["escalations"] == 0 for r in tied)  # crossing gold sets: C is not raised


# --------------------------------------------------------------------------- item 11: by construction
def test_certified_by_construction_is_labelled():
    rng = np.random.default_rng(3)
    D = rng.standard_normal((20, 64)).astype(np.float32)  # n <= dim + 1, general position
    res = probe(D, [[0, 5], [3]], **PROBE_CFG)
    assert all(r.by_construction and r.by_construction.startswith("n_docs <= dim + 1") for r in res)
    D = rng.standard_normal((500, 16)).astype(np.float32)
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    single, pair = probe(D, [[4], [4, 9]], **PROBE_CFG)
    assert single.by_construction.startswith("single gold") and single.certified
    assert pair.by_construction is None
    D[9] = D[4]  # a twin: nothing is guaranteed, and the twin ranks first
    twin = probe(D, [[4]], **PROBE_CFG)[0]
    assert twin.by_construction is None and twin.cause == "duplicate" and twin.gold_ranks.tolist() == [2.0]


# --------------------------------------------------------------------------- found by review
def test_near_identical_text_twins_are_twins():
    """The same text embedded in two batches can differ in the last bits: documents with
    identical text are passed as duplicates and treated exactly like bit-identical rows."""
    rng = np.random.default_rng(5)
    D = rng.standard_normal((300, 16)).astype(np.float32)
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    D[7] = D[3] + np.float32(1.4e-7)  # d7 has d3's text; its embedding differs by padding noise
    alone = probe(D, [[3]], **PROBE_CFG)[0]
    assert alone.certified  # geometrically the rows differ, and the probe finds a w
    twin = probe(D, [[3]], duplicates=[[3, 7]], **PROBE_CFG)[0]
    assert twin.cause == "duplicate" and not twin.certified and twin.gold_ranks.tolist() == [2.0]
    assert twin.by_construction is None and twin.extra["escalations"] == 0


def test_document_groups_merge_text_and_rows():
    from capgap.data import Corpus, Qrels, Queries, RetrievalSet, Split

    rs = RetrievalSet(
        "t",
        Corpus(("a", "b", "c", "d"), ("", "", "", ""), ("x", "y", "x", "z")),
        Queries(("q",), ("x",)),
        Qrels({"q": {"a": 1}}),
        Split(("q",), ()),
    )
    E = np.eye(4, dtype=np.float32)
    E[3] = E[1]  # rows b and d are bit-identical, texts a and c are identical
    assert [g.tolist() for g in document_groups(rs.corpus, E)] == [[0, 2], [1, 3]]
    assert [g.tolist() for g in document_groups(rs.corpus)] == [[0, 2]]


def test_rank_bm25_robertson_epsilon0_equals_bm25s_with_empty_documents():
    # documents that are empty after stopword removal must not change rank-bm25's avgdl
    docs = [
        "bird",
        "dog fish bird cat bird cat",
        "fish",
        "dog dog fish",
        "bird bird dog cat dog",
        "cat dog fish bird dog dog fish bird",
    ] + ["the of and"] * 8
    a = BM25(docs, backend="bm25s", method="robertson").scores(["cat fish"])[0]
    b = BM25(docs, backend="rank-bm25", method="robertson", epsilon=0.0).scores(["cat fish"])[0]
    assert np.allclose(2.5 * a, b, rtol=1e-5, atol=1e-6)


def test_split_ids_may_start_with_hash(tmp_path):
    from capgap.data import load_beir_dir, load_canonical, write_canonical

    src = tmp_path / "src"
    (src / "qrels").mkdir(parents=True)
    (src / "corpus.jsonl").write_text('{"_id": "d1", "text": "alpha"}\n{"_id": "d2", "text": "beta"}\n')
    (src / "queries.jsonl").write_text('{"_id": "#q1", "text": "alpha"}\n{"_id": "q2", "text": "beta"}\n')
    (src / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n#q1\td1\t1\nq2\td2\t1\n")
    rs = load_beir_dir(src, split_cfg={"heldout_fraction": 0.5, "seed": 0})
    write_canonical(rs, tmp_path / "canon")
    back = load_canonical(tmp_path / "canon")
    assert sorted(back.split.train + back.split.heldout) == ["#q1", "q2"] and back.split.rule == rs.split.rule
