"""One fact stated twice differently is an error naming both places (issue 27, kind 5), and a
qrels line ending in a TAB is refused as such, not as a bad score (kind 7)."""

import pytest

from capgap.data import Queries, iter_qrels, load_beir_dir, load_qrels, load_split, split_tsv
from capgap.diagnosis import load_qrels_file, load_run_file
from capgap.errors import DataFormatError

from ..conftest import write_jsonl

FILES_SPLIT = {"train_qrels": ["train"], "heldout_qrels": ["test"]}


def _beir(tmp_path, qrels: dict[str, bytes]):
    """A BEIR folder with d1..d5, q1..q5 and the qrels files given by name (``test.tsv``)."""
    d = tmp_path / "beir"
    write_jsonl(d / "corpus.jsonl", [f'{{"_id": "d{i}", "text": "doc {i}"}}' for i in range(1, 6)])
    write_jsonl(d / "queries.jsonl", [f'{{"_id": "q{i}", "text": "query {i}"}}' for i in range(1, 6)])
    (d / "qrels").mkdir()
    for fname, raw in qrels.items():
        (d / "qrels" / fname).write_bytes(raw)
    return d


# --- kind 5 --------------------------------------------------------------------------------


def test_a_grade_conflict_with_a_file_the_split_does_not_use_names_both_files_and_lines(tmp_path):
    """(q2, d2) is grade 2 in test.tsv line 2 and grade 1 in dev.tsv line 3 (counted by hand);
    dev is not used by the split, but the dataset states two grades: an error."""
    d = _beir(
        tmp_path,
        {
            "train.tsv": b"q1\td1\t1\n",
            "test.tsv": b"q2\td1\t1\nq2\td2\t2\n",
            "dev.tsv": b"q3\td3\t1\nq3\td4\t1\nq2\td2\t1\n",
        },
    )
    with pytest.raises(DataFormatError) as e:
        load_beir_dir(d, split_cfg=FILES_SPLIT)
    assert e.value.path.endswith("dev.tsv") and e.value.line == 3 and e.value.field == "score"
    assert "('q2', 'd2') judged 2 in" in str(e.value) and "test.tsv line 2 and 1 in" in str(e.value)


def test_the_same_grade_in_a_used_and_an_unused_file_is_no_conflict(tmp_path):
    d = _beir(tmp_path, {"train.tsv": b"q1\td1\t1\n", "test.tsv": b"q2\td2\t2\n", "dev.tsv": b"q2\td2\t2\nq3\td3\t1\n"})
    rs = load_beir_dir(d, split_cfg=FILES_SPLIT)
    assert rs.split.train == ("q1",) and rs.split.heldout == ("q2",) and dict(rs.dropped_unused) == {"dev": 1}


def test_two_splits_claiming_one_query_name_both_files_and_lines(tmp_path):
    """q2 has gold in train.tsv (line 2) and in test.tsv (line 1): it would be trained on and
    evaluated as held-out."""
    d = _beir(tmp_path, {"train.tsv": b"q1\td1\t1\nq2\td3\t1\n", "test.tsv": b"q2\td2\t1\nq4\td4\t1\n"})
    with pytest.raises(DataFormatError) as e:
        load_beir_dir(d, split_cfg=FILES_SPLIT)
    msg = str(e.value)
    assert e.value.path.endswith("test.tsv") and e.value.line == 1 and e.value.field == "query-id"
    assert "query 'q2' is claimed by two splits: train in" in msg
    assert "train.tsv line 2 and held-out in" in msg and msg.count("test.tsv line 1") == 1


def test_two_qrels_files_for_one_split_are_an_error(tmp_path):
    """qrels/test.tsv and qrels/test.jsonl: which one counted used to depend on sort order."""
    d = _beir(
        tmp_path,
        {
            "train.tsv": b"q1\td1\t1\n",
            "test.tsv": b"q2\td1\t1\n",
            "test.jsonl": b'{"query-id": "q2", "corpus-id": "d2", "score": 1}\n',
        },
    )
    with pytest.raises(DataFormatError, match=r"two qrels files for split 'test': .*test\.jsonl and .*test\.tsv"):
        load_beir_dir(d, split_cfg=FILES_SPLIT)


def test_top_level_qrels_jsonl_and_tsv_are_an_error(tmp_path):
    d = tmp_path / "limit"
    write_jsonl(d / "corpus.jsonl", ['{"_id": "d1", "text": "x"}'])
    write_jsonl(d / "queries.jsonl", ['{"_id": "q1", "text": "y"}'])
    write_jsonl(d / "qrels.jsonl", ['{"query-id": "q1", "corpus-id": "d1", "score": 1}'])
    (d / "qrels.tsv").write_text("q1\td1\t2\n")
    with pytest.raises(DataFormatError, match=r"two qrels files for split 'all'"):
        load_beir_dir(d)


def test_split_file_listing_a_query_twice_names_both_lines(tmp_path):
    p = tmp_path / "split.tsv"
    p.write_text("query-id\tsplit\nq1\ttrain\nq2\theldout\nq1\theldout\n")
    with pytest.raises(DataFormatError) as e:
        load_split(p, Queries(("q1", "q2"), ("a", "b")))
    assert e.value.line == 4 and "query 'q1' listed twice: train (line 2) and heldout" in str(e.value)


