"""The paper's datasets beyond the mirror: BRIGHT (excluded_ids, "N/A", duplicate gold ids) and
BEIR (score-0 qrels, the self-retrieval convention), each loaded from fixture files in the exact
upstream format; and excluded documents removed from every method's ranking, the probe's too."""

import hashlib
import json
import zipfile

import numpy as np
import pandas as pd
import pytest

from capgap import sources
from capgap.data import load_canonical, write_canonical
from capgap.errors import DataFormatError
from capgap.probe import probe
from capgap.retrieval import rank_queries
from capgap.sources import bright_to_beir, download_beir, download_bright, obtain

# One BRIGHT category in the layout of HF xlangai/BRIGHT (configs `examples` and `documents`,
# one parquet file per category, the columns of the real files).
EXAMPLES = pd.DataFrame(
    {
        "query": ["Why do cats purr?", "How do bees see colour?", "What makes leaves fall?"],
        "reasoning": ["r1", "r2", "r3"],
        "id": ["0", "1", "2"],
        "excluded_ids": [["N/A"], ["doc_cat_2", "doc_ghost"], ["doc_bee"]],
        "gold_ids_long": [["cat.txt"], ["bee.txt"], ["leaf.txt"]],
        # query 2 repeats its gold id, as theoremqa_questions does
        "gold_ids": [["doc_cat_1", "doc_cat_2"], ["doc_bee"], ["doc_leaf", "doc_leaf"]],
        "gold_answer": ["a", "b", "c"],
    }
)
DOCUMENTS = pd.DataFrame(
    {
        "id": ["doc_cat_1", "doc_cat_2", "doc_bee", "doc_leaf", "doc_empty", "doc_other"],
        "content": [
            "Cats purr when content.",
            "Purring is a vibration.",
            "Bees see ultraviolet.",
            "Abscission layers form.",
            "",
            "Unrelated.",
        ],
    }
)


@pytest.fixture
def bright_repo(tmp_path):
    """A local copy of the HF repo layout: {config}/{category}-00000-of-00001.parquet."""
    root = tmp_path / "hf" / "main"
    for config, frame in (("examples", EXAMPLES), ("documents", DOCUMENTS)):
        (root / config).mkdir(parents=True)
        frame.to_parquet(root / config / "biology-00000-of-00001.parquet")
    return tmp_path / "hf"


def test_bright_download_and_conversion(bright_repo, tmp_path):
    base = bright_repo.as_uri() + "/{revision}/{config}/{category}-00000-of-00001.parquet"
    folder = download_bright("biology", tmp_path / "cache", base_url=base)
    assert folder.name == "bright-biology"
    rs = obtain(
        "bright-biology",
        {"source": "bright", "split": {"heldout_fraction": 0.5, "seed": 0}},
        mirror=None,
        cache_dir=tmp_path / "cache",
    )
    # the empty document is left out; every other document is kept, with its id
    assert list(rs.corpus.ids) == ["doc_cat_1", "doc_cat_2", "doc_bee", "doc_leaf", "doc_other"]
    assert rs.qrels.gold("2") == {"doc_leaf": 1}  # the duplicated gold id counted once
    assert rs.qrels.gold("0") == {"doc_cat_1": 1, "doc_cat_2": 1}
    # "N/A" means no exclusion; an excluded id not in the corpus cannot be retrieved anyway
    assert dict(rs.excluded) == {"1": ("doc_cat_2",), "2": ("doc_bee",)}
    assert rs.source["kind"] == "download:bright"
    # converted once: a second call reuses the folder without fetching
    assert (
        download_bright("biology", tmp_path / "cache", base_url="file:///nonexistent/{revision}/{config}/{category}")
        == folder
    )


def test_bright_gold_and_excluded_is_gold_never_found(tmp_path):
    # BRIGHT's run.py asserts no excluded id is gold; capgap applies its one rule (data.gold_rule):
    # the id stays gold, is removed from the ranking, and is counted
    ex = EXAMPLES.copy()
    ex.loc[0, "excluded_ids"] = ["doc_cat_1"]
    ex.to_parquet(tmp_path / "ex.parquet")
    DOCUMENTS.to_parquet(tmp_path / "docs.parquet")
    info = bright_to_beir(tmp_path / "ex.parquet", tmp_path / "docs.parquet", tmp_path / "out")
    assert info["gold_pairs_excluded"] == 1
    rs = obtain("b", {"source": "local", "path": str(tmp_path / "out")})
    assert rs.unfindable["0"] == (("doc_cat_1", 1, "excluded"),) and rs.excluded["0"] == ("doc_cat_1",)
    assert rs.qrels.gold("0") == {"doc_cat_2": 1}
    # an excluded id that is an empty document (left out of the corpus) or absent is counted apart
    ex.loc[1, "excluded_ids"] = ["doc_cat_2", "doc_ghost", "doc_empty"]
    ex.to_parquet(tmp_path / "ex3.parquet")
    info = bright_to_beir(tmp_path / "ex3.parquet", tmp_path / "docs.parquet", tmp_path / "out3")
    assert (info["exclusions_of_unknown_ids"], info["exclusions_of_empty_documents"]) == (1, 1)
    EXAMPLES.drop(columns=["excluded_ids"]).to_parquet(tmp_path / "ex2.parquet")
    with pytest.raises(DataFormatError, match="excluded_ids"):
        bright_to_beir(tmp_path / "ex2.parquet", tmp_path / "docs.parquet", tmp_path / "out2")
    with pytest.raises(ValueError, match="unknown BRIGHT category"):
        download_bright("chemistry", tmp_path)


