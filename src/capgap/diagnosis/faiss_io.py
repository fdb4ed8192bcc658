"""Reading a faiss index file as the vectors its search scores a query against.

``read_faiss_vectors(path)`` -> ``(metric, FaissVectors)`` for the types in ``SUPPORTED_FAISS``:
flat, scalar-quantizer (SQ) and product-quantizer (PQ) indexes, IVF-Flat/SQ/PQ, HNSW (its
storage) and ``IndexIDMap``/``IndexIDMap2`` around any of these. SQ and PQ give their decoded
vectors, IVF its codes decoded and added back to their centroid; an IVF coarse quantizer and an
HNSW graph only decide which vectors a search visits (an ANN effect, not geometry). The file is
never written. ``capgap.diagnosis.inputs.load_embeddings`` wraps it.

faiss is imported inside the functions: ``capgap.diagnosis`` is imported by the report rule,
whose conda env (envs/report.yaml) must not load faiss, and by users diagnosing ``.npy`` files.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataFormatError

log = logging.getLogger(__name__)

_FAISS_METRICS = {0: "ip", 1: "l2"}  # faiss.METRIC_INNER_PRODUCT, faiss.METRIC_L2
# the scalar-quantizer types whose search scores a float query against the decoded vector
_SQ_KINDS = {
    "QT_8bit": "sq8",
    "QT_4bit": "sq4",
    "QT_6bit": "sq6",
    "QT_8bit_uniform": "sq8-uniform",
    "QT_4bit_uniform": "sq4-uniform",
    "QT_fp16": "sq-fp16",
    "QT_bf16": "sq-bf16",
    "QT_8bit_direct": "sq8-direct",
    "QT_8bit_direct_signed": "sq8-direct-signed",
}
SUPPORTED_FAISS = (
    "IndexFlat (IndexFlatIP, IndexFlatL2)",
    "IndexScalarQuantizer",
    "IndexPQ",
    "IndexIVFFlat",
    "IndexIVFScalarQuantizer",
    "IndexIVFPQ",
    "IndexHNSWFlat/SQ/PQ (their storage)",
    "IndexIDMap/IndexIDMap2 around any of these",
)


@dataclass(frozen=True)
class FaissVectors:
    """The vectors of a faiss index, as ``read_faiss_vectors`` reconstructed them (the fields
    of ``capgap.diagnosis.Embeddings`` of the same names)."""

    matrix: np.ndarray  # (n, dim) float32, rows in ascending id order when ids is not None
    ids: np.ndarray | None  # (n,) int64 faiss ids of the rows, None: the ids are the row numbers 0..n-1
    kind: str
    bytes_per_vector: float
    faiss_type: str


def read_faiss_vectors(path: Path) -> tuple[str, FaissVectors]:
    """The metric (``"ip"`` or ``"l2"``) and the reconstructed vectors of the faiss index file
    ``path``. Raises ``DataFormatError`` naming the file: faiss cannot read it, it holds no
    vectors, another metric, a type outside ``SUPPORTED_FAISS``, or ids that are nested,
    negative or repeated."""
    flat = _flat_memmap(path)
    if flat is not None:  # a flat index's vectors memory-mapped from the file, not loaded twice
        return flat
    import faiss  # not at module level: see the module docstring

    try:
        idx = faiss.read_index(str(path))
    except RuntimeError as e:
        raise DataFormatError(path, None, None, f"faiss cannot read it as an index: {e}") from e
    if idx.ntotal == 0:
        raise DataFormatError(path, None, None, "not a faiss index with stored vectors")
    metric = _FAISS_METRICS.get(int(idx.metric_type))
    if metric is None:
        raise DataFormatError(
            path,
            None,
            None,
            f"faiss metric_type {idx.metric_type} is not supported: "
            "capgap scores inner product (METRIC_INNER_PRODUCT) or L2 (METRIC_L2)",
        )
    try:
        return metric, _faiss_vectors(idx, path)
    except RuntimeError as e:
        raise DataFormatError(path, None, None, f"faiss cannot reconstruct its vectors: {e}") from e


_FLAT_FOURCC = {b"IxFI": ("ip", "IndexFlatIP"), b"IxF2": ("l2", "IndexFlatL2")}  # faiss's index_write.cpp


def _flat_memmap(path: Path) -> tuple[str, FaissVectors] | None:
    """A flat inner-product or L2 index file (``IndexFlatIP`` / ``IndexFlatL2``, as
    ``faiss.write_index`` writes them) read without faiss: its vectors memory-mapped read-only
    from the file, so a 1M x 768 index costs no copy in memory (``faiss.read_index`` holds the
    vectors, ``reconstruct_n`` a second copy). The layout (faiss ``index_write.cpp``): the fourcc,
    d (int32), ntotal (int64), two int64 placeholders, is_trained (1 byte), metric_type (int32),
    then the codes: their count in floats (uint64), n x d float32. Returns None for any other
    file or a header that does not add up (faiss then reads it)."""
    try:
        with open(path, "rb") as f:
            head = f.read(45)
            size = f.seek(0, 2)
    except OSError:
        return None
    if len(head) < 45 or head[:4] not in _FLAT_FOURCC:
        return None
    d = int(np.frombuffer(head, np.int32, 1, 4)[0])
    n = int(np.frombuffer(head, np.int64, 1, 8)[0])
    metric_type = int(np.frombuffer(head, np.int32, 1, 33)[0])
    count = int(np.frombuffer(head, np.uint64, 1, 37)[0])
    metric, name = _FLAT_FOURCC[head[:4]]
    if d <= 0 or n <= 0 or _FAISS_METRICS.get(metric_type) != metric or count != n * d or size != 45 + 4 * count:
        return None
    M = np.memmap(path, dtype=np.float32, mode="r", offset=45, shape=(n, d))
    return metric, FaissVectors(M, None, "flat", float(4 * d), name)


def _ivf_ids(ivf) -> np.ndarray:
    """All ids stored in an IVF index's inverted lists, ``(ntotal,)`` int64 (list by list)."""
    import faiss  # not at module level: see the module docstring

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


