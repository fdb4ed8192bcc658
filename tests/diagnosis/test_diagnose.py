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
from capgap.compress import compress
from capgap.diagnosis import (
    diagnose,
    document_ids,
    load_embeddings,
    load_ids,
    load_matrix,
    load_qrels_file,
    load_run_file,
    resolve_metric,
)
from capgap.errors import DataFormatError

DATA = Path(__file__).parents[1] / "data"

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
    assert s["verdicts"] == {
        "index-limited": 1,
        "compression-limited": 0,
        "undetermined": 0,
        "encoder-limited": 1,
        "ann-limited": 1,
        "ok": 1,
    }
    assert s["probe_recall@1"] == 0.75 and s["encoder_recall@1"] == 0.5 and s["unused_capacity"] == 0.25
    assert s["ann_recall@1"] == 0.5 and "limited by" in s["reading"]


def test_capgap_diagnose_stays_the_function_once_the_package_is_imported():
    """``capgap.diagnose(...)`` is the documented Python API (docs/diagnose.md) and the package is
    ``capgap.diagnosis``: a subpackage named ``diagnose`` would replace the attribute
    ``capgap.diagnose`` with the module on its first import. Called twice, after every
    submodule is imported, it gives the verdicts of the construction above (one of each)."""
    import importlib

    import capgap

    for m in ("inputs", "faiss_io", "prepare", "verdicts", "summary", "outputs"):
        importlib.import_module(f"capgap.diagnosis.{m}")
    for _ in range(2):
        assert callable(capgap.diagnose)
        s = capgap.diagnose(D, Q, QRELS, DOCS, QIDS, k=1, ann_run=ANN).summary
        assert s["verdicts"] == {
            "index-limited": 1,
            "compression-limited": 0,
            "undetermined": 0,
            "encoder-limited": 1,
            "ann-limited": 1,
            "ok": 1,
        }


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
    for m in (
        load_matrix(tmp_path / "d.npy"),
        load_matrix(tmp_path / "d16.npy"),
        load_matrix(tmp_path / "one.npz"),
        load_matrix(tmp_path / "two.npz", "docs"),
        load_matrix(tmp_path / "d.faiss"),
    ):
        assert np.array_equal(np.asarray(m, dtype=np.float32), D)
    (tmp_path / "ids.txt").write_text("\n".join(DOCS) + "\n")
    assert load_ids(tmp_path / "ids.txt") == DOCS
    want = {"q1": {"d0": 1, "d2": 0}, "q2": {"d1": 2}}
    forms = {
        "beir_header.tsv": "query-id\tcorpus-id\tscore\nq1\td0\t1\nq1\td2\t0\nq2\td1\t2\n",
        "beir.tsv": "q1\td0\t1\nq1\td2\t0\nq2\td1\t2\n",
        "trec.txt": "q1 0 d0 1\nq1 0 d2 0\nq2 Q0 d1 2\n",
    }
    for name, text in forms.items():
        (tmp_path / name).write_text(text)
        assert load_qrels_file(tmp_path / name) == want, name
    (tmp_path / "pairs.tsv").write_text("qid\tdocid\nq1\td0\nq2\td1\n")
    assert load_qrels_file(tmp_path / "pairs.tsv") == {"q1": {"d0": 1}, "q2": {"d1": 1}}
    runs = {
        "run.trec": "q1 Q0 d2 1 0.9 x\nq1 Q0 d0 2 0.5 x\n",
        "run_scores.tsv": "q1\td0\t0.5\nq1\td2\t0.9\n",  # ordered by score, not by line
        "run_plain.tsv": "q1\td2\nq1\td0\n",
    }  # file order
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
    (tmp_path / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, r in QRELS.items() for d, g in r.items())
    )
    (tmp_path / "ann.trec").write_text("".join(f"{q} Q0 {d} 1 1.0 ann\n" for q, ds in ANN.items() for d in ds))
    args = [
        "diagnose",
        "--doc-embeddings",
        str(tmp_path / "docs.npy"),
        "--query-embeddings",
        str(tmp_path / "queries.npy"),
        "--qrels",
        str(tmp_path / "qrels.tsv"),
        "--doc-ids",
        str(tmp_path / "doc_ids.txt"),
        "--query-ids",
        str(tmp_path / "query_ids.txt"),
        "--ann-run",
        str(tmp_path / "ann.trec"),
        "--k",
        "1",
        "--out",
        str(tmp_path / "out"),
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["verdicts"] == {
        "index-limited": 1,
        "compression-limited": 0,
        "undetermined": 0,
        "encoder-limited": 1,
        "ann-limited": 1,
        "ok": 1,
    }
    lines = (tmp_path / "out" / "per_query.tsv").read_text().splitlines()
    assert lines[0].split("\t")[0] == "query_id" and len(lines) == 5
    assert (tmp_path / "out" / "verdicts.png").read_bytes()[:4] == b"\x89PNG" and "| ok | 1 |" in (
        tmp_path / "out" / "summary.md"
    ).read_text()
    bad = CliRunner().invoke(
        main, args[:-2] + ["--doc-ids", str(tmp_path / "query_ids.txt"), "--out", str(tmp_path / "o2")]
    )
    assert (
        bad.exit_code != 0
        and f"{tmp_path / 'query_ids.txt'}: 4 document ids for the 5 rows of {tmp_path / 'docs.npy'}" in bad.output
    )


def test_bundled_example_shows_every_verdict(tmp_path):
    """examples/diagnose_example.py (the README's copy-paste example): queries 0-4 have a gold
    document with 10 exact non-gold copies, so they are index-limited by construction."""
    import subprocess
    import sys

    from ..conftest import ROOT

    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "diagnose_example.py"), str(tmp_path / "ex")],
        check=True,
        capture_output=True,
    )
    ex = tmp_path / "ex"
    diag = diagnose(
        load_matrix(ex / "docs.npy"),
        load_matrix(ex / "queries.npy"),
        load_qrels_file(ex / "qrels.tsv"),
        load_ids(ex / "doc_ids.txt"),
        load_ids(ex / "query_ids.txt"),
        k=10,
        ann_run=load_run_file(ex / "ann.trec"),
    )
    by = {r["query_id"]: r["verdict"] for r in diag.rows}
    assert all(by[f"q{i}"] == "index-limited" for i in range(5))
    assert all(diag.summary["verdicts"][v] > 0 for v in ("index-limited", "encoder-limited", "ann-limited", "ok"))


def _diagnose_cli(out, docs, queries, qrels, *extra):
    args = [
        "diagnose",
        "--doc-embeddings",
        str(docs),
        "--query-embeddings",
        str(queries),
        "--qrels",
        str(qrels),
        "--out",
        str(out),
        *map(str, extra),
    ]
    return CliRunner().invoke(main, args)


def test_query_ids_that_meet_no_judgement_are_an_error(tmp_path):
    """Query ids "1", "2" against qrels naming "q1", "q2": an error naming both sides, not a NaN report."""
    case = DATA / "diagnose-id-mismatch-nan"
    r = _diagnose_cli(
        tmp_path / "out",
        case / "docs.npy",
        case / "queries.npy",
        case / "qrels.tsv",
        "--doc-ids",
        case / "doc_ids.txt",
        "--query-ids",
        case / "query_ids.txt",
        "--k",
        2,
    )
    assert r.exit_code != 0
    assert (
        "none of the 2 query ids (e.g. ['1', '2']) appears in the qrels, whose query ids look like ['q1', 'q2']"
        in r.output
    )
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="the qrels judge no query"):
        diagnose(D, Q, {}, DOCS, QIDS)
    # documents: the error shows what the document ids look like (row numbers when --doc-ids is missing)
    with pytest.raises(
        ValueError,
        match=r"qrels name 4 documents not in the document ids, e.g. \['d0', 'd1', 'd2'\]; "
        r"the document ids look like \['0', '1', '2'\]",
    ):
        diagnose(D, Q, QRELS, [str(i) for i in range(5)], QIDS)