def _zip(tmp_path, name, files):
    z = tmp_path / f"{name}.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for rel, text in files.items():
            zf.writestr(f"{name}/{rel}", text)
    return z


def test_beir_self_retrieval_and_score_zero(tmp_path):
    """An ArguAna-layout archive: queries are also corpus documents (same ids); BEIR ignores a
    retrieved document whose id equals the query id. A score-0 qrels row is not gold."""
    corpus = "".join(
        json.dumps({"_id": d, "title": "", "text": t}) + "\n"
        for d, t in (
            ("a1", "Cats are good."),
            ("a2", "Cats are bad."),
            ("a3", "Dogs are loyal."),
            ("a4", "Dogs are loud."),
        )
    )
    queries = "".join(
        json.dumps({"_id": q, "text": t}) + "\n" for q, t in (("a1", "Cats are good."), ("a3", "Dogs are loyal."))
    )
    qrels = "query-id\tcorpus-id\tscore\na1\ta2\t1\na3\ta4\t1\na3\ta2\t0\n"
    z = _zip(tmp_path, "arguana", {"corpus.jsonl": corpus, "queries.jsonl": queries, "qrels/test.tsv": qrels})
    md5 = hashlib.md5(z.read_bytes()).hexdigest()
    download_beir("arguana", tmp_path / "cache", url=z.as_uri(), md5=md5)
    rs = obtain(
        "arguana", {"source": "beir", "split": {"heldout_fraction": 0.5, "seed": 0}}, cache_dir=tmp_path / "cache"
    )
    assert rs.qrels.gold("a3") == {"a4": 1}  # score 0: judged, not relevant
    assert dict(rs.excluded) == {"a1": ("a1",), "a3": ("a3",)} and rs.source["ignore_identical_ids"] == 2
    # the convention is per dataset: off for a set not in BEIR_SELF_RETRIEVAL unless asked
    rs2 = obtain("other", {"source": "local", "path": str(tmp_path / "cache" / "arguana")})
    assert not rs2.excluded
    rs3 = obtain(
        "other", {"source": "local", "path": str(tmp_path / "cache" / "arguana"), "ignore_identical_ids": True}
    )
    assert dict(rs3.excluded) == {"a1": ("a1",), "a3": ("a3",)}
    assert sources.BEIR_SELF_RETRIEVAL == {"arguana", "quora"}
    assert set(sources.BEIR_MD5) == {"trec-covid", "nfcorpus", "fiqa", "arguana", "scidocs", "scifact", "quora"}


def test_canonical_round_trip_keeps_exclusions(bright_repo, tmp_path):
    base = bright_repo.as_uri() + "/{revision}/{config}/{category}-00000-of-00001.parquet"
    download_bright("biology", tmp_path / "cache", base_url=base)
    rs = obtain("bright-biology", {"source": "bright"}, cache_dir=tmp_path / "cache")
    write_canonical(rs, tmp_path / "canon")
    back = load_canonical(tmp_path / "canon")
    assert dict(back.excluded) == dict(rs.excluded)
    (tmp_path / "canon" / "excluded.tsv").write_text("query-id\tcorpus-id\n1\tnope\n")
    with pytest.raises(DataFormatError, match=r"excluded.tsv:2: field 'corpus-id'"):
        load_canonical(tmp_path / "canon")


def test_excluded_documents_leave_the_ranking_by_hand():
    S = np.array([[0.7, 0.8, 0.6, 0.9], [0.4, 0.3, 0.5, 0.2]], dtype=np.float32)
    gold, grades = [np.array([0]), np.array([3])], [np.ones(1), np.ones(1)]
    ranks, rows, sc = rank_queries(lambda a, b: S[a:b], 2, gold, grades, [[3], []], 3, 4)
    assert rows.tolist() == [[1, 0, 2], [2, 0, 1]] and sc[0].tolist() == pytest.approx([0.8, 0.7, 0.6])
    assert [r.tolist() for r in ranks] == [[2.0], [4.0]]
    ranks, rows, sc = rank_queries(lambda a, b: S[a:b], 2, gold, grades, [[3, 1, 2], []], 2, 4)  # one document left
    assert rows[0].tolist() == [0, -1] and np.isneginf(sc[0, 1]) and ranks[0].tolist() == [1.0]
    ranks, _, _ = rank_queries(lambda a, b: S[a:b], 2, [np.array([3]), np.array([3])], grades, [[], [3]], 2, 4)
    assert ranks[0].tolist() == [1.0]