def _faiss_vectors(idx, path: Path) -> FaissVectors:
    """The vectors a faiss index searches against, reconstructed, for the types in
    ``SUPPORTED_FAISS`` (checked by exact class: faiss's default ``reconstruct_n`` calls
    ``reconstruct`` inside an OpenMP loop, and a type without ``reconstruct`` then aborts the
    process instead of raising). Raises ``DataFormatError`` for another type, nested ids, or
    ids that are negative or repeated."""
    import faiss  # not at module level: see the module docstring

    idx = faiss.downcast_index(idx)
    name = type(idx).__name__
    n = int(idx.ntotal)
    if isinstance(idx, faiss.IndexIDMap):  # IndexIDMap2 is a subclass
        inner = _faiss_vectors(idx.index, path)
        if inner.ids is not None:
            raise DataFormatError(
                path, None, None, f"a faiss {name} around an index that has its own ids is not supported"
            )
        ids = faiss.vector_to_array(idx.id_map).astype(np.int64, copy=False)
        if len(ids) != inner.matrix.shape[0]:
            raise DataFormatError(path, None, None, f"faiss {name}: {len(ids)} ids for {inner.matrix.shape[0]} vectors")
        return _with_ids(inner, ids, f"{name}({inner.faiss_type})", path)
    if isinstance(idx, faiss.IndexHNSW):
        inner = _faiss_vectors(idx.storage, path)  # the graph only decides which vectors are visited: an ANN effect
        return FaissVectors(
            inner.matrix, inner.ids, f"hnsw-{inner.kind}", inner.bytes_per_vector, f"{name}({inner.faiss_type})"
        )
    if type(idx) in (faiss.IndexFlat, faiss.IndexFlatIP, faiss.IndexFlatL2):
        return FaissVectors(idx.reconstruct_n(0, n), None, "flat", float(idx.sa_code_size()), name)
    if type(idx) is faiss.IndexScalarQuantizer:
        return FaissVectors(idx.reconstruct_n(0, n), None, _sq_kind(idx.sq, path), float(idx.sa_code_size()), name)
    if type(idx) is faiss.IndexPQ:
        if int(idx.search_type) != int(faiss.IndexPQ.ST_PQ):
            log.warning(
                "%s: this IndexPQ searches with search_type %d, not ST_PQ (asymmetric: float query against the "
                "decoded vectors); the diagnosis scores the decoded vectors",
                path,
                int(idx.search_type),
            )
        return FaissVectors(
            idx.reconstruct_n(0, n), None, f"pq-{idx.pq.M}x{idx.pq.nbits}", float(idx.sa_code_size()), name
        )
    if type(idx) in (faiss.IndexIVFFlat, faiss.IndexIVFPQ, faiss.IndexIVFScalarQuantizer):
        return _ivf_vectors(idx, path)
    raise DataFormatError(
        path,
        None,
        None,
        f"faiss {name} is not supported: capgap reconstructs the vectors of {', '.join(SUPPORTED_FAISS)}",
    )