def test_qrels_errors_name_the_qrels_file_and_line(tmp_path):
    """An empty or header-only qrels file, a comment line, and judged documents that are no
    document id: each an error naming the qrels file (and the first such line)."""
    np.save(tmp_path / "docs.npy", D)
    np.save(tmp_path / "queries.npy", Q)
    (tmp_path / "doc_ids.txt").write_text("\n".join(DOCS) + "\n")
    (tmp_path / "query_ids.txt").write_text("\n".join(QIDS) + "\n")
    qrels = tmp_path / "qrels.tsv"

    def run(text, *extra):
        qrels.write_text(text)
        return _diagnose_cli(
            tmp_path / "out",
            tmp_path / "docs.npy",
            tmp_path / "queries.npy",
            qrels,
            "--query-ids",
            tmp_path / "query_ids.txt",
            "--k",
            1,
            *extra,
        )

    for text in ("", "\n\n", "query-id\tcorpus-id\tscore\n"):
        r = run(text, "--doc-ids", tmp_path / "doc_ids.txt")
        assert r.exit_code == 1 and r.output == (
            f"Error: {qrels}: judges no query: the file holds no judgement line (it is empty, blank or only a header)\n"
        ), text
    for text in ("qa d2\n# comment\nqb d0\n", "qa\td2\t1\n  #\tcomment\t1\n"):
        r = run(text, "--doc-ids", tmp_path / "doc_ids.txt")
        assert r.exit_code == 1 and r.output == (
            f"Error: {qrels}:2: {text.splitlines()[1].strip()!r} is a comment: qrels "
            "have no comment lines (it would be a judgement of query '#'); remove the "
            "line\n"
        ), text
    r = run("qa d2\nqb d0\nqc dX\nqd dA\nqd dX\n", "--doc-ids", tmp_path / "doc_ids.txt")
    assert r.exit_code == 1 and r.output == (
        f"Error: {qrels}:3: field 'corpus-id': document 'dX' (query 'qc') is not in the "
        "document ids (nor are 1 more documents the qrels name, e.g. ['dA']); the "
        "document ids look like ['d0', 'd1', 'd2']\n"
    )
    r = run("qa d2\n#qb d9\n", "--doc-ids", tmp_path / "doc_ids.txt")
    assert r.exit_code == 1 and r.output == (
        f"Error: {qrels}:2: field 'corpus-id': document 'd9' (query '#qb') is not in the "
        "document ids; the document ids look like ['d0', 'd1', 'd2']; a line starting "
        "with '#' is a judgement: qrels have no comment lines\n"
    )
    r = run("qa d2\nqb d0\n")  # no --doc-ids: the default the ids came from is named too
    assert r.exit_code == 1 and r.output == (
        f"Error: {qrels}:1: field 'corpus-id': document 'd2' (query 'qa') is not in the "
        "document ids (nor are 1 more documents the qrels name, e.g. ['d0']); the "
        "document ids look like ['0', '1', '2'] (no document ids given: document row i "
        "is document id 'i' (the row number, 0-based) (row 0 = '0', row 1 = '1'))\n"
    )
    assert not (tmp_path / "out").exists()


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
    r = _diagnose_cli(
        tmp_path / "out",
        tmp_path / "docs.npy",
        tmp_path / "queries.npy",
        tmp_path / "qrels.tsv",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--query-ids",
        tmp_path / "query_ids.txt",
        "--k",
        1,
    )
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (
        s["rows_without_judgements"]["count"] == 1
        and s["judged_queries_without_row"]["count"] == 2
        and s["queries"] == 3
    )


def test_cosine_never_writes_its_inputs(tmp_path):
    """--metric cosine on read-only memory-mapped .npy files (unit length or not), .npz and a
    faiss inner-product index: the same diagnosis, and the input files' bytes unchanged."""
    case = DATA / "diagnose-cosine-npy-readonly"
    Dn = np.load(case / "docs.npy")
    np.savez(tmp_path / "docs.npz", emb=Dn)
    index = faiss.IndexFlatIP(Dn.shape[1])
    index.add(Dn)
    faiss.write_index(index, str(tmp_path / "docs.faiss"))
    inputs = [
        (case / "docs.npy", case / "queries.npy"),
        (case / "docs_unit.npy", case / "queries_unit.npy"),
        (tmp_path / "docs.npz", case / "queries.npy"),
        (tmp_path / "docs.faiss", case / "queries.npy"),
    ]
    for i, (docs, queries) in enumerate(inputs):
        before = {p: p.read_bytes() for p in (docs, queries)}
        r = _diagnose_cli(
            tmp_path / f"out{i}",
            docs,
            queries,
            case / "qrels.tsv",
            "--query-ids",
            case / "query_ids.txt",
            "--k",
            2,
            "--metric",
            "cosine",
        )
        assert r.exit_code == 0, (docs, r.output)
        s = json.loads((tmp_path / f"out{i}" / "summary.json").read_text())
        assert s["metric"] == "cosine" and s["encoder_recall@2"] == 0.5 and s["probe_recall@2"] == 1.0, docs
        assert s["verdicts"] == {
            "index-limited": 0,
            "compression-limited": 0,
            "undetermined": 0,
            "encoder-limited": 1,
            "ann-limited": 0,
            "ok": 1,
        }, docs
        assert all(p.read_bytes() == b for p, b in before.items()), docs
    # the Python API on the read-only memory map, and the original arrays are untouched
    Dm = load_matrix(case / "docs.npy")
    assert not Dm.flags.writeable
    diag = diagnose(
        Dm,
        load_matrix(case / "queries.npy"),
        load_qrels_file(case / "qrels.tsv"),
        [str(i) for i in range(8)],
        load_ids(case / "query_ids.txt"),
        k=2,
        metric="cosine",
    )
    assert {r["query_id"]: r["verdict"] for r in diag.rows} == {"q1": "encoder-limited", "q2": "ok"}
    assert np.array_equal(Dm, Dn) and any("were not unit length" in n for n in diag.notes)


