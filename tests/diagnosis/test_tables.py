"""Embeddings in tables (capgap.diagnosis.tables): a Parquet or Arrow IPC file with an id column
and a list / fixed-size-list column of floats, as Hugging Face datasets and LanceDB store them,
diagnoses to exactly the numbers of the same vectors in .npy; each bad table is one error naming
the file, the row and the column."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from capgap.cli import main
from capgap.diagnosis import load_embeddings
from capgap.diagnosis.tables import read_table_vectors
from capgap.errors import DataFormatError

# tests/diagnosis/test_diagnose.py's hand-built case: at k = 1, qa is index-limited (its gold d2 has an
# identical copy d3), qb encoder-limited (its vector points at d1, its gold is d0), qc and qd ok
D = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 1], [0.5, 0.5, 0]], dtype=np.float32)
Q = np.array([[0.5, 0.5, 0], [0, 1, 0], [0, 1, 0], [1, 0, 0]], dtype=np.float32)
DOCS = ["d0", "d1", "d2", "d3", "d4"]
QIDS = ["qa", "qb", "qc", "qd"]
QRELS = "query-id\tcorpus-id\tscore\nqa\td2\t1\nqb\td0\t1\nqc\td1\t1\nqd\td0\t1\n"


def _list(M, t=pa.float32(), large=False):
    return pa.array([list(map(float, r)) for r in M], type=(pa.large_list if large else pa.list_)(t))


def _fixed(M, t=pa.float32()):
    return pa.FixedSizeListArray.from_arrays(pa.array(M.ravel(), type=t), M.shape[1])


def _run(tmp_path, out, *args):
    (tmp_path / "qrels.tsv").write_text(QRELS)
    r = CliRunner().invoke(
        main,
        ["diagnose", *map(str, args), "--qrels", str(tmp_path / "qrels.tsv"), "--k", "1", "--out", str(tmp_path / out)],
    )
    return r


def test_a_table_diagnoses_to_the_numbers_of_the_same_vectors_in_npy(tmp_path):
    np.save(tmp_path / "docs.npy", D)
    np.save(tmp_path / "queries.npy", Q)
    (tmp_path / "doc_ids.txt").write_text("\n".join(DOCS) + "\n")
    (tmp_path / "query_ids.txt").write_text("\n".join(QIDS) + "\n")
    r = _run(
        tmp_path,
        "npy",
        "--doc-embeddings",
        tmp_path / "docs.npy",
        "--query-embeddings",
        tmp_path / "queries.npy",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--query-ids",
        tmp_path / "query_ids.txt",
    )
    assert r.exit_code == 0, r.output
    # Hugging Face datasets: Parquet, list<float>; LanceDB: Arrow, fixed_size_list<float>[dim]; rows in another
    # order than the .npy (the ids say which row is which), and a text column beside them
    perm = [3, 0, 4, 1, 2]
    pq.write_table(
        pa.table({"_id": [DOCS[i] for i in perm], "text": ["t"] * 5, "emb": _list(D[perm])}), tmp_path / "docs.parquet"
    )
    feather.write_feather(
        pa.table({"_id": QIDS, "emb": _fixed(Q)}), tmp_path / "queries.arrow", compression="uncompressed"
    )
    r = _run(
        tmp_path,
        "table",
        "--doc-embeddings",
        tmp_path / "docs.parquet",
        "--query-embeddings",
        tmp_path / "queries.arrow",
        "--id-column",
        "_id",
    )
    assert r.exit_code == 0, r.output
    a, b = (json.loads((tmp_path / o / "summary.json").read_text()) for o in ("npy", "table"))
    assert {v: n for v, n in b["verdicts"].items() if n} == {"index-limited": 1, "encoder-limited": 1, "ok": 2}
    assert b["probe_recall@1"] == 0.75 and b["encoder_recall@1"] == 0.5  # by construction (module comment)
    for key in ("verdicts", "probe_recall@1", "encoder_recall@1", "unused_capacity", "reading"):
        assert a[key] == b[key], key
    rows = lambda o: sorted((tmp_path / o / "per_query.tsv").read_text().splitlines())  # noqa: E731
    assert rows("npy") == rows("table")


def test_vector_column_types_and_memory_mapping(tmp_path):
    for name, col in (
        ("f64_large.parquet", _list(D, pa.float64(), large=True)),
        ("f16_fixed.parquet", _fixed(D, pa.float16())),
        ("stream.arrows", _list(D)),
    ):
        t = pa.table({"vec": col, "n": pa.array(range(5))})
        if name.endswith(".arrows"):  # the IPC stream format (Hugging Face datasets' cache files)
            with pa.OSFile(str(tmp_path / name), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
                w.write_table(t, max_chunksize=2)  # three record batches: three chunks
        else:
            pq.write_table(t, tmp_path / name)
        m, ids, col_name = read_table_vectors(tmp_path / name)
        assert col_name == "vec" and ids is None and np.array_equal(m.astype(np.float32), D)
    assert read_table_vectors(tmp_path / "f16_fixed.parquet")[0].dtype == np.float16
    e = load_embeddings(tmp_path / "f64_large.parquet", id_column="n")
    assert e.row_ids == ("0", "1", "2", "3", "4") and e.kind == "float64" and e.bytes_per_vector == 24.0
    feather.write_feather(pa.table({"v": _fixed(D)}), tmp_path / "m.arrow", compression="uncompressed")
    m = load_embeddings(tmp_path / "m.arrow").matrix
    assert not m.flags.writeable and not m.flags.owndata  # a view of the memory-mapped file, not a copy


def _table_error(tmp_path, table, *, column=None, id_column=None, name="t.parquet"):
    pq.write_table(table, tmp_path / name)
    with pytest.raises(DataFormatError) as e:
        load_embeddings(tmp_path / name, column=column, id_column=id_column)
    return str(e.value).removeprefix(f"{tmp_path / name}: ")


def test_bad_tables_name_the_file_row_and_column(tmp_path):
    ok = _list(D)
    ragged = pa.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0]], type=pa.list_(pa.float32()))
    assert _table_error(tmp_path, pa.table({"emb": ragged})) == (
        "row 2 (0-based), column 'emb': 2 values, row 0 has 3: the vectors must all have one length"
    )
    null_vec = pa.array([[1.0, 0.0], None], type=pa.list_(pa.float32()))
    assert _table_error(tmp_path, pa.table({"emb": null_vec})) == "row 1 (0-based), column 'emb': null, not a vector"
    null_val = pa.array([[1.0, 0.0], [0.0, 1.0], [0.5, None]], type=pa.list_(pa.float32()))
    assert (
        _table_error(tmp_path, pa.table({"emb": null_val}))
        == "row 2 (0-based), column 'emb': value 1 of the vector is null"
    )
    text = pa.array(["[0.1, 0.2]", "[0.3, 0.4]"])
    assert _table_error(tmp_path, pa.table({"emb": text}), column="emb") == (
        "row 0 (0-based), column 'emb': '[0.1, 0.2]' is string, not a vector: expected a list or fixed-size list of float16, "
        "float32 or float64 in every row"
    )
    ints = pa.array([[1, 2], [3, 4]], type=pa.list_(pa.int64()))
    assert _table_error(tmp_path, pa.table({"emb": ints}), column="emb") == (
        "row 0 (0-based), column 'emb': the vectors hold int64 values (list<element: int64>); expected float16, float32 or float64"
    )
    nan = D.copy()
    nan[3, 1] = np.nan
    assert (
        _table_error(tmp_path, pa.table({"emb": _list(nan)}))
        == "column 'emb': row 3 (0-based) is not finite: column 1 holds nan"
    )
    assert _table_error(tmp_path, pa.table({"id": ["a", "b", "c", "b", "e"], "emb": ok}), id_column="id") == (
        "row 3 (0-based), column 'id': duplicate id 'b' (first at row 1)"
    )
    assert _table_error(tmp_path, pa.table({"id": ["a", None, "c", "d", "e"], "emb": ok}), id_column="id") == (
        "row 1 (0-based), column 'id': null, not an id"
    )
    assert _table_error(tmp_path, pa.table({"id": ["a", "b\tc", "c", "d", "e"], "emb": ok}), id_column="id") == (
        "row 1 (0-based), column 'id': id 'b\\tc' contains a control character U+0009 (TAB); ids are written to TSV and TREC files"
    )
    assert _table_error(tmp_path, pa.table({"id": [0.5] * 5, "emb": ok}), id_column="id") == (
        "column 'id' (--id-column) is double: ids must be strings or integers"
    )
    assert (
        _table_error(tmp_path, pa.table({"emb": ok}), id_column="_id")
        == "no column '_id' (--id-column); its columns: emb (list<element: float>)"
    )
    assert (
        _table_error(tmp_path, pa.table({"a": ok, "b": ok}))
        == "several vector columns ['a', 'b']: name one with --column"
    )
    assert _table_error(tmp_path, pa.table({"id": ["x"]})) == (
        "no column holds vectors (a list or fixed-size list of "
        "float16, float32 or float64 per row); its columns: id (string)"
    )
    # lists of other values: no column to name, so no option is advised
    other = pa.table(
        {
            "s": pa.array([["a"]], pa.list_(pa.string())),
            "i": pa.array([[1]], pa.list_(pa.int64())),
            "b": pa.array([[True]], pa.list_(pa.bool_())),
        }
    )
    assert _table_error(tmp_path, other) == (
        "no column holds vectors (a list or fixed-size list of float16, float32 or "
        "float64 per row); its columns: s (list<element: string>), i (list<element: "
        "int64>), b (list<element: bool>)"
    )
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataFormatError, match=r"junk.parquet: not a readable Parquet file \("):
        load_embeddings(tmp_path / "junk.parquet")


def test_ids_from_a_table_and_a_file_are_refused_together(tmp_path):
    pq.write_table(pa.table({"_id": DOCS, "emb": _list(D)}), tmp_path / "docs.parquet")
    np.save(tmp_path / "queries.npy", Q)
    (tmp_path / "doc_ids.txt").write_text("\n".join(DOCS) + "\n")
    (tmp_path / "query_ids.txt").write_text("\n".join(QIDS) + "\n")
    r = _run(
        tmp_path,
        "o",
        "--doc-embeddings",
        tmp_path / "docs.parquet",
        "--query-embeddings",
        tmp_path / "queries.npy",
        "--id-column",
        "_id",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--query-ids",
        tmp_path / "query_ids.txt",
    )
    assert r.exit_code == 1
    assert (
        r.output
        == f"Error: {tmp_path / 'docs.parquet'}: ids come from both --doc-ids and its id column (--id-column): give one\n"
    )
    r = _run(
        tmp_path,
        "o",
        "--doc-embeddings",
        tmp_path / "docs.parquet",
        "--query-embeddings",
        tmp_path / "queries.npy",
        "--id-column",
        "_id",
        "--query-ids",
        tmp_path / "query_ids.txt",
    )  # a table for the documents, .npy for the queries
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["encoder_recall@1"] == 0.5


def test_per_file_options_for_documents_and_queries(tmp_path):
    """One .npz holding both (--doc-key / --query-key), a query table without an id column
    beside --query-ids (--doc-id-column), differently named vector columns (--doc-column /
    --query-column): each diagnoses to the hand-built case's numbers (module comment); the
    shared option is refused where one file lacks what it names, and a --key that names no
    array is refused even in a single-array .npz."""
    (tmp_path / "query_ids.txt").write_text("\n".join(QIDS) + "\n")
    (tmp_path / "doc_ids.txt").write_text("\n".join(DOCS) + "\n")
    np.savez(tmp_path / "emb.npz", docs=D, queries=Q)
    pq.write_table(pa.table({"_id": DOCS, "demb": _list(D)}), tmp_path / "docs.parquet")
    pq.write_table(pa.table({"qemb": _list(Q)}), tmp_path / "queries.parquet")  # no id column
    runs = {
        "npz": (
            "--doc-embeddings",
            tmp_path / "emb.npz",
            "--query-embeddings",
            tmp_path / "emb.npz",
            "--doc-key",
            "docs",
            "--query-key",
            "queries",
            "--doc-ids",
            tmp_path / "doc_ids.txt",
            "--query-ids",
            tmp_path / "query_ids.txt",
        ),
        "tables": (
            "--doc-embeddings",
            tmp_path / "docs.parquet",
            "--query-embeddings",
            tmp_path / "queries.parquet",
            "--doc-id-column",
            "_id",
            "--query-ids",
            tmp_path / "query_ids.txt",
            "--doc-column",
            "demb",
            "--query-column",
            "qemb",
        ),
    }
    for out, args in runs.items():
        r = _run(tmp_path, out, *args)
        assert r.exit_code == 0, (out, r.output)
        s = json.loads((tmp_path / out / "summary.json").read_text())
        assert {v: n for v, n in s["verdicts"].items() if n} == {"index-limited": 1, "encoder-limited": 1, "ok": 2}, out
        assert s["probe_recall@1"] == 0.75 and s["encoder_recall@1"] == 0.5, out
    # the shared --id-column names a column the query table lacks
    r = _run(
        tmp_path,
        "x",
        "--doc-embeddings",
        tmp_path / "docs.parquet",
        "--query-embeddings",
        tmp_path / "queries.parquet",
        "--id-column",
        "_id",
        "--query-ids",
        tmp_path / "query_ids.txt",
        "--doc-column",
        "demb",
        "--query-column",
        "qemb",
    )
    assert r.exit_code == 1 and r.output == (
        f"Error: {tmp_path / 'queries.parquet'}: no column '_id' (--id-column); its "
        "columns: qemb (list<element: float>)\n"
    )
    # a key naming no array: refused in a single-array .npz too, naming the option that gave it
    np.savez(tmp_path / "one.npz", emb=D)
    r = _run(
        tmp_path,
        "x",
        "--doc-embeddings",
        tmp_path / "one.npz",
        "--query-embeddings",
        tmp_path / "emb.npz",
        "--key",
        "other",
        "--query-key",
        "queries",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
    )
    assert (
        r.exit_code == 1
        and r.output == f"Error: {tmp_path / 'one.npz'}: holds arrays ['emb'], not 'other': name one with --key\n"
    )
    r = _run(
        tmp_path,
        "x",
        "--doc-embeddings",
        tmp_path / "one.npz",
        "--query-embeddings",
        tmp_path / "emb.npz",
        "--query-key",
        "query",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
    )
    assert r.exit_code == 1 and r.output == (
        f"Error: {tmp_path / 'emb.npz'}: holds arrays ['docs', 'queries'], not 'query': name one with --query-key\n"
    )
    # ids from both the table's id column and an ids file name the per-file option
    r = _run(
        tmp_path,
        "x",
        "--doc-embeddings",
        tmp_path / "docs.parquet",
        "--query-embeddings",
        tmp_path / "queries.parquet",
        "--doc-id-column",
        "_id",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--column",
        "demb",
        "--query-column",
        "qemb",
    )
    assert r.exit_code == 1 and r.output == (
        f"Error: {tmp_path / 'docs.parquet'}: ids come from both --doc-ids and its id "
        "column (--doc-id-column): give one\n"
    )


def test_errors_name_the_per_file_option_that_gave_the_column(tmp_path):
    """A column named by --query-column / --query-id-column / --doc-column is named by that
    option in the error, not by the shared --column / --id-column; the uncompressed documents
    take their array name from --uncompressed-key where it differs from --doc-key."""
    (tmp_path / "query_ids.txt").write_text("\n".join(QIDS) + "\n")
    pq.write_table(pa.table({"_id": DOCS, "demb": _list(D)}), tmp_path / "docs.parquet")
    pq.write_table(pa.table({"qid": QIDS, "qemb": _list(Q)}), tmp_path / "queries.parquet")
    base = (
        "--doc-embeddings",
        tmp_path / "docs.parquet",
        "--query-embeddings",
        tmp_path / "queries.parquet",
        "--doc-id-column",
        "_id",
    )
    r = _run(tmp_path, "x", *base, "--query-id-column", "qid", "--query-column", "emb")
    assert r.exit_code == 1 and r.output == (
        f"Error: {tmp_path / 'queries.parquet'}: no column 'emb' (--query-column); its "
        "columns: qid (string), qemb (list<element: float>)\n"
    )
    r = _run(tmp_path, "x", *base, "--query-id-column", "id")
    assert r.exit_code == 1 and r.output == (
        f"Error: {tmp_path / 'queries.parquet'}: no column 'id' (--query-id-column); its "
        "columns: qid (string), qemb (list<element: float>)\n"
    )
    pq.write_table(pa.table({"_id": DOCS, "qemb": _list(D)}), tmp_path / "docs2.parquet")
    r = _run(
        tmp_path,
        "x",
        "--doc-embeddings",
        tmp_path / "docs2.parquet",
        "--query-embeddings",
        tmp_path / "queries.parquet",
        "--doc-id-column",
        "_id",
        "--query-id-column",
        "qid",
        "--doc-column",
        "demb",
    )
    assert r.exit_code == 1 and r.output == (
        f"Error: {tmp_path / 'docs2.parquet'}: no column 'demb' (--doc-column); its "
        "columns: _id (string), qemb (list<element: float>)\n"
    )
    # the uncompressed documents in an .npz under another array name than the documents' .npz
    np.savez(tmp_path / "docs.npz", pq_codes=D)
    np.savez(tmp_path / "full.npz", emb=D)
    (tmp_path / "doc_ids.txt").write_text("\n".join(DOCS) + "\n")
    args = (
        "--doc-embeddings",
        tmp_path / "docs.npz",
        "--uncompressed-embeddings",
        tmp_path / "full.npz",
        "--query-embeddings",
        tmp_path / "queries.parquet",
        "--query-id-column",
        "qid",
        "--doc-key",
        "pq_codes",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
    )
    r = _run(tmp_path, "x", *args)
    assert r.exit_code == 1 and r.output == (
        f"Error: {tmp_path / 'full.npz'}: holds arrays ['emb'], not 'pq_codes': name one with --doc-key\n"
    )
    r = _run(tmp_path, "u", *args, "--uncompressed-key", "emb")
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "u" / "summary.json").read_text())
    assert s["probe_recall@1"] == 0.75 and s["encoder_recall@1"] == 0.5  # the hand-built case (module comment)


def test_a_default_pairing_that_the_tables_own_ids_contradict_is_refused(tmp_path):
    """No query ids given, but the query table's column 'id' holds the judged query ids in
    another row order than the qrels': the qrels-order default would pair row 0 ('qc') with
    'qa', so it is refused, naming the column and the option; the same for a document table
    whose integer column holds the document ids the qrels name (row numbers by default). Passing
    the option diagnoses to the hand-built case's numbers (module comment), and a column in the
    default's own order is no contradiction."""
    perm = [2, 0, 3, 1]  # query rows qc, qa, qd, qb
    pq.write_table(pa.table({"_id": DOCS, "emb": _list(D)}), tmp_path / "docs.parquet")
    pq.write_table(
        pa.table({"id": [QIDS[i] for i in perm], "text": ["t"] * 4, "emb": _list(Q[perm])}),
        tmp_path / "queries.parquet",
    )
    base = (
        "--doc-embeddings",
        tmp_path / "docs.parquet",
        "--query-embeddings",
        tmp_path / "queries.parquet",
        "--doc-id-column",
        "_id",
    )
    r = _run(tmp_path, "x", *base)
    assert r.exit_code == 1 and r.output == (
        f"Error: {tmp_path / 'queries.parquet'}: no query ids given (--query-ids, --query-id-column), so query row i would "
        f"be the i-th query id of {tmp_path / 'qrels.tsv'}, in order of first appearance, but its column 'id' holds the "
        "judged query ids and names row 0 'qc', not 'qa': pass --query-id-column id to pair the rows by that column\n"
    )
    assert not (tmp_path / "x").exists()

    def numbers(out):
        s = json.loads((tmp_path / out / "summary.json").read_text())
        return {v: n for v, n in s["verdicts"].items() if n}, s["probe_recall@1"], s["encoder_recall@1"]

    hand_built = ({"index-limited": 1, "encoder-limited": 1, "ok": 2}, 0.75, 0.5)
    r = _run(tmp_path, "q", *base, "--query-id-column", "id")
    assert r.exit_code == 0, r.output
    assert numbers("q") == hand_built
    pq.write_table(pa.table({"id": QIDS, "emb": _list(Q)}), tmp_path / "queries_in_order.parquet")
    r = _run(
        tmp_path,
        "o",
        "--doc-embeddings",
        tmp_path / "docs.parquet",
        "--query-embeddings",
        tmp_path / "queries_in_order.parquet",
        "--doc-id-column",
        "_id",
    )
    assert r.exit_code == 0, r.output
    assert numbers("o") == hand_built
    # documents: integer ids 0..4 in the table's column 'doc', rows in another order; the qrels name them
    dperm = [3, 0, 4, 1, 2]
    pq.write_table(
        pa.table({"doc": pa.array(dperm, type=pa.int64()), "emb": _list(D[dperm])}), tmp_path / "docs_int.parquet"
    )
    (tmp_path / "qrels_int.tsv").write_text("qa\t2\t1\nqb\t0\t1\nqc\t1\t1\nqd\t0\t1\n")
    args = [
        "diagnose",
        "--doc-embeddings",
        str(tmp_path / "docs_int.parquet"),
        "--query-embeddings",
        str(tmp_path / "queries.parquet"),
        "--query-id-column",
        "id",
        "--qrels",
        str(tmp_path / "qrels_int.tsv"),
        "--k",
        "1",
        "--out",
    ]
    r = CliRunner().invoke(main, args + [str(tmp_path / "y")])
    assert r.exit_code == 1 and r.output == (
        f"Error: {tmp_path / 'docs_int.parquet'}: no document ids given (--doc-ids, --doc-id-column), so document row i "
        "would be document id 'i' (the row number), but its column 'doc' holds every document id the qrels name and names "
        "row 0 '3', not '0': pass --doc-id-column doc to pair the rows by that column\n"
    )
    r = CliRunner().invoke(main, args + [str(tmp_path / "d"), "--doc-id-column", "doc"])
    assert r.exit_code == 0, r.output
    assert numbers("d") == hand_built


