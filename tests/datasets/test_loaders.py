"""Loaders on the real LIMIT-small and SciFact files, and on every kind of bad input."""

import json

import pytest

from capgap.data import (
    Qrels,
    load_beir_dir,
    load_canonical,
    load_corpus,
    load_qrels,
    load_queries,
    split_queries,
    write_canonical,
)
from capgap.errors import DataFormatError

from ..conftest import write_jsonl


# ---------------------------------------------------------------- real data
def test_limit_small_real(mirror):
    rs = load_beir_dir(mirror / "limit-small", split_cfg={"heldout_fraction": 0.5, "seed": 0})
    # counts of the LIMIT-small release (google-deepmind/limit)
    assert len(rs.corpus) == 46 and len(rs.queries) == 1000
    assert rs.qrels.n_judgements() == 2000
    assert all(len(rs.qrels.gold(q)) == 2 for q in rs.queries.ids)
    first = json.loads((mirror / "limit-small" / "corpus.jsonl").read_text().splitlines()[0])["_id"]
    assert rs.corpus.ids[0] == first and " " in first  # ids are names with spaces, in file order
    assert len(rs.split.train) == 500 and len(rs.split.heldout) == 500
    assert rs.dropped_queries == 0


def test_scifact_real_uses_dataset_split(mirror):
    rs = load_beir_dir(mirror / "scifact")
    # README: 5,183 abstracts, 1,109 claims = 809 train + 300 test; 919 train and 339 test rows
    assert len(rs.corpus) == 5183
    assert len(rs.queries) == 1109
    assert len(rs.split.train) == 809 and len(rs.split.heldout) == 300
    assert sum(len(rs.qrels.judgements[q]) for q in rs.split.heldout) == 339
    assert sum(len(rs.qrels.judgements[q]) for q in rs.split.train) == 919
    assert rs.split.rule.startswith("dataset qrels files")


def test_canonical_roundtrip(mirror, tmp_path):
    rs = load_beir_dir(mirror / "limit-small")
    write_canonical(rs, tmp_path)
    back = load_canonical(tmp_path, "limit-small")
    assert back.corpus == rs.corpus and back.queries == rs.queries
    assert back.split.train == rs.split.train and back.split.heldout == rs.split.heldout
    assert {q: dict(v) for q, v in back.qrels.judgements.items()} == {
        q: dict(v) for q, v in rs.qrels.judgements.items()
    }


# ---------------------------------------------------------------- split rule
def test_split_is_seeded_stable_and_exact():
    ids = [f"q{i}" for i in range(101)]
    a = split_queries(ids, 0.3, seed=7)
    b = split_queries(list(reversed(ids)), 0.3, seed=7)
    assert len(a.heldout) == 30 and len(a.train) == 71  # round(0.3 * 101)
    assert set(a.heldout) == set(b.heldout)  # file order does not matter
    assert set(split_queries(ids, 0.3, seed=8).heldout) != set(a.heldout)
    with pytest.raises(ValueError):
        split_queries(ids, 1.5)


