"""capgap diagnose: each verdict on a hand-built case whose answer is known by construction,
every input format, every user error, and the command line end to end."""

import json
import logging
from pathlib import Path

import faiss
import numpy as np
import pytest
from click.testing import CliRunner

from capgap.cli import main
from capgap.diagnosis import (diagnose, load_embeddings, load_ids, load_matrix, load_qrels_file, load_run_file,
                              resolve_metric)
from capgap.errors import DataFormatError

DATA = Path(__file__).parent / "data"

# 5 documents in 3-d: d3 is an exact copy of d2, so no query vector can rank d2 above d3
D = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 1], [0.5, 0.5, 0]], dtype=np.float32)
DOCS = ["d0", "d1", "d2", "d3", "d4"]
QIDS = ["qa", "qb", "qc", "qd"]
Q = np.array([[0.5, 0.5, 0], [0, 1, 0], [0, 1, 0], [1, 0, 0]], dtype=np.float32)  # qa points at d4
QRELS = {"qa": {"d2": 1}, "qb": {"d0": 1}, "qc": {"d1": 1}, "qd": {"d0": 1, "d4": 0}}
ANN = {"qa": ["d2"], "qb": ["d1"], "qc": ["d0"], "qd": ["d0"]}


def test_each_verdict_by_construction():
    diag = diagnose(D, Q, QRELS, DOCS, QIDS, k=1, ann_run=ANN)
    by = {r["query_id"]: r for r in diag.rows}
    # qa: its gold d2 has an identical non-gold copy d3: the index cannot serve it at k = 1
    assert by["qa"]["verdict"] == "index-limited" and not by["qa"]["certified"] and by["qa"]["probe_recall@1"] == 0.0
    # qb: d0 is separable (w = (1, -1, -1) puts it first) but the query vector points at d1
    assert by["qb"]["verdict"] == "encoder-limited" and by["qb"]["certified"] and by["qb"]["encoder_recall@1"] == 0.0
    # its gold d0 scores 0, tied with non-gold d2 and d3 and below d1 and d4: pessimistic rank 5
    assert by["qb"]["best_gold_rank"] == 5
    # qc: exact search finds d1; the ANN run returned d0 instead
    assert by["qc"]["verdict"] == "ann-limited" and by["qc"]["encoder_recall@1"] == 1.0
    assert by["qc"]["ann_recall@1"] == 0.0 and by["qc"]["ann_vs_exact@1"] == 0.0
    # qd: everything finds d0 (d4 is judged, grade 0: not gold)
    assert by["qd"]["verdict"] == "ok" and by["qd"]["n_gold"] == 1 and by["qd"]["best_gold_rank"] == 1
    s = diag.summary
    assert s["verdicts"] == {"index-limited": 1, "encoder-limited": 1, "ann-limited": 1, "ok": 1}
    assert s["probe_recall@1"] == 0.75 and s["encoder_recall@1"] == 0.5 and s["unused_capacity"] == 0.25
    assert s["ann_recall@1"] == 0.5 and "limited by" in s["reading"]


def test_capped_recall_and_no_ann():
    """Two gold documents at k = 1: one in the top 1 serves the query fully (capped recall)."""
    diag = diagnose(D, Q[3:], {"qd": {"d0": 1, "d4": 1}}, DOCS, ["qd"], k=1)
    assert diag.rows[0]["encoder_recall@1"] == 1.0 and diag.rows[0]["verdict"] == "ok"
    assert "ann_recall@1" not in diag.summary


