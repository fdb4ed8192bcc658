"""Reading a user's files for ``capgap diagnose``, each checked where it enters.

- embedding matrices: ``load_embeddings`` (``.npy`` memory-mapped read-only and ``.npz``, both
  through ``capgap.arrays``: big-endian arrays byte-swapped, pickles never loaded; a Parquet or
  Arrow IPC table through ``capgap.diagnosis.tables``; a faiss index through
  ``capgap.diagnosis.faiss_io``) -> ``Embeddings`` (matrix, faiss metric, kind, bytes per
  vector, faiss ids, a table's row ids); ``load_matrix`` (the matrix alone); ``validate_matrix``
  (an in-memory matrix: 2-d, floating point, finite, checked blockwise); ``embedding_format``
  (which format a file is, and ``OPTION_FORMATS``, which formats take a key, column or id column);
- ids: ``load_ids`` (one per line), ``row_ids`` (an ids file or a table's id column),
  ``document_ids`` (faiss ids to row ids) and ``match_uncompressed`` (the uncompressed vectors
  of an index's rows, by id where they have ids);
- judgements and runs: ``load_qrels_file`` (BEIR, TREC or two columns), ``load_run_file`` (TREC or
  ``qid docid [score]``);
- ``resolve_metric``: the metric to diagnose with, given ``--metric`` and a faiss index's own.

Bad input raises ``DataFormatError`` naming the file (and line and field where there is one).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..arrays import npz_names, numpy_format, read_npy, read_npz
from ..data import check_id, iter_lines
from ..errors import DataFormatError

METRICS = ("ip", "cosine", "l2")
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
    row_ids : tuple of str or None
        ``n`` ids read from a table's id column (``--id-column``), row i's id first; None for
        every other input.
    """

    matrix: np.ndarray
    metric: str | None
    path: Path
    kind: str | None = None
    bytes_per_vector: float | None = None
    faiss_type: str | None = None
    ids: np.ndarray | None = None
    row_ids: tuple[str, ...] | None = None

    def info(self) -> dict:
        """``{"path", "kind", "faiss_type", "bytes_per_vector", "n", "dim"}`` for a summary."""
        return {
            **_array_info(self.matrix),
            "path": str(self.path),
            "kind": self.kind,
            "faiss_type": self.faiss_type,
            "bytes_per_vector": self.bytes_per_vector,
        }