def test_faiss_l2_index_is_scored_by_its_own_metric(tmp_path):
    case = DATA / "diagnose-faiss-l2-index-scored-as-ip"
    e = load_embeddings(case / "docs_l2.faiss")
    assert e.metric == "l2" and e.matrix.shape == (10, 4) and e.matrix.dtype == np.float32
    assert load_embeddings(case / "queries.npy").metric is None
    assert np.array_equal(load_matrix(case / "docs_l2.faiss"), e.matrix)  # load_matrix: the matrix, as before
    args = (
        case / "docs_l2.faiss",
        case / "queries.npy",
        case / "qrels.tsv",
        "--query-ids",
        case / "query_ids.txt",
        "--ann-run",
        case / "l2_exact.trec",
        "--k",
        1,
    )
    for i, extra in enumerate([(), ("--metric", "l2")]):
        r = _diagnose_cli(tmp_path / f"out{i}", *args, *extra)
        assert r.exit_code == 0, r.output
        s = json.loads((tmp_path / f"out{i}" / "summary.json").read_text())
        assert (
            s["metric"] == "l2"
            and s["encoder_recall@1"] == 1.0
            and s["ann_vs_exact@1"] == 1.0
            and s["probe_recall@1"] == 1.0
        )
        assert s["verdicts"]["ok"] == 3 and s["probe_not_l2_query"] == 0
        lines = (tmp_path / f"out{i}" / "per_query.tsv").read_text().splitlines()
        col = lines[0].split("\t").index("probe_l2_query")
        assert [ln.split("\t")[col] for ln in lines[1:]] == ["True"] * 3
    # another metric than the index's own is an error
    for m in ("ip", "cosine"):
        r = _diagnose_cli(tmp_path / "bad", *args, "--metric", m)
        assert (
            r.exit_code != 0
            and f"docs_l2.faiss is a faiss index that searches by L2 distance; --metric {m} would" in r.output
        )
    assert (
        resolve_metric(None, None) == "ip"
        and resolve_metric(None, "l2") == "l2"
        and resolve_metric("cosine", "ip") == "cosine"
    )
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
    import capgap.diagnosis.inputs as dg

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
    for name, row, col, value in (
        ("docs_nan.npy", 3, 1, "nan"),
        ("queries_inf.npy", 3, 0, "inf"),
        ("queries_inf16.npy", 3, 0, "inf"),
        ("docs_nan.npz", 3, 1, "nan"),
        ("docs_nan.faiss", 3, 1, "nan"),
    ):
        with pytest.raises(
            DataFormatError, match=rf"{name}: row {row} \(0-based\) is not finite: column {col} holds {value}"
        ):
            load_matrix(tmp_path / name)
    assert load_matrix(_save(tmp_path / "f64.npy", D.astype(np.float64))).dtype == np.float64  # numpy's default: taken
    for name, arr, reason in (
        ("i32.npy", D.astype(np.int32), "expected float16, float32 or float64, got int32"),
        ("flat.npy", D[0], r"expected a 2-d \(n, dim\) array, got shape \(3,\)"),
        ("empty.npy", D[:0], "expected at least one row and one column"),
    ):
        np.save(tmp_path / name, arr)
        with pytest.raises(DataFormatError, match=rf"{name}: {reason}"):
            load_matrix(tmp_path / name)
    other = faiss.IndexFlat(3, faiss.METRIC_L1)
    other.add(D)
    faiss.write_index(other, str(tmp_path / "l1.faiss"))
    (tmp_path / "junk.faiss").write_bytes(b"not an index")
    np.savez(tmp_path / "two.npz", a=D, b=Q)
    for path, key, reason in (
        (tmp_path / "l1.faiss", None, "faiss metric_type 2 is not supported"),
        (tmp_path / "junk.faiss", None, "faiss cannot read it as an index"),
        (tmp_path / "two.npz", "c", r"holds arrays \['a', 'b'\], not 'c': name one with --key"),
    ):
        with pytest.raises(DataFormatError, match=reason):
            load_matrix(path, key)
    # the command line: the file and the row, and a dimension mismatch names both files
    np.save(tmp_path / "docs.npy", D)
    np.save(tmp_path / "q2d.npy", Q[:, :2])
    (tmp_path / "qrels.tsv").write_text("qa\t0\t1\n")
    (tmp_path / "qids.txt").write_text("\n".join(QIDS) + "\n")
    r = _diagnose_cli(
        tmp_path / "o",
        tmp_path / "docs.npy",
        tmp_path / "queries_inf.npy",
        tmp_path / "qrels.tsv",
        "--query-ids",
        tmp_path / "qids.txt",
    )
    assert r.exit_code != 0 and "queries_inf.npy: row 3 (0-based) is not finite: column 0 holds inf" in r.output
    r = _diagnose_cli(
        tmp_path / "o",
        tmp_path / "docs.npy",
        tmp_path / "q2d.npy",
        tmp_path / "qrels.tsv",
        "--query-ids",
        tmp_path / "qids.txt",
    )
    assert r.exit_code != 0 and "docs.npy has dim 3" in r.output and "q2d.npy has dim 2" in r.output
    # the Python API names the array and the row; float64 is taken, integers are not
    with pytest.raises(ValueError, match=r"documents: row 3 \(0-based\) is not finite: column 1 holds nan"):
        diagnose(bad_d, Q, QRELS, DOCS, QIDS)
    with pytest.raises(ValueError, match=r"queries: row 3 \(0-based\) is not finite: column 0 holds inf"):
        diagnose(D, bad_q, QRELS, DOCS, QIDS)
    # a finite float64 beyond float32 is scored times a power of two: it ranks as the same direction at norm ~1
    big, unit = diagnose(D, np.full((4, 3), 1e300), QRELS, DOCS, QIDS), diagnose(D, np.ones((4, 3)), QRELS, DOCS, QIDS)
    assert [r["encoder_recall@10"] for r in big.rows] == [r["encoder_recall@10"] for r in unit.rows]
    with pytest.raises(ValueError, match="documents: expected float16, float32 or float64, got int64"):
        diagnose(D.astype(np.int64), Q, QRELS, DOCS, QIDS)
    assert diagnose(D.astype(np.float64), Q, QRELS, DOCS, QIDS, k=1).summary["verdicts"]["index-limited"] == 1


def test_ann_run_ids_that_meet_nothing_are_an_error(tmp_path):
    """An ANN run whose query ids, or whose document ids, meet none of the given ids would make
    every verdict an artefact: an error naming both sides; blank lines closing an ids file are
    no row."""
    with pytest.raises(ValueError, match=r"none of the ANN run's 1 query ids \(e.g. \['x0'\]\) is a judged query"):
        diagnose(D, Q, QRELS, DOCS, QIDS, k=1, ann_run={"x0": ["d0"]})
    with pytest.raises(
        ValueError, match=r"none of the ANN run's 2 document ids \(e.g. \['0', '1'\]\) is a document id"
    ):
        diagnose(D, Q, QRELS, DOCS, QIDS, k=1, ann_run={"qa": ["0"], "qb": ["1"]})
    (tmp_path / "ids.txt").write_text("d0\nd1\n\n\n")
    assert load_ids(tmp_path / "ids.txt") == ["d0", "d1"]
    (tmp_path / "ids.txt").write_text("d0\n\nd1\n")
    with pytest.raises(DataFormatError, match="ids.txt:2: empty id"):
        load_ids(tmp_path / "ids.txt")


