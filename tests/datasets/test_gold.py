"""Gold that no method can find (issue 27, kind 2): a gold id whose document is absent from the
corpus, empty, or excluded for that query stays in the gold set and is never retrieved, as the
benchmarks' own evaluators have it (BRIGHT's run.py: ground_truth[q][gid] = 1 for every gold id,
then pytrec_eval; BEIR's EvaluateRetrieval and MTEB: pytrec_eval on the qrels as written). One
rule (capgap.data.gold_rule) for every loader, counted in status.json and the report."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import pytrec_eval

from capgap.data import describe, load_beir_dir, load_canonical, write_canonical
from capgap.evaluate import Judged, rows_from_ranks
from capgap.io import write_jsonl
from capgap.report.datasets import _unfindable_cell, render_datasets
from capgap.sources import bright_to_beir, obtain

N10 = Path(__file__).parents[1] / "data" / "n10-bright-gold-dropped" / "parquet"


def _value(rows, method, metric, k, split="all"):
    return next(
        r["value"]
        for r in rows
        if r["method"] == method and r["metric"] == metric and r["k"] == k and r["split"] == split
    )


def _bright_ground_truth():
    """BRIGHT's run.py ground truth: every gold_ids entry of every example, whatever the documents hold."""
    ex = pd.read_parquet(N10 / "examples.parquet")
    return {str(q): {str(d): 1 for d in g} for q, g in zip(ex["id"], ex["gold_ids"])}


def _pytrec(run, qrels, measures=("recall_10", "ndcg_cut_10")):
    """Mean over the judged queries of pytrec_eval's per-query measures (BRIGHT averages the same way)."""
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"recall", "ndcg_cut"})
    res = ev.evaluate(run)
    return {m: float(np.mean([res[q][m] for q in qrels])) for m in measures}


def test_bright_case_n10_matches_brights_own_evaluation(tmp_path):
    """Case n10: q7's gold d24 is empty, q8's gold d99 is absent. capgap's pre-trained and probe
    recall@10 / nDCG@10 equal pytrec_eval of capgap's own rankings against BRIGHT's ground truth
    (every gold id), not against the shrunken gold sets (which gave 1.000)."""
    from capgap.encoders import EncoderSpec, load_encoder
    from capgap.evaluate import evaluate_encoder
    from capgap.index import build_index
    from capgap.probe import ProbeConfig
    from capgap.probe import evaluate as probe_evaluate

    info = bright_to_beir(N10 / "examples.parquet", N10 / "documents.parquet", tmp_path / "conv")
    assert (info["gold_pairs"], info["gold_pairs_absent"], info["gold_pairs_empty"]) == (21, 1, 1)
    rs = load_beir_dir(tmp_path / "conv", "n10", {"heldout_fraction": 0.5, "seed": 0})
    assert dict(rs.unfindable) == {"q7": (("d24", 1, "empty"),), "q8": (("d99", 1, "absent"),)}
    enc = load_encoder(EncoderSpec("minilm", "sentence-transformers/all-MiniLM-L6-v2"), threads=2)
    idx = build_index(rs.corpus, enc, tmp_path / "index", progress=False)
    truth = _bright_ground_truth()
    for method in ("pretrained", "probe"):
        if method == "pretrained":
            rows, run = evaluate_encoder(rs, enc, idx, [1, 2, 5, 10], 10, "minilm", "pretrained")
        else:
            rows, records, run = probe_evaluate(rs, idx, ProbeConfig.from_config(None), "minilm", [1, 2, 5, 10], 10)
            # per_query.jsonl counts the unfindable gold as the rows do: q7 and q8 find 3 of 4 (by hand)
            by_q = {r["query_id"]: r for r in records}
            assert (by_q["q7"]["n_gold"], by_q["q7"]["n_unfindable"], by_q["q7"]["recall@10"]) == (4, 1, 0.75)
            assert (by_q["q8"]["n_gold"], by_q["q8"]["n_unfindable"], by_q["q8"]["recall@10"]) == (4, 1, 0.75)
            assert sum(r["recall@10"] for r in records) / len(records) == pytest.approx(23 / 24)
        # the run as a pytrec_eval dict: rank r gets score depth - r (the run's own order); excluded ids are not in it
        trec = {
            q: {run.doc_ids[j]: float(len(row) - r) for r, j in enumerate(row) if j >= 0}
            for q, row in zip(run.query_ids, run.rows)
        }
        for q, docs in rs.excluded.items():
            assert not set(docs) & set(trec[q])
        want = _pytrec(trec, truth)
        assert _value(rows, method, "recall", 10) == pytest.approx(want["recall_10"], abs=1e-9)
        assert _value(rows, method, "ndcg", 10) == pytest.approx(want["ndcg_cut_10"], abs=1e-9)
        assert want["recall_10"] < 1.0  # d24 and d99 can never be found
    pre = _pytrec(
        {
            q: {run.doc_ids[j]: float(-r) for r, j in enumerate(row) if j >= 0}
            for q, row in zip(run.query_ids, run.rows)
        },
        truth,
    )
    assert pre["recall_10"] == pytest.approx(23 / 24)  # the probe finds every findable gold: (10 + 3/4 + 3/4) / 12


