"""numpy files as people save them (capgap.arrays): big-endian arrays read as the same numbers,
and files that are no usable array (raw tofile() bytes, a git-LFS pointer, pickled objects, a
truncated copy) refused with one error naming the file and what it holds, never numpy's text and
never advice to unpickle. Every reader goes through it: diagnose, the index loader, the DAG's
.npz outputs."""

import json
import pickle

import numpy as np
import pytest
from click.testing import CliRunner

from capgap.arrays import npz_names, numpy_format, read_npy, read_npz
from capgap.cli import main
from capgap.diagnosis import load_matrix
from capgap.errors import DataFormatError
from capgap.io import load_query_embeddings

# 5 documents in 3-d, d3 an exact copy of d2 (tests/diagnosis/test_diagnose.py's hand-built case): at k = 1
# qa's gold d2 ties with its copy d3 (index-limited); qb's query points at d1, its gold is d0
# (encoder-limited); qc and qd are served (ok). Probe recall@1 3/4, encoder recall@1 2/4.
D = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 1], [0.5, 0.5, 0]], dtype=np.float32)
Q = np.array([[0.5, 0.5, 0], [0, 1, 0], [0, 1, 0], [1, 0, 0]], dtype=np.float32)
DOCS = ["d0", "d1", "d2", "d3", "d4"]
QIDS = ["qa", "qb", "qc", "qd"]
QRELS = "query-id\tcorpus-id\tscore\nqa\td2\t1\nqb\td0\t1\nqc\td1\t1\nqd\td0\t1\n"
LFS = (
    b"version https://git-lfs.github.com/spec/v1\n"
    b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 192\n"
)
PICKLED = pickle.dumps({"d0": [1.0, 0.0, 0.0]}, protocol=4)  # b'\x80\x04\x95' + frame length ...


def _case(tmp_path, docs, queries):
    """Write ids and qrels beside ``docs``/``queries`` (already written) and run diagnose at k = 1."""
    (tmp_path / "doc_ids.txt").write_text("\n".join(DOCS) + "\n")
    (tmp_path / "query_ids.txt").write_text("\n".join(QIDS) + "\n")
    (tmp_path / "qrels.tsv").write_text(QRELS)
    out = tmp_path / f"out_{docs.stem}_{queries.stem}"
    r = CliRunner().invoke(
        main,
        [
            "diagnose",
            "--doc-embeddings",
            str(docs),
            "--query-embeddings",
            str(queries),
            "--qrels",
            str(tmp_path / "qrels.tsv"),
            "--doc-ids",
            str(tmp_path / "doc_ids.txt"),
            "--query-ids",
            str(tmp_path / "query_ids.txt"),
            "--k",
            "1",
            "--out",
            str(out),
        ],
    )
    return r, out


def test_big_endian_arrays_diagnose_to_the_native_numbers(tmp_path):
    np.save(tmp_path / "docs.npy", D)
    np.save(tmp_path / "queries.npy", Q)
    np.save(tmp_path / "docs_be.npy", D.astype(">f4"))
    np.save(tmp_path / "queries_be.npy", Q.astype(">f8"))
    np.save(tmp_path / "queries_be16.npy", Q.astype(">f2"))
    assert (tmp_path / "docs_be.npy").read_bytes()[10:30].startswith(b"{'descr': '>f4'")  # really big-endian on disk
    native, out0 = _case(tmp_path, tmp_path / "docs.npy", tmp_path / "queries.npy")
    assert native.exit_code == 0, native.output
    for docs, queries in (("docs_be", "queries_be"), ("docs", "queries_be"), ("docs_be", "queries_be16")):
        r, out = _case(tmp_path, tmp_path / f"{docs}.npy", tmp_path / f"{queries}.npy")
        assert r.exit_code == 0, r.output
        s = json.loads((out / "summary.json").read_text())
        assert {v: n for v, n in s["verdicts"].items() if n} == {"index-limited": 1, "encoder-limited": 1, "ok": 2}
        assert s["probe_recall@1"] == 0.75 and s["encoder_recall@1"] == 0.5
        assert (out / "per_query.tsv").read_text() == (out0 / "per_query.tsv").read_text()
    m = load_matrix(tmp_path / "docs_be.npy")
    assert m.dtype == np.float32 and m.dtype.isnative and np.array_equal(m, D)