def test_an_ann_run_repeating_a_document_is_refused_on_the_command_line(tmp_path):
    """qd's gold is d0 (d4 is judged 0): read twice, d0 would fill both of the top 2 places. The
    run is refused naming its file, the repeat's line and the first line."""
    np.save(tmp_path / "docs.npy", D)
    np.save(tmp_path / "queries.npy", Q)
    (tmp_path / "doc_ids.txt").write_text("\n".join(DOCS) + "\n")
    (tmp_path / "query_ids.txt").write_text("\n".join(QIDS) + "\n")
    (tmp_path / "qrels.tsv").write_text("".join(f"{q}\t{d}\t{g}\n" for q, r in QRELS.items() for d, g in r.items()))
    (tmp_path / "run.tsv").write_text("qd d0 5\nqd d0 4\nqd d1 3\n")
    r = CliRunner().invoke(
        main,
        [
            "diagnose",
            "--doc-embeddings",
            str(tmp_path / "docs.npy"),
            "--query-embeddings",
            str(tmp_path / "queries.npy"),
            "--qrels",
            str(tmp_path / "qrels.tsv"),
            "--doc-ids",
            str(tmp_path / "doc_ids.txt"),
            "--query-ids",
            str(tmp_path / "query_ids.txt"),
            "--ann-run",
            str(tmp_path / "run.tsv"),
            "--k",
            "2",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert r.exit_code == 1 and r.output == (
        f"Error: {tmp_path / 'run.tsv'}:2: field 'doc-id': document 'd0' of query 'qd' repeats line 1\n"
    )
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- compressed faiss indexes
def _write(index, path):
    faiss.write_index(index, str(path))
    return path


def _trained(index, X):
    index.train(X)
    index.add(X)
    return index


def test_compressed_faiss_indexes_are_read_as_their_reconstructed_vectors(tmp_path):
    """Each supported type, written and read back, gives exactly faiss's own reconstruction of
    the in-memory index, and its kind and bytes per vector (derived from the code layout:
    SQ8 one byte a coordinate, SQ4 half a byte, PQ m * nbits / 8, flat 4 * dim; IVF lists hold
    the same codes)."""
    X = np.random.default_rng(0).standard_normal((300, 8)).astype(np.float32)
    ip = faiss.METRIC_INNER_PRODUCT
    SQ = faiss.ScalarQuantizer
    cases = {  # name: (index, kind, bytes per vector)
        "flat": (faiss.IndexFlatIP(8), "flat", 32),
        "sq8": (faiss.IndexScalarQuantizer(8, SQ.QT_8bit, ip), "sq8", 8),
        "sq4": (faiss.IndexScalarQuantizer(8, SQ.QT_4bit, ip), "sq4", 4),
        "pq": (faiss.IndexPQ(8, 4, 4, ip), "pq-4x4", 2),
        "pq_l2": (faiss.IndexPQ(8, 2, 4), "pq-2x4", 1),
        "ivfpq": (faiss.IndexIVFPQ(faiss.IndexFlatIP(8), 8, 4, 4, 4, ip), "ivf4-pq-4x4", 2),
        "ivfflat": (faiss.IndexIVFFlat(faiss.IndexFlatL2(8), 8, 4), "ivf4-flat", 32),
        "ivfsq8": (faiss.IndexIVFScalarQuantizer(faiss.IndexFlatL2(8), 8, 4, SQ.QT_8bit), "ivf4-sq8", 8),
        "hnswsq8": (faiss.IndexHNSWSQ(8, SQ.QT_8bit, 4, ip), "hnsw-sq8", 8),
    }
    for name, (index, kind, nbytes) in cases.items():
        if isinstance(index, faiss.IndexPQ):
            index.pq.cp.min_points_per_centroid = 1  # no faiss warning for a small training set
        _trained(index, X)
        if isinstance(index, faiss.IndexIVF):
            index.make_direct_map()  # written with a direct map (the case without: the next test)
        e = load_embeddings(_write(index, tmp_path / f"{name}.faiss"))
        assert np.array_equal(e.matrix, index.reconstruct_n(0, 300)), name
        assert e.matrix.dtype == np.float32 and e.ids is None, name
        assert (e.kind, e.bytes_per_vector) == (kind, nbytes), name
        assert e.metric == ("ip" if index.metric_type == ip else "l2"), name
    # the compressed ones really are lossy; flat is the input itself
    assert np.array_equal(load_matrix(tmp_path / "flat.faiss"), X)
    assert not np.array_equal(load_matrix(tmp_path / "sq4.faiss"), X)
    assert load_embeddings(tmp_path / "ivfpq.faiss").faiss_type == "IndexIVFPQ"
    # arrays: the dtype and itemsize * dim
    e = load_embeddings(_save(tmp_path / "x16.npy", X.astype(np.float16)))
    assert (e.kind, e.bytes_per_vector, e.faiss_type, e.ids) == ("float16", 16.0, None, None)


def test_ivf_without_direct_map_and_faiss_ids(tmp_path):
    """An IVF index written without a direct map is read without one: faiss's
    IndexIVF.reconstruct_n scans the inverted lists (reconstruct(i) would need the map), and
    the file is not written. Ids given with add_with_ids (IVF or IndexIDMap) order the rows;
    they name documents as line numbers of --doc-ids, or as themselves."""
    X = np.random.default_rng(1).standard_normal((200, 8)).astype(np.float32)
    index = _trained(faiss.IndexIVFPQ(faiss.IndexFlatIP(8), 8, 4, 4, 4, faiss.METRIC_INNER_PRODUCT), X)
    path = _write(index, tmp_path / "ivfpq_nomap.faiss")
    before = path.read_bytes()
    with pytest.raises(RuntimeError, match="direct map not initialized"):  # faiss itself, on a loaded copy
        faiss.read_index(str(path)).reconstruct(0)
    e = load_embeddings(path)
    index.make_direct_map()
    assert np.array_equal(e.matrix, np.stack([index.reconstruct(i) for i in range(200)]))  # one by one, through the map
    assert e.kind == "ivf4-pq-4x4" and e.ids is None and path.read_bytes() == before
    # IVF with ids: rows ascending by id
    ids = (np.arange(200) * 7 + 3)[::-1].astype(np.int64)
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatL2(8), 8, 4)
    ivf.train(X)
    ivf.add_with_ids(X, ids)
    e = load_embeddings(_write(ivf, tmp_path / "ivf_ids.faiss"))
    assert np.array_equal(e.ids, np.sort(ids)) and np.array_equal(e.matrix, X[::-1])  # IVF-Flat stores X exactly
    assert document_ids(e)[:2] == ["3", "10"]
    listed = [f"doc{i}" for i in range(1400)]
    assert document_ids(e, listed)[:2] == ["doc3", "doc10"]
    with pytest.raises(
        ValueError,
        match=r"holds faiss ids up to 1396, taken as line numbers \(0-based\) of ids.txt, which names only 5",
    ):
        document_ids(e, listed[:5], "ids.txt")
    # IndexIDMap around PQ: ids from id_map; a permutation of 0..n-1 is row numbers again
    pq = faiss.IndexPQ(8, 4, 4, faiss.METRIC_INNER_PRODUCT)
    pq.pq.cp.min_points_per_centroid = 1
    pq.train(X)
    idmap = faiss.IndexIDMap(pq)
    idmap.add_with_ids(X, np.arange(200)[::-1].astype(np.int64))
    e = load_embeddings(_write(idmap, tmp_path / "idmap_pq.faiss"))
    assert e.ids is None and e.faiss_type == "IndexIDMap(IndexPQ)" and e.kind == "pq-4x4" and e.bytes_per_vector == 2
    assert np.array_equal(e.matrix, pq.reconstruct_n(0, 200)[::-1])
    assert faiss.vector_to_array(idmap.id_map)[0] == 199  # row 0 of the inner index is id 199, the last row here


def test_unsupported_or_ambiguous_faiss_indexes_are_errors(tmp_path):
    """A type capgap cannot reconstruct is refused by name, before faiss is asked: faiss's default
    reconstruct_n runs reconstruct inside an OpenMP loop, so an IndexIDMap or an index without
    reconstruct would abort the process instead of raising. Repeated or negative ids are
    refused too."""
    X = np.random.default_rng(2).standard_normal((50, 8)).astype(np.float32)
    lsh = _trained(faiss.IndexLSH(8, 16), X)
    idlsh = faiss.IndexIDMap(faiss.IndexLSH(8, 16))
    idlsh.train(X)
    idlsh.add_with_ids(X, np.arange(50, dtype=np.int64))
    dup = faiss.IndexIDMap(faiss.IndexFlatIP(8))
    dup.add_with_ids(X, np.r_[np.arange(49), 3].astype(np.int64))
    neg = faiss.IndexIDMap(faiss.IndexFlatIP(8))
    neg.add_with_ids(X, np.arange(-1, 49, dtype=np.int64))
    for name, index, reason in (
        ("lsh", lsh, "faiss IndexLSH is not supported: capgap reconstructs the vectors of IndexFlat"),
        ("idlsh", idlsh, "faiss IndexLSH is not supported"),
        ("dup", dup, r"faiss IndexIDMap\(IndexFlatIP\) holds id 3 2 times"),
        ("neg", neg, r"faiss IndexIDMap\(IndexFlatIP\) holds a negative id \(-1\): ids must be >= 0"),
    ):
        with pytest.raises(DataFormatError, match=rf"{name}.faiss: {reason}"):
            load_embeddings(_write(index, tmp_path / f"{name}.faiss"))


# Compression-limited by construction. 2-d documents; every coordinate spans [0, 15], so SQ4
# (faiss QT_4bit, min/max ranges: code floor(15 (x - 0) / 15) = floor(x), clipped to 15; decoded
# code + 0.5) has bins [c, c + 1) decoding to c + 0.5, and 15 decodes to 15.5.
#   d0 = (10.8, 10.8) and d1 = (10.2, 10.2) both decode to (10.5, 10.5): twins.
#   d2 = (15, 0) -> (15.5, 0.5), d3 = (0, 15) -> (0.5, 15.5), d4 = (0, 0) -> (0.5, 0.5),
#   d5 = (5, 5) -> (5.5, 5.5).
# Uncompressed, d0 is strictly first for w = (1, 1) (21.6 against 20.4, 15, 15, 10, 0); after SQ4
# its twin d1 ties it for every w: not certified (cause duplicate), probe recall@1 0 (ties are
# pessimistic). d5 lies inside the triangle d2 d3 d4 (5 + 5 < 15; decoded 5.5 + 5.5 < 16) and
# below d0's line: no w ranks it first, compressed or not. d2 and d4 are vertices of the
# hull in both geometries, and the queries (1, 0) and (-1, -1) put them first.
SQ4_D = np.array([[10.8, 10.8], [10.2, 10.2], [15, 0], [0, 15], [0, 0], [5, 5]], dtype=np.float32)
SQ4_DECODED = np.array([[10.5, 10.5], [10.5, 10.5], [15.5, 0.5], [0.5, 15.5], [0.5, 0.5], [5.5, 5.5]], dtype=np.float32)
SQ4_Q = np.array([[1, 1], [1, 0], [1, 1], [-1, -1]], dtype=np.float32)
SQ4_QIDS = ["q_twin", "q_corner", "q_inside", "q_origin"]
SQ4_QRELS = {"q_twin": {"d0": 1}, "q_corner": {"d2": 1}, "q_inside": {"d5": 1}, "q_origin": {"d4": 1}}
SQ4_DOCS = [f"d{i}" for i in range(6)]
SQ4_COMPRESSED = {"q_twin": "compression-limited", "q_corner": "ok", "q_inside": "index-limited", "q_origin": "ok"}


def _sq4_index(D):
    return _trained(faiss.IndexScalarQuantizer(2, faiss.ScalarQuantizer.QT_4bit, faiss.METRIC_INNER_PRODUCT), D)


def test_compression_limited_by_construction(tmp_path):
    e = load_embeddings(_write(_sq4_index(SQ4_D), tmp_path / "sq4.faiss"))
    np.testing.assert_allclose(e.matrix, SQ4_DECODED, atol=1e-5)
    assert np.array_equal(e.matrix[0], e.matrix[1])  # the same code: bit-identical twins
    assert (e.kind, e.bytes_per_vector) == ("sq4", 1.0)  # 2 coordinates x 4 bits
    assert np.array_equal(compress(SQ4_D, "sq4").documents, e.matrix)  # capgap.compress builds the same geometry
    diag = diagnose(e.matrix, SQ4_Q, SQ4_QRELS, SQ4_DOCS, SQ4_QIDS, k=1, uncompressed=SQ4_D, index_info=e.info())
    by = {r["query_id"]: r for r in diag.rows}
    assert {q: r["verdict"] for q, r in by.items()} == SQ4_COMPRESSED
    assert (
        by["q_twin"]["cause"] == "duplicate" and by["q_twin"]["probe_recall@1"] == 0.0 and not by["q_twin"]["certified"]
    )
    assert by["q_twin"]["uncompressed_certified"] and by["q_twin"]["uncompressed_probe_recall@1"] == 1.0
    assert by["q_twin"]["best_gold_rank"] == 2  # tied with its twin: pessimistic rank 2
    assert not by["q_inside"]["certified"] and not by["q_inside"]["uncompressed_certified"]
    s = diag.summary
    assert s["verdicts"] == {
        "index-limited": 1,
        "compression-limited": 1,
        "undetermined": 0,
        "encoder-limited": 0,
        "ann-limited": 0,
        "ok": 2,
    }
    assert s["index"]["kind"] == "sq4" and s["index"]["bytes_per_vector"] == 1.0
    u = s["uncompressed"]
    assert (u["admitted"], u["admitted_by_index"], u["lost_to_compression"], u["admitted_only_by_index"]) == (
        3,
        2,
        1,
        0,
    )
    assert u["probe_recall@1"] == 0.75 and u["kind"] == "float32" and u["bytes_per_vector"] == 8.0
    assert "lose 1 queries to compression" in s["reading"]
    # without the uncompressed vectors nothing tells compression from geometry: index-limited
    diag = diagnose(e.matrix, SQ4_Q, SQ4_QRELS, SQ4_DOCS, SQ4_QIDS, k=1)
    assert {r["query_id"]: r["verdict"] for r in diag.rows} == {**SQ4_COMPRESSED, "q_twin": "index-limited"}
    assert diag.summary["uncompressed"] is None and diag.summary["verdicts"]["compression-limited"] == 0
    assert diag.summary["index"]["kind"] == "float32"  # an array: its dtype
    # uncompressed, both are admitted and the float query (1, 1) finds d0: ok
    diag = diagnose(SQ4_D, SQ4_Q, SQ4_QRELS, SQ4_DOCS, SQ4_QIDS, k=1, uncompressed=SQ4_D)
    assert diag.rows[0]["verdict"] == "ok" and diag.summary["uncompressed"]["lost_to_compression"] == 0
    with pytest.raises(ValueError, match=r"uncompressed documents have shape \(5, 2\), documents \(6, 2\)"):
        diagnose(e.matrix, SQ4_Q, SQ4_QRELS, SQ4_DOCS, SQ4_QIDS, k=1, uncompressed=SQ4_D[:5])
    with pytest.raises(ValueError, match=r"uncompressed documents: row 2 \(0-based\) is not finite"):
        diagnose(
            e.matrix,
            SQ4_Q,
            SQ4_QRELS,
            SQ4_DOCS,
            SQ4_QIDS,
            k=1,
            uncompressed=np.where(np.arange(6)[:, None] == 2, np.nan, SQ4_D),
        )


def test_compression_limited_on_the_command_line(tmp_path):
    """The CLI end to end on files: an SQ4 index, the uncompressed .npy, and the same with an
    IndexIDMap whose ids are row numbers of a larger corpus (the odd rows of 12)."""
    _write(_sq4_index(SQ4_D), tmp_path / "sq4.faiss")
    np.save(tmp_path / "docs.npy", SQ4_D)
    np.save(tmp_path / "queries.npy", SQ4_Q)
    (tmp_path / "doc_ids.txt").write_text("\n".join(SQ4_DOCS) + "\n")
    (tmp_path / "query_ids.txt").write_text("\n".join(SQ4_QIDS) + "\n")
    (tmp_path / "qrels.tsv").write_text("".join(f"{q}\t{d}\t1\n" for q, r in SQ4_QRELS.items() for d in r))
    base = (
        tmp_path / "sq4.faiss",
        tmp_path / "queries.npy",
        tmp_path / "qrels.tsv",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--query-ids",
        tmp_path / "query_ids.txt",
        "--k",
        1,
    )

    def per_query(out):
        lines = (out / "per_query.tsv").read_text().splitlines()
        cols = lines[0].split("\t")
        return {ln.split("\t")[0]: ln.split("\t")[cols.index("verdict")] for ln in lines[1:]}

    r = _diagnose_cli(tmp_path / "with", *base, "--uncompressed-embeddings", tmp_path / "docs.npy")
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "with" / "summary.json").read_text())
    assert s["verdicts"] == {
        "index-limited": 1,
        "compression-limited": 1,
        "undetermined": 0,
        "encoder-limited": 0,
        "ann-limited": 0,
        "ok": 2,
    }
    assert s["index"] == {
        "path": str(tmp_path / "sq4.faiss"),
        "kind": "sq4",
        "faiss_type": "IndexScalarQuantizer",
        "bytes_per_vector": 1.0,
        "n": 6,
        "dim": 2,
    }
    assert s["uncompressed"]["kind"] == "float32" and s["uncompressed"]["lost_to_compression"] == 1
    assert "NaN" not in (tmp_path / "with" / "summary.json").read_text()
    md = (tmp_path / "with" / "summary.md").read_text()
    assert "| compression-limited | 1 |" in md and "`sq4` (faiss `IndexScalarQuantizer`), 1 bytes per vector" in md
    assert per_query(tmp_path / "with") == SQ4_COMPRESSED
    r = _diagnose_cli(tmp_path / "without", *base)
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "without" / "summary.json").read_text())
    assert (
        s["verdicts"]["index-limited"] == 2 and s["verdicts"]["compression-limited"] == 0 and s["uncompressed"] is None
    )
    assert "| compression-limited | not measured" in (tmp_path / "without" / "summary.md").read_text()
    # the uncompressed file must be the same documents: rows and dimension, both files named
    np.save(tmp_path / "five.npy", SQ4_D[:5])
    np.save(tmp_path / "wide.npy", np.c_[SQ4_D, SQ4_D])
    r = _diagnose_cli(tmp_path / "bad", *base, "--uncompressed-embeddings", tmp_path / "five.npy")
    assert (
        r.exit_code != 0
        and "sq4.faiss holds 6 documents" in r.output
        and "five.npy (the uncompressed documents) 5" in r.output
    )
    r = _diagnose_cli(tmp_path / "bad", *base, "--uncompressed-embeddings", tmp_path / "wide.npy")
    assert (
        r.exit_code != 0
        and "sq4.faiss has dim 2" in r.output
        and "wide.npy (the uncompressed documents) has dim 4" in r.output
    )
    assert not (tmp_path / "bad").exists()
    # IndexIDMap: the index holds corpus rows 1, 3, ..., 11 (faiss ids), in reverse order; the
    # uncompressed corpus has 12 rows (even rows: other documents, not in the index)
    sq = faiss.IndexScalarQuantizer(2, faiss.ScalarQuantizer.QT_4bit, faiss.METRIC_INNER_PRODUCT)
    sq.train(SQ4_D)
    idmap = faiss.IndexIDMap(sq)
    idmap.add_with_ids(SQ4_D[::-1].copy(), (2 * np.arange(6) + 1)[::-1].astype(np.int64))
    _write(idmap, tmp_path / "idmap.faiss")
    corpus = np.full((12, 2), 7.0, dtype=np.float32)
    corpus[1::2] = SQ4_D
    np.save(tmp_path / "corpus.npy", corpus)
    (tmp_path / "corpus_ids.txt").write_text("".join(f"c{i}\n" for i in range(12)))
    (tmp_path / "qrels_c.tsv").write_text(
        "".join(f"{q}\tc{2 * int(d[1:]) + 1}\t1\n" for q, r in SQ4_QRELS.items() for d in r)
    )
    r = _diagnose_cli(
        tmp_path / "idmap",
        tmp_path / "idmap.faiss",
        tmp_path / "queries.npy",
        tmp_path / "qrels_c.tsv",
        "--doc-ids",
        tmp_path / "corpus_ids.txt",
        "--query-ids",
        tmp_path / "query_ids.txt",
        "--k",
        1,
        "--uncompressed-embeddings",
        tmp_path / "corpus.npy",
    )
    assert r.exit_code == 0, r.output
    assert per_query(tmp_path / "idmap") == SQ4_COMPRESSED
    s = json.loads((tmp_path / "idmap" / "summary.json").read_text())
    assert s["index"]["faiss_type"] == "IndexIDMap(IndexScalarQuantizer)" and s["index"]["n"] == 6