def test_input_formats(tmp_path):
    np.save(tmp_path / "d.npy", D)
    np.save(tmp_path / "d16.npy", D.astype(np.float16))
    np.savez(tmp_path / "one.npz", D)
    np.savez(tmp_path / "two.npz", docs=D, queries=Q)
    index = faiss.IndexFlatIP(3)
    index.add(D)
    faiss.write_index(index, str(tmp_path / "d.faiss"))
    assert isinstance(load_matrix(tmp_path / "d.npy"), np.memmap)  # memory-mapped, not copied
    for m in (load_matrix(tmp_path / "d.npy"), load_matrix(tmp_path / "d16.npy"), load_matrix(tmp_path / "one.npz"),
              load_matrix(tmp_path / "two.npz", "docs"), load_matrix(tmp_path / "d.faiss")):
        assert np.array_equal(np.asarray(m, dtype=np.float32), D)
    (tmp_path / "ids.txt").write_text("\n".join(DOCS) + "\n")
    assert load_ids(tmp_path / "ids.txt") == DOCS
    want = {"q1": {"d0": 1, "d2": 0}, "q2": {"d1": 2}}
    forms = {"beir_header.tsv": "query-id\tcorpus-id\tscore\nq1\td0\t1\nq1\td2\t0\nq2\td1\t2\n",
             "beir.tsv": "q1\td0\t1\nq1\td2\t0\nq2\td1\t2\n",
             "trec.txt": "q1 0 d0 1\nq1 0 d2 0\nq2 Q0 d1 2\n"}
    for name, text in forms.items():
        (tmp_path / name).write_text(text)
        assert load_qrels_file(tmp_path / name) == want, name
    (tmp_path / "pairs.tsv").write_text("qid\tdocid\nq1\td0\nq2\td1\n")
    assert load_qrels_file(tmp_path / "pairs.tsv") == {"q1": {"d0": 1}, "q2": {"d1": 1}}
    runs = {"run.trec": "q1 Q0 d2 1 0.9 x\nq1 Q0 d0 2 0.5 x\n",
            "run_scores.tsv": "q1\td0\t0.5\nq1\td2\t0.9\n",  # ordered by score, not by line
            "run_plain.tsv": "q1\td2\nq1\td0\n"}  # file order
    for name, text in runs.items():
        (tmp_path / name).write_text(text)
        assert load_run_file(tmp_path / name) == {"q1": ["d2", "d0"]}, name


def test_user_errors(tmp_path):
    with pytest.raises(ValueError, match="dimension mismatch"):
        diagnose(D, Q[:, :2], QRELS, DOCS, QIDS)
    with pytest.raises(ValueError, match="4 document ids for 5 document rows"):
        diagnose(D, Q, QRELS, DOCS[:4], QIDS)
    with pytest.raises(ValueError, match="3 query ids for 4 query rows"):
        diagnose(D, Q, QRELS, DOCS, QIDS[:3])
    with pytest.raises(ValueError, match="not in the document ids, e.g. \\['d9'\\]"):
        diagnose(D, Q, {**QRELS, "qa": {"d9": 1}}, DOCS, QIDS)
    with pytest.raises(ValueError, match="empty gold set"):
        diagnose(D, Q, {**QRELS, "qa": {"d2": 0}}, DOCS, QIDS)
    diag = diagnose(D * 3, Q, QRELS, DOCS, QIDS, k=1, metric="cosine")  # not unit length: warned, normalised
    assert any("were not unit length" in n for n in diag.notes)
    assert diag.summary["verdicts"]["index-limited"] == 1
    (tmp_path / "bad.tsv").write_text("q1\td0\t1\nq1\td2\thigh\n")
    with pytest.raises(DataFormatError, match=r"bad.tsv:2: field 'score'"):
        load_qrels_file(tmp_path / "bad.tsv")
    np.savez(tmp_path / "two.npz", a=D, b=Q)
    with pytest.raises(DataFormatError, match="name one with --key"):
        load_matrix(tmp_path / "two.npz")
    np.save(tmp_path / "ints.npy", np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(DataFormatError, match="expected float16, float32 or float64, got int64"):
        load_matrix(tmp_path / "ints.npy")
    (tmp_path / "ids.txt").write_text("a\n\nb\n")
    with pytest.raises(DataFormatError, match=r"ids.txt:2"):
        load_ids(tmp_path / "ids.txt")


def test_command_line(tmp_path):
    np.save(tmp_path / "docs.npy", D)
    np.save(tmp_path / "queries.npy", Q)
    (tmp_path / "doc_ids.txt").write_text("\n".join(DOCS) + "\n")
    (tmp_path / "query_ids.txt").write_text("\n".join(QIDS) + "\n")
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, r in QRELS.items() for d, g in r.items()))
    (tmp_path / "ann.trec").write_text("".join(f"{q} Q0 {d} 1 1.0 ann\n" for q, ds in ANN.items() for d in ds))
    args = ["diagnose", "--doc-embeddings", str(tmp_path / "docs.npy"), "--query-embeddings", str(tmp_path / "queries.npy"),
            "--qrels", str(tmp_path / "qrels.tsv"), "--doc-ids", str(tmp_path / "doc_ids.txt"), "--query-ids", str(tmp_path / "query_ids.txt"),
            "--ann-run", str(tmp_path / "ann.trec"), "--k", "1", "--out", str(tmp_path / "out")]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["verdicts"] == {"index-limited": 1, "encoder-limited": 1, "ann-limited": 1, "ok": 1}
    lines = (tmp_path / "out" / "per_query.tsv").read_text().splitlines()
    assert lines[0].split("\t")[0] == "query_id" and len(lines) == 5
    assert (tmp_path / "out" / "verdicts.png").read_bytes()[:4] == b"\x89PNG" and "| ok | 1 |" in (tmp_path / "out" / "summary.md").read_text()
    bad = CliRunner().invoke(main, args[:-2] + ["--doc-ids", str(tmp_path / "query_ids.txt"), "--out", str(tmp_path / "o2")])
    assert bad.exit_code != 0 and "4 document ids for 5 document rows" in bad.output