def _block_rows(dim: int) -> int:
    """Rows per block for a pass over a (memory-mapped) matrix: about 4 M values."""
    return max(1, (1 << 22) // max(1, dim))


FLOAT_DTYPES = (np.float16, np.float32, np.float64)  # float64 (numpy's default) is cast to float32 blockwise


def _matrix_problem(a: np.ndarray, dtypes: tuple = FLOAT_DTYPES) -> str | None:
    """Why ``a`` is not a usable embedding matrix, or None: not 2-d, no rows or columns, a dtype
    outside ``dtypes``, or a value that is not finite (NaN, +-inf; a finite float64 beyond
    float32's range is kept: ``diagnose`` scores it times a power of two,
    ``prepare._score_scales``): the first such row is named (0-based). Reads ``a`` in
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
        bad = ~np.isfinite(block)  # a finite float64 beyond float32's range is scaled by a power of two when scored
        if bad.any():
            r, c = np.argwhere(bad)[0]
            return f"row {b0 + r} (0-based) is not finite: column {c} holds {float(block[r, c])}"
    return None


def validate_matrix(a: np.ndarray, name: str) -> None:
    """Check an in-memory embedding matrix for ``diagnose``: 2-d with at least one row and
    column, a floating dtype (float16, float32 or float64; scored as float32), and
    every value finite, checked blockwise (a memory map is fine).

    Raises ``ValueError`` ``"<name>: <reason>"``, naming the first non-finite row (0-based),
    e.g. ``"queries: row 1 (0-based) is not finite: column 0 holds nan"``."""
    problem = _matrix_problem(np.asarray(a))
    if problem:
        raise ValueError(f"{name}: {problem}")


_SUFFIX_ERROR = (
    "expected .npy, .npz, a Parquet or Arrow table (.parquet, .arrow, .feather) or a faiss index (.faiss/.index)"
)
FORMAT_NAMES = {"npy": "a .npy file", "npz": "an .npz file", "table": "a Parquet/Arrow table", "faiss": "a faiss index"}
# what the options of load_embeddings apply to: key -> .npz files, column and id_column -> tables
OPTION_FORMATS = {
    "key": ("npz", ".npz files"),
    "column": ("table", "Parquet/Arrow tables"),
    "id_column": ("table", "Parquet/Arrow tables"),
}


def embedding_format(path: str | Path) -> str:
    """The format of an embedding file, as ``load_embeddings`` reads it: ``"npy"`` or ``"npz"``
    (a ``.npy``/``.npz`` file, told apart by its first bytes: ``capgap.arrays.numpy_format``),
    ``"table"`` (Parquet or Arrow IPC) or ``"faiss"``; ``FORMAT_NAMES`` says each in words.

    Raises ``DataFormatError`` naming the file for another suffix, or a ``.npy``/``.npz`` that
    is neither (``numpy_format``)."""
    from .tables import TABLE_SUFFIXES  # lazy: as in load_embeddings

    path = Path(path)
    if path.suffix in (".npy", ".npz"):
        return numpy_format(path)
    if path.suffix in TABLE_SUFFIXES:
        return "table"
    if path.suffix in (".faiss", ".index"):
        return "faiss"
    raise DataFormatError(path, None, None, _SUFFIX_ERROR)


def load_embeddings(
    path: str | Path,
    key: str | None = None,
    column: str | None = None,
    id_column: str | None = None,
    key_option: str = "--key",
    column_option: str = "--column",
    id_column_option: str = "--id-column",
) -> Embeddings:
    """Read an embedding matrix, or the vectors a faiss index searches against.

    Parameters
    ----------
    path : str or pathlib.Path
        ``.npy`` (memory-mapped read-only; float32, float16 or float64, either byte order),
        ``.npz`` (array ``key`` when the file holds it, else its only array), a Parquet
        (``.parquet``/``.pq``) or Arrow IPC/Feather (``.arrow``/``.feather``/``.ipc``/``.arrows``)
        table with a vector column (``capgap.diagnosis.tables``), or a faiss index file
        (``.faiss``/``.index``) of a type in ``SUPPORTED_FAISS``, metric inner product
        (``"ip"``) or L2 (``"l2"``). ``.npy`` and ``.npz`` are told apart by their first bytes,
        as ``numpy.load`` does. The file is never written.
    key : str, optional
        The array to take from an ``.npz`` (needed when it holds several; one it does not hold
        is an error, also in a file holding a single array). Given for another format, an error.
    column : str, optional
        A table's vector column (default: its only list-of-floats column). Given for another
        format, an error.
    id_column : str, optional
        A table's id column: its ids become ``Embeddings.row_ids``. Given for another format,
        an error.
    key_option, column_option, id_column_option : str
        The command-line options that gave ``key`` (``--key``, ``--doc-key``, ``--query-key``,
        ``--uncompressed-key``), ``column`` and ``id_column`` (``--query-column``,
        ``--doc-id-column`` ...), for messages; where none was given, the options to name when
        one is needed (``"--query-column (or --column for every table)"``).

    Returns
    -------
    Embeddings
        ``matrix`` ``(n, dim)``: arrays as stored (float16 and float64 are returned as is;
        callers cast blockwise); for a faiss index its vectors reconstructed as float32
        (``reconstruct_n``: decoded SQ/PQ codes; IVF codes decoded and added to their coarse
        centroid), rows in ascending faiss-id order. Also the metric, ``kind``,
        ``bytes_per_vector``, ``faiss_type``, ``ids`` and a table's ``row_ids`` (see
        ``Embeddings``). A big-endian array (``>f4``, ``>f8``, ``>f2``) is returned as a
        native-order copy of the same values (``capgap.arrays.read_npy``).

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
    ValueError
        ``key``, ``column`` or ``id_column`` given for a file that takes none (``--column applies
        to Parquet/Arrow tables; docs.npy is a .npy file``: ``OPTION_FORMATS``).
    DataFormatError
        Naming the file: another suffix; a ``.npy``/``.npz`` that is neither (raw ``tofile()``
        bytes, a git-LFS pointer, an HTML page: ``capgap.arrays.numpy_format``), holds pickled
        objects (dtype object; never unpickled) or is shorter or longer than its header
        declares; an ``.npz`` holding several arrays and no ``key``, or no array named ``key``
        (``emb.npz: holds arrays ['emb'], not 'other': name one with --key``); a table problem,
        naming the row and column (``capgap.diagnosis.tables.read_table_vectors``); a file faiss
        cannot read; a faiss index without vectors, of an unsupported type or scalar-quantizer
        type, with another metric, or with negative or repeated ids; a shape that is not 2-d
        with at least one row and column; a dtype other than float32/float16/float64; or a
        non-finite value, checked block by block (the reason names the first such row, 0-based:
        ``docs.npy: row 3 (0-based) is not finite: column 1 holds nan``).
    """
    # the report env reads qrels here without pyarrow
    from .tables import TABLE_SUFFIXES, read_table_vectors  # lazy: pyarrow is imported only for a table

    path = Path(path)
    fmt = embedding_format(path)
    for value, option, name in (
        (key, key_option, "key"),
        (column, column_option, "column"),
        (id_column, id_column_option, "id_column"),
    ):
        wanted, what = OPTION_FORMATS[name]
        if value is not None and fmt != wanted:  # an option the file cannot take is a mistake, never ignored
            raise ValueError(f"{option} applies to {what}; {path} is {FORMAT_NAMES[fmt]}")
    if path.suffix in (".npy", ".npz"):
        a = read_npy(path) if fmt == "npy" else _npz_array(path, key, key_option)
    elif path.suffix in TABLE_SUFFIXES:
        a, ids, col = read_table_vectors(path, column, id_column, column_option, id_column_option)
        problem = _matrix_problem(a)
        if problem:
            raise DataFormatError(path, None, None, f"column {col!r}: {problem}")
        return Embeddings(a, None, path, a.dtype.name, float(a.dtype.itemsize * a.shape[1]), row_ids=ids)
    else:
        from .faiss_io import read_faiss_vectors  # lazy: faiss (the report rule reads qrels here; its env has no faiss)

        metric, fv = read_faiss_vectors(path)
        _check_matrix(fv.matrix, path)
        return Embeddings(fv.matrix, metric, path, fv.kind, fv.bytes_per_vector, fv.faiss_type, fv.ids)
    _check_matrix(a, path)
    return Embeddings(a, None, path, a.dtype.name, float(a.dtype.itemsize * a.shape[1]))


def _npz_array(path: Path, key: str | None, option: str = "--key") -> np.ndarray:
    """Array ``key`` of an ``.npz``, or without ``key`` its only array (``capgap.arrays.read_npz``).

    Raises ``DataFormatError`` naming the file and the arrays it holds when it holds none, when
    ``key`` names none of them (even in a file holding one: a key that names nothing is a
    mistake, never ignored), or when it holds several and no ``key`` is given; ``option`` (the
    command-line option that gave ``key``) is named in the message."""
    names = npz_names(path)
    if not names:
        raise DataFormatError(path, None, None, "holds no arrays")
    if (key is not None and key not in names) or (key is None and len(names) != 1):
        got = "" if key is None else f", not {key!r}"
        raise DataFormatError(path, None, None, f"holds arrays {names}{got}: name one with {option}")
    name = key if key is not None else names[0]
    return read_npz(path, [name])[name]


def _check_matrix(a: np.ndarray, path: Path) -> None:
    """``DataFormatError`` naming ``path`` when ``a`` is no usable embedding matrix (``_matrix_problem``)."""
    problem = _matrix_problem(a)
    if problem:
        raise DataFormatError(path, None, None, problem)


def load_matrix(path: str | Path, key: str | None = None, column: str | None = None) -> np.ndarray:
    """The ``(n, dim)`` float16/float32/float64 matrix of ``load_embeddings(path, key, column)`` (same
    formats, checks and ``DataFormatError``s), without the faiss metric."""
    return load_embeddings(path, key, column).matrix


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
    raise ValueError(
        f"{path} is a faiss index that searches by {_METRIC_NAMES[index_metric]}; --metric {requested} "
        "would diagnose a search the index does not run: omit --metric (capgap then uses the index's own "
        f"metric, {index_metric})"
    )


def load_ids(path: str | Path) -> list[str]:
    """One id per line, line i naming array row i-1 (``capgap.data.iter_lines``: UTF-8, a
    leading BOM skipped, lines end at LF or CRLF only).

    Leading and trailing whitespace of a line is removed (``str.strip``: the format cannot
    tell it from the id), nothing else. Raises ``DataFormatError`` naming the line for bad
    UTF-8, a blank line before the last id (ids must match array rows one to one; blank lines at
    the end are ignored), an id with a control
    character (``capgap.data.check_id``) or a duplicate id."""
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


def row_ids(
    emb: Embeddings, ids_file: str | Path | None, option: str, id_option: str = "--id-column"
) -> list[str] | None:
    """The ids of ``emb``'s rows: from the ids file ``ids_file`` (``load_ids``) or from the
    table's id column (``emb.row_ids``); None when neither gives them.

    Parameters
    ----------
    emb : Embeddings
        From ``load_embeddings``.
    ids_file : str or pathlib.Path or None
        ``--doc-ids`` / ``--query-ids``.
    option : str
        That option's name, for the message.
    id_option : str
        The option that named the table's id column (``--id-column``, ``--doc-id-column``,
        ``--query-id-column``), for the message.

    Returns
    -------
    list of str or None
        One id per line of ``ids_file`` or per table row.

    Raises
    ------
    ValueError
        Both give ids (``docs.parquet: ids come from both --doc-ids and its id column (--id-column):
        give one``); ``DataFormatError`` from ``load_ids``.
    """
    if ids_file is not None and emb.row_ids is not None:
        raise ValueError(f"{emb.path}: ids come from both {option} and its id column ({id_option}): give one")
    if ids_file is not None:
        return load_ids(ids_file)
    return list(emb.row_ids) if emb.row_ids is not None else None


def document_ids(
    docs: Embeddings, listed: Sequence[str] | None = None, listed_path: str | Path = "--doc-ids"
) -> list[str]:
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
        raise ValueError(
            f"{docs.path} holds faiss ids up to {top}, taken as line numbers (0-based) of {listed_path}, "
            f"which names only {len(listed)} documents"
        )
    return [listed[int(i)] for i in docs.ids]


def match_uncompressed(
    docs: Embeddings, unc: Embeddings, listed: Sequence[str] | None = None, listed_path: str | Path = "--doc-ids"
) -> np.ndarray:
    """The uncompressed vectors of the documents in ``docs``, row for row.

    When ``unc`` has ids, its rows are matched to the documents by id: a table's id column
    (``unc.row_ids``: document ids), or a faiss index's ids that are not 0..n-1 (``unc.ids``:
    read as ``document_ids`` reads them, row numbers of ``listed``, else decimal ids), against
    the documents' ids (``document_ids(docs, listed)``); the two must name the same documents.
    Without ids, row i of ``unc`` is the document of row i of ``docs`` (the same row order);
    when ``docs`` has faiss ids (``docs.ids``) they are row numbers of ``unc``, as in
    ``document_ids``.

    Parameters
    ----------
    docs : Embeddings
        The index diagnosed (e.g. a compressed faiss index), ``(n_docs, dim)``.
    unc : Embeddings
        The same documents at full precision (``--uncompressed-embeddings``).
    listed : sequence of str, optional
        The documents' ids file's lines or table ids (``row_ids``), as for ``document_ids``.
    listed_path : str or pathlib.Path
        Where ``listed`` came from, for messages.

    Returns
    -------
    numpy.ndarray
        ``(n_docs, dim)``: ``unc.matrix`` itself, or its rows in the documents' order (a copy).

    Raises
    ------
    ValueError
        Naming both files: different dimensions, row counts, or documents (ids of one side the
        other lacks); a faiss id beyond the uncompressed rows or ``listed``; or two faiss indexes
        searching by different metrics.
    """
    both = f"{docs.path} and {unc.path}"
    if docs.metric and unc.metric and docs.metric != unc.metric:
        raise ValueError(
            f"{both} are faiss indexes searching by different metrics ({_METRIC_NAMES[docs.metric]}, "
            f"{_METRIC_NAMES[unc.metric]}): the uncompressed vectors must be scored like the index's own"
        )
    (n, dim), (nu, dimu) = docs.matrix.shape, unc.matrix.shape
    if dim != dimu:
        raise ValueError(
            f"dimension mismatch: {docs.path} has dim {dim}, {unc.path} (the uncompressed documents) has "
            f"dim {dimu}; the reconstructed vectors of a flat, SQ or PQ index keep the input dimension"
        )
    U = unc.matrix
    if unc.row_ids is not None or unc.ids is not None:
        uids = list(unc.row_ids) if unc.row_ids is not None else document_ids(unc, listed, listed_path)
        dids = document_ids(docs, listed, listed_path)
        at, known = {d: r for r, d in enumerate(uids)}, set(dids)
        foreign = [d for d in uids if d not in known]
        missing = [d for d in dids if d not in at]
        if foreign or missing:
            how = "its id column" if unc.row_ids is not None else "its faiss ids"
            parts = (
                [f"{len(foreign)} of its {nu} ids name no document of {docs.path} (e.g. {foreign[:3]})"]
                if foreign
                else []
            ) + ([f"{len(missing)} of the {n} documents have no row in it (e.g. {missing[:3]})"] if missing else [])
            raise ValueError(
                f"{unc.path} (the uncompressed documents) is matched to {docs.path} by document id "
                f"({how}), but {' and '.join(parts)}: they must be the same documents"
            )
        order = np.array([at[d] for d in dids], dtype=np.int64)
        return U if np.array_equal(order, np.arange(nu)) else U[order]
    if docs.ids is not None:
        top = int(docs.ids[-1])
        if top >= nu:
            raise ValueError(
                f"{docs.path} holds faiss ids up to {top}, taken as row numbers of {unc.path}, which has only {nu} rows"
            )
        U = U[docs.ids]
    if U.shape[0] != n:
        raise ValueError(
            f"{docs.path} holds {n} documents, {unc.path} (the uncompressed documents) {U.shape[0]}: "
            "they must be the same documents in the same row order"
        )
    return U


def _array_info(M: np.ndarray) -> dict:
    """``Embeddings.info()`` of an in-memory matrix ``M`` ``(n, dim)``: its dtype as ``kind``,
    ``itemsize * dim`` bytes per vector."""
    return {
        "path": None,
        "kind": M.dtype.name,
        "faiss_type": None,
        "bytes_per_vector": float(M.dtype.itemsize * M.shape[1]),
        "n": int(M.shape[0]),
        "dim": int(M.shape[1]),
    }
