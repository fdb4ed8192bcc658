"""``capgap diagnose`` (``capgap.diagnose(...)``): the capacity probe on a user's own frozen index, with a verdict per query.

When a query fails, which part failed? (arXiv 2610.02749 adds the first question, the index, to
the two the ANN literature separates, the encoder and the approximate search):

- **index-limited**: the index geometry does not admit the answer: the probe (a per-query
  ranking SVM, ``capgap.probe``) cannot place the gold documents in the top k (not certified
  and its recall@k below 1);
- **compression-limited** (only with the documents' uncompressed vectors, ``uncompressed``):
  the index's own vectors do not admit the answer, as for index-limited, but the uncompressed
  vectors of the same documents do (certified or probe recall@k 1 there): compression (SQ,
  PQ, ...) lost it. It takes the place of index-limited; a query admitted by neither stays
  index-limited, and a query the index's vectors admit goes on to the encoder and ANN verdicts
  whatever the uncompressed vectors say (the index is what is searched);
- **encoder-limited**: the probe can, but exact search with the user's query embedding misses
  gold documents at k;
- **ann-limited**: exact search finds them, the user's approximate search (``--ann-run``)
  misses some;
- **ok**.

Recall here is *capped*: |top-k ∩ gold| / min(k, |gold|), so a query with more gold documents
than k can still be fully served. ANN recall against exact search (|ANN top-k ∩ exact top-k| /
k) is reported apart from gold-document recall.

Metrics. ``ip`` ranks by q.d; ``cosine`` by q.d of L2-normalised rows (copies: inputs are never
written, and a ``.npy`` is memory-mapped read-only; a row of norm 0, ``<= capgap.retrieval.ZERO_NORM``,
has no cosine: an error naming the file and rows, or with ``zero_norm="set-apart"`` left out and
counted, never scored as 0); ``l2`` by -|q - d|^2, a faiss
``IndexFlatL2``'s own order (``load_embeddings`` reports a faiss file's metric, and the CLI uses
it unless ``--metric`` is given; ``resolve_metric`` refuses another). Under ``l2`` everything is
an inner product of augmented vectors: q.d - |d|^2/2 = (q, 1).(d, -|d|^2/2) ranks each query's
documents like -|q - d|^2. Exact search scores (q, 1) against them; the probe runs on the
augmented documents and returns w' = (w, c). When c > 0 the L2 query w/c ranks exactly as w'
does; when c <= 0, w' is no L2 query (c < 0 ranks the *farthest* documents first), so its
numbers are not used: the row (``probe_l2_query`` False) gets the ranking by w.d instead,
which the L2 queries t*w approach as t grows (strict orders kept, ties pessimistic), a lower
bound; certified only if that ranking puts every gold document first (else cause
``l2-unreachable``).

Compressed indexes. ``load_embeddings`` reconstructs the vectors of a faiss flat, SQ, PQ,
IVF-Flat/SQ/PQ or HNSW index (``SUPPORTED_FAISS``): for SQ and PQ the decoded vectors, which
the index's search scores a float query against (asymmetric scoring, ``capgap.compress``), so
the probe and exact search run on the geometry the index really has. An IVF index's coarse
quantizer and an HNSW graph only choose which vectors a search visits: an ANN effect, judged
through ``ann_run``, not a change of geometry (IVF codes are decoded and added back to their
centroid, the vector IVF search scores).

Inputs are checked before anything is scored: matrices 2-d, float32/float16 (``diagnose`` also
takes float64), every value finite (blockwise, naming the first bad row), matching dims, ids
matching the rows, at least one query row judged by the qrels (a partial mismatch is counted
in the summary and logged), qrels naming only known documents, and a gold document per judged
query.

Public API: ``diagnose(D, Q, qrels, doc_ids, query_ids, k=10, ann_run=None, metric="ip",
uncompressed=None)`` -> ``Diagnosis`` (per-query rows and a summary), ``write_diagnosis(diag,
out_dir)``, the loaders ``load_embeddings`` (matrix, faiss metric, index kind, bytes per
vector, faiss ids), ``load_matrix`` (matrix), ``load_ids``, ``load_qrels_file``,
``load_run_file``, ``document_ids`` and ``match_uncompressed`` (faiss ids to rows), and
``validate_matrix``, ``resolve_metric``.
``capgap.cli`` wraps them.
"""

from __future__ import annotations

import csv
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .errors import DataFormatError
from .io import atomic_open, write_json, write_text

log = logging.getLogger(__name__)
VERDICTS = ("index-limited", "compression-limited", "encoder-limited", "ann-limited", "ok")


# --------------------------------------------------------------------------- inputs
METRICS = ("ip", "cosine", "l2")
ZERO_NORM_POLICIES = ("error", "set-apart")  # diagnose(zero_norm=...): what a norm-0 row does under cosine
_FAISS_METRICS = {0: "ip", 1: "l2"}  # faiss.METRIC_INNER_PRODUCT, faiss.METRIC_L2
_METRIC_NAMES = {"ip": "inner product", "cosine": "cosine", "l2": "L2 distance"}


@dataclass(frozen=True)
class Embeddings:
    """An embedding matrix as ``load_embeddings`` read it.

    Attributes
    ----------
    matrix : numpy.ndarray
        ``(n, dim)`` float32, float16 or float64 (a read-only memory map for ``.npy``); for a
        faiss index the reconstructed vectors, float32: what the index's search scores a query
        against (decoded SQ/PQ codes, IVF residuals added back to their centroid).
    metric : str or None
        The metric a faiss index searches by (``"ip"`` or ``"l2"``); None for ``.npy``/``.npz``
        (the file does not say).
    path : pathlib.Path
        The file.
    kind : str or None
        What the vectors are: for arrays the dtype name (``"float32"``, ``"float16"``,
        ``"float64"``); for a faiss index its compression, ``"flat"``, ``"sq8"``, ``"sq4"``,
        ``"sq6"``, ``"sq-fp16"``, ... (``_SQ_KINDS``), ``"pq-<M>x<nbits>"``, and for IVF and
        HNSW indexes ``"ivf<nlist>-"`` / ``"hnsw-"`` followed by the code, e.g. ``"ivf256-pq-48x8"``.
    bytes_per_vector : float or None
        Stored bytes per vector: ``itemsize * dim`` for arrays; faiss's ``sa_code_size()`` for
        flat, SQ and PQ; for IVF the code stored in the inverted lists (``code_size``: faiss's
        ``sa_code_size()`` adds the list number, which the lists hold implicitly). Ids (8 bytes
        each in IVF lists and id maps), graph links and shared tables (codebooks, SQ ranges,
        centroids) are not counted.
    faiss_type : str or None
        The faiss class, wrappers outside in (``"IndexIDMap(IndexPQ)"``); None for arrays.
    ids : numpy.ndarray or None
        ``(n,)`` int64: the faiss ids of the rows, ascending, for an index whose ids are not
        0..n-1 (``IndexIDMap``, IVF ``add_with_ids``); None when row i is id i (always for
        arrays).
    """

    matrix: np.ndarray
    metric: str | None
    path: Path
    kind: str | None = None
    bytes_per_vector: float | None = None
    faiss_type: str | None = None
    ids: np.ndarray | None = None

    def info(self) -> dict:
        """``{"path", "kind", "faiss_type", "bytes_per_vector", "n", "dim"}`` for a summary."""
        return {**_array_info(self.matrix), "path": str(self.path), "kind": self.kind, "faiss_type": self.faiss_type,
                "bytes_per_vector": self.bytes_per_vector}