def test_bundled_example_shows_every_verdict(tmp_path):
    """examples/diagnose_example.py (the README's copy-paste example): queries 0-4 have a gold
    document with 10 exact non-gold copies, so they are index-limited by construction."""
    import subprocess
    import sys

    from .conftest import ROOT

    subprocess.run([sys.executable, str(ROOT / "examples" / "diagnose_example.py"), str(tmp_path / "ex")], check=True, capture_output=True)
    ex = tmp_path / "ex"
    diag = diagnose(load_matrix(ex / "docs.npy"), load_matrix(ex / "queries.npy"), load_qrels_file(ex / "qrels.tsv"),
                    load_ids(ex / "doc_ids.txt"), load_ids(ex / "query_ids.txt"), k=10, ann_run=load_run_file(ex / "ann.trec"))
    by = {r["query_id"]: r["verdict"] for r in diag.rows}
    assert all(by[f"q{i}"] == "index-limited" for i in range(5))
    assert all(diag.summary["verdicts"][v] > 0 for v in ("index-limited", "encoder-limited", "ann-limited", "ok"))


def _diagnose_cli(out, docs, queries, qrels, *extra):
    args = ["diagnose", "--doc-embeddings", str(docs), "--query-embeddings", str(queries), "--qrels", str(qrels),
            "--out", str(out), *map(str, extra)]
    return CliRunner().invoke(main, args)


def test_query_ids_that_meet_no_judgement_are_an_error(tmp_path):
    """Query ids "1", "2" against qrels naming "q1", "q2": an error naming both sides, not a NaN report."""
    case = DATA / "diagnose-id-mismatch-nan"
    r = _diagnose_cli(tmp_path / "out", case / "docs.npy", case / "queries.npy", case / "qrels.tsv", "--doc-ids", case / "doc_ids.txt",
                      "--query-ids", case / "query_ids.txt", "--k", 2)
    assert r.exit_code != 0
    assert "none of the 2 query ids (e.g. ['1', '2']) appears in the qrels, whose query ids look like ['q1', 'q2']" in r.output
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="the qrels judge no query"):
        diagnose(D, Q, {}, DOCS, QIDS)
    # documents: the error shows what the document ids look like (row numbers when --doc-ids is missing)
    with pytest.raises(ValueError, match=r"qrels name 4 documents not in the document ids, e.g. \['d0', 'd1', 'd2'\]; "
                                         r"the document ids look like \['0', '1', '2'\]"):
        diagnose(D, Q, QRELS, [str(i) for i in range(5)], QIDS)


def test_partial_id_mismatch_is_counted_and_logged(tmp_path, caplog):
    qrels = {"qa": QRELS["qa"], "qb": QRELS["qb"], "qc": QRELS["qc"], "qz": {"d0": 1}, "qy": {"d1": 1}}
    with caplog.at_level(logging.WARNING, logger="capgap.diagnosis"):
        diag = diagnose(D, Q, qrels, DOCS, QIDS, k=1)
    s = diag.summary
    assert s["queries"] == 3 and s["left_out_without_qrels"] == 1
    assert s["rows_without_judgements"] == {"count": 1, "examples": ["qd"]}
    assert s["judged_queries_without_row"] == {"count": 2, "examples": ["qz", "qy"]}
    assert "1 of the 4 query rows have no judgements in the qrels (left out), e.g. ['qd']" in caplog.text
    assert "2 of the 5 judged queries have no query embedding row (not evaluated), e.g. ['qz', 'qy']" in caplog.text
    assert len(diag.notes) == 2
    # the command line writes the counts into summary.json (strict JSON)
    np.save(tmp_path / "docs.npy", D)
    np.save(tmp_path / "queries.npy", Q)
    (tmp_path / "qrels.tsv").write_text("".join(f"{q}\t{d}\t{g}\n" for q, r in qrels.items() for d, g in r.items()))
    (tmp_path / "doc_ids.txt").write_text("\n".join(DOCS) + "\n")
    (tmp_path / "query_ids.txt").write_text("\n".join(QIDS) + "\n")
    r = _diagnose_cli(tmp_path / "out", tmp_path / "docs.npy", tmp_path / "queries.npy", tmp_path / "qrels.tsv",
                      "--doc-ids", tmp_path / "doc_ids.txt", "--query-ids", tmp_path / "query_ids.txt", "--k", 1)
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["rows_without_judgements"]["count"] == 1 and s["judged_queries_without_row"]["count"] == 2 and s["queries"] == 3