@pytest.mark.parametrize(
    "name, write, reason",
    [
        (
            "docs.npy",
            lambda p: D.tofile(p),
            r"not a .npy file (no \x93NUMPY magic; it starts with b'\x00\x00\x80?\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00'): "
            "60 bytes of raw data, as arr.tofile() writes, with no dtype or shape; save the array with numpy.save",
        ),
        (
            "docs.npy",
            lambda p: p.write_bytes(LFS),
            "not a .npy file: it is a git-LFS pointer (oid sha256:4d7a214614ab..., 192 bytes kept in LFS), not the array: "
            "fetch the file with 'git lfs pull'",
        ),
        (
            "docs.npy",
            lambda p: np.save(p, np.array([D[0], D[1, :2]], dtype=object), allow_pickle=True),
            "holds pickled Python objects (dtype object, shape (2,)), e.g. a list of vectors saved without stacking, not a "
            "(n, dim) float16/float32/float64 array; capgap never loads pickled data: stack the vectors (numpy.vstack) and save "
            "the array itself",
        ),
        (
            "docs.npz",
            lambda p: np.savez(p, {"d0": D[0], "d1": D[1]}),
            "array 'arr_0' holds a pickled Python object (dtype object, shape ()), e.g. a dict or list saved whole "
            "(np.savez(path, d) instead of np.savez(path, **d)), not a (n, dim) float16/float32/float64 array; capgap never "
            "loads pickled data: stack the vectors (numpy.vstack) and save the array itself",
        ),
        (
            "docs.npy",
            lambda p: p.write_bytes(_npy_bytes(D)[:-20]),
            "truncated: the header declares shape (5, 3) float32 (60 bytes of data), the file holds 40 bytes after its "
            "128-byte header",
        ),
        (
            "docs.npy",
            lambda p: p.write_bytes(PICKLED),
            f"not a .npy file: it is a Python pickle (starts with {PICKLED[:8]!r}), which capgap never loads: save the array "
            "with numpy.save",
        ),
        (
            "docs.npy",
            lambda p: p.write_bytes(b"<!DOCTYPE html><html>404</html>"),
            "not a .npy file: it is an HTML/XML page (starts with b'<!DOCTYPE html><'), e.g. a failed download's error page: "
            "download the file again",
        ),
        ("docs.npy", lambda p: p.write_bytes(b""), "not a .npy file: the file is empty (0 bytes)"),
        # two .npy files joined with cat: 128-byte header + 5 x 3 x 4 = 60 data bytes each, so 60 + 128 + 60 = 248 after the first header
        (
            "docs.npy",
            lambda p: p.write_bytes(_npy_bytes(D) + _npy_bytes(D)),
            "188 bytes after the data: the header declares shape (5, 3) float32 (60 bytes of data), the file holds 248 bytes "
            r"after its 128-byte header; a second .npy header (\x93NUMPY) follows the data: two .npy files joined into one "
            "(e.g. with cat)? save the rows as one array (numpy.concatenate, numpy.save)",
        ),
        (
            "docs.npy",
            lambda p: p.write_bytes(_npy_bytes(D) + b"\0" * 7),
            "7 bytes after the data: the header declares shape (5, 3) float32 (60 bytes of data), the file holds 67 bytes "
            "after its 128-byte header: save the array again with numpy.save",
        ),
        (
            "docs.npy",
            lambda p: p.write_bytes(b'{"error": "rate limited"}'),
            """not a .npy file: it is JSON text (25 bytes, starts with '{"error": "rate limited"}'), not an array, e.g. a """
            "server's error reply saved under the array's name: fetch or save the array again",
        ),
        (
            "docs.npy",
            lambda p: p.write_bytes(D.tobytes()[:59]),
            r"not a .npy file (no \x93NUMPY magic; it starts with b'\x00\x00\x80?\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00'): "
            "59 bytes, not a multiple of 2, 4 or 8, so not raw float16/float32/float64 values either; save the array with "
            "numpy.save",
        ),
    ],
)
def test_files_that_are_no_array_get_one_error_naming_the_file(tmp_path, name, write, reason):
    p = tmp_path / name
    write(p)
    with pytest.raises(DataFormatError) as e:
        load_matrix(p)
    assert str(e.value) == f"{p}: {reason}"
    np.save(tmp_path / "queries.npy", Q)
    r, _ = _case(tmp_path, p, tmp_path / "queries.npy")  # the command line: that one line, no traceback
    assert r.exit_code == 1 and r.output == f"Error: {p}: {reason}\n"
    assert "allow_pickle" not in r.output


