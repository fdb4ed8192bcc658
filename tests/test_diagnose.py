"""capgap diagnose: each verdict on a hand-built case whose answer is known by construction,
every input format, every user error, and the command line end to end."""

import json

import faiss
import numpy as np
import pytest
from click.testing import CliRunner

from capgap.cli import main
from capgap.diagnosis import diagnose, load_ids, load_matrix, load_qrels_file, load_run_file
from capgap.errors import DataFormatError

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
    with pytest.raises(DataFormatError, match="float32 or float16"):
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