def test_cosine_never_writes_its_inputs(tmp_path):
    """--metric cosine on read-only memory-mapped .npy files (unit length or not), .npz and a
    faiss inner-product index: the same diagnosis, and the input files' bytes unchanged."""
    case = DATA / "diagnose-cosine-npy-readonly"
    Dn, Qn = np.load(case / "docs.npy"), np.load(case / "queries.npy")
    np.savez(tmp_path / "docs.npz", emb=Dn)
    index = faiss.IndexFlatIP(Dn.shape[1])
    index.add(Dn)
    faiss.write_index(index, str(tmp_path / "docs.faiss"))
    inputs = [(case / "docs.npy", case / "queries.npy"), (case / "docs_unit.npy", case / "queries_unit.npy"),
              (tmp_path / "docs.npz", case / "queries.npy"), (tmp_path / "docs.faiss", case / "queries.npy")]
    for i, (docs, queries) in enumerate(inputs):
        before = {p: p.read_bytes() for p in (docs, queries)}
        r = _diagnose_cli(tmp_path / f"out{i}", docs, queries, case / "qrels.tsv", "--query-ids", case / "query_ids.txt",
                          "--k", 2, "--metric", "cosine")
        assert r.exit_code == 0, (docs, r.output)
        s = json.loads((tmp_path / f"out{i}" / "summary.json").read_text())
        assert s["metric"] == "cosine" and s["encoder_recall@2"] == 0.5 and s["probe_recall@2"] == 1.0, docs
        assert s["verdicts"] == {"index-limited": 0, "encoder-limited": 1, "ann-limited": 0, "ok": 1}, docs
        assert all(p.read_bytes() == b for p, b in before.items()), docs
    # the Python API on the read-only memory map, and the original arrays are untouched
    Dm = load_matrix(case / "docs.npy")
    assert not Dm.flags.writeable
    diag = diagnose(Dm, load_matrix(case / "queries.npy"), load_qrels_file(case / "qrels.tsv"), [str(i) for i in range(8)],
                    load_ids(case / "query_ids.txt"), k=2, metric="cosine")
    assert {r["query_id"]: r["verdict"] for r in diag.rows} == {"q1": "encoder-limited", "q2": "ok"}
    assert np.array_equal(Dm, Dn) and any("were not unit length" in n for n in diag.notes)


def test_faiss_l2_index_is_scored_by_its_own_metric(tmp_path):
    case = DATA / "diagnose-faiss-l2-index-scored-as-ip"
    e = load_embeddings(case / "docs_l2.faiss")
    assert e.metric == "l2" and e.matrix.shape == (10, 4) and e.matrix.dtype == np.float32
    assert load_embeddings(case / "queries.npy").metric is None
    assert np.array_equal(load_matrix(case / "docs_l2.faiss"), e.matrix)  # load_matrix: the matrix, as before
    args = (case / "docs_l2.faiss", case / "queries.npy", case / "qrels.tsv", "--query-ids", case / "query_ids.txt",
            "--ann-run", case / "l2_exact.trec", "--k", 1)
    for i, extra in enumerate([(), ("--metric", "l2")]):
        r = _diagnose_cli(tmp_path / f"out{i}", *args, *extra)
        assert r.exit_code == 0, r.output
        s = json.loads((tmp_path / f"out{i}" / "summary.json").read_text())
        assert s["metric"] == "l2" and s["encoder_recall@1"] == 1.0 and s["ann_vs_exact@1"] == 1.0 and s["probe_recall@1"] == 1.0
        assert s["verdicts"]["ok"] == 3 and s["probe_not_l2_query"] == 0
        lines = (tmp_path / f"out{i}" / "per_query.tsv").read_text().splitlines()
        col = lines[0].split("\t").index("probe_l2_query")
        assert [ln.split("\t")[col] for ln in lines[1:]] == ["True"] * 3
    # another metric than the index's own is an error
    for m in ("ip", "cosine"):
        r = _diagnose_cli(tmp_path / "bad", *args, "--metric", m)
        assert r.exit_code != 0 and f"docs_l2.faiss is a faiss index that searches by L2 distance; --metric {m} would" in r.output
    assert resolve_metric(None, None) == "ip" and resolve_metric(None, "l2") == "l2" and resolve_metric("cosine", "ip") == "cosine"
    assert resolve_metric("l2", None) == "l2"
    with pytest.raises(ValueError, match="searches by inner product; --metric l2"):
        resolve_metric("l2", "ip", "d.faiss")
    with pytest.raises(ValueError, match="metric must be one of"):
        diagnose(D, Q, QRELS, DOCS, QIDS, metric="dot")