def test_uncompressed_rows_are_matched_to_the_documents_by_id(tmp_path):
    """The uncompressed documents as a table with ids: matched to the documents by id, so the
    same documents in another row order diagnose to the same per_query.tsv and summary.json
    (but for the file's path): SQ4_COMPRESSED, by construction (comment above), where pairing
    by position would not give it. Ids that are not the documents' are refused naming both
    files. Without ids (an .npy; a table without the documents' id column) the rows pair by
    position, recorded in summary.json, and a table column holding the document ids in another
    row order is refused, naming the option that pairs by it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(ids, M, id_name="id"):
        return pa.table({id_name: ids, "emb": pa.array([list(map(float, r)) for r in M], type=pa.list_(pa.float32()))})

    perm = [5, 3, 0, 4, 1, 2]
    pq.write_table(table(SQ4_DOCS, SQ4_DECODED), tmp_path / "docs.parquet")
    for name, rows in (("a", list(range(6))), ("b", perm)):
        (tmp_path / name).mkdir()
        pq.write_table(table([SQ4_DOCS[i] for i in rows], SQ4_D[rows]), tmp_path / name / "u.parquet")
    np.save(tmp_path / "queries.npy", SQ4_Q)
    np.save(tmp_path / "u.npy", SQ4_D)
    (tmp_path / "query_ids.txt").write_text("\n".join(SQ4_QIDS) + "\n")
    (tmp_path / "qrels.tsv").write_text("".join(f"{q}\t{d}\t1\n" for q, r in SQ4_QRELS.items() for d in r))
    base = (
        tmp_path / "docs.parquet",
        tmp_path / "queries.npy",
        tmp_path / "qrels.tsv",
        "--id-column",
        "id",
        "--query-ids",
        tmp_path / "query_ids.txt",
        "--k",
        1,
    )

    def verdicts(out):
        lines = (out / "per_query.tsv").read_text().splitlines()
        cols = lines[0].split("\t")
        return {ln.split("\t")[0]: ln.split("\t")[cols.index("verdict")] for ln in lines[1:]}

    summaries = {}
    for name in ("a", "b"):
        r = _diagnose_cli(tmp_path / f"out_{name}", *base, "--uncompressed-embeddings", tmp_path / name / "u.parquet")
        assert r.exit_code == 0, r.output
        assert verdicts(tmp_path / f"out_{name}") == SQ4_COMPRESSED
        summaries[name] = json.loads((tmp_path / f"out_{name}" / "summary.json").read_text())
        assert summaries[name]["uncompressed"].pop("path") == str(tmp_path / name / "u.parquet")
    assert summaries["a"] == summaries["b"] and "id_defaults" not in summaries["a"]  # every row paired by id
    assert (tmp_path / "out_a" / "per_query.tsv").read_bytes() == (tmp_path / "out_b" / "per_query.tsv").read_bytes()
    by_position = diagnose(SQ4_DECODED, SQ4_Q, SQ4_QRELS, SQ4_DOCS, SQ4_QIDS, k=1, uncompressed=SQ4_D[perm])
    assert by_position.rows[0]["verdict"] == "index-limited"  # q_twin: d0 paired with d5's (5, 5), inside the hull
    # a foreign id: refused, naming both files
    pq.write_table(table(SQ4_DOCS[:5] + ["dX"], SQ4_D), tmp_path / "foreign.parquet")
    r = _diagnose_cli(tmp_path / "bad", *base, "--uncompressed-embeddings", tmp_path / "foreign.parquet")
    assert r.exit_code == 1 and r.output == (
        f"Error: {tmp_path / 'foreign.parquet'} (the uncompressed documents) is matched to {tmp_path / 'docs.parquet'} by "
        f"document id (its id column), but 1 of its 6 ids name no document of {tmp_path / 'docs.parquet'} (e.g. ['dX']) "
        "and 1 of the 6 documents have no row in it (e.g. ['d5']): they must be the same documents\n"
    )
    assert not (tmp_path / "bad").exists()
    # no ids: by position, recorded
    r = _diagnose_cli(tmp_path / "npy", *base, "--uncompressed-embeddings", tmp_path / "u.npy")
    assert r.exit_code == 0, r.output
    assert verdicts(tmp_path / "npy") == SQ4_COMPRESSED
    assert json.loads((tmp_path / "npy" / "summary.json").read_text())["id_defaults"]["uncompressed"] == {
        "rule": f"row j of {tmp_path / 'u.npy'} is the document of row j of {tmp_path / 'docs.parquet'}",
        "first": ["d0", "d1", "d2"],
    }
    # a table whose ids sit in another column than the documents': refused by position, matched by id with the option
    pq.write_table(table([SQ4_DOCS[i] for i in perm], SQ4_D[perm], "doc"), tmp_path / "u_doc.parquet")
    r = _diagnose_cli(tmp_path / "bad", *base, "--uncompressed-embeddings", tmp_path / "u_doc.parquet")
    assert r.exit_code == 1 and r.output == (
        f"Error: {tmp_path / 'u_doc.parquet'}: its rows are paired with the documents of {tmp_path / 'docs.parquet'} by "
        f"position (no --uncompressed-id-column), but its column 'doc' holds the document ids of "
        f"{tmp_path / 'docs.parquet'} and names row 0 'd5', not 'd0': pass --uncompressed-id-column doc to pair the rows "
        "by that column\n"
    )
    r = _diagnose_cli(
        tmp_path / "doc",
        *base,
        "--uncompressed-embeddings",
        tmp_path / "u_doc.parquet",
        "--uncompressed-id-column",
        "doc",
    )
    assert r.exit_code == 0, r.output
    assert verdicts(tmp_path / "doc") == SQ4_COMPRESSED


def test_compression_limited_under_l2(tmp_path):
    """L2: the uncompressed documents are probed as L2 documents ``(d, -|d|^2/2)``, like the
    index's own. A gold document at the centre of a ring of 20 points at radius 10 and its
    non-gold twin at (0.3, 0.3): an L2 query at (-1, -1) is nearer the gold one, so it is
    admitted uncompressed; SQ4 over the range [-10, 10] decodes both to one vector (cell width
    20/15 = 1.33 > 0.3), so the index's own vectors cannot separate them: compression-limited."""
    t = np.linspace(0, 2 * np.pi, 20, endpoint=False)
    D = np.vstack([[0, 0], [0.3, 0.3], np.stack([10 * np.cos(t), 10 * np.sin(t)], 1)]).astype(np.float32)
    idx = faiss.IndexScalarQuantizer(2, faiss.ScalarQuantizer.QT_4bit, faiss.METRIC_L2)
    idx.train(D)
    idx.add(D)
    rec = idx.reconstruct_n(0, len(D))
    assert np.array_equal(rec[0], rec[1])  # the construction: the twins collapse
    faiss.write_index(idx, str(tmp_path / "sq4.faiss"))
    np.save(tmp_path / "docs.npy", D)
    np.save(tmp_path / "queries.npy", np.zeros((1, 2), np.float32))
    (tmp_path / "qrels.tsv").write_text("q0\t0\t1\n")
    (tmp_path / "qids.txt").write_text("q0\n")
    args = [
        "diagnose",
        "--doc-embeddings",
        str(tmp_path / "sq4.faiss"),
        "--query-embeddings",
        str(tmp_path / "queries.npy"),
        "--qrels",
        str(tmp_path / "qrels.tsv"),
        "--query-ids",
        str(tmp_path / "qids.txt"),
        "--k",
        "1",
    ]
    r = CliRunner().invoke(
        main, args + ["--uncompressed-embeddings", str(tmp_path / "docs.npy"), "--out", str(tmp_path / "o")]
    )
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["verdicts"]["compression-limited"] == 1 and s["verdicts"]["index-limited"] == 0
    r = CliRunner().invoke(main, args + ["--out", str(tmp_path / "o2")])
    assert json.loads((tmp_path / "o2" / "summary.json").read_text())["verdicts"]["index-limited"] == 1