def test_diagnose_qrels_with_one_pair_graded_twice_is_an_error(tmp_path):
    """capgap diagnose's qrels reader kept the last grade; now the same rule as load_qrels."""
    p = tmp_path / "q.tsv"
    p.write_text("q1\td1\t1\nq1\td2\t1\nq1\td1\t2\n")
    with pytest.raises(DataFormatError) as e:
        load_qrels_file(p)
    assert e.value.line == 3 and "judged twice: 1 (line 1) and 2" in str(e.value)
    p.write_text("q1\td1\t1\nq1\td1\t1\n")  # the same fact twice is one judgement
    assert load_qrels_file(p) == {"q1": {"d1": 1}}


# --- kind 7: a trailing TAB is named as such -------------------------------------------------


def test_a_qrels_line_with_a_trailing_tab_names_the_empty_field(tmp_path):
    """BEIR line 'q1<TAB>d1<TAB>1<TAB>': 4 columns, the 4th empty. It used to read as TREC
    (qid, iter, docid, rel) and fail with "score: not a number: ''"."""
    p = tmp_path / "test.tsv"
    p.write_bytes(b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t1\t\n")
    with pytest.raises(DataFormatError) as e:
        load_qrels(p)
    assert (e.value.line, e.value.field) == (3, "column 4")
    assert "column 4 (of 4) is empty: the line ends in a TAB; remove the trailing TAB" in str(e.value)
    assert "not a number" not in str(e.value)


@pytest.mark.parametrize(
    "line, col, why",
    [
        (b"q1\td1\t1\t \n", 4, "ends in a TAB and spaces"),
        (b"q1\t0\td1\t1\t\n", 5, "ends in a TAB"),  # TREC 4 columns + a trailing TAB
        (b"q1\t\td1\t1\n", 2, "two TABs in a row after column 1"),
        (b"\tq1\td1\t1\n", 1, "starts with a TAB"),
    ],
)
def test_every_empty_column_is_named(tmp_path, line, col, why):
    p = tmp_path / "q.tsv"
    p.write_bytes(line)
    with pytest.raises(DataFormatError, match=f"field 'column {col}'.*{why}"):
        list(iter_qrels(p))


def test_run_and_two_column_qrels_with_a_trailing_tab(tmp_path):
    run = tmp_path / "run.tsv"
    run.write_text("q1\td1\t0.5\nq1\td2\t0.4\t\n")
    with pytest.raises(DataFormatError, match=r"run\.tsv:2: field 'column 4'.*trailing TAB"):
        load_run_file(run)
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("q1\td1\t\n")
    with pytest.raises(DataFormatError, match=r"pairs\.tsv:1: field 'column 3'.*trailing TAB"):
        load_qrels_file(pairs)


def test_split_tsv_keeps_ids_with_spaces():
    assert split_tsv("f", 1, "q 1\t d1 \t2") == ["q 1", " d1 ", "2"]


# --- kind 7: docs/diagnose.md's statement of how diagnose's recall relates to the pipeline's ----


def test_diagnose_recall_is_capped_recall():
    """On a random index with |gold| from 1 to 6 and k = 3: diagnose's encoder recall equals
    pytrec_eval's recall_3 where |gold| <= 3, and recall_3 * |gold| / 3 where |gold| > 3 (capped
    recall), as docs/diagnose.md states; the pipeline's recall_cap_from_ranks agrees."""
    import numpy as np
    import pytrec_eval

    from capgap.diagnosis import diagnose

    rng = np.random.default_rng(3)
    D = rng.standard_normal((40, 8)).astype(np.float32)
    Q = rng.standard_normal((12, 8)).astype(np.float32)
    doc_ids = [f"d{i}" for i in range(40)]
    query_ids = [f"q{i}" for i in range(12)]
    qrels = {q: {f"d{j}": 1 for j in rng.choice(40, size=1 + i % 6, replace=False)} for i, q in enumerate(query_ids)}
    k = 3
    diag = diagnose(D, Q, qrels, doc_ids, query_ids, k=k)
    got = {r["query_id"]: r[f"encoder_recall@{k}"] for r in diag.rows}
    S = Q @ D.T  # no ties among random float scores
    run = {q: {d: float(S[i, j]) for j, d in enumerate(doc_ids)} for i, q in enumerate(query_ids)}
    ref = pytrec_eval.RelevanceEvaluator(qrels, {f"recall.{k}"}).evaluate(run)
    assert any(len(g) > k for g in qrels.values()) and any(len(g) <= k for g in qrels.values())
    for q, gold in qrels.items():
        plain = ref[q][f"recall_{k}"]
        want = plain if len(gold) <= k else plain * len(gold) / k
        assert got[q] == pytest.approx(want, abs=1e-6), q
    assert diag.summary[f"encoder_recall@{k}"] == pytest.approx(np.mean(list(got.values())))
    from capgap.metrics import recall_cap_from_ranks

    ranks = [
        np.array([1 + np.sum(S[i] > S[i, int(d[1:])]) for d in qrels[q]], dtype=float) for i, q in enumerate(query_ids)
    ]
    assert recall_cap_from_ranks(ranks, k) == pytest.approx([got[q] for q in query_ids], abs=1e-6)