def test_l2_probe_keeps_only_vectors_that_are_l2_queries():
    """Under l2 the probe runs on (d, -|d|^2/2) and finds (w, c); only c > 0 is an L2 query
    (w/c). Three documents on a line, at 0, 1 and 2."""
    L = np.array([[0.0], [1.0], [2.0]], dtype=np.float32)
    ids = ["d0", "d1", "d2"]

    def one(gold, q, k, metric="l2"):
        return diagnose(L, np.array([[q]], dtype=np.float32), {"q": gold}, ids, ["q"], k=k, metric=metric)

    # {d0, d2} at k = 2: (w, c) separates them only with c < 0 (farthest documents first); the
    # top 2 of an L2 query on a line are neighbours, so the index cannot serve it
    diag = one({"d0": 1, "d2": 1}, 1.0, 2)
    row = diag.rows[0]
    assert not row["probe_l2_query"] and not row["certified"] and row["cause"] == "l2-unreachable"
    assert row["verdict"] == "index-limited" and row["probe_recall@2"] == 0.5
    assert diag.summary["probe_not_l2_query"] == 1 and any("is no L2 query" in n for n in diag.notes)
    # {d2} at k = 1: c < 0 again, but w alone (the L2 queries t*w for large t) puts d2 first
    row = one({"d2": 1}, 2.0, 1).rows[0]
    assert not row["probe_l2_query"] and row["certified"] and row["cause"] is None and row["verdict"] == "ok"
    # {d1} at k = 1: the L2 query 1.0 serves it (c > 0); no inner-product query puts the middle point first
    row = one({"d1": 1}, 1.0, 1).rows[0]
    assert row["probe_l2_query"] and row["certified"] and row["verdict"] == "ok"
    assert one({"d1": 1}, 1.0, 1, "ip").rows[0]["verdict"] == "index-limited"


def _save(path, arr):
    np.save(path, arr)
    return path