def _ivf_vectors(idx, path: Path) -> FaissVectors:
    """``_faiss_vectors`` of an ``IndexIVFFlat``, ``IndexIVFPQ`` or ``IndexIVFScalarQuantizer``
    (already downcast): the codes decoded and added back to their centroid, rows by id."""
    import faiss  # not at module level: see the module docstring

    name = type(idx).__name__
    n = int(idx.ntotal)
    inner = {
        faiss.IndexIVFFlat: lambda: "flat",
        faiss.IndexIVFPQ: lambda: f"pq-{idx.pq.M}x{idx.pq.nbits}",
        faiss.IndexIVFScalarQuantizer: lambda: _sq_kind(idx.sq, path),
    }[type(idx)]()
    kind = f"ivf{idx.nlist}-{inner}"
    # the inverted lists store code_size bytes a vector (and its 8-byte id); sa_code_size() would add the list number
    nbytes = float(idx.code_size)
    ids = np.sort(_ivf_ids(idx))
    if np.array_equal(ids, np.arange(n)):
        # IndexIVF.reconstruct_n scans the inverted lists for ids i0..i0+ni-1: no direct map needed
        return FaissVectors(idx.reconstruct_n(0, n), None, kind, nbytes, name)
    # ids given with add_with_ids: a hash-table direct map on this in-memory copy (the file is not written)
    _check_ids(ids, name, path)
    if idx.direct_map.type != faiss.DirectMap.Hashtable:
        idx.set_direct_map_type(faiss.DirectMap.Hashtable)
    return FaissVectors(idx.reconstruct_batch(ids), ids, kind, nbytes, name)


def _sq_kind(sq, path: Path) -> str:
    """The ``kind`` name of a faiss scalar quantizer (``_SQ_KINDS``); ``DataFormatError`` for another type."""
    import faiss  # not at module level: see the module docstring

    for attr, kind in _SQ_KINDS.items():
        if hasattr(faiss.ScalarQuantizer, attr) and int(sq.qtype) == int(getattr(faiss.ScalarQuantizer, attr)):
            return kind
    names = [
        a
        for a in dir(faiss.ScalarQuantizer)
        if a.startswith("QT_") and int(getattr(faiss.ScalarQuantizer, a)) == int(sq.qtype)
    ]
    raise DataFormatError(
        path,
        None,
        None,
        f"faiss scalar quantizer type {names[0] if names else int(sq.qtype)} is not "
        f"supported: capgap reads {', '.join(_SQ_KINDS)}",
    )


def _check_ids(ids: np.ndarray, name: str, path: Path) -> None:
    """``DataFormatError`` for a negative or a repeated faiss id."""
    if len(ids) and ids.min() < 0:
        raise DataFormatError(
            path, None, None, f"faiss {name} holds a negative id ({int(ids.min())}): ids must be >= 0"
        )
    u, c = np.unique(ids, return_counts=True)
    if (c > 1).any():
        raise DataFormatError(
            path,
            None,
            None,
            f"faiss {name} holds id {int(u[c > 1][0])} {int(c[c > 1][0])} times: each document needs its own id",
        )


def _with_ids(v: FaissVectors, ids: np.ndarray, faiss_type: str, path: Path) -> FaissVectors:
    """``v`` with faiss ids ``ids`` (one per row of ``v.matrix``), rows sorted by id; ids that
    are exactly 0..n-1 in order are dropped (row numbers)."""
    _check_ids(ids, faiss_type, path)
    if np.array_equal(ids, np.arange(len(ids))):
        return FaissVectors(v.matrix, None, v.kind, v.bytes_per_vector, faiss_type)
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    keep = None if np.array_equal(ids, np.arange(len(ids))) else ids  # a permutation of 0..n-1: row numbers again
    return FaissVectors(np.ascontiguousarray(v.matrix[order]), keep, v.kind, v.bytes_per_vector, faiss_type)