def test_options_name_the_per_file_option_and_refuse_files_they_cannot_apply_to(tmp_path):
    """Where a file needs a column or array named, the error names that file's own option (the
    shared one beside it); an option given for a file that takes none (--key: .npz files;
    --column, --id-column: tables) is refused, never ignored. A shared option applies to each
    file that takes it, and is refused only where no file does."""
    (tmp_path / "query_ids.txt").write_text("\n".join(QIDS) + "\n")
    (tmp_path / "doc_ids.txt").write_text("\n".join(DOCS) + "\n")
    np.save(tmp_path / "docs.npy", D)
    np.save(tmp_path / "queries.npy", Q)
    np.savez(tmp_path / "emb.npz", docs=D, queries=Q)
    pq.write_table(pa.table({"a": _list(D), "b": _list(D)}), tmp_path / "docs2.parquet")
    pq.write_table(pa.table({"a": _list(Q), "b": _list(Q)}), tmp_path / "queries2.parquet")
    pq.write_table(pa.table({"emb": _list(Q)}), tmp_path / "queries.parquet")
    npy = (
        "--doc-embeddings",
        tmp_path / "docs.npy",
        "--query-embeddings",
        tmp_path / "queries.npy",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--query-ids",
        tmp_path / "query_ids.txt",
    )

    def error(*args):
        r = _run(tmp_path, "x", *args)
        assert r.exit_code == 1 and r.output.startswith("Error: "), r.output
        return r.output[len("Error: ") : -1]

    # a table or .npz holding several: its own option, the shared one beside it
    assert error(
        "--doc-embeddings",
        tmp_path / "docs.npy",
        "--query-embeddings",
        tmp_path / "queries2.parquet",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--query-ids",
        tmp_path / "query_ids.txt",
    ) == (
        f"{tmp_path / 'queries2.parquet'}: several vector columns ['a', 'b']: name one with --query-column (or --column "
        "for every table)"
    )
    assert error(
        "--doc-embeddings",
        tmp_path / "docs2.parquet",
        "--query-embeddings",
        tmp_path / "queries.npy",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--query-ids",
        tmp_path / "query_ids.txt",
    ) == (
        f"{tmp_path / 'docs2.parquet'}: several vector columns ['a', 'b']: name one with --doc-column (or --column for "
        "every table)"
    )
    assert error(*npy, "--uncompressed-embeddings", tmp_path / "docs2.parquet") == (
        f"{tmp_path / 'docs2.parquet'}: several vector columns ['a', 'b']: name one with --uncompressed-column (or "
        "--column for every table)"
    )
    assert error(*npy, "--uncompressed-embeddings", tmp_path / "emb.npz") == (
        f"{tmp_path / 'emb.npz'}: holds arrays ['docs', 'queries']: name one with --uncompressed-key (or --key for every "
        ".npz)"
    )
    assert error(
        "--doc-embeddings",
        tmp_path / "emb.npz",
        "--query-embeddings",
        tmp_path / "queries.npy",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--query-ids",
        tmp_path / "query_ids.txt",
    ) == (
        f"{tmp_path / 'emb.npz'}: holds arrays ['docs', 'queries']: name one with --doc-key (or --key for every .npz)"
    )
    # a file's own option for a file that takes none
    assert (
        error(*npy, "--doc-column", "emb")
        == f"--doc-column applies to Parquet/Arrow tables; {tmp_path / 'docs.npy'} is a .npy file"
    )
    assert (
        error(*npy, "--query-key", "q")
        == f"--query-key applies to .npz files; {tmp_path / 'queries.npy'} is a .npy file"
    )
    assert error(
        "--doc-embeddings",
        tmp_path / "emb.npz",
        "--query-embeddings",
        tmp_path / "queries.npy",
        "--key",
        "docs",
        "--doc-id-column",
        "id",
        "--query-ids",
        tmp_path / "query_ids.txt",
    ) == (f"--doc-id-column applies to Parquet/Arrow tables; {tmp_path / 'emb.npz'} is an .npz file")
    assert error(*npy, "--uncompressed-embeddings", tmp_path / "docs.npy", "--uncompressed-key", "docs") == (
        f"--uncompressed-key applies to .npz files; {tmp_path / 'docs.npy'} is a .npy file"
    )
    assert (
        error(*npy, "--uncompressed-column", "emb")
        == "--uncompressed-column is given without --uncompressed-embeddings"
    )
    # a shared option that applies to no file
    assert error(*npy, "--column", "emb") == (
        f"--column applies to Parquet/Arrow tables, and no file takes it: "
        f"{tmp_path / 'docs.npy'} is a .npy file, {tmp_path / 'queries.npy'} is a .npy file"
    )
    assert error(*npy, "--id-column", "id") == (
        f"--id-column applies to Parquet/Arrow tables, and no file takes it: "
        f"{tmp_path / 'docs.npy'} is a .npy file, {tmp_path / 'queries.npy'} is a .npy file"
    )
    assert error(
        "--doc-embeddings",
        tmp_path / "emb.npz",
        "--query-embeddings",
        tmp_path / "emb.npz",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--query-ids",
        tmp_path / "query_ids.txt",
        "--key",
        "docs",
        "--doc-key",
        "docs",
        "--query-key",
        "queries",
    ) == (
        f"--key applies to .npz files, and no file takes it: {tmp_path / 'emb.npz'} "
        f"takes --doc-key, {tmp_path / 'emb.npz'} takes --query-key"
    )
    # a shared option that applies to one file: taken there, the hand-built case's numbers (module comment)
    for out, args in {
        "key": (
            "--doc-embeddings",
            tmp_path / "emb.npz",
            "--query-embeddings",
            tmp_path / "queries.parquet",
            "--key",
            "docs",
            "--doc-ids",
            tmp_path / "doc_ids.txt",
            "--query-ids",
            tmp_path / "query_ids.txt",
        ),
        "column": (
            "--doc-embeddings",
            tmp_path / "docs.npy",
            "--query-embeddings",
            tmp_path / "queries2.parquet",
            "--column",
            "b",
            "--doc-ids",
            tmp_path / "doc_ids.txt",
            "--query-ids",
            tmp_path / "query_ids.txt",
        ),
    }.items():
        r = _run(tmp_path, out, *args)
        assert r.exit_code == 0, (out, r.output)
        s = json.loads((tmp_path / out / "summary.json").read_text())
        assert s["probe_recall@1"] == 0.75 and s["encoder_recall@1"] == 0.5, out