def _beir_folder(root, qrels_name="qrels/test.tsv", qrels_text=None, excluded=None):
    write_jsonl(
        root / "corpus.jsonl",
        [
            {"_id": "d1", "title": "", "text": "apple pie"},
            {"_id": "d2", "title": "", "text": "pear"},
            {"_id": "d3", "title": "", "text": ""},
            {"_id": "d4", "title": "", "text": "plum"},
        ],
    )
    write_jsonl(
        root / "queries.jsonl",
        [{"_id": "q1", "text": "apple?"}, {"_id": "q2", "text": "pear?"}, {"_id": "q3", "text": "plum?"}],
    )
    p = root / qrels_name
    p.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        ("q1", "d1", 1),
        ("q1", "d3", 2),
        ("q2", "d2", 1),
        ("q2", "ghost", 1),
        ("q2", "ghost0", 0),
        ("q3", "d4", 1),
        ("q3", "d2", 1),
    ]
    if p.suffix == ".jsonl":
        write_jsonl(p, [{"query-id": q, "corpus-id": d, "score": g} for q, d, g in rows])
    else:
        p.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in rows))
    (root / "excluded.tsv").write_text("query-id\tcorpus-id\nq3\td2\n")
    return root


WANT = {"q1": (("d3", 2, "empty"),), "q2": (("ghost", 1, "absent"),), "q3": (("d2", 1, "excluded"),)}


@pytest.mark.parametrize("layout", ["beir", "limit", "local"])
def test_every_beir_layout_loader_keeps_unfindable_gold(tmp_path, layout):
    """BEIR (qrels/test.tsv), LIMIT (qrels.jsonl) and a local folder through ``obtain``: the same
    three unfindable pairs (empty, absent, excluded), the same counts, and recall@1 by hand:
    each query's findable gold ranked first, its unfindable one never: q1 1/2, q2 1/2, q3 1/2."""
    root = _beir_folder(tmp_path / "ds", "qrels.jsonl" if layout == "limit" else "qrels/test.tsv")
    rs = obtain("ds", {"source": "local", "path": str(root)}) if layout == "local" else load_beir_dir(root)
    assert dict(rs.unfindable) == WANT and rs.corpus.empty_ids == ("d3",)
    assert rs.qrels.gold("q2") == {"d2": 1} and rs.excluded["q3"] == ("d2",)
    st = describe(rs)
    assert st["unfindable_gold"]["all"] == {"gold_pairs": 6, "absent": 1, "empty": 1, "excluded": 1}
    assert st["empty_documents_left_out"] == 1
    j = Judged.of(rs, list(rs.queries.ids), rs.corpus.ids)
    ranks = [np.ones(len(g)) for g in j.gold]  # every findable gold at rank 1
    rows = rows_from_ranks(rs, j, ranks, [1], 10)
    assert _value(rows, "", "recall", 1) == pytest.approx(0.5)
    # nDCG@10 by hand: q1 gains 1 at rank 1 of ideal (2, 1): 1 / (2 + 1/log2 3); q2, q3: 1 / (1 + 1/log2 3)
    want = np.mean([1 / (2 + 1 / np.log2(3)), 1 / (1 + 1 / np.log2(3)), 1 / (1 + 1 / np.log2(3))])
    assert _value(rows, "", "ndcg", 10) == pytest.approx(want)
    # the canonical copy keeps them (unfindable.tsv)
    write_canonical(rs, tmp_path / "canon")
    back = load_canonical(tmp_path / "canon", name="ds")
    assert (
        dict(back.unfindable) == WANT
        and rows_from_ranks(back, Judged.of(back, list(back.queries.ids), back.corpus.ids), ranks, [1], 10) == rows
    )


