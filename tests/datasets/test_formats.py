"""Inputs that used to give silently wrong numbers: Unicode normal forms,
ids that do not round-trip through TSV/TREC files, bad encodings and non-finite numbers, and
non-strict JSON output. The small datasets under tests/data/ reproduce each report."""

import json
import re
import shutil
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from capgap import evaluate, trec
from capgap.data import (
    check_id,
    corpus_hash,
    iter_lines,
    load_beir_dir,
    load_canonical,
    load_corpus,
    load_excluded,
    load_qrels,
    load_queries,
    load_split,
    write_canonical,
)
from capgap.diagnosis import load_ids, load_run_file
from capgap.errors import DataFormatError
from capgap.io import write_json, write_jsonl

DATA = Path(__file__).parents[1] / "data"


def _strict_loads(text: str):
    def reject(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=reject)


# --------------------------------------------------------------------------- item 5: Unicode
def test_nfd_texts_load_as_nfc(tmp_path):
    raw = [
        json.loads(line) for line in (DATA / "nfd-unicode" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert any(r["text"] != unicodedata.normalize("NFC", r["text"]) for r in raw)  # the input really is NFD
    corpus = load_corpus(DATA / "nfd-unicode" / "corpus.jsonl")
    assert list(corpus.texts) == [unicodedata.normalize("NFC", r["text"]) for r in raw]
    assert "café" in corpus.texts[0] and "crème" in corpus.texts[0]  # one code point per accented letter
    assert list(corpus.ids) == [r["_id"] for r in raw]
    queries = load_queries(DATA / "nfd-unicode" / "queries.jsonl")
    assert all(unicodedata.is_normalized("NFC", t) for t in queries.texts)
    # the fingerprint sees the normalised text: an NFC copy of the same corpus is the same corpus
    nfc = tmp_path / "corpus.jsonl"
    write_jsonl(nfc, ({**r, "text": unicodedata.normalize("NFC", r["text"])} for r in raw))
    assert corpus_hash(load_corpus(nfc)) == corpus_hash(corpus)
    # titles too; ids are never normalised
    nfd_id, nfd_title = unicodedata.normalize("NFD", "café"), unicodedata.normalize("NFD", "Crème")
    write_jsonl(tmp_path / "c2.jsonl", [{"_id": nfd_id, "title": nfd_title, "text": "x"}])
    c2 = load_corpus(tmp_path / "c2.jsonl")
    assert c2.ids == (nfd_id,) and c2.titles == ("Crème",)


# --------------------------------------------------------------------------- item 6: ids
def test_tab_in_id_is_an_error_naming_file_line_field():
    with pytest.raises(DataFormatError) as e:
        load_beir_dir(DATA / "tab-in-ids")
    assert (e.value.line, e.value.field) == (3, "_id")
    assert str(e.value) == (
        f"{DATA / 'tab-in-ids' / 'corpus.jsonl'}:3: field '_id': id 'piano\\td9' contains a control "
        "character U+0009 (TAB); ids are written to TSV and TREC files"
    )


@pytest.mark.parametrize(
    "ch,name",
    [
        ("\t", "U+0009 (TAB)"),
        ("\n", "U+000A (LF)"),
        ("\r", "U+000D (CR)"),
        ("\x00", "U+0000 (NUL)"),
        ("\x7f", "U+007F (DEL)"),
        ("\x85", "U+0085 (NEL)"),
        ("\u2028", "U+2028 (LINE SEPARATOR)"),
        ("\u2029", "U+2029 (PARAGRAPH SEPARATOR)"),
    ],
)
def test_check_id_rejects_control_characters(ch, name):
    with pytest.raises(
        DataFormatError, match=rf"f.tsv:7: field 'corpus-id': id .* contains a control character {re.escape(name)}"
    ):
        check_id("f.tsv", 7, "corpus-id", f"d{ch}1")


def test_check_id_keeps_other_ids():
    for ok in ("doc 0", " d1 ", "a%b", unicodedata.normalize("NFD", "café"), "日本", "x\u00a0y"):
        assert check_id("f", 1, "_id", ok) is ok


def test_every_tsv_reader_checks_ids(tmp_path):
    ds = tmp_path / "ds"
    write_jsonl(ds / "corpus.jsonl", [{"_id": "d1", "text": "apple"}, {"_id": "d2", "text": "pear"}])
    write_jsonl(ds / "queries.jsonl", [{"_id": "q1", "text": "apple?"}, {"_id": "q2", "text": "pear?"}])
    corpus, queries = load_corpus(ds / "corpus.jsonl"), load_queries(ds / "queries.jsonl")
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\x0b\t1\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"qrels.tsv:2: field 'corpus-id': .*U\+000B"):
        load_qrels(tmp_path / "qrels.tsv")
    (tmp_path / "qrels.jsonl").write_text(
        '{"query-id": "q1\\u2028", "corpus-id": "d1", "score": 1}\n', encoding="utf-8"
    )
    with pytest.raises(DataFormatError, match=r"qrels.jsonl:1: field 'query-id': .*U\+2028"):
        load_qrels(tmp_path / "qrels.jsonl")
    (tmp_path / "split.tsv").write_text("query-id\tsplit\nq1\x00\ttrain\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"split.tsv:2: field 'query-id': .*U\+0000 \(NUL\)"):
        load_split(tmp_path / "split.tsv", queries)
    (tmp_path / "excluded.tsv").write_text("query-id\tcorpus-id\nq1\td2\r\r\n", encoding="utf-8")  # a CR before CRLF
    with pytest.raises(DataFormatError, match=r"excluded.tsv:2: field 'corpus-id': .*U\+000D \(CR\)"):
        load_excluded(tmp_path / "excluded.tsv", corpus, queries)
    # U+2028 used to split a line of an id file silently (str.splitlines): now it is named
    (tmp_path / "ids.txt").write_text("d1\nd\u20282\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"ids.txt:2: .*U\+2028"):
        load_ids(tmp_path / "ids.txt")
    (tmp_path / "ids.txt").write_text(" d1 \r\nd2\n", encoding="utf-8")  # ends of a line are stripped (documented)
    assert load_ids(tmp_path / "ids.txt") == ["d1", "d2"]
    (tmp_path / "ids.txt").write_text("d1\nd2\nd1\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"ids.txt:3: duplicate id 'd1' \(first on line 1\)"):
        load_ids(tmp_path / "ids.txt")


def test_ids_round_trip_through_the_canonical_copy(tmp_path):
    rs = load_beir_dir(DATA / "trec-id-collision")
    assert {"doc 0", "doc_0", "piano doc"} <= set(rs.corpus.ids) and "q 3" in rs.queries.ids
    assert rs.qrels.gold("q1") == {"doc 0": 1} and rs.qrels.gold("q2") == {"doc_0": 1}
    write_canonical(rs, tmp_path / "canon")
    back = load_canonical(tmp_path / "canon")
    assert back.corpus == rs.corpus and back.queries == rs.queries and back.split == rs.split
    assert {q: dict(v) for q, v in back.qrels.judgements.items()} == {
        q: dict(v) for q, v in rs.qrels.judgements.items()
    }
    # ids with spaces at their ends are kept too: TSV columns are split on TAB, never stripped
    ds = tmp_path / "ends"
    write_jsonl(ds / "corpus.jsonl", [{"_id": " d1", "text": "apple"}, {"_id": "d1", "text": "pear"}])
    write_jsonl(ds / "queries.jsonl", [{"_id": "q1 ", "text": "apple?"}, {"_id": "q1", "text": "pear?"}])
    write_jsonl(
        ds / "qrels.jsonl",
        [{"query-id": "q1 ", "corpus-id": " d1", "score": 1}, {"query-id": "q1", "corpus-id": "d1", "score": 1}],
    )
    rs2 = load_beir_dir(ds, split_cfg={"heldout_fraction": 0.5})
    write_canonical(rs2, tmp_path / "canon2")
    back2 = load_canonical(tmp_path / "canon2")
    assert back2.qrels.gold("q1 ") == {" d1": 1} and back2.qrels.gold("q1") == {"d1": 1}
    assert back2.split == rs2.split


def test_encode_decode_id():
    assert trec.encode_id("doc 0") == "doc%200"
    assert trec.encode_id("doc_0") == "doc_0"
    assert trec.encode_id("a%b") == "a%25b"
    assert trec.encode_id("x\u3000y") == "x%E3%80%80y"  # ideographic space: one escape per UTF-8 byte
    for s in ("doc 0", "doc_0", "a%b", "%20", "a b\tc\u2028", "café", "", "100%"):
        enc = trec.encode_id(s)
        assert trec.decode_id(enc) == s and not any(ch.isspace() for ch in enc)
    for bad in ("a%zz", "a%2", "%ff"):
        with pytest.raises(ValueError):
            trec.decode_id(bad)


def test_run_ids_round_trip(tmp_path):
    assert evaluate.write_run is trec.write_run  # old import path still works
    doc_ids = ["doc 0", "doc_0", "a%b", "d3"]
    idx = np.array([[0, 1, 2, -1], [3, 1, -1, -1]])
    sc = np.array([[0.9, 0.8, 0.7, -np.inf], [0.6, 0.5, -np.inf, -np.inf]], dtype=np.float32)
    trec.write_run(tmp_path / "run.trec", ["q 1", "q2"], idx, sc, doc_ids, "test")
    lines = (tmp_path / "run.trec").read_text(encoding="utf-8").splitlines()
    assert lines[0] == f"q%201 Q0 doc%200 1 {float(np.float32(0.9))!r} test"
    assert all(len(line.split()) == 6 for line in lines) and len(lines) == 5
    run = trec.read_run(tmp_path / "run.trec")
    assert run == {
        "q 1": [("doc 0", float(sc[0, 0])), ("doc_0", float(sc[0, 1])), ("a%b", float(sc[0, 2]))],
        "q2": [("d3", float(sc[1, 0])), ("doc_0", float(sc[1, 1]))],
    }
    # neighbouring float32 scores stay distinct in the text (full precision)
    s = np.nextafter(np.float32(0.5), np.float32(0))
    trec.write_run(
        tmp_path / "close.trec", ["q"], np.array([[0, 1]]), np.array([[0.5, s]], dtype=np.float32), doc_ids, "t"
    )
    (a, sa), (b, sb) = trec.read_run(tmp_path / "close.trec")["q"]
    assert sa == 0.5 and sb == float(s) and sa != sb
    with pytest.raises(ValueError, match="NaN"):
        trec.write_run(tmp_path / "nan.trec", ["q"], np.array([[0]]), np.array([[np.nan]]), doc_ids, "t")
    with pytest.raises(ValueError, match="tag"):
        trec.write_run(tmp_path / "tag.trec", ["q"], np.array([[0]]), np.array([[1.0]]), doc_ids, "two words")
    (tmp_path / "bad.trec").write_text("q1 Q0 d%zz 1 0.5 t\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad.trec:1: field 'doc-id'"):
        trec.read_run(tmp_path / "bad.trec")


def test_pytrec_eval_on_written_run_matches_recall_by_hand(tmp_path):
    """trec_eval's view of capgap's files equals the recall computed from the ids themselves,
    including "doc 0" vs "doc_0" (which the old '_' mapping merged) and scores 1 ulp apart."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rs = load_beir_dir(DATA / "trec-id-collision")
    doc_ids = list(rs.corpus.ids)
    rng = np.random.default_rng(0)
    k = 5
    order = {q: list(rng.permutation(len(doc_ids))[:k]) for q in rs.queries.ids}
    order["q1"] = [doc_ids.index("doc_0"), doc_ids.index("doc 0")] + [
        i for i in order["q1"] if doc_ids[i] not in ("doc 0", "doc_0")
    ][: k - 2]
    order["q2"] = [doc_ids.index("doc 0"), doc_ids.index("doc_0")] + [
        i for i in order["q2"] if doc_ids[i] not in ("doc 0", "doc_0")
    ][: k - 2]
    qids = list(rs.queries.ids)
    idx = np.array([order[q] for q in qids])
    col = [np.float32(0.5)]
    for _ in range(k - 1):  # each score the next float32 below the previous: ties at 6 decimals
        col.append(np.nextafter(col[-1], np.float32(0)))
    sc = np.tile(np.array(col, dtype=np.float32), (len(qids), 1))
    trec.write_run(tmp_path / "run.trec", qids, idx, sc, doc_ids, "t")
    trec.write_qrels_trec(tmp_path / "qrels.txt", rs.qrels.judgements)
    with open(tmp_path / "qrels.txt") as fq, open(tmp_path / "run.trec") as fr:
        qrels, run = pytrec_eval.parse_qrel(fq), pytrec_eval.parse_run(fr)
    res = pytrec_eval.RelevanceEvaluator(qrels, {"recall.1,2,5"}).evaluate(run)
    assert len(res) == len(qids)
    for q in qids:
        ranked = [doc_ids[i] for i in order[q]]
        gold = set(rs.qrels.gold(q))
        for kk in (1, 2, 5):
            by_hand = len(set(ranked[:kk]) & gold) / len(gold)
            assert res[trec.encode_id(q)][f"recall_{kk}"] == pytest.approx(by_hand), (q, kk)
    assert res["q1"]["recall_1"] == 0.0 and res["q1"]["recall_2"] == 1.0  # doc_0 is not doc 0
    assert res["q2"]["recall_1"] == 0.0


# --------------------------------------------------------------------------- item 7: encodings and numbers
def test_bom_is_skipped(tmp_path):
    rs = load_beir_dir(DATA / "utf8-bom-qrels")
    assert len(rs.queries) == 4
    ds = tmp_path / "bom"
    shutil.copytree(DATA / "utf8-bom-qrels", ds)
    for name in ("corpus.jsonl", "queries.jsonl"):
        (ds / name).write_bytes(b"\xef\xbb\xbf" + (ds / name).read_bytes())
    assert load_beir_dir(ds).corpus == rs.corpus
    (tmp_path / "x.txt").write_bytes(b"\xef\xbb\xbfa\r\n\xef\xbb\xbfb\n")  # only the file's first BOM is skipped
    assert list(iter_lines(tmp_path / "x.txt")) == [(1, "a"), (2, "\ufeffb")]


@pytest.mark.parametrize("case,raw", [("score-nan", "nan"), ("score-inf", "inf")])
def test_non_finite_qrels_score(case, raw):
    with pytest.raises(DataFormatError) as e:
        load_beir_dir(DATA / case)
    assert (e.value.line, e.value.field) == (4, "score")
    assert str(e.value) == f"{DATA / case / 'qrels' / 'test.tsv'}:4: field 'score': not a finite number: '{raw}'"


def test_non_finite_json_numbers(tmp_path):
    for text, match in (
        ('{"query-id": "q1", "corpus-id": "d1", "score": NaN}', r"q.jsonl:2: NaN is not valid JSON"),
        ('{"query-id": "q1", "corpus-id": "d1", "score": -Infinity}', r"q.jsonl:2: -Infinity is not valid JSON"),
        (
            '{"query-id": "q1", "corpus-id": "d1", "score": 1e400}',
            r"q.jsonl:2: field 'score': not a finite number: '1e400'",
        ),
        (
            '{"query-id": "q1", "corpus-id": "d1", "score": 1' + "0" * 400 + "}",
            r"q.jsonl:2: field 'score': not a finite number",
        ),
    ):
        (tmp_path / "q.jsonl").write_text(
            '{"query-id": "q0", "corpus-id": "d0", "score": 1}\n' + text + "\n", encoding="utf-8"
        )
        with pytest.raises(DataFormatError, match=match):
            load_qrels(tmp_path / "q.jsonl")


def test_non_finite_run_score(tmp_path):
    for raw in ("nan", "inf", "-inf"):
        (tmp_path / "run.trec").write_text(f"q1 Q0 d0 1 0.5 x\nq1 Q0 d1 2 {raw} x\n", encoding="utf-8")
        with pytest.raises(DataFormatError) as e:
            load_run_file(tmp_path / "run.trec")
        assert str(e.value) == f"{tmp_path / 'run.trec'}:2: field 'score': not a finite number: '{raw}'"


def test_latin1_byte_names_line(tmp_path):
    with pytest.raises(DataFormatError) as e:
        load_beir_dir(DATA / "latin1")
    line9 = (DATA / "latin1" / "corpus.jsonl").read_bytes().split(b"\n")[8]
    col = line9.index(b"\xe9") + 1
    assert (e.value.line, e.value.field) == (9, None)
    assert (
        str(e.value)
        == f"{DATA / 'latin1' / 'corpus.jsonl'}:9: not valid UTF-8 (byte 0xe9 at column {col}); save the file as UTF-8"
    )
    for reader, content in (
        (load_qrels, b"q1\td0\t1\nq1\tcaf\xe9\t1\n"),
        (load_run_file, b"q1 d0 1\nq1 caf\xe9 0.5\n"),
        (load_ids, b"d0\n\t  caf\xe9\n"),
    ):
        (tmp_path / "f.tsv").write_bytes(content)
        with pytest.raises(DataFormatError, match=r"f.tsv:2: not valid UTF-8 \(byte 0xe9 at column 7\)"):
            reader(tmp_path / "f.tsv")


# --------------------------------------------------------------------------- item 8: strict JSON
def test_write_json_is_strict(tmp_path):
    write_json(tmp_path / "a.json", {"a": float("nan"), "b": [np.float32("inf")], "c": np.int64(3)})
    assert _strict_loads((tmp_path / "a.json").read_text(encoding="utf-8")) == {"a": None, "b": [None], "c": 3}
    obj = {"arr": np.array([1.5, np.nan]), "t": (np.bool_(True), -np.inf, np.float64(0.25)), "n": {"x": np.float16(2)}}
    write_jsonl(tmp_path / "a.jsonl", [obj, {"y": float("-inf")}])
    rows = [_strict_loads(line) for line in (tmp_path / "a.jsonl").read_text(encoding="utf-8").splitlines()]
    assert rows == [{"arr": [1.5, None], "t": [True, None, 0.25], "n": {"x": 2.0}}, {"y": None}]
    assert type(rows[0]["t"][0]) is bool


# --------------------------------------------------------------------------- found by review
def test_qrels_delimiter_and_header_from_the_first_non_blank_line(tmp_path):
    from capgap.data import iter_qrels

    p = tmp_path / "qrels.tsv"
    p.write_text("\ufeff\nq1\tdoc 0\t1\n")  # BOM, a blank line, then a TAB-separated row: ids keep spaces
    assert [r[1:] for r in iter_qrels(p)] == [("q1", "doc 0", 1)]
    p.write_text("query\td1\t1\nqid\td2\t2\n")  # no header: a query named 'query' is a row
    assert [r[1:] for r in iter_qrels(p)] == [("query", "d1", 1), ("qid", "d2", 2)]
    p.write_text("query-id\tcorpus-id\tscore\nq\td\t1\n")
    assert [r[1:] for r in iter_qrels(p)] == [("q", "d", 1)]


def test_a_qrels_comment_line_is_refused_not_read_as_query_hash(tmp_path):
    """'# comment 1' has the columns of a judgement of query '#'; every qrels reader refuses it,
    naming the line. An id that starts with '#' is an id."""
    from capgap.data import iter_qrels

    p = tmp_path / "qrels.tsv"
    p.write_text("q1 d0 1\n# comment 1\n")
    with pytest.raises(DataFormatError) as e:
        load_qrels(p)
    assert str(e.value) == (
        f"{p}:2: '# comment 1' is a comment: qrels have no comment lines (it would be a judgement of "
        "query '#'); remove the line"
    )
    p.write_text("#12 d0 1\n")
    assert [r[1:] for r in iter_qrels(p)] == [("#12", "d0", 1)]


def test_numeric_json_ids_keep_their_literal_text(tmp_path):
    p = tmp_path / "corpus.jsonl"
    p.write_text('{"_id": 1.50, "text": "a"}\n{"_id": 1e2, "text": "b"}\n{"_id": 7, "text": "c"}\n')
    assert load_corpus(p).ids == ("1.50", "1e2", "7")
    q = tmp_path / "qrels.jsonl"
    q.write_text('{"query-id": 1, "corpus-id": 1.50, "score": 2.0}\n')
    assert load_qrels(q).judgements == {"1": {"1.50": 2}}


def test_diagnose_run_files_tabs_and_percent_encoding(tmp_path):
    p = tmp_path / "run.tsv"
    p.write_text("q 1\tdoc 0\t9\nq 1\td1\t8\n")  # TAB-separated: ids with spaces
    assert load_run_file(p) == {"q 1": ["doc 0", "d1"]}
    trec.write_run(tmp_path / "run.trec", ["q 1"], np.array([[0, 1]]), np.array([[9.0, 8.0]]), ["doc 0", "d%2"], "x")
    assert load_run_file(tmp_path / "run.trec", percent_encoded=True) == {"q 1": ["doc 0", "d%2"]}
    assert load_run_file(tmp_path / "run.trec") == {"q%201": ["doc%200", "d%252"]}  # as written


def test_a_document_repeated_in_a_run_is_refused_naming_both_lines(tmp_path):
    """trec_eval refuses a repeated docno; read twice, d0 would take two of the top 2 places.
    Every run reader names the repeat's line and the first one, ids compared as decoded."""
    p = tmp_path / "run.tsv"
    p.write_text("q0 d0 5\nq0 d0 4\nq0 d1 3\n")
    with pytest.raises(DataFormatError) as e:
        load_run_file(p)
    assert str(e.value) == f"{p}:2: field 'doc-id': document 'd0' of query 'q0' repeats line 1"
    p.write_text("q0 Q0 d0 1 5 x\nq1 Q0 d0 1 5 x\nq0 Q0 d1 2 4 x\nq0 Q0 doc%200 3 3 x\nq0\tQ0\tdoc 0\t4\t2\tx\n")
    assert load_run_file(p) == {"q0": ["d0", "d1", "doc%200", "doc 0"], "q1": ["d0"]}  # ids as written: no repeat
    with pytest.raises(DataFormatError) as e:
        load_run_file(p, percent_encoded=True)
    assert str(e.value) == f"{p}:5: field 'doc-id': document 'doc 0' of query 'q0' repeats line 4"
    (tmp_path / "run.trec").write_text("q0 Q0 d0 1 5 x\nq0 Q0 d1 2 4 x\nq0 Q0 d0 3 3 x\n")
    with pytest.raises(DataFormatError) as e:
        trec.read_run(tmp_path / "run.trec")
    assert str(e.value) == f"{tmp_path / 'run.trec'}:3: field 'doc-id': document 'd0' of query 'q0' repeats line 1"


def test_diagnose_names_run_ids_that_meet_nothing():
    from capgap.diagnosis import diagnose

    D = np.eye(3, dtype=np.float32)
    diag = diagnose(
        D,
        D[:2],
        {"a": {"x": 1}, "b": {"y": 1}},
        ["x", "y", "z"],
        ["a", "b"],
        k=1,
        ann_run={"a": ["x"], "b%20": ["y"], "c": ["w"]},
    )
    notes = " ".join(diag.notes)
    assert "2 ANN-run queries are not judged queries" in notes and "['b%20', 'c']" in notes
    assert (
        "1 judged queries are missing from the ANN run" in notes
        and "1 ANN-run documents are not in the document ids" in notes
    )


# --------------------------------------------------------------------------- qrels headers
@pytest.mark.parametrize(
    "header",
    [
        "QueryID\tDocID\tRelevance",
        "topic\tdocno\trel",
        "q\td\tscore",
        "query-id\tcorpus-id\tscore",
        "Query_Id\tCorpus-ID\tLabel",
        "query\tpassage\trelevance_label",
    ],
)
def test_a_first_line_whose_last_column_is_not_a_number_is_a_header(tmp_path, header):
    """docs/evaluation.md's rule, in every qrels reader: the DAG's (load_qrels) and diagnose's."""
    from capgap.diagnosis import load_qrels_file

    p = tmp_path / "qrels.tsv"
    p.write_text(f"{header}\nq0\td0\t1\nq0\td3\t2\nq1\td1\t0\n")
    want = {"q0": {"d0": 1, "d3": 2}, "q1": {"d1": 0}}
    assert load_qrels(p).judgements == want
    assert load_qrels_file(p) == want
    p.write_text(
        header.replace("\t", " ") + "\nq0 0 d0 1\nq0 0 d3 2\nq1 0 d1 0\n"
    )  # TREC lines under a whitespace header
    assert load_qrels(p).judgements == want


def test_header_names_in_another_order_are_read_by_name(tmp_path):
    from capgap.diagnosis import load_qrels_file

    p = tmp_path / "qrels.tsv"
    p.write_text("corpus-id\tquery-id\tscore\nd0\tq0\t1\nd3\tq0\t2\n")
    assert load_qrels(p).judgements == {"q0": {"d0": 1, "d3": 2}}
    p.write_text("score\tdocno\ttopic\n1\td0\tq0\n")
    assert load_qrels_file(p) == {"q0": {"d0": 1}}
    p.write_text("docno iter qid rel\nd0 0 q0 1\nd3 Q0 q1 2\n")
    assert load_qrels(p).judgements == {"q0": {"d0": 1}, "q1": {"d3": 2}}
    p.write_text("docid\tqid\nd0\tq0\nd1\tq1\n")  # diagnose's pairs, named
    assert load_qrels_file(p) == {"q0": {"d0": 1}, "q1": {"d1": 1}}
    p.write_text("corpus-id\tquery-id\tscore\nd0\tq0\t1\nq1\t0\td1\t1\n")
    with pytest.raises(DataFormatError) as e:
        load_qrels(p)
    assert str(e.value) == f"{p}:3: expected 3 columns, as the header names, got 4"


def test_header_names_that_contradict_the_order_are_refused_naming_it(tmp_path):
    p = tmp_path / "qrels.tsv"
    p.write_text("corpus-id\tfoo\tscore\nd0\tq0\t1\n")
    with pytest.raises(DataFormatError) as e:
        load_qrels(p)
    assert str(e.value) == (
        f"{p}:1: header 'corpus-id' (document) 'foo' (unknown) 'score' (score): the columns are in "
        "another order than query document score and not every name is known; name them query-id, "
        "corpus-id, score (any order), or write them in the order query, document, score"
    )
    p.write_text("qid\tquery\tscore\nq0\td0\t1\n")
    with pytest.raises(DataFormatError) as e:
        load_qrels(p)
    assert str(e.value) == f"{p}:1: header 'qid' (query) 'query' (query) 'score' (score): 2 columns name the query"


def test_a_first_line_of_unknown_names_is_no_header(tmp_path):
    """A judgement with a bad grade is as likely as a header of unknown names: refused, never dropped unread."""
    p = tmp_path / "qrels.tsv"
    p.write_text("q0\td0\thigh\nq1\td1\t1\n")
    with pytest.raises(DataFormatError) as e:
        load_qrels(p)
    assert str(e.value) == (
        f"{p}:1: field 'score': not a number: 'high', and as a header none of its names is a qrels "
        "column name (query-id, qid, topic, q; corpus-id, docid, docno, d; score, rel, relevance, label)"
    )
    p.write_text("q0\td0\t1\nq1\td1\thigh\n")  # a non-number below line 1 is still an error naming the field
    with pytest.raises(DataFormatError, match=r"qrels.tsv:2: field 'score': not a number: 'high'"):
        load_qrels(p)
    p.write_text("101 0 doc5 high\n101 0 doc6 1\n")  # TREC's iteration column '0' alone makes no header
    with pytest.raises(DataFormatError, match=r"qrels.tsv:1: field 'score': not a number: 'high'"):
        load_qrels(p)