N8 = DATA / "n8-zero-norm-cosine"  # docs.npy row 4 and queries.npy row 2 are all zeros (case n8)


def _n8_args(out, *extra):
    return [
        "diagnose",
        "--doc-embeddings",
        str(N8 / "docs.npy"),
        "--doc-ids",
        str(N8 / "doc_ids.txt"),
        "--query-embeddings",
        str(N8 / "queries.npy"),
        "--query-ids",
        str(N8 / "query_ids.txt"),
        "--qrels",
        str(N8 / "qrels.tsv"),
        "--k",
        "4",
        "--metric",
        "cosine",
        "--out",
        str(out),
        *extra,
    ]


def test_zero_norm_rows_under_cosine_are_an_error_naming_file_and_rows(tmp_path):
    """cos(q, d) = q.d / (|q| |d|) is 0/0 for a zero vector: never scored as 0, but an error
    naming the file, the 0-based rows and their ids (as a NaN row is)."""
    r = CliRunner().invoke(main, _n8_args(tmp_path / "out"))
    assert r.exit_code != 0 and not (tmp_path / "out" / "per_query.tsv").exists()
    assert "docs.npy: row 4 (0-based; ids ['d4']) has norm 0 (every value 0): cosine is undefined" in r.output
    assert "queries.npy: row 2 (0-based; ids ['q2'])" in r.output and "--zero-norm set-apart" in r.output
    D, Q = np.load(N8 / "docs.npy"), np.load(N8 / "queries.npy")
    ids = [f"d{i}" for i in range(12)]
    qrels = {"q0": {"d8": 1}, "q1": {"d3": 1}, "q3": {"d2": 1}}
    with pytest.raises(ValueError, match=r"^documents: row 4 \(0-based; ids \['d4'\]\) has norm 0"):
        diagnose(D, Q[[0, 1, 3]], qrels, ids, ["q0", "q1", "q3"], k=4, metric="cosine")
    # a tiny non-zero row has a direction: 1e-30 times a vector diagnoses as the vector itself
    # (float64 input: its squares, 1e-60, are far below float32 but the row is prescaled first)
    D1, D2 = D.astype(np.float64), D.astype(np.float64)
    D1[4] = D[7] + D[8]
    D2[4] = 1e-30 * D1[4]
    a, b = (diagnose(M, Q[[0, 1, 3]], qrels, ids, ["q0", "q1", "q3"], k=4, metric="cosine") for M in (D1, D2))
    assert a.rows == b.rows and a.summary["zero_norm"]["documents"]["count"] == 0
    # under inner product a zero vector's scores (0) are defined: no error
    assert len(diagnose(D, Q, {**qrels, "q2": {"d7": 1}}, ids, ["q0", "q1", "q2", "q3"], k=4, metric="ip").rows) == 4
    with pytest.raises(ValueError, match="zero_norm must be one of"):
        diagnose(D, Q, qrels, ids, ["q0", "q1", "q2", "q3"], k=4, metric="cosine", zero_norm="zero")