def test_every_matrix_is_validated(tmp_path, monkeypatch):
    """Documents and queries alike: shape, dtype and finite values; errors name the file (or the
    array) and the first bad row. Checked block by block."""
    import capgap.diagnosis as dg

    monkeypatch.setattr(dg, "_block_rows", lambda dim: 2)  # row 3 lies in the second block
    bad_d = D.copy()
    bad_d[3, 1] = np.nan
    bad_q = Q.copy()
    bad_q[3, 0] = np.inf
    np.save(tmp_path / "docs_nan.npy", bad_d)
    np.save(tmp_path / "queries_inf.npy", bad_q)
    np.save(tmp_path / "queries_inf16.npy", bad_q.astype(np.float16))
    np.savez(tmp_path / "docs_nan.npz", emb=bad_d)
    index = faiss.IndexFlatL2(3)
    index.add(bad_d)
    faiss.write_index(index, str(tmp_path / "docs_nan.faiss"))
    for name, row, col, value in (("docs_nan.npy", 3, 1, "nan"), ("queries_inf.npy", 3, 0, "inf"), ("queries_inf16.npy", 3, 0, "inf"),
                                  ("docs_nan.npz", 3, 1, "nan"), ("docs_nan.faiss", 3, 1, "nan")):
        with pytest.raises(DataFormatError, match=rf"{name}: row {row} \(0-based\) is not finite: column {col} holds {value}"):
            load_matrix(tmp_path / name)
    assert load_matrix(_save(tmp_path / "f64.npy", D.astype(np.float64))).dtype == np.float64  # numpy's default: taken
    for name, arr, reason in (("i32.npy", D.astype(np.int32), "expected float16, float32 or float64, got int32"),
                              ("flat.npy", D[0], r"expected a 2-d \(n, dim\) array, got shape \(3,\)"),
                              ("empty.npy", D[:0], "expected at least one row and one column")):
        np.save(tmp_path / name, arr)
        with pytest.raises(DataFormatError, match=rf"{name}: {reason}"):
            load_matrix(tmp_path / name)
    other = faiss.IndexFlat(3, faiss.METRIC_L1)
    other.add(D)
    faiss.write_index(other, str(tmp_path / "l1.faiss"))
    (tmp_path / "junk.faiss").write_bytes(b"not an index")
    np.savez(tmp_path / "two.npz", a=D, b=Q)
    for path, key, reason in ((tmp_path / "l1.faiss", None, "faiss metric_type 2 is not supported"),
                              (tmp_path / "junk.faiss", None, "faiss cannot read it as an index"),
                              (tmp_path / "two.npz", "c", r"holds arrays \['a', 'b'\], not 'c': name one with --key")):
        with pytest.raises(DataFormatError, match=reason):
            load_matrix(path, key)
    # the command line: the file and the row, and a dimension mismatch names both files
    np.save(tmp_path / "docs.npy", D)
    np.save(tmp_path / "q2d.npy", Q[:, :2])
    (tmp_path / "qrels.tsv").write_text("qa\t0\t1\n")
    (tmp_path / "qids.txt").write_text("\n".join(QIDS) + "\n")
    r = _diagnose_cli(tmp_path / "o", tmp_path / "docs.npy", tmp_path / "queries_inf.npy", tmp_path / "qrels.tsv", "--query-ids", tmp_path / "qids.txt")
    assert r.exit_code != 0 and "queries_inf.npy: row 3 (0-based) is not finite: column 0 holds inf" in r.output
    r = _diagnose_cli(tmp_path / "o", tmp_path / "docs.npy", tmp_path / "q2d.npy", tmp_path / "qrels.tsv", "--query-ids", tmp_path / "qids.txt")
    assert r.exit_code != 0 and "docs.npy has dim 3" in r.output and "q2d.npy has dim 2" in r.output
    # the Python API names the array and the row; float64 is taken, integers are not
    with pytest.raises(ValueError, match=r"documents: row 3 \(0-based\) is not finite: column 1 holds nan"):
        diagnose(bad_d, Q, QRELS, DOCS, QIDS)
    with pytest.raises(ValueError, match=r"queries: row 3 \(0-based\) is not finite: column 0 holds inf"):
        diagnose(D, bad_q, QRELS, DOCS, QIDS)
    with pytest.raises(ValueError, match=r"queries: row 0 \(0-based\) is not finite: column 0 holds 1e\+300 \(beyond float32\)"):
        diagnose(D, np.full((4, 3), 1e300), QRELS, DOCS, QIDS)
    with pytest.raises(ValueError, match="documents: expected float16, float32 or float64, got int64"):
        diagnose(D.astype(np.int64), Q, QRELS, DOCS, QIDS)
    assert diagnose(D.astype(np.float64), Q, QRELS, DOCS, QIDS, k=1).summary["verdicts"]["index-limited"] == 1


def test_ann_run_ids_that_meet_nothing_are_an_error(tmp_path):
    """An ANN run whose query ids, or whose document ids, meet none of the given ids would make
    every verdict an artefact: an error naming both sides; blank lines closing an ids file are
    no row."""
    with pytest.raises(ValueError, match=r"none of the ANN run's 1 query ids \(e.g. \['x0'\]\) is a judged query"):
        diagnose(D, Q, QRELS, DOCS, QIDS, k=1, ann_run={"x0": ["d0"]})
    with pytest.raises(ValueError, match=r"none of the ANN run's 2 document ids \(e.g. \['0', '1'\]\) is a document id"):
        diagnose(D, Q, QRELS, DOCS, QIDS, k=1, ann_run={"qa": ["0"], "qb": ["1"]})
    (tmp_path / "ids.txt").write_text("d0\nd1\n\n\n")
    assert load_ids(tmp_path / "ids.txt") == ["d0", "d1"]
    (tmp_path / "ids.txt").write_text("d0\n\nd1\n")
    with pytest.raises(DataFormatError, match="ids.txt:2: empty id"):
        load_ids(tmp_path / "ids.txt")