def test_probe_with_exclusions_equals_probe_without_those_documents():
    """Excluded rows are neither gold nor non-gold: the probe must give exactly what it gives on
    the index with those rows removed (same pairs, same C scaling, same ranks). Equal up to
    rounding: the extra rows change how float sums block, and the line search's choice of its
    best point (batch._line_search) carries that into w at ~1e-6 (3.3e-6 here, 2026-12-06)."""
    rng = np.random.default_rng(0)
    D = rng.standard_normal((80, 6)).astype(np.float32)
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    golds = [[0, 5], [10], [20, 21, 22]]
    excl = [[1, 2, 3], [11], [40, 41]]
    res = probe(D, golds, C=10.0, C_max=None, excluded_sets=excl)
    for g, e, r in zip(golds, excl, res):
        keep = np.setdiff1d(np.arange(len(D)), e)
        new = {old: i for i, old in enumerate(keep)}
        ref = probe(D[keep], [[new[x] for x in g]], C=10.0, C_max=None)[0]
        assert r.objective == pytest.approx(ref.objective, rel=1e-6)
        assert r.slack == pytest.approx(ref.slack, rel=1e-5, abs=1e-9)
        assert r.certified == ref.certified and r.gold_ranks.tolist() == ref.gold_ranks.tolist()
        assert np.allclose(r.w, ref.w, atol=1e-5)


def test_probe_excluded_duplicate_is_no_conflict():
    """A gold document with an identical copy cannot be separated from it, unless the copy is
    excluded (e.g. the query itself in a self-retrieval set)."""
    rng = np.random.default_rng(1)
    D = rng.standard_normal((30, 8)).astype(np.float32)
    D[7] = D[3]
    plain, with_excl = (
        probe(D, [[3]], lp_check_max_docs=100, C_max=None)[0],
        probe(D, [[3]], lp_check_max_docs=100, excluded_sets=[[7]], C_max=None)[0],
    )
    assert plain.duplicate_conflict and not plain.certified
    assert not with_excl.duplicate_conflict and with_excl.certified and with_excl.gold_ranks.tolist() == [1]
    with pytest.raises(ValueError, match="both gold and excluded"):
        probe(D, [[3]], excluded_sets=[[3]])


def test_infonce_exclusion_equals_removing_the_candidate():
    import torch

    from capgap.finetune import infonce_loss

    s = torch.tensor([[2.0, 1.0, 3.0, -1.0], [0.5, 0.1, 0.2, 0.3]])
    gold = torch.tensor([[True, False, False, False], [False, True, False, False]])
    excl = torch.tensor([[False, False, True, False], [False, False, False, False]])
    got = infonce_loss(s, gold, 0.5, "avg", excl)
    # closed form: query 0 without candidate 2, query 1 unchanged
    l0 = -torch.log_softmax(torch.tensor([2.0, 1.0, -1.0]) / 0.5, 0)[0]
    l1 = -torch.log_softmax(s[1] / 0.5, 0)[1]
    assert float(got) == pytest.approx(float((l0 + l1) / 2), rel=1e-6)


def test_bm25_stage_removes_excluded_before_top_k(tmp_path):
    """By hand: 'apple' scores d_excl highest; with it excluded the gold d_gold ranks first."""
    from types import SimpleNamespace as NS

    from capgap import stages
    from capgap.data import Corpus, Qrels, Queries, RetrievalSet, Split

    corpus = Corpus(
        ("d_excl", "d_gold", "d_x", "d_y"), ("", "", "", ""), ("apple apple apple", "apple pie", "banana", "cherry")
    )
    rs = RetrievalSet(
        "t",
        corpus,
        Queries(("q",), ("apple",)),
        Qrels({"q": {"d_gold": 1}}),
        Split(("q",), ()),
        excluded={"q": ("d_excl",)},
    )
    write_canonical(rs, tmp_path / "data")
    rows = stages.bm25(
        NS(data=tmp_path / "data"),
        NS(metrics=tmp_path / "m.csv", run=tmp_path / "run.trec"),
        NS(bm25={"backend": "bm25s"}, ks=[1, 2], ndcg_k=2),
    )
    r1 = [r["value"] for r in rows if r["metric"] == "recall" and r["k"] == 1 and r["split"] == "all"]
    assert r1 == [1.0]
    assert "d_excl" not in (tmp_path / "run.trec").read_text()