def test_zero_norm_rows_set_apart_rank_gold_among_defined_cosines(tmp_path):
    """With --zero-norm set-apart the zero rows are left out and counted; each gold document's
    rank is its rank among the 11 documents whose cosine is defined, computed here with numpy
    (the case's expected.py: q0 rank 4, q1 rank 9, q3 rank 5, one better than with d4 scored 0)."""
    D = np.load(N8 / "docs.npy").astype(np.float64)
    Q = np.load(N8 / "queries.npy").astype(np.float64)
    gold = {"q0": 8, "q1": 3, "q3": 2}
    want = {}
    for q, g in gold.items():
        i = int(q[1:])
        c = (D @ Q[i]) / (
            np.linalg.norm(D, axis=1) * np.linalg.norm(Q[i]) + (np.arange(12) == 4)
        )  # d4: 0/1, dropped below
        c = np.delete(c, 4)
        want[q] = int((c > c[g - (g > 4)]).sum()) + 1
    assert want == {"q0": 4, "q1": 9, "q3": 5}
    r = CliRunner().invoke(main, _n8_args(tmp_path / "out", "--zero-norm", "set-apart"))
    assert r.exit_code == 0, r.output
    lines = (tmp_path / "out" / "per_query.tsv").read_text().splitlines()
    head = lines[0].split("\t")
    rows = {ln.split("\t")[0]: dict(zip(head, ln.split("\t"))) for ln in lines[1:]}
    assert set(rows) == {"q0", "q1", "q3"}  # the zero query q2 gets no verdict
    assert {q: int(r["best_gold_rank"]) for q, r in rows.items()} == want
    assert {q: float(r["encoder_recall@4"]) for q, r in rows.items()} == {q: float(w <= 4) for q, w in want.items()}
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    z = s["zero_norm"]
    assert z["policy"] == "set-apart" and z["documents"] == {"count": 1, "rows": [4], "ids": ["d4"]}
    assert z["queries"] == {"count": 1, "rows": [2], "ids": ["q2"]} and s["queries"] == 3
    assert any("row 4 (0-based; ids ['d4'])" in n for n in s["notes"])