def _block_rows(dim: int) -> int:
    """Rows per block for a pass over a (memory-mapped) matrix: about 4 M values."""
    return max(1, (1 << 22) // max(1, dim))


FLOAT_DTYPES = (np.float16, np.float32, np.float64)  # float64 (numpy's default) is cast to float32 blockwise


def _matrix_problem(a: np.ndarray, dtypes: tuple = FLOAT_DTYPES) -> str | None:
    """Why ``a`` is not a usable embedding matrix, or None: not 2-d, no rows or columns, a dtype
    outside ``dtypes``, or a value that is not finite once cast to float32 (NaN, +-inf, or a
    float64 beyond float32's range): the first such row is named (0-based). Reads ``a`` in
    blocks of rows, so a memory map is never loaded whole."""
    if a.ndim != 2:
        return f"expected a 2-d (n, dim) array, got shape {a.shape}"
    if a.dtype not in dtypes:
        names = [np.dtype(t).name for t in dtypes]
        return f"expected {', '.join(names[:-1])} or {names[-1]}, got {a.dtype}"
    if 0 in a.shape:
        return f"expected at least one row and one column, got shape {a.shape}"
    step = _block_rows(a.shape[1])
    for b0 in range(0, a.shape[0], step):
        block = np.asarray(a[b0 : b0 + step])
        with np.errstate(over="ignore"):  # float64 beyond float32 becomes inf, reported below
            bad = ~np.isfinite(block.astype(np.float32, copy=False))
        if bad.any():
            r, c = np.argwhere(bad)[0]
            v = float(block[r, c])
            return f"row {b0 + r} (0-based) is not finite: column {c} holds {v}" + (" (beyond float32)" if math.isfinite(v) else "")
    return None


def validate_matrix(a: np.ndarray, name: str) -> None:
    """Check an in-memory embedding matrix for ``diagnose``: 2-d with at least one row and
    column, a floating dtype (float16, float32 or float64; float64 is cast to float32), and
    every value finite as float32, checked blockwise (a memory map is fine).

    Raises ``ValueError`` ``"<name>: <reason>"``, naming the first non-finite row (0-based),
    e.g. ``"queries: row 1 (0-based) is not finite: column 0 holds nan"``."""
    problem = _matrix_problem(np.asarray(a))
    if problem:
        raise ValueError(f"{name}: {problem}")


# --------------------------------------------------------------------------- faiss index files
# the scalar-quantizer types whose search scores a float query against the decoded vector
_SQ_KINDS = {"QT_8bit": "sq8", "QT_4bit": "sq4", "QT_6bit": "sq6", "QT_8bit_uniform": "sq8-uniform",
             "QT_4bit_uniform": "sq4-uniform", "QT_fp16": "sq-fp16", "QT_bf16": "sq-bf16",
             "QT_8bit_direct": "sq8-direct", "QT_8bit_direct_signed": "sq8-direct-signed"}
SUPPORTED_FAISS = ("IndexFlat (IndexFlatIP, IndexFlatL2)", "IndexScalarQuantizer", "IndexPQ", "IndexIVFFlat",
                   "IndexIVFScalarQuantizer", "IndexIVFPQ", "IndexHNSWFlat/SQ/PQ (their storage)",
                   "IndexIDMap/IndexIDMap2 around any of these")


@dataclass(frozen=True)
class _FaissVectors:
    matrix: np.ndarray  # (n, dim) float32, rows in ascending id order when ids is not None
    ids: np.ndarray | None  # (n,) int64 faiss ids of the rows, None: the ids are the row numbers 0..n-1
    kind: str
    bytes_per_vector: float
    faiss_type: str


def _ivf_ids(ivf) -> np.ndarray:
    """All ids stored in an IVF index's inverted lists, ``(ntotal,)`` int64 (list by list)."""
    import faiss

    inv = ivf.invlists
    out = []
    for lst in range(ivf.nlist):
        size = inv.list_size(lst)
        if size == 0:
            continue
        buf = np.empty(size, dtype=np.int64)
        ptr = inv.get_ids(lst)
        try:
            faiss.memcpy(faiss.swig_ptr(buf), ptr, buf.nbytes)
        finally:
            inv.release_ids(lst, ptr)
        out.append(buf)
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


def _faiss_vectors(idx, path: Path) -> _FaissVectors:
    """The vectors a faiss index searches against, reconstructed, for the types in
    ``SUPPORTED_FAISS`` (checked by exact class: faiss's default ``reconstruct_n`` calls
    ``reconstruct`` inside an OpenMP loop, and a type without ``reconstruct`` then aborts the
    process instead of raising). Raises ``DataFormatError`` for another type, nested ids, or
    ids that are negative or repeated."""
    import faiss

    idx = faiss.downcast_index(idx)
    name = type(idx).__name__
    n = int(idx.ntotal)
    if isinstance(idx, faiss.IndexIDMap):  # IndexIDMap2 is a subclass
        inner = _faiss_vectors(idx.index, path)
        if inner.ids is not None:
            raise DataFormatError(path, None, None, f"a faiss {name} around an index that has its own ids is not supported")
        ids = faiss.vector_to_array(idx.id_map).astype(np.int64, copy=False)
        if len(ids) != inner.matrix.shape[0]:
            raise DataFormatError(path, None, None, f"faiss {name}: {len(ids)} ids for {inner.matrix.shape[0]} vectors")
        return _with_ids(inner, ids, f"{name}({inner.faiss_type})", path)
    if isinstance(idx, faiss.IndexHNSW):
        inner = _faiss_vectors(idx.storage, path)  # the graph only decides which vectors are visited: an ANN effect
        return _FaissVectors(inner.matrix, inner.ids, f"hnsw-{inner.kind}", inner.bytes_per_vector, f"{name}({inner.faiss_type})")
    if type(idx) in (faiss.IndexFlat, faiss.IndexFlatIP, faiss.IndexFlatL2):
        return _FaissVectors(idx.reconstruct_n(0, n), None, "flat", float(idx.sa_code_size()), name)
    if type(idx) is faiss.IndexScalarQuantizer:
        return _FaissVectors(idx.reconstruct_n(0, n), None, _sq_kind(idx.sq, path), float(idx.sa_code_size()), name)
    if type(idx) is faiss.IndexPQ:
        if int(idx.search_type) != int(faiss.IndexPQ.ST_PQ):
            log.warning("%s: this IndexPQ searches with search_type %d, not ST_PQ (asymmetric: float query against the "
                        "decoded vectors); the diagnosis scores the decoded vectors", path, int(idx.search_type))
        return _FaissVectors(idx.reconstruct_n(0, n), None, f"pq-{idx.pq.M}x{idx.pq.nbits}", float(idx.sa_code_size()), name)
    if type(idx) in (faiss.IndexIVFFlat, faiss.IndexIVFPQ, faiss.IndexIVFScalarQuantizer):
        inner = {faiss.IndexIVFFlat: lambda: "flat", faiss.IndexIVFPQ: lambda: f"pq-{idx.pq.M}x{idx.pq.nbits}",
                 faiss.IndexIVFScalarQuantizer: lambda: _sq_kind(idx.sq, path)}[type(idx)]()
        kind = f"ivf{idx.nlist}-{inner}"
        # the inverted lists store code_size bytes a vector (and its 8-byte id); sa_code_size() would add the list number
        nbytes = float(idx.code_size)
        ids = np.sort(_ivf_ids(idx))
        if np.array_equal(ids, np.arange(n)):
            # IndexIVF.reconstruct_n scans the inverted lists for ids i0..i0+ni-1: no direct map needed
            return _FaissVectors(idx.reconstruct_n(0, n), None, kind, nbytes, name)
        # ids given with add_with_ids: a hash-table direct map on this in-memory copy (the file is not written)
        _check_ids(ids, name, path)
        if idx.direct_map.type != faiss.DirectMap.Hashtable:
            idx.set_direct_map_type(faiss.DirectMap.Hashtable)
        return _FaissVectors(idx.reconstruct_batch(ids), ids, kind, nbytes, name)
    raise DataFormatError(path, None, None, f"faiss {name} is not supported: capgap reconstructs the vectors of "
                                            f"{', '.join(SUPPORTED_FAISS)}")


def _sq_kind(sq, path: Path) -> str:
    import faiss

    for attr, kind in _SQ_KINDS.items():
        if hasattr(faiss.ScalarQuantizer, attr) and int(sq.qtype) == int(getattr(faiss.ScalarQuantizer, attr)):
            return kind
    names = [a for a in dir(faiss.ScalarQuantizer) if a.startswith("QT_") and int(getattr(faiss.ScalarQuantizer, a)) == int(sq.qtype)]
    raise DataFormatError(path, None, None, f"faiss scalar quantizer type {names[0] if names else int(sq.qtype)} is not "
                                            f"supported: capgap reads {', '.join(_SQ_KINDS)}")


def _check_ids(ids: np.ndarray, name: str, path: Path) -> None:
    if len(ids) and ids.min() < 0:
        raise DataFormatError(path, None, None, f"faiss {name} holds a negative id ({int(ids.min())}): ids must be >= 0")
    u, c = np.unique(ids, return_counts=True)
    if (c > 1).any():
        raise DataFormatError(path, None, None, f"faiss {name} holds id {int(u[c > 1][0])} {int(c[c > 1][0])} times: "
                                                "each document needs its own id")


def _with_ids(v: _FaissVectors, ids: np.ndarray, faiss_type: str, path: Path) -> _FaissVectors:
    """``v`` with faiss ids ``ids`` (one per row of ``v.matrix``), rows sorted by id; ids that
    are exactly 0..n-1 in order are dropped (row numbers)."""
    _check_ids(ids, faiss_type, path)
    if np.array_equal(ids, np.arange(len(ids))):
        return _FaissVectors(v.matrix, None, v.kind, v.bytes_per_vector, faiss_type)
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    keep = None if np.array_equal(ids, np.arange(len(ids))) else ids  # a permutation of 0..n-1: row numbers again
    return _FaissVectors(np.ascontiguousarray(v.matrix[order]), keep, v.kind, v.bytes_per_vector, faiss_type)


def load_embeddings(path: str | Path, key: str | None = None) -> Embeddings:
    """Read an embedding matrix, or the vectors a faiss index searches against.

    Parameters
    ----------
    path : str or pathlib.Path
        ``.npy`` (memory-mapped read-only; float32, float16 or float64), ``.npz`` (array
        ``key`` when the file holds it, else its only array), or a faiss index file
        (``.faiss``/``.index``) of a type in ``SUPPORTED_FAISS``, metric inner product
        (``"ip"``) or L2 (``"l2"``). The file is never written.
    key : str, optional
        The array to take from an ``.npz`` holding several.

    Returns
    -------
    Embeddings
        ``matrix`` ``(n, dim)``: arrays as stored (float16 and float64 are returned as is;
        callers cast blockwise); for a faiss index its vectors reconstructed as float32
        (``reconstruct_n``: decoded SQ/PQ codes; IVF codes decoded and added to their coarse
        centroid), rows in ascending faiss-id order. Also the metric, ``kind``,
        ``bytes_per_vector``, ``faiss_type`` and ``ids`` (see ``Embeddings``).

    Notes
    -----
    faiss indexes: ``IndexIDMap``/``IndexIDMap2`` take their ids from ``id_map``; IVF indexes
    from their inverted lists. When those ids are 0..n-1 (a plain ``add``), row i is the vector
    with id i and ``ids`` is None; otherwise the rows are sorted by id and ``ids`` holds them.
    IVF needs no direct map: ``IndexIVF.reconstruct_n`` scans the inverted lists; for ids that
    are not 0..n-1 a hash-table direct map is built on the loaded copy (the file is untouched).
    An IVF index's coarse quantizer and an HNSW graph only decide which vectors a search
    visits, an approximation ``diagnose`` judges through its ANN run, not a change of geometry.

    Raises
    ------
    DataFormatError
        Naming the file: another suffix; an ``.npz`` holding several arrays and no ``key``
        among them; a file faiss cannot read; a faiss index without vectors, of an unsupported
        type or scalar-quantizer type, with another metric, or with negative or repeated ids; a
        shape that is not 2-d with at least one row and column; a dtype other than
        float32/float16/float64; or a non-finite value, checked block by block (the reason
        names the first such row, 0-based: ``docs.npy: row 3 (0-based) is not finite: column 1
        holds nan``).
    """
    path = Path(path)
    metric = None
    fv = None
    if path.suffix == ".npy":
        a = np.load(path, mmap_mode="r")
    elif path.suffix == ".npz":
        with np.load(path) as z:
            names = list(z.files)
            if key not in names and len(names) != 1:
                got = "" if key is None else f", not {key!r}"
                raise DataFormatError(path, None, None, f"holds arrays {names}{got}: name one with --key")
            a = z[key if key in names else names[0]]
    elif path.suffix in (".faiss", ".index"):
        import faiss

        try:
            idx = faiss.read_index(str(path))
        except RuntimeError as e:
            raise DataFormatError(path, None, None, f"faiss cannot read it as an index: {e}") from e
        if idx.ntotal == 0:
            raise DataFormatError(path, None, None, "not a faiss index with stored vectors")
        metric = _FAISS_METRICS.get(int(idx.metric_type))
        if metric is None:
            raise DataFormatError(path, None, None, f"faiss metric_type {idx.metric_type} is not supported: "
                                                    "capgap scores inner product (METRIC_INNER_PRODUCT) or L2 (METRIC_L2)")
        try:
            fv = _faiss_vectors(idx, path)
        except RuntimeError as e:
            raise DataFormatError(path, None, None, f"faiss cannot reconstruct its vectors: {e}") from e
        a = fv.matrix
    else:
        raise DataFormatError(path, None, None, "expected .npy, .npz or a faiss index (.faiss/.index)")
    problem = _matrix_problem(a)
    if problem:
        raise DataFormatError(path, None, None, problem)
    if fv is not None:
        return Embeddings(a, metric, path, fv.kind, fv.bytes_per_vector, fv.faiss_type, fv.ids)
    return Embeddings(a, metric, path, a.dtype.name, float(a.dtype.itemsize * a.shape[1]))


def load_matrix(path: str | Path, key: str | None = None) -> np.ndarray:
    """The ``(n, dim)`` float16/float32/float64 matrix of ``load_embeddings(path, key)`` (same formats,
    checks and ``DataFormatError``s), without the faiss metric."""
    return load_embeddings(path, key).matrix


def resolve_metric(requested: str | None, index_metric: str | None, path: str | Path = "the document index") -> str:
    """The metric to diagnose with: ``requested`` (``--metric``) or, when None, the faiss
    index's own ``index_metric`` (else ``"ip"``).

    A faiss index is searched by its own metric, so diagnosing it by another would judge a
    search the index never runs: ``requested`` must equal ``index_metric``, except ``cosine``
    on an inner-product index (the usual cosine index: normalised vectors, inner product).
    Raises ``ValueError`` naming ``path`` for a mismatch or an unknown metric."""
    if requested is not None and requested not in METRICS:
        raise ValueError(f"metric must be one of {list(METRICS)}, got {requested!r}")
    if requested is None:
        return index_metric or "ip"
    if index_metric is None or requested == index_metric or (requested, index_metric) == ("cosine", "ip"):
        return requested
    raise ValueError(f"{path} is a faiss index that searches by {_METRIC_NAMES[index_metric]}; --metric {requested} would "
                     f"diagnose a search the index does not run: omit --metric (capgap then uses the index's own metric, "
                     f"{index_metric})")


def load_ids(path: str | Path) -> list[str]:
    """One id per line, line i naming array row i-1 (``capgap.data.iter_lines``: UTF-8, a
    leading BOM skipped, lines end at LF or CRLF only).

    Leading and trailing whitespace of a line is removed (``str.strip``: the format cannot
    tell it from the id), nothing else. Raises ``DataFormatError`` naming the line for bad
    UTF-8, a blank line before the last id (ids must match array rows one to one; blank lines at
    the end are ignored), an id with a control
    character (``capgap.data.check_id``) or a duplicate id."""
    from .data import check_id, iter_lines

    path = Path(path)
    ids: list[str] = []
    seen: dict[str, int] = {}
    lines = list(iter_lines(path))
    while lines and not lines[-1][1].strip():  # blank lines at the end of the file name no row
        lines.pop()
    for i, line in lines:
        x = line.strip()
        if not x:
            raise DataFormatError(path, i, None, "empty id")
        check_id(path, i, None, x)
        if x in seen:
            raise DataFormatError(path, i, None, f"duplicate id {x!r} (first on line {seen[x]})")
        seen[x] = i
        ids.append(x)
    return ids


def document_ids(docs: Embeddings, listed: Sequence[str] | None = None, listed_path: str | Path = "--doc-ids") -> list[str]:
    """The id of each row of ``docs.matrix``.

    Row i of an array, or of a faiss index whose ids are 0..n-1, is document ``listed[i]``
    (default: ``str(i)``). A faiss index with other ids (``docs.ids``) takes them as row
    numbers into ``listed``: the row with faiss id j is document ``listed[j]``, the usual use
    of ``add_with_ids`` (the list may name more documents than the index holds); without
    ``listed`` the ids themselves, as decimal strings, are the document ids.

    Parameters
    ----------
    docs : Embeddings
        From ``load_embeddings``.
    listed : sequence of str, optional
        The ids file's lines (``load_ids``).
    listed_path : str or pathlib.Path
        The ids file, for messages.

    Returns
    -------
    list of str
        ``n_docs`` ids, one per row (``diagnose`` checks the count for arrays).

    Raises
    ------
    ValueError
        A faiss id beyond the end of ``listed`` (naming both files).
    """
    if docs.ids is None:
        return list(listed) if listed is not None else [str(i) for i in range(docs.matrix.shape[0])]
    if listed is None:
        return [str(int(i)) for i in docs.ids]
    top = int(docs.ids[-1])
    if top >= len(listed):
        raise ValueError(f"{docs.path} holds faiss ids up to {top}, taken as line numbers (0-based) of {listed_path}, "
                         f"which names only {len(listed)} documents")
    return [listed[int(i)] for i in docs.ids]


def match_uncompressed(docs: Embeddings, unc: Embeddings) -> np.ndarray:
    """The uncompressed vectors of the documents in ``docs``, row for row.

    Row i of ``unc`` is the document of row i of ``docs`` (the same row order); when ``docs``
    has faiss ids (``docs.ids``) they are row numbers of an uncompressed array, as in
    ``document_ids``, and an uncompressed faiss index with ids must hold the same ids.

    Parameters
    ----------
    docs : Embeddings
        The index diagnosed (e.g. a compressed faiss index), ``(n_docs, dim)``.
    unc : Embeddings
        The same documents at full precision (``--uncompressed-embeddings``).

    Returns
    -------
    numpy.ndarray
        ``(n_docs, dim)``: ``unc.matrix`` itself, or its rows at ``docs.ids`` (a copy).

    Raises
    ------
    ValueError
        Naming both files: different dimensions, row counts, or ids; a faiss id beyond the
        uncompressed rows; or two faiss indexes searching by different metrics.
    """
    both = f"{docs.path} and {unc.path}"
    if docs.metric and unc.metric and docs.metric != unc.metric:
        raise ValueError(f"{both} are faiss indexes searching by different metrics ({_METRIC_NAMES[docs.metric]}, "
                         f"{_METRIC_NAMES[unc.metric]}): the uncompressed vectors must be scored like the index's own")
    (n, dim), (nu, dimu) = docs.matrix.shape, unc.matrix.shape
    if dim != dimu:
        raise ValueError(f"dimension mismatch: {docs.path} has dim {dim}, {unc.path} (the uncompressed documents) has dim "
                         f"{dimu}; the reconstructed vectors of a flat, SQ or PQ index keep the input dimension")
    U = unc.matrix
    if unc.ids is not None:
        if docs.ids is None:
            raise ValueError(f"{unc.path} holds faiss ids that are not 0..n-1, {docs.path} does not: its rows cannot be "
                             "matched to the documents; give the uncompressed vectors in the index's row order")
        if not np.array_equal(docs.ids, unc.ids):
            raise ValueError(f"{both} hold different faiss ids: the uncompressed vectors must be the same documents")
    elif docs.ids is not None:
        top = int(docs.ids[-1])
        if top >= nu:
            raise ValueError(f"{docs.path} holds faiss ids up to {top}, taken as row numbers of {unc.path}, which has "
                             f"only {nu} rows")
        U = U[docs.ids]
    if U.shape[0] != n:
        raise ValueError(f"{docs.path} holds {n} documents, {unc.path} (the uncompressed documents) {U.shape[0]}: "
                         "they must be the same documents in the same row order")
    return U


def load_qrels_file(path: str | Path) -> dict[str, dict[str, int]]:
    """Qrels as query id -> {document id: grade}: BEIR tsv (``query-id corpus-id score``, header
    optional), TREC (``qid iter docid rel``, whitespace), or two columns (``qid docid``, grade 1),
    read by ``capgap.data.iter_qrels``. Grades <= 0 are judged non-gold. A pair repeated with
    the same grade is one judgement; with another grade it is an error naming both lines (as
    ``capgap.data.load_qrels``). Raises ``DataFormatError`` (file, line, field)."""
    from .data import iter_qrels

    out: dict[str, dict[str, int]] = {}
    first: dict[tuple[str, str], int] = {}
    for lineno, q, d, g in iter_qrels(path, pairs=True):
        prev = out.setdefault(q, {}).get(d)
        if prev is not None and prev != g:
            raise DataFormatError(path, lineno, "score", f"({q!r}, {d!r}) judged twice: {prev} (line {first[(q, d)]}) and {g}")
        out[q][d] = g
        first.setdefault((q, d), lineno)
    return out


def load_run_file(path: str | Path, percent_encoded: bool = False) -> dict[str, list[str]]:
    """A run as query id -> document ids in rank order: TREC (``qid Q0 docid rank score tag``) or
    tsv ``qid docid [score]`` (ordered by score when given, else by file order). A line holding a
    TAB is split on TABs (so ids may contain spaces), any other on whitespace; ids are taken as
    written, or percent-decoded with ``percent_encoded`` (the run files capgap writes:
    ``capgap.trec.decode_id``); lines are read by ``capgap.data.iter_lines`` (UTF-8, a leading
    BOM skipped).

    Raises ``DataFormatError`` naming file and line for bad UTF-8, a wrong column count, an id
    with a control character (``capgap.data.check_id``) or a malformed percent escape, and
    (field ``score``) a score that is not a number (except on line 1, a header) or is not finite
    (``nan``, ``inf``)."""
    from .data import check_id, iter_lines, split_tsv
    from .trec import decode_id

    path = Path(path)
    rows: dict[str, list[tuple[float, int, str]]] = {}
    for i, line in iter_lines(path):
        if not line.strip():
            continue
        cols = split_tsv(path, i, line) if "\t" in line else line.split()
        if len(cols) == 6:
            q, d, score = cols[0], cols[2], cols[4]
        elif len(cols) in (2, 3):
            q, d, score = cols[0], cols[1], cols[2] if len(cols) == 3 else None
        else:
            raise DataFormatError(path, i, None, f"expected 6 (TREC) or 2-3 (qid docid [score]) columns, got {len(cols)}")
        try:
            s = float(score) if score is not None else -float(i)
        except ValueError:
            if i == 1:
                continue  # header
            raise DataFormatError(path, i, "score", f"{score!r} is not a number") from None
        if not math.isfinite(s):
            raise DataFormatError(path, i, "score", f"not a finite number: {score!r}")
        if percent_encoded:
            try:
                q, d = decode_id(q), decode_id(d)
            except ValueError as e:
                raise DataFormatError(path, i, None, f"not a percent-encoded id: {e}") from None
        check_id(path, i, "query-id", q)
        check_id(path, i, "doc-id", d)
        rows.setdefault(q, []).append((-s, i, d))
    return {q: [d for _, _, d in sorted(v)] for q, v in rows.items()}


def _run_mismatch(run: Mapping[str, Sequence[str]], qids: Sequence[str], pos: Mapping[str, int]) -> list[str]:
    """Notes (also logged) on ANN-run ids that meet nothing: run queries that are not judged
    queries, judged queries missing from the run, run documents not among the document ids.
    Raises ``ValueError`` when no run query is a judged query, or no run document is a known
    document: every verdict would then be an artefact of the ids."""
    notes = []
    known_q = set(qids)
    extra_q = [q for q in run if q not in known_q]
    missing_q = [q for q in qids if q not in run]
    run_docs = {d for v in run.values() for d in v}
    extra_d = sorted(d for d in run_docs if d not in pos)
    hint = "percent-encoded ids (capgap's run files) need --ann-run-percent-encoded"
    if run and len(extra_q) == len(run):
        raise ValueError(f"none of the ANN run's {len(run)} query ids (e.g. {list(run)[:3]}) is a judged query; "
                         f"the query ids look like {list(qids)[:3]} ({hint})")
    if run_docs and len(extra_d) == len(run_docs):
        raise ValueError(f"none of the ANN run's {len(run_docs)} document ids (e.g. {extra_d[:3]}) is a document id; "
                         f"the document ids look like {list(pos)[:3]} ({hint})")
    for what, ids in (("ANN-run queries are not judged queries (ignored)", extra_q),
                      ("judged queries are missing from the ANN run (nothing retrieved)", missing_q),
                      ("ANN-run documents are not in the document ids (count as misses)", extra_d)):
        if ids:
            _note(notes, f"{len(ids)} {what}, e.g. {ids[:3]}; {hint}")
    return notes


# --------------------------------------------------------------------------- the diagnosis
@dataclass
class Diagnosis:
    """Per-query rows (dicts) and the summary dict of one ``diagnose`` call."""

    rows: list[dict]
    summary: dict
    k: int
    notes: list[str] = field(default_factory=list)


def _capped_recall(ranked: Sequence[str], gold: set[str], k: int) -> float:
    return len(set(ranked[:k]) & gold) / min(k, len(gold))


def _note(notes: list[str], msg: str) -> None:
    """A note for the summary, also logged as a warning (the console, under the CLI)."""
    log.warning(msg)
    notes.append(msg)


def _match_queries(query_ids: Sequence[str], qrels: Mapping[str, Mapping[str, int]], notes: list[str]) -> tuple[list[int], dict]:
    """Which query rows have judgements, and the ids on either side that meet nothing.

    Returns ``(keep, unmatched)``: ``keep``, the row indices whose id the qrels judge (row
    order); ``unmatched``, ``{"rows_without_judgements": ..., "judged_queries_without_row": ...}``,
    each ``{"count": int, "examples": [first 5 ids]}``. A partial mismatch becomes a note (and a
    logged warning). Raises ``ValueError`` when no query row is judged, naming ids of both sides."""
    keep = [i for i, q in enumerate(query_ids) if q in qrels]
    if not keep:
        if not qrels:
            raise ValueError("the qrels judge no query")
        raise ValueError(f"none of the {len(query_ids)} query ids (e.g. {list(query_ids[:3])}) appears in the qrels, "
                         f"whose query ids look like {list(qrels)[:3]}")
    rows = set(query_ids)
    unjudged = [q for q in query_ids if q not in qrels]
    rowless = [q for q in qrels if q not in rows]
    unmatched = {}
    for key, ids, total, what in (
            ("rows_without_judgements", unjudged, len(query_ids), "query rows have no judgements in the qrels (left out)"),
            ("judged_queries_without_row", rowless, len(qrels), "judged queries have no query embedding row (not evaluated)")):
        unmatched[key] = {"count": len(ids), "examples": list(ids[:5])}
        if ids:
            _note(notes, f"{len(ids)} of the {total} {what}, e.g. {ids[:3]}")
    return keep, unmatched


def _scoring_matrix(M: np.ndarray, metric: str, side: str) -> tuple[np.ndarray, float]:
    """``M`` ``(n, dim)`` as float32 rows whose inner products rank by ``metric``; ``M`` is never
    written to.

    ``ip``: ``M`` itself (float32 C-contiguous input, e.g. a memory map, is read in place;
    other dtypes are cast to a new array). ``cosine``: a new array of L2-normalised rows (rows of
    norm 0 never get here: ``_zero_norm_rows`` refuses or removes them first). ``l2``: a new ``(n, dim + 1)`` array, documents ``(d, -|d|^2/2)`` and queries
    ``(q, 1)`` (``side`` ``"queries"``; any other side is a document matrix), since ``q.d - |d|^2/2 = (|q|^2 - |q - d|^2)/2`` ranks each query's documents as
    ``-|q - d|^2`` does. Built block by block (norms in float64). Returns the array and, for
    cosine, the largest ``|norm - 1|`` of the input rows (else 0.0). Raises ``ValueError`` when
    a document's ``|d|^2/2`` overflows float32 (``l2``)."""
    n, dim = M.shape
    if metric == "ip":
        return np.ascontiguousarray(M, dtype=np.float32), 0.0
    out = np.empty((n, dim + (metric == "l2")), dtype=np.float32)
    dev = 0.0
    step = _block_rows(dim)
    for a in range(0, n, step):
        x = np.asarray(M[a : a + step], dtype=np.float64)
        if metric == "cosine":
            norms = np.linalg.norm(x, axis=1)
            dev = max(dev, float(np.abs(norms - 1).max()))
            out[a : a + step] = x / np.maximum(norms, 1e-12)[:, None]
        else:
            out[a : a + step, :dim] = x
            out[a : a + step, dim] = 1.0 if side == "queries" else -0.5 * np.einsum("ij,ij->i", x, x)
            if not np.isfinite(out[a : a + step, dim]).all():
                r = a + int(np.flatnonzero(~np.isfinite(out[a : a + step, dim]))[0])
                raise ValueError(f"{side}: row {r} (0-based): |d|^2/2 overflows float32 (metric l2)")
    return out, dev


def _zero_norm_rows(D, Q, U, doc_ids, query_ids, keep, qrels, policy: str, paths: Mapping[str, str], notes: list[str]):
    """Under cosine: find the rows of norm 0 (``capgap.retrieval.zero_norm_rows``) of the
    documents, the judged query rows ``keep`` and the uncompressed documents, and apply
    ``policy`` (``diagnose``'s ``zero_norm``). Returns ``(D, U, doc_ids, keep, summary)``: with
    ``"set-apart"`` the matrices and ids without the zero document rows (a row zero in either
    document matrix leaves both) and ``keep`` without zero query rows or queries whose gold is
    only zero documents; ``summary`` = per side ``{"count", "rows", "ids"}`` (input rows,
    0-based) and the policy. Raises ``ValueError`` naming the file and rows with ``"error"``."""
    from .retrieval import ZERO_NORM, describe_rows, zero_norm_rows

    if policy not in ZERO_NORM_POLICIES:
        raise ValueError(f"zero_norm must be one of {list(ZERO_NORM_POLICIES)}, got {policy!r}")
    found = {"documents": (zero_norm_rows(D), doc_ids),
             "queries": (np.asarray(keep, dtype=np.int64)[zero_norm_rows(Q[keep])], query_ids)}
    if U is not None:
        found["uncompressed documents"] = (zero_norm_rows(U), doc_ids)
    bad = {side: rows for side, (rows, _) in found.items() if len(rows)}
    summary = {"policy": policy, "threshold": ZERO_NORM,
               **{side: {"count": len(rows), "rows": rows.tolist()[:20], "ids": [ids[r] for r in rows[:20]]}
                  for side, (rows, ids) in found.items()}}
    if not bad:
        return D, U, doc_ids, keep, summary
    if policy == "error":
        side, rows = next(iter(bad.items()))
        more = "".join(f"; so {'does' if len(r) == 1 else 'do'} {paths.get(s, s)}: {describe_rows(r, found[s][1])}"
                       for s, r in list(bad.items())[1:])
        raise ValueError(f"{paths.get(side, side)}: {describe_rows(rows, found[side][1])} "
                         f"{'has' if len(rows) == 1 else 'have'} norm 0 (<= {ZERO_NORM:g}): cosine is undefined for "
                         f"{'it' if len(rows) == 1 else 'them'} (an empty or failed text embedded as a zero vector is "
                         f"the usual cause){more}. Fix the embeddings, or pass --zero-norm set-apart to leave such rows "
                         "out, counted")
    zd = np.union1d(found["documents"][0], found.get("uncompressed documents", (np.zeros(0, np.int64),))[0])
    dkeep = np.setdiff1d(np.arange(D.shape[0]), zd)
    if not len(dkeep):
        raise ValueError(f"{paths.get('documents', 'documents')}: every row has norm 0: cosine is undefined")
    left = set(doc_ids[i] for i in dkeep)
    zq = set(found["queries"][0].tolist())
    no_gold = [i for i in keep if i not in zq and not any(g > 0 and d in left for d, g in qrels[query_ids[i]].items())]
    new_keep = [i for i in keep if i not in zq and i not in set(no_gold)]
    if not new_keep:
        raise ValueError("metric cosine: no query is left once the rows of norm 0 are set apart")
    summary["queries_with_only_zero_gold"] = {"count": len(no_gold), "ids": [query_ids[i] for i in no_gold[:20]]}
    for side, rows in bad.items():
        _note(notes, f"metric cosine: {paths.get(side, side)}: {len(rows)} {'row has' if len(rows) == 1 else 'rows have'} "
                     f"norm 0 (cosine undefined), set apart: {describe_rows(rows, found[side][1])}")
    if no_gold:
        _note(notes, f"metric cosine: {len(no_gold)} queries whose every gold document has norm 0 are set apart too, "
                     f"e.g. {[query_ids[i] for i in no_gold[:3]]}")
    sub = (lambda M: None if M is None else np.asarray(M)[dkeep]) if len(zd) else (lambda M: M)
    return sub(D), sub(U), [doc_ids[i] for i in dkeep], new_keep, summary


def _probe_geometry(Ds: np.ndarray, gold_rows: list, grades: list, metric: str, kk: int, threads: int | None,
                    probe_cfg: Mapping | None, groups) -> dict:
    """Run the probe on one scoring matrix ``Ds`` ``(n_docs, dim')`` float32 (``_scoring_matrix``).

    Returns ``{"results", "ranks", "certified", "causes", "reachable", "off"}``: the probe's
    results, per query the gold documents' ranks under the probe's vector, certified and cause;
    under ``l2`` whether the probe's ``(w, c)`` is an L2 query (``c > 0``) and the queries
    where it is not, whose ranks come from ``w`` alone (module docstring); else None and []."""
    from .probe import ProbeConfig, probe
    from .retrieval import dense_scores, rank_queries

    results = probe(Ds, gold_rows, threads=threads, grades=grades, **ProbeConfig.from_config(probe_cfg).kwargs())
    ranks = [res.gold_ranks for res in results]
    certified = [bool(res.certified) for res in results]
    causes = [res.cause for res in results]
    reachable = [bool(res.w[-1] > 0) for res in results] if metric == "l2" else None
    off = [i for i, r in enumerate(reachable) if not r] if reachable is not None else []
    if off:
        # (w, c) with c <= 0 is no L2 query; w alone is the limit of the L2 queries t*w, t -> oo
        W = np.stack([results[i].w for i in off]).astype(np.float32)
        W[:, -1] = 0.0
        f_ranks, _, _ = rank_queries(dense_scores(W, Ds, threads), len(off), [gold_rows[i] for i in off],
                                     [grades[i] for i in off], None, kk, Ds.shape[0], groups)
        for i, r in zip(off, f_ranks):
            ranks[i] = r
            certified[i] = bool(r.max() <= len(r))  # pessimistic ranks 1..|G|: every gold strictly first
            causes[i] = None if certified[i] else (results[i].cause or "l2-unreachable")
    return {"results": results, "ranks": ranks, "certified": certified, "causes": causes, "reachable": reachable, "off": off}


def diagnose(D: np.ndarray, Q: np.ndarray, qrels: Mapping[str, Mapping[str, int]], doc_ids: Sequence[str],
             query_ids: Sequence[str], k: int = 10, ann_run: Mapping[str, Sequence[str]] | None = None,
             metric: str = "ip", probe_cfg: Mapping | None = None, threads: int | None = None,
             uncompressed: np.ndarray | None = None, index_info: Mapping | None = None,
             uncompressed_info: Mapping | None = None, zero_norm: str = "error",
             paths: Mapping[str, str] | None = None) -> Diagnosis:
    """Verdict per query: index-limited, compression-limited, encoder-limited, ann-limited or ok
    (module docstring).

    Parameters
    ----------
    D : numpy.ndarray
        ``(n_docs, dim)`` document embeddings as the index stores them (for a compressed faiss
        index its reconstructed vectors, ``load_embeddings``), float16/float32/float64 (scored
        as float32; a memory map is read in place and never written).
    Q : numpy.ndarray
        ``(n_queries, dim)`` query embeddings, same dtypes.
    qrels : mapping
        Query id -> {doc id: grade} (grade > 0 = gold).
    doc_ids, query_ids : sequence of str
        The rows' ids.
    k : int
        The cut-off of every recall and verdict.
    ann_run : mapping, optional
        Query id -> the user's approximate top documents.
    metric : str
        ``ip`` (inner product), ``cosine`` (rows L2-normalised into new arrays; a note says how
        far they were from unit length) or ``l2`` (ranked by ``-|q - d|^2``; the probe runs on
        ``(d, -|d|^2/2)``: module docstring).
    probe_cfg : mapping, optional
        Overrides of the probe's defaults (``capgap.probe.ProbeConfig``: the DAG's).
    threads : int, optional
        BLAS threads.
    uncompressed : numpy.ndarray, optional
        ``(n_docs, dim)``: the same documents at full precision, row for row
        (``match_uncompressed``). The probe also runs on them, scored by the same ``metric``;
        a query the index's own vectors do not admit but these do is **compression-limited**.
    index_info, uncompressed_info : mapping, optional
        What the two matrices are (``Embeddings.info()``: kind, bytes per vector, ...), copied
        into the summary's ``index`` / ``uncompressed``; default: the dtype and
        ``itemsize * dim``.
    zero_norm : str
        Under ``cosine``, what a row of norm 0 (``<= capgap.retrieval.ZERO_NORM``: its cosine is
        undefined) does: ``"error"`` (default) raises ``ValueError`` naming the file and rows;
        ``"set-apart"`` leaves those rows out and counts them (summary ``zero_norm``): a zero
        document is ranked for no query (a gold one stays in its query's gold set, never found,
        so recall keeps its denominator), a zero query gets no verdict, and a query whose every
        gold document is zero is left out too. Ignored under ``ip`` and ``l2`` (a zero vector has
        well-defined scores there).
    paths : mapping, optional
        The files the matrices came from, keyed ``"documents"``, ``"queries"``,
        ``"uncompressed documents"``, named in errors about their rows (default: those words).

    Returns
    -------
    Diagnosis
        Per-query rows and the summary (module docstring).

    Notes
    -----
    Query rows whose id the qrels do not judge are left out, judged queries without a row are
    not evaluated: both are counted in the summary (``rows_without_judgements``,
    ``judged_queries_without_row``) and in a note logged as a warning.

    Raises
    ------
    ValueError
        A matrix that is not 2-d, not floating point, empty, or holds a non-finite value
        (``"documents: row 3 (0-based) is not finite: column 1 holds nan"``; the uncompressed
        matrix is named ``"uncompressed documents"``), a dimension mismatch, ``uncompressed``
        of another shape than ``D``, an unknown metric, id counts that differ from the row
        counts, no query row judged by the qrels (naming ids of both sides), qrels that name
        documents not in ``doc_ids``, a query whose judged documents are all non-gold, or,
        under ``cosine`` with ``zero_norm="error"``, a row of norm 0 (``"docs.npy: row 4
        (0-based; ids ['d4']) has norm 0 (<= 1e-12): cosine is undefined ..."``).
    """
    from .retrieval import dense_scores, duplicate_groups, rank_queries

    if metric not in METRICS:
        raise ValueError(f"metric must be one of {list(METRICS)}, got {metric!r}")
    D, Q = np.asarray(D), np.asarray(Q)
    validate_matrix(D, "documents")
    validate_matrix(Q, "queries")
    if D.shape[1] != Q.shape[1]:
        raise ValueError(f"dimension mismatch: documents {D.shape}, queries {Q.shape}")
    if uncompressed is not None:
        uncompressed = np.asarray(uncompressed)
        validate_matrix(uncompressed, "uncompressed documents")
        if uncompressed.shape != D.shape:
            raise ValueError(f"uncompressed documents have shape {uncompressed.shape}, documents {D.shape}: they must be "
                             "the same documents, row for row, at the same dimension")
    if len(doc_ids) != D.shape[0]:
        raise ValueError(f"{len(doc_ids)} document ids for {D.shape[0]} document rows")
    if len(query_ids) != Q.shape[0]:
        raise ValueError(f"{len(query_ids)} query ids for {Q.shape[0]} query rows")
    notes: list[str] = []
    pos = {d: i for i, d in enumerate(doc_ids)}
    unknown = sorted({d for q in qrels for d in qrels[q] if d not in pos})
    if unknown:
        raise ValueError(f"qrels name {len(unknown)} documents not in the document ids, e.g. {unknown[:3]}; "
                         f"the document ids look like {list(doc_ids[:3])}")
    keep, unmatched = _match_queries(query_ids, qrels, notes)
    qids = [query_ids[i] for i in keep]
    empty = [q for q in qids if not any(g > 0 for g in qrels[q].values())]
    if empty:
        raise ValueError(f"{len(empty)} queries have an empty gold set (every judged grade <= 0), e.g. {empty[:3]}")
    pos_all = pos
    zero = None
    if metric == "cosine":
        D, uncompressed, doc_ids, keep, zero = _zero_norm_rows(D, Q, uncompressed, doc_ids, query_ids, keep, qrels,
                                                               zero_norm, paths or {}, notes)
        pos = {d: i for i, d in enumerate(doc_ids)}
        qids = [query_ids[i] for i in keep]
    Ds, dev_d = _scoring_matrix(D, metric, "documents")
    Qs, dev_q = _scoring_matrix(Q[keep], metric, "queries")
    Us, dev_u = _scoring_matrix(uncompressed, metric, "uncompressed documents") if uncompressed is not None else (None, 0.0)
    for name, dev in (("documents", dev_d), ("queries", dev_q), ("uncompressed documents", dev_u)):
        if dev > 1e-3:
            _note(notes, f"metric cosine: {name} were not unit length (max |norm - 1| = {dev:.3g}); normalised them")
    if ann_run is not None:
        notes += _run_mismatch(ann_run, qids, pos_all)
    golds = [{d for d, g in qrels[q].items() if g > 0} for q in qids]
    # a gold document set apart (zero norm) stays in ``golds`` (the denominators) but has no row
    gold_rows = [np.array(sorted(pos[d] for d in g if d in pos), dtype=np.int64) for g in golds]
    grades = [np.array([qrels[q][doc_ids[r]] for r in g], dtype=np.float64) for q, g in zip(qids, gold_rows)]
    groups = duplicate_groups(Ds)  # bit-identical rows; under l2 the same groups as D's
    # no text ties here: equal query embeddings need not mean equal texts, and another encoder
    # could tell them apart, so each query keeps its own w
    kk = min(k, len(doc_ids))
    pr = _probe_geometry(Ds, gold_rows, grades, metric, kk, threads, probe_cfg, groups)
    results, probe_ranks, certified, causes, reachable = pr["results"], pr["ranks"], pr["certified"], pr["causes"], pr["reachable"]
    if pr["off"]:
        off = pr["off"]
        _note(notes, f"metric l2: for {len(off)} of {len(qids)} queries the probe's vector (w, c) has c <= 0, so it is no "
                     f"L2 query; their probe numbers come from w alone (the ranking of the L2 queries t*w as t grows), a "
                     f"lower bound, e.g. {[qids[i] for i in off[:3]]}")
    pu = None
    if Us is not None:
        pu = _probe_geometry(Us, gold_rows, grades, metric, kk, threads, probe_cfg, duplicate_groups(Us))
        if pu["off"]:
            _note(notes, f"metric l2, uncompressed documents: for {len(pu['off'])} of {len(qids)} queries the probe's "
                         f"vector is no L2 query; their uncompressed probe numbers come from w alone, a lower bound")
    # the encoder's full ranking under the evaluation tie rule (capgap.retrieval)
    enc_ranks, exact_top, _ = rank_queries(dense_scores(Qs, Ds, threads), len(qids), gold_rows, grades, None, kk, len(doc_ids), groups)
    rows = []
    admitted_c, admitted_u = [], []  # per query: the index's / the uncompressed vectors admit it
    for i, (q, gold, res, er) in enumerate(zip(qids, golds, results, enc_ranks)):
        probe_r = float(np.sum(probe_ranks[i] <= kk)) / min(kk, len(gold))
        enc_r = float(np.sum(er <= kk)) / min(kk, len(gold))
        row = {"query_id": q, "n_gold": len(gold), f"probe_recall@{k}": round(probe_r, 6), "certified": certified[i]}
        if reachable is not None:
            row["probe_l2_query"] = reachable[i]
        row |= {"cause": causes[i], "slack": res.slack}
        unc_admits = None
        if pu is not None:
            unc_r = float(np.sum(pu["ranks"][i] <= kk)) / min(kk, len(gold))
            row |= {f"uncompressed_probe_recall@{k}": round(unc_r, 6), "uncompressed_certified": pu["certified"][i]}
            unc_admits = pu["certified"][i] or unc_r >= 1
        row |= {f"encoder_recall@{k}": round(enc_r, 6), "best_gold_rank": int(er.min())}
        ann_r = ann_vs_exact = None
        if ann_run is not None:
            ann = list(ann_run.get(q, []))  # a query the run lacks retrieved nothing
            ann_r = _capped_recall(ann, gold, kk)
            exact = {doc_ids[j] for j in exact_top[i]}
            ann_vs_exact = len(set(ann[:kk]) & exact) / kk
            row[f"ann_recall@{k}"] = round(ann_r, 6)
            row[f"ann_vs_exact@{k}"] = round(ann_vs_exact, 6)
        admits = certified[i] or probe_r >= 1
        admitted_c.append(admits)
        admitted_u.append(unc_admits)
        if not admits:
            verdict = "compression-limited" if unc_admits else "index-limited"
        elif enc_r < 1:
            verdict = "encoder-limited"
        elif ann_r is not None and ann_r < 1:
            verdict = "ann-limited"
        else:
            verdict = "ok"
        row["verdict"] = verdict
        rows.append(row)
    extra = {"metric": metric, "left_out_without_qrels": unmatched["rows_without_judgements"]["count"], **unmatched}
    if zero is not None:
        extra["zero_norm"] = zero
    if reachable is not None:
        extra["probe_not_l2_query"] = reachable.count(False)
    extra["index"] = dict(index_info) if index_info is not None else _array_info(D)
    extra["uncompressed"] = None
    if pu is not None:
        unc = dict(uncompressed_info) if uncompressed_info is not None else _array_info(uncompressed)
        unc |= {f"probe_recall@{k}": float(np.mean([r[f"uncompressed_probe_recall@{k}"] for r in rows])),
                "certified": float(np.mean([r["uncompressed_certified"] for r in rows])),
                "admitted": int(sum(admitted_u)), "admitted_by_index": int(sum(admitted_c)),
                "lost_to_compression": int(sum(u and not c for u, c in zip(admitted_u, admitted_c))),
                "admitted_only_by_index": int(sum(c and not u for u, c in zip(admitted_u, admitted_c)))}
        if pu["reachable"] is not None:
            unc["probe_not_l2_query"] = pu["reachable"].count(False)
        extra["uncompressed"] = unc
        if unc["admitted_only_by_index"]:
            _note(notes, f"{unc['admitted_only_by_index']} queries are admitted by the index's own vectors but not by the "
                         "uncompressed ones (compression moved or merged non-gold documents); their verdicts follow the index")
    kind = str(extra["index"].get("kind") or "")
    if kind.startswith(("ivf", "hnsw")) and ann_run is None:
        _note(notes, f"the index is {kind}: the probe and exact search score its reconstructed vectors, as its search does; "
                     "which vectors a search visits (IVF lists, HNSW graph) is an approximation judged only with --ann-run")
    return Diagnosis(rows, _summary(rows, k, ann_run is not None, notes, extra), k, notes)


def _array_info(M: np.ndarray) -> dict:
    return {"path": None, "kind": M.dtype.name, "faiss_type": None, "bytes_per_vector": float(M.dtype.itemsize * M.shape[1]),
            "n": int(M.shape[0]), "dim": int(M.shape[1])}


def _summary(rows: list[dict], k: int, has_ann: bool, notes: list[str], extra: Mapping) -> dict:
    n = len(rows)
    mean = (lambda key: float(np.mean([r[key] for r in rows])) if rows else float("nan"))
    s = {"queries": n, "k": k, **extra,
         "verdicts": {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS},
         f"probe_recall@{k}": mean(f"probe_recall@{k}"), "certified": mean("certified"),
         f"encoder_recall@{k}": mean(f"encoder_recall@{k}"), "notes": notes}
    s["unused_capacity"] = s[f"probe_recall@{k}"] - s[f"encoder_recall@{k}"]
    if has_ann:
        s[f"ann_recall@{k}"] = mean(f"ann_recall@{k}")
        s[f"ann_vs_exact@{k}"] = mean(f"ann_vs_exact@{k}")
    s["reading"] = _reading(s, k, has_ann)
    return s


def _reading(s: dict, k: int, has_ann: bool) -> str:
    """A plain-language reading of where the bottleneck is."""
    n = max(s["queries"], 1)
    v = s["verdicts"]
    worst = max((x for x in VERDICTS if x != "ok"), key=lambda x: v[x])
    parts = [f"At k = {k}, the index admits {s[f'probe_recall@{k}']:.3f} recall (the probe; {s['certified']:.0%} of queries certified); "
             f"the query encoder reaches {s[f'encoder_recall@{k}']:.3f} with exact search"]
    if has_ann:
        parts.append(f" and {s[f'ann_recall@{k}']:.3f} with your ANN (which returns {s[f'ann_vs_exact@{k}']:.3f} of the exact top-{k})")
    unc = s.get("uncompressed")
    if unc:
        parts.append(f". Uncompressed, the same documents admit {unc[f'probe_recall@{k}']:.3f} recall; the index's "
                     f"{s['index']['kind']} vectors lose {unc['lost_to_compression']} queries to compression")
    parts.append(f". {v['ok']} of {s['queries']} queries are fully served. ")
    if v[worst] == 0:
        parts.append("No bottleneck at this k.")
    else:
        where = {"index-limited": "the index itself: no query vector puts their gold documents in the top k; "
                                  "better document embeddings or a larger k, not query-side training, would help",
                 "compression-limited": "the index's compression: the uncompressed vectors admit the answer, the "
                                        "index's own reconstructed vectors do not; a finer code (more bytes per vector) "
                                        "or re-ranking with the full-precision vectors would help",
                 "encoder-limited": "the query encoder: the index admits the answer but the encoder's query vectors miss it "
                                    f"({s['unused_capacity']:.3f} recall of capacity unused); tune or replace the query side",
                 "ann-limited": "the approximate search: exact search finds the gold documents, the ANN index loses them; "
                                "tune the ANN (more probes, candidates) before anything else"}[worst]
        parts.append(f"The largest group ({v[worst]} queries, {v[worst] / n:.0%}) is limited by {where}.")
    return "".join(parts)


def write_diagnosis(diag: Diagnosis, out_dir: str | Path) -> dict[str, Path]:
    """Write ``per_query.tsv``, ``summary.json``, ``summary.md`` and ``verdicts.png`` into
    ``out_dir`` (each atomically); returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"per_query": out / "per_query.tsv", "summary_json": out / "summary.json", "summary_md": out / "summary.md",
             "figure": out / "verdicts.png"}
    cols = list(diag.rows[0]) if diag.rows else ["query_id", "verdict"]
    with atomic_open(paths["per_query"], "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, delimiter="\t", lineterminator="\n")
        w.writeheader()
        for r in diag.rows:
            w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in cols})
    write_json(paths["summary_json"], diag.summary)
    s, k = diag.summary, diag.k
    md = ["# capgap diagnose", "", s["reading"], "", f"Metric: {_METRIC_NAMES[s['metric']]} (`{s['metric']}`).", ""]
    for what, info in (("Index", s.get("index")), ("Uncompressed documents", s.get("uncompressed"))):
        if info:
            src = f"`{info['path']}`, " if info.get("path") else ""
            typ = f" (faiss `{info['faiss_type']}`)" if info.get("faiss_type") else ""
            md += [f"{what}: {src}`{info['kind']}`{typ}, {info['bytes_per_vector']:g} bytes per vector.", ""]
    md += ["| verdict | queries |", "|---|---|"]
    md += [f"| {v} | {s['verdicts'][v]} |" if v != "compression-limited" or s.get("uncompressed")
           else f"| {v} | not measured (no uncompressed documents) |" for v in VERDICTS]
    md += ["", f"| at k = {k} | mean |", "|---|---|", f"| probe (capacity) recall | {s[f'probe_recall@{k}']:.3f} |",
           f"| certified | {s['certified']:.3f} |", f"| encoder recall (exact search) | {s[f'encoder_recall@{k}']:.3f} |",
           f"| unused capacity (probe − encoder) | {s['unused_capacity']:.3f} |"]
    if f"ann_recall@{k}" in s:
        md += [f"| ANN recall | {s[f'ann_recall@{k}']:.3f} |", f"| ANN vs exact top-{k} | {s[f'ann_vs_exact@{k}']:.3f} |"]
    if s.get("uncompressed"):
        u = s["uncompressed"]
        md += [f"| probe recall, uncompressed documents | {u[f'probe_recall@{k}']:.3f} |",
               f"| certified, uncompressed documents | {u['certified']:.3f} |"]
    md += ["", "Recall is capped: |top-k ∩ gold| / min(k, |gold|). Per-query numbers: `per_query.tsv`.", ""]
    md += [f"- {n}" for n in s["notes"]]
    write_text(paths["summary_md"], "\n".join(md).rstrip() + "\n")
    _plot(diag, paths["figure"])
    return paths


def _plot(diag: Diagnosis, path: Path) -> None:
    from .figures import _mpl, _save

    plt, sns = _mpl()
    s, k = diag.summary, diag.k
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2))
    shown = [v for v in VERDICTS if v != "compression-limited" or s.get("uncompressed")]
    sns.barplot(x=shown, y=[s["verdicts"][v] for v in shown], ax=a, color="#4c72b0")
    a.set(ylabel="queries", title="Verdicts")
    a.tick_params(axis="x", labelrotation=25)
    names = ["probe (capacity)", "encoder (exact)"] + (["ANN"] if f"ann_recall@{k}" in s else [])
    vals = [s[f"probe_recall@{k}"], s[f"encoder_recall@{k}"]] + ([s[f"ann_recall@{k}"]] if f"ann_recall@{k}" in s else [])
    sns.barplot(x=names, y=vals, ax=b, color="#55a868")
    b.set(ylim=(0, 1.02), ylabel=f"recall@{k} (capped)", title="Where recall is lost")
    _save(fig, path)


def admitted_but_missed(probe_rows: Sequence[Mapping], run: Mapping[str, Sequence[str]],
                        qrels: Mapping[str, Mapping[str, int]], k: int) -> list[dict]:
    """Queries the index admits but an encoder's exact run misses at k: the DAG report's
    "geometrically easy but missed" list (encoder-limited queries, as ``diagnose`` defines them).

    ``probe_rows``: the probe's per-query JSON lines (``query_id``, ``certified``,
    ``recall@{k}``, ``n_gold``); ``run``: query id -> ranked document ids (decoded, e.g. by
    ``capgap.trec.read_run``); ``qrels``: query id -> {doc id: grade}. Returns dicts
    ``query_id, n_gold, encoder_recall (capped), best_gold_rank`` (None: no gold document in
    the run) for every such query, in probe order."""
    out = []
    for p in probe_rows:
        q = p["query_id"]
        gold = {d for d, g in qrels.get(q, {}).items() if g > 0}
        if not gold:
            continue
        key = f"recall@{k}"
        probe_r = p[key] * len(gold) / min(k, len(gold)) if key in p else None
        if probe_r is None or not (p["certified"] or probe_r >= 1):
            continue
        ranked = list(run.get(q, []))
        enc = _capped_recall(ranked, gold, k)
        if enc < 1:
            ranks = [i + 1 for i, d in enumerate(ranked) if d in gold]
            out.append({"query_id": q, "n_gold": len(gold), "encoder_recall": round(enc, 6), "best_gold_rank": min(ranks) if ranks else None})
    return out