# ---------------------------------------------------------------- bad input
def _dataset(tmp_path, corpus=None, queries=None, qrels=None):
    d = tmp_path / "ds"
    write_jsonl(
        d / "corpus.jsonl",
        corpus or ['{"_id": "d1", "title": "", "text": "apple"}', '{"_id": "d2", "title": "T", "text": "pear"}'],
    )
    write_jsonl(d / "queries.jsonl", queries or ['{"_id": "q1", "text": "apple?"}', '{"_id": "q2", "text": "pear?"}'])
    (d / "qrels").mkdir(exist_ok=True)
    (d / "qrels" / "test.tsv").write_text(qrels or "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    return d


def test_malformed_json_names_file_and_line(tmp_path):
    d = _dataset(tmp_path, corpus=['{"_id": "d1", "text": "a"}', '{"_id": "d2", "text": '])
    with pytest.raises(DataFormatError) as e:
        load_beir_dir(d)
    assert e.value.line == 2 and e.value.path.endswith("corpus.jsonl")
    assert "corpus.jsonl:2" in str(e.value) and "malformed JSON" in str(e.value)


def test_missing_id(tmp_path):
    d = _dataset(tmp_path, queries=['{"_id": "q1", "text": "a"}', '{"text": "b"}'])
    with pytest.raises(DataFormatError) as e:
        load_beir_dir(d)
    assert (e.value.line, e.value.field) == (2, "_id")


def test_duplicate_ids(tmp_path):
    d = _dataset(
        tmp_path, corpus=['{"_id": "d1", "text": "a"}', '{"_id": "d2", "text": "b"}', '{"_id": "d1", "text": "c"}']
    )
    with pytest.raises(DataFormatError) as e:
        load_beir_dir(d)
    assert (e.value.line, e.value.field) == (3, "_id") and "first on line 1" in str(e.value)


def test_qrels_unknown_ids(tmp_path, caplog):
    # a gold document absent from the corpus stays gold, never found (data.gold_rule, as
    # pytrec_eval / BEIR's evaluation keep it), logged with its file and line; an unknown query is an error
    d = _dataset(tmp_path, qrels="query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\tnope\t1\nq2\td2\t1\n")
    with caplog.at_level("WARNING"):
        rs = load_beir_dir(d)
    assert dict(rs.unfindable) == {"q2": (("nope", 1, "absent"),)} and rs.qrels.gold("q2") == {"d2": 1}
    assert "test.tsv line 3: gold document 'nope' of query 'q2' is not in corpus.jsonl" in caplog.text
    d2 = _dataset(tmp_path / "b", qrels="q1\td1\t1\nqX\td2\t1\n")  # no header
    with pytest.raises(DataFormatError) as e:
        load_beir_dir(d2)
    assert (e.value.line, e.value.field) == (2, "query-id")


def test_query_without_gold_is_dropped_and_counted(tmp_path):
    # q2's only judgement has score 0: not relevant, so q2 has no gold and is dropped
    d = _dataset(tmp_path, qrels="query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t0\n")
    rs = load_beir_dir(d)
    assert rs.queries.ids == ("q1",) and rs.dropped_queries == 1


def test_score_zero_not_relevant():
    q = Qrels({"q": {"a": 1, "b": 0, "c": -1, "d": 2}})
    assert q.gold("q") == {"a": 1, "d": 2}


def test_empty_text(tmp_path):
    # an empty document is left out (nothing to embed or match), counted; its gold stays gold,
    # never found; q2's only gold is that document, so q2 is dropped and counted apart
    d = _dataset(tmp_path, corpus=['{"_id": "d1", "text": "a"}', '{"_id": "d2", "title": "", "text": "  "}'])
    rs = load_beir_dir(d)
    assert rs.corpus.ids == ("d1",) and rs.corpus.empty_ids == ("d2",)
    assert rs.queries.ids == ("q1",) and rs.dropped_unfindable == 1 and rs.dropped_queries == 0
    d = _dataset(tmp_path / "all", corpus=['{"_id": "d1", "text": ""}'])
    with pytest.raises(DataFormatError, match="no documents with text"):
        load_beir_dir(d)
    d = _dataset(tmp_path / "q", queries=['{"_id": "q1", "text": ""}'])
    with pytest.raises(DataFormatError) as e:
        load_queries(d / "queries.jsonl")
    assert (e.value.line, e.value.field) == (1, "text")


def test_bad_score_and_columns(tmp_path):
    p = tmp_path / "q.tsv"
    p.write_text("q1\td1\thigh\n")
    with pytest.raises(DataFormatError) as e:
        load_qrels(p)
    assert e.value.field == "score"
    p.write_text("q1\td1\n")
    with pytest.raises(DataFormatError, match="columns"):
        load_qrels(p)


def test_trec_qrels_and_jsonl_qrels(tmp_path):
    p = tmp_path / "trec.txt"
    p.write_text("q1 0 d1 1\nq1 0 d2 0\n")
    assert dict(load_qrels(p).judgements["q1"]) == {"d1": 1, "d2": 0}
    j = tmp_path / "qrels.jsonl"
    j.write_text(
        json.dumps({"query-id": "q1", "corpus-id": "d1", "score": 1})
        + "\n"
        + json.dumps({"query-id": "q1", "corpus-id": "d2"})
        + "\n"
    )
    with pytest.raises(DataFormatError) as e:
        load_qrels(j)
    assert (e.value.line, e.value.field) == (2, "score")


def test_numeric_ids_are_strings(tmp_path):
    write_jsonl(tmp_path / "c.jsonl", ['{"_id": 12, "title": "t", "text": "x"}'])
    assert load_corpus(tmp_path / "c.jsonl").ids == ("12",)


# ---------------------------------------------------------------- NFCorpus's quirks, in miniature
def _beir(tmp_path, qrels: dict[str, bytes], corpus=None, queries=None):
    """A BEIR folder whose qrels files are written byte for byte (CRLF where given)."""
    d = tmp_path / "beir"
    write_jsonl(
        d / "corpus.jsonl", corpus or [f'{{"_id": "d{i}", "title": "", "text": "doc {i}"}}' for i in range(1, 6)]
    )
    write_jsonl(d / "queries.jsonl", queries or [f'{{"_id": "q{i}", "text": "query {i}"}}' for i in range(1, 6)])
    (d / "qrels").mkdir()
    for stem, raw in qrels.items():
        (d / "qrels" / f"{stem}.tsv").write_bytes(raw)
    return d


FILES_SPLIT = {"train_qrels": ["train"], "heldout_qrels": ["test"]}


def test_crlf_graded_qrels_keep_ids_and_grades(tmp_path):
    # NFCorpus's qrels end every line with CRLF (the last one too) and grade 2 / 1
    d = _beir(
        tmp_path,
        {
            "train": b"query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\nq1\td2\t1\r\n",
            "test": b"query-id\tcorpus-id\tscore\r\nq2\td3\t2\r\nq2\td4\t1\r\nq2\td5\t0\r\nq3\td1\t1",
        },
    )
    rs = load_beir_dir(d, split_cfg=FILES_SPLIT)
    ids = set(rs.queries.ids) | {doc for q in rs.queries.ids for doc in rs.qrels.judgements[q]}
    assert ids == {"q1", "q2", "q3", "d1", "d2", "d3", "d4", "d5"}  # no id carries the '\r'
    assert rs.qrels.gold("q2") == {"d3": 2, "d4": 1}  # grades as written; 0 is not gold
    assert dict(rs.qrels.judgements["q2"]) == {"d3": 2, "d4": 1, "d5": 0}
    assert rs.split.train == ("q1",) and rs.split.heldout == ("q2", "q3")
    # the canonical copy (LF, what later stages read) keeps the grades
    write_canonical(rs, tmp_path / "canon")
    assert b"\r" not in (tmp_path / "canon" / "qrels.tsv").read_bytes()
    assert load_canonical(tmp_path / "canon").qrels.gold("q2") == {"d3": 2, "d4": 1}


def test_dev_only_queries_are_dropped_from_both_splits_and_counted(tmp_path):
    from capgap.data import describe

    # q1 train, q2 test, q3 and q4 only in dev, q5 judged nowhere
    d = _beir(
        tmp_path,
        {"train": b"q1\td1\t1\r\n", "dev": b"q3\td2\t2\r\nq4\td3\t1\r\nq4\td4\t1\r\n", "test": b"q2\td1\t1\r\n"},
    )
    rs = load_beir_dir(d, split_cfg=FILES_SPLIT)
    assert rs.split.train == ("q1",) and rs.split.heldout == ("q2",)
    assert rs.queries.ids == ("q1", "q2")
    assert rs.dropped_queries == 1 and dict(rs.dropped_unused) == {"dev": 2}  # q5; q3 and q4
    st = describe(rs)
    assert st["dropped_queries_without_gold"] == 1 and st["dropped_queries_unused_qrels"] == {"dev": 2}
    assert "unused=['dev'] (2 queries judged only there dropped)" in st["split_rule"]
    # dev named in train_qrels: q3 and q4 train, nothing dropped for dev
    rs = load_beir_dir(d, split_cfg={"train_qrels": ["train", "dev"], "heldout_qrels": ["test"]})
    assert rs.split.train == ("q1", "q3", "q4") and dict(rs.dropped_unused) == {}


def test_grade_conflict_across_qrels_files_names_both_files_and_lines(tmp_path):
    # (q1, d2) is 1 in train (line 3) and 2 in dev (line 2): merged, that used to be last-file-wins
    d = _beir(
        tmp_path,
        {
            "train": b"query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\nq1\td2\t1\r\n",
            "dev": b"query-id\tcorpus-id\tscore\r\nq1\td2\t2\r\n",
            "test": b"q2\td1\t1\r\n",
        },
    )
    with pytest.raises(DataFormatError) as e:
        load_beir_dir(d, split_cfg={"train_qrels": ["train", "dev"], "heldout_qrels": ["test"]})
    msg = str(e.value)
    assert e.value.path.endswith("dev.tsv") and e.value.line == 2 and e.value.field == "score"
    assert "train.tsv line 3" in msg and "dev.tsv line 2" in msg and "judged 1" in msg and "and 2" in msg
    # a fraction split merges every file: the same error
    with pytest.raises(DataFormatError, match="train.tsv line 3"):
        load_beir_dir(d, split_cfg={"heldout_fraction": 0.5, "train_qrels": ["none"]})
    # dev unused by the split: still one dataset stating two grades for (q1, d2), an error
    # naming both places (issue 27, kind 5), not a silent choice of the used file's grade
    with pytest.raises(DataFormatError) as e:
        load_beir_dir(d, split_cfg=FILES_SPLIT)
    assert e.value.path.endswith("dev.tsv") and e.value.line == 2
    assert "judged 1 in" in str(e.value) and "train.tsv line 3 and 2 in" in str(e.value)
    # a grade 0 in one file no longer silently removes the gold of another
    d0 = _beir(tmp_path / "z", {"train": b"q1\td1\t1\n", "dev": b"q1\td1\t0\n", "test": b"q2\td1\t1\n"})
    with pytest.raises(DataFormatError, match="judged 1 in .*train.tsv line 1 and 0 in .*dev.tsv line 1"):
        load_beir_dir(d0, split_cfg={"train_qrels": ["train", "dev"], "heldout_qrels": ["test"]})


def test_same_grade_in_two_merged_files_is_one_judgement(tmp_path):
    d = _beir(tmp_path, {"a": b"q1\td1\t2\nq2\td2\t1\n", "b": b"q1\td1\t2\nq3\td3\t1\n"})
    rs = load_beir_dir(d, split_cfg={"heldout_fraction": 0.5})
    assert dict(rs.qrels.judgements["q1"]) == {"d1": 2} and rs.qrels.n_judgements() == 3


def test_grade_conflict_within_one_file_names_both_lines(tmp_path):
    p = tmp_path / "q.tsv"
    p.write_bytes(b"q1\td1\t1\r\nq1\td2\t1\r\nq1\td1\t2\r\n")
    with pytest.raises(DataFormatError) as e:
        load_qrels(p)
    assert e.value.line == 3 and "(line 1)" in str(e.value)


def test_duplicate_documents_and_queries_are_counted(tmp_path):
    from capgap.data import describe

    # d1/d4 identical passages (title + text); q1/q3 equal after whitespace collapsing
    corpus = [
        '{"_id": "d1", "title": "T", "text": "same"}',
        '{"_id": "d2", "title": "", "text": "other"}',
        '{"_id": "d3", "title": "", "text": "third"}',
        '{"_id": "d4", "title": "T", "text": "same"}',
    ]
    queries = [
        '{"_id": "q1", "text": "what  is x"}',
        '{"_id": "q2", "text": "y"}',
        '{"_id": "q3", "text": "what is x"}',
    ]
    d = _beir(tmp_path, {"train": b"q1\td1\t1\r\nq2\td2\t1\r\n", "test": b"q3\td4\t2\r\n"}, corpus, queries)
    st = describe(load_beir_dir(d, split_cfg=FILES_SPLIT))
    assert st["duplicate_documents"] == {"groups": 1, "items": 2, "examples": [["d1", "d4"]]}
    assert st["duplicate_queries"] == {"groups": 1, "items": 2, "examples": [["q1", "q3"]]}