def test_zero_norm_gold_set_apart_stays_in_the_denominator():
    """A gold document of norm 0 set apart is never found but stays gold: recall@k over the full
    gold set (1 of 2 found = 0.5, by hand); a query whose only gold is zero is set apart too."""
    D = np.array([[1, 0], [0, 0], [0, 1], [-1, 0]], dtype=np.float32)
    Q = np.array([[1, 0.1], [0, 1]], dtype=np.float32)
    d = diagnose(
        D,
        Q,
        {"a": {"d0": 1, "d1": 1}, "b": {"d1": 1}},
        ["d0", "d1", "d2", "d3"],
        ["a", "b"],
        k=2,
        metric="cosine",
        zero_norm="set-apart",
    )
    assert [r["query_id"] for r in d.rows] == ["a"]
    assert d.rows[0]["encoder_recall@2"] == 0.5 and d.rows[0]["probe_recall@2"] == 0.5 and d.rows[0]["n_gold"] == 2
    assert d.summary["zero_norm"]["queries_with_only_zero_gold"] == {"count": 1, "ids": ["b"]}


def test_id_counts_that_do_not_fit_the_rows_name_both_files(tmp_path):
    """An ids file one line short of the embeddings' rows, and a shared --key that feeds the
    documents' array to the queries too: each error names the ids source and the embeddings
    file (with its key), and says how to name one array per file."""
    from click.testing import CliRunner

    from capgap.cli import main

    rng = np.random.default_rng(0)
    D, Q = rng.normal(size=(6, 4)).astype(np.float32), rng.normal(size=(3, 4)).astype(np.float32)
    np.save(tmp_path / "d.npy", D)
    np.save(tmp_path / "q.npy", Q)
    np.savez(tmp_path / "both.npz", docs=D, queries=Q)
    (tmp_path / "dids.txt").write_text("".join(f"d{i}\n" for i in range(5)))
    (tmp_path / "qids.txt").write_text("".join(f"q{i}\n" for i in range(3)))
    (tmp_path / "qrels.tsv").write_text("q0\td0\t1\nq1\td1\t1\nq2\td2\t1\n")
    t = str(tmp_path)
    r = CliRunner().invoke(
        main,
        [
            "diagnose",
            "--doc-embeddings",
            f"{t}/d.npy",
            "--query-embeddings",
            f"{t}/q.npy",
            "--qrels",
            f"{t}/qrels.tsv",
            "--doc-ids",
            f"{t}/dids.txt",
            "--query-ids",
            f"{t}/qids.txt",
            "--k",
            "1",
            "--out",
            f"{t}/o",
        ],
    )
    assert r.exit_code != 0 and f"Error: {t}/dids.txt: 5 document ids for the 6 rows of {t}/d.npy" in r.output
    r = CliRunner().invoke(
        main,
        [
            "diagnose",
            "--doc-embeddings",
            f"{t}/both.npz",
            "--query-embeddings",
            f"{t}/both.npz",
            "--key",
            "docs",
            "--qrels",
            f"{t}/qrels.tsv",
            "--query-ids",
            f"{t}/qids.txt",
            "--k",
            "1",
            "--out",
            f"{t}/o",
        ],
    )
    assert (
        r.exit_code != 0
        and (
            f"Error: {t}/qids.txt: 3 query ids for the 6 rows of {t}/both.npz['docs']; --key names the "
            "array in both files: --doc-key and --query-key name one each"
        )
        in r.output
    )


def test_a_flat_faiss_index_is_memory_mapped_to_the_same_vectors(tmp_path):
    """IndexFlatIP / IndexFlatL2 files are read without faiss: their vectors memory-mapped from the
    file (no copy in memory at 1M x 768), equal to faiss's own reconstruct_n, with faiss's metric;
    a file whose header does not add up (truncated) falls back to faiss, which refuses it."""
    import faiss

    from capgap.diagnosis.faiss_io import read_faiss_vectors

    x = np.random.default_rng(0).standard_normal((50, 7)).astype(np.float32)
    for cls, metric in ((faiss.IndexFlatIP, "ip"), (faiss.IndexFlatL2, "l2")):
        idx = cls(7)
        idx.add(x)
        path = tmp_path / f"{metric}.index"
        faiss.write_index(idx, str(path))
        got, fv = read_faiss_vectors(path)
        assert got == metric and isinstance(fv.matrix, np.memmap) and not fv.matrix.flags.writeable
        assert np.array_equal(fv.matrix, faiss.read_index(str(path)).reconstruct_n(0, 50))
        assert (fv.kind, fv.bytes_per_vector, fv.ids) == ("flat", 28.0, None)
    path.write_bytes(path.read_bytes()[:-4])  # truncated: not the flat layout, faiss reads (and refuses) it
    with pytest.raises(DataFormatError, match="faiss cannot read it as an index"):
        read_faiss_vectors(path)
