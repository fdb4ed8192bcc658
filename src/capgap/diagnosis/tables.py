"""Embeddings kept in tables: a Parquet or Arrow IPC (Feather) file with a vector column and,
optionally, an id column, as Hugging Face datasets and LanceDB store them.

The vector column holds one vector per row: a list, large list or fixed-size list of float16,
float32 or float64. Read with pyarrow (the ``data`` and ``diagnose`` extras), columns selected
before anything is decoded; an Arrow IPC file is memory-mapped, and an uncompressed single-chunk
vector column becomes the matrix without a copy (read-only). Parquet is encoded and compressed:
its file is memory-mapped for reading, the vectors are decoded into memory.

Each bad input is a ``DataFormatError`` naming the file, and the row (0-based, as the matrix's
rows) and the column where there is one: a null vector or a null value in one, vectors of
different lengths, a column that is not vectors of floats, ids that are null, empty, hold a
control character (``capgap.data.check_id``) or repeat.

Public API: ``TABLE_SUFFIXES``, ``read_table_vectors(path, column=None, id_column=None)``,
``table_columns(path)`` and ``id_columns(path, ids)`` (the columns that hold ids, for checking a
default pairing of rows with ids against the table's own).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..data import check_id
from ..errors import DataFormatError

PARQUET_SUFFIXES = (".parquet", ".pq")
ARROW_SUFFIXES = (".arrow", ".feather", ".ipc", ".arrows")
TABLE_SUFFIXES = PARQUET_SUFFIXES + ARROW_SUFFIXES


def _pyarrow():
    """pyarrow, or ``DataFormatError`` saying how to install it (it is in capgap's ``data`` and ``diagnose`` extras)."""
    try:
        import pyarrow  # lazy: only table inputs need it
        import pyarrow.compute  # noqa: F401
        import pyarrow.feather  # noqa: F401
        import pyarrow.ipc  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:  # pragma: no cover - every capgap install path that runs diagnose has it
        return None
    return pyarrow


def _open(path: Path):
    """``(schema, read)`` of a Parquet or Arrow IPC file: ``read(columns)`` returns a ``pyarrow.Table``
    of those columns (memory-mapped where the format allows). Raises ``DataFormatError`` naming
    the file when pyarrow cannot read it."""
    pa = _pyarrow()
    if pa is None:
        raise DataFormatError(
            path, None, None, "reading Parquet/Arrow tables needs pyarrow: pip install 'capgap[diagnose]'"
        )
    fmt = "Parquet" if path.suffix in PARQUET_SUFFIXES else "Arrow IPC (Feather)"
    try:
        if fmt == "Parquet":
            schema = pa.parquet.read_schema(path, memory_map=True)
            return schema, lambda cols: pa.parquet.read_table(path, columns=cols, memory_map=True)
        source = pa.memory_map(str(path), "r")
        try:
            reader = pa.ipc.open_file(source)  # the IPC file format (Feather v2, LanceDB/pyarrow exports)
        except pa.ArrowInvalid:
            source.seek(0)
            reader = pa.ipc.open_stream(source)  # the IPC stream format (Hugging Face datasets' .arrow files)
        return reader.schema, lambda cols: reader.read_all().select(cols)
    except (pa.ArrowException, OSError) as e:
        raise DataFormatError(path, None, None, f"not a readable {fmt} file ({e})") from None


def _is_vector_type(pa, t) -> bool:
    """A list, large list or fixed-size list of floats."""
    return (
        pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
    ) and pa.types.is_floating(t.value_type)


def _columns(schema) -> str:
    return ", ".join(f"{f.name} ({f.type})" for f in schema)


def _pick_vector_column(pa, path: Path, schema, column: str | None, option: str = "--column") -> str:
    """The vector column: ``column`` (which must exist), else the table's only vector column;
    ``option`` is the command-line option naming it, for messages."""
    if column is not None:
        if column not in schema.names:
            raise DataFormatError(path, None, None, f"no column {column!r} ({option}); its columns: {_columns(schema)}")
        return column
    found = [f.name for f in schema if _is_vector_type(pa, f.type)]
    if len(found) == 1:
        return found[0]
    if not found:  # naming a column cannot help: none holds vectors _vectors would take
        raise DataFormatError(
            path,
            None,
            None,
            f"no column holds vectors (a list or fixed-size list of float16, float32 or "
            f"float64 per row); its columns: {_columns(schema)}",
        )
    raise DataFormatError(path, None, None, f"several vector columns {found}: name one with {option}")


def _first_row(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _vectors(pa, path: Path, col, name: str) -> np.ndarray:
    """``(n, dim)`` float16/float32/float64 matrix of the vector column ``col`` (a ChunkedArray):
    one chunk without nulls is viewed without a copy, several are concatenated."""
    where = lambda r: f"row {r} (0-based), column {name!r}"  # noqa: E731
    t = col.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
        r = _first_row(~np.asarray(col.is_null())) if col.null_count < len(col) else 0
        shown = repr(col[r].as_py())[:40] if len(col) else ""
        raise DataFormatError(
            path,
            None,
            None,
            f"{where(r)}: {shown} is {t}, not a vector: expected a list or fixed-size "
            f"list of float16, float32 or float64 in every row",
        )
    if not pa.types.is_floating(t.value_type):
        r = _first_row(~np.asarray(col.is_null())) if 0 < col.null_count < len(col) else 0
        raise DataFormatError(
            path,
            None,
            None,
            f"{where(r)}: the vectors hold {t.value_type} values ({t}); expected float16, float32 or float64",
        )
    if col.null_count:
        raise DataFormatError(path, None, None, f"{where(_first_row(np.asarray(col.is_null())))}: null, not a vector")
    parts, dim, row0 = [], None, 0
    for ch in col.chunks:
        if pa.types.is_fixed_size_list(t):
            lens = np.full(len(ch), t.list_size, dtype=np.int64)
        else:
            lens = np.asarray(pa.compute.list_value_length(ch), dtype=np.int64)
        if dim is None and len(lens):
            dim = int(lens[0])
        bad = lens != dim
        if bad.any():
            r = _first_row(bad)
            raise DataFormatError(
                path,
                None,
                None,
                f"{where(row0 + r)}: {lens[r]} values, row 0 has {dim}: the vectors must all have one length",
            )
        vals = ch.flatten()
        if vals.null_count:
            j = _first_row(np.asarray(vals.is_null()))
            raise DataFormatError(path, None, None, f"{where(row0 + j // dim)}: value {j % dim} of the vector is null")
        parts.append(vals.to_numpy(zero_copy_only=False).reshape(len(ch), dim or 0))
        row0 += len(ch)
    if not parts:
        return np.zeros((0, 0), dtype=t.value_type.to_pandas_dtype())
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _is_id_type(pa, t) -> bool:
    """Strings or integers (a dictionary of them too): the types an id column may have."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_integer(t)
        or (hasattr(pa.types, "is_string_view") and pa.types.is_string_view(t))
    )


def _ids(pa, path: Path, col, name: str, option: str = "--id-column") -> tuple[str, ...]:
    """The ids of the id column ``col``: strings as written, integers in decimal; each checked."""
    t = col.type
    if pa.types.is_dictionary(t):
        col = col.cast(t.value_type)
        t = col.type
    if not _is_id_type(pa, t):
        raise DataFormatError(path, None, None, f"column {name!r} ({option}) is {t}: ids must be strings or integers")
    if col.null_count:
        r = _first_row(np.asarray(col.is_null()))
        raise DataFormatError(path, None, None, f"row {r} (0-based), column {name!r}: null, not an id")
    ids = [str(x) for x in col.to_pylist()]
    seen: dict[str, int] = {}
    for r, x in enumerate(ids):
        if not x.strip():
            raise DataFormatError(path, None, None, f"row {r} (0-based), column {name!r}: empty id")
        try:
            check_id(path, None, None, x)
        except DataFormatError as e:
            raise DataFormatError(path, None, None, f"row {r} (0-based), column {name!r}: {e.reason}") from None
        if x in seen:
            raise DataFormatError(
                path, None, None, f"row {r} (0-based), column {name!r}: duplicate id {x!r} (first at row {seen[x]})"
            )
        seen[x] = r
    return tuple(ids)


def read_table_vectors(
    path: str | Path,
    column: str | None = None,
    id_column: str | None = None,
    column_option: str = "--column",
    id_option: str = "--id-column",
) -> tuple[np.ndarray, tuple[str, ...] | None, str]:
    """The vectors (and ids) of a Parquet or Arrow IPC table.

    Parameters
    ----------
    path : str or pathlib.Path
        ``.parquet``/``.pq`` (Parquet) or ``.arrow``/``.feather``/``.ipc``/``.arrows`` (Arrow IPC,
        file or stream format). Never written.
    column : str, optional
        The vector column (``--column``); default: the table's only column whose type is a list,
        large list or fixed-size list of floats.
    id_column : str, optional
        The id column (``--id-column``): strings, or integers (written in decimal); row i's id
        names matrix row i. Default: no ids (None).
    column_option, id_option : str
        The command-line options that gave ``column`` and ``id_column`` (``--query-column``,
        ``--doc-id-column`` ...), named in messages.

    Returns
    -------
    matrix : numpy.ndarray
        ``(n_rows, dim)``, the column's float16, float32 or float64 values; a read-only view of
        the memory-mapped file for an uncompressed single-chunk Arrow column, else in memory.
    ids : tuple of str or None
        ``n_rows`` ids when ``id_column`` is given.
    column : str
        The vector column read.

    Raises
    ------
    DataFormatError
        Naming the file and, where there is one, the row (0-based) and column: pyarrow cannot
        read the file; no such column, no vector column (``no column holds vectors ...; its
        columns: emb (list<element: int64>)``) or several (name one with ``column_option``); a
        column that is no list of floats (``row 0 (0-based), column 'emb':
        '[0.1, 0.2]' is string, not a vector ...``); a null vector or null value; vectors of
        different lengths (``row 2 (0-based), column 'emb': 3 values, row 0 has 4 ...``); ids
        that are not strings or integers, null, empty, hold a control character, or repeat
        (``row 3 (0-based), column 'id': duplicate id 'd1' (first at row 1)``).
    """
    path = Path(path)
    pa = _pyarrow()
    schema, read = _open(path)
    vec = _pick_vector_column(pa, path, schema, column, column_option)
    if id_column is not None and id_column not in schema.names:
        raise DataFormatError(
            path, None, None, f"no column {id_column!r} ({id_option}); its columns: {_columns(schema)}"
        )
    if id_column == vec:
        raise DataFormatError(path, None, None, f"column {vec!r} cannot hold both the vectors and the ids")
    try:
        table = read([vec] + ([id_column] if id_column else []))
    except (pa.ArrowException, OSError) as e:
        raise DataFormatError(path, None, None, f"cannot read columns of the table ({e})") from None
    matrix = _vectors(pa, path, table.column(vec), vec)
    ids = _ids(pa, path, table.column(id_column), id_column, id_option) if id_column else None
    return matrix, ids, vec


def table_columns(path: str | Path) -> tuple[str, ...]:
    """The column names of a Parquet or Arrow IPC table (its schema only); ``()`` for a file of
    another format (by suffix). Raises ``DataFormatError`` naming a table pyarrow cannot read."""
    path = Path(path)
    if path.suffix not in TABLE_SUFFIXES:
        return ()
    return tuple(_open(path)[0].names)


def _column_chunks(pa, path: Path, name: str, rows: int = 1 << 16):
    """The column ``name`` of a table, chunk by chunk: Parquet decoded ``rows`` rows at a time
    (a text column is never held whole), Arrow IPC as its memory-mapped record batches."""
    if path.suffix in PARQUET_SUFFIXES:
        for batch in pa.parquet.ParquetFile(path, memory_map=True).iter_batches(batch_size=rows, columns=[name]):
            yield batch.column(0)
    else:
        yield from _open(path)[1]([name]).column(name).chunks


def id_columns(path: str | Path, ids) -> dict[str, tuple[str, ...]]:
    """The columns of a table that hold ``ids``: its string or integer columns whose values
    (integers in decimal) include every id of ``ids`` and are valid ids (no null, empty or
    repeated value, no control character), as ``--id-column`` would read them.

    Parameters
    ----------
    path : str or pathlib.Path
        A Parquet or Arrow IPC table; ``{}`` for a file of another format (by suffix).
    ids : iterable of str
        The ids a column must include (e.g. the judged query ids); ``{}`` when empty.

    Returns
    -------
    dict of str to tuple of str
        Column name -> its ids, row by row, in schema order.

    Notes
    -----
    A column is read chunk by chunk and left at the first null or repeated id of ``ids``, so a
    text column costs one pass and never sits in memory whole; only a column that holds every
    id is read whole. Raises ``DataFormatError`` naming a table pyarrow cannot read.
    """
    path = Path(path)
    want = sorted(set(ids))
    if path.suffix not in TABLE_SUFFIXES or not want:
        return {}
    pa = _pyarrow()
    schema, _ = _open(path)
    value_set = pa.array(want, type=pa.string())
    found: dict[str, tuple[str, ...]] = {}
    for field in schema:
        if not _is_id_type(pa, field.type):
            continue
        met: set[str] = set()
        try:
            for chunk in _column_chunks(pa, path, field.name):
                if chunk.null_count:
                    break
                text = chunk.cast(pa.string())  # a dictionary's values; integers in decimal
                hit = text.filter(pa.compute.is_in(text, value_set=value_set)).to_pylist()
                if len(met) + len(hit) != len(met.union(hit)):
                    break  # an id repeats: no id column
                met.update(hit)
            else:
                if len(met) == len(want):
                    found[field.name] = _ids(pa, path, _open(path)[1]([field.name]).column(field.name), field.name)
        except DataFormatError:
            continue  # an empty or repeated id, or a control character: not an id column
        except (pa.ArrowException, OSError) as e:
            raise DataFormatError(path, None, None, f"cannot read column {field.name!r} of the table ({e})") from None
    return found