def _npy_bytes(a) -> bytes:
    import io

    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def test_content_decides_the_format_and_npz_members_are_checked(tmp_path):
    np.savez(tmp_path / "two.npy.npz", docs=D.astype(">f4"), ids=np.array(DOCS))
    (tmp_path / "two.npy").write_bytes(
        (tmp_path / "two.npy.npz").read_bytes()
    )  # an .npz named .npy: read as numpy.load would
    assert numpy_format(tmp_path / "two.npy") == "npz" and npz_names(tmp_path / "two.npy") == ["docs", "ids"]
    got = read_npz(tmp_path / "two.npy", ["docs"])
    assert list(got) == ["docs"] and got["docs"].dtype == np.dtype("<f4") and np.array_equal(got["docs"], D)
    assert np.array_equal(load_matrix(tmp_path / "two.npy", "docs"), D)
    np.save(tmp_path / "f.npy", np.asfortranarray(D.astype(">f8")))
    assert np.array_equal(read_npy(tmp_path / "f.npy", mmap=False), D)
    assert isinstance(read_npy(tmp_path / "f.npy"), np.ndarray) and not isinstance(
        read_npy(tmp_path / "f.npy"), np.memmap
    )
    np.save(tmp_path / "n.npy", D)
    assert isinstance(read_npy(tmp_path / "n.npy"), np.memmap)  # native: memory-mapped, not copied


def test_dag_readers_use_the_same_checks(tmp_path):
    """The index loader and the DAG's .npz outputs (queries.npz, w.npz): a big-endian index
    loads as the same numbers; an LFS pointer or a pickled array is named, never unpickled."""
    from capgap.data import Corpus
    from capgap.index import index_fingerprint, load_index
    from capgap.io import write_json

    corpus = Corpus(tuple(DOCS), ("",) * 5, ("a", "b", "c", "d", "e"))
    fp = index_fingerprint({"model": "m", "dim": 3, "normalize": False}, corpus)
    folder = tmp_path / "index"
    folder.mkdir()
    np.save(folder / "embeddings.npy", D.astype(">f4"))
    write_json(folder / "doc_ids.json", DOCS)
    write_json(folder / "fingerprint.json", fp)
    idx = load_index(folder, fp)
    assert idx.embeddings.dtype == np.float32 and np.array_equal(idx.embeddings, D)
    (folder / "embeddings.npy").write_bytes(LFS)
    with pytest.raises(DataFormatError, match=r"embeddings.npy: not a .npy file: it is a git-LFS pointer"):
        load_index(folder, fp)
    np.savez(tmp_path / "queries.npz", q=np.array([Q[0], Q[1][:2]], dtype=object), query_ids=np.array(QIDS[:2]))
    with pytest.raises(DataFormatError) as e:
        load_query_embeddings(tmp_path / "queries.npz", QIDS[:2])
    assert str(e.value) == (
        f"{tmp_path / 'queries.npz'}: array 'q' holds pickled Python objects (dtype object, shape (2,)), "
        "e.g. a list of vectors saved without stacking, not a (n, dim) float16/float32/float64 array; "
        "capgap never loads pickled data: stack the vectors (numpy.vstack) and save the array itself"
    )
    np.savez(tmp_path / "queries.npz", q=Q.astype(">f4"), query_ids=np.array(QIDS))
    assert np.array_equal(load_query_embeddings(tmp_path / "queries.npz", QIDS[::-1]), Q[::-1])