def test_bright_loader_and_generated_follow_the_same_rule(tmp_path):
    """BRIGHT through the conversion and ``obtain``; the generator (``assemble``) has none."""
    bright_to_beir(N10 / "examples.parquet", N10 / "documents.parquet", tmp_path / "conv")
    rs = obtain("b", {"source": "local", "path": str(tmp_path / "conv")})
    assert describe(rs)["unfindable_gold"]["all"] == {"gold_pairs": 21, "absent": 1, "empty": 1, "excluded": 0}
    gen = obtain("g", {"source": "generated", "generator": {"n_queries": 10, "n_distractors": 10}})
    assert describe(gen)["unfindable_gold"]["all"]["absent"] == 0 and not gen.unfindable


def test_query_with_only_unfindable_gold_is_dropped_and_counted(tmp_path):
    root = _beir_folder(tmp_path / "ds")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\tghost\t1\nq3\td4\t1\n")
    rs = load_beir_dir(root)
    assert rs.queries.ids == ("q1", "q3") and rs.dropped_unfindable == 1
    assert describe(rs)["dropped_queries_gold_unfindable"] == 1


def test_report_dataset_section_counts_unfindable_gold():
    status = {
        "dataset": "n10",
        "n_docs": 24,
        "n_queries": 12,
        "n_train": 6,
        "n_heldout": 6,
        "dropped_queries_without_gold": 0,
        "source": {"kind": "path"},
        "split_rule": "r",
        "text_normalization": "NFC",
        "unfindable_gold": {
            "train": {"gold_pairs": 8, "absent": 0, "empty": 0, "excluded": 0},
            "heldout": {"gold_pairs": 13, "absent": 1, "empty": 1, "excluded": 0},
            "all": {"gold_pairs": 21, "absent": 1, "empty": 1, "excluded": 0},
        },
    }
    cell = "2 of 21 gold pairs (absent 1, empty 1; train 0, held-out 2)"
    assert _unfindable_cell(status) == cell
    assert _unfindable_cell({}) == "not recorded"
    text = "\n".join(
        render_datasets(
            [status], pd.DataFrame({"dataset": [], "method": [], "split": [], "metric": [], "value": []}), {}
        )
    )
    assert "gold no method can find" in text and cell in text


def test_qrels_ids_that_match_no_corpus_id_are_named_with_both_sides(tmp_path):
    """Every gold id absent (here upper-case ids against lower-case ones): the error says that no
    gold can be found, with the counts by reason and example ids from both files, not only
    "no query has a gold document"."""
    write_jsonl(tmp_path / "corpus.jsonl", [{"_id": f"d{i}", "title": "", "text": f"text {i}"} for i in range(3)])
    write_jsonl(tmp_path / "queries.jsonl", [{"_id": "q1", "text": "x"}, {"_id": "q2", "text": "y"}])
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tD1\t1\nq2\tD2\t1\nq2\tD0\t1\n")
    with pytest.raises(ValueError) as e:
        load_beir_dir(tmp_path, "ids", {"heldout_fraction": 0.5, "seed": 0})
    msg = str(e.value)
    assert "3 gold judgements of 2 queries, 3 absent from the corpus, 0 empty, 0 excluded" in msg
    assert "['D1', 'D2', 'D0']" in msg and "['d0', 'd1', 'd2']" in msg


@pytest.mark.parametrize("written, meant", [("d1 ", "d1"), ("D1", "d1"), ("e\u0301", "\u00e9"), ("d9", None)])
def test_an_absent_gold_id_names_the_corpus_id_it_was_likely_meant_to_be(written, meant):
    from capgap.data.assemble import near_id

    known = {"d1", "d2", "\u00e9"}
    folded = {k.casefold(): k for k in known}
    assert near_id(written, known, folded) == meant
