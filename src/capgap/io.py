"""Atomic file output: write to a temporary file in the same folder, then rename.

A killed run therefore never leaves a half-written file under the final name. Inside
``output_set()`` the renames wait for the end of the block, so the outputs of one command are
all written or none is. A write that fails (a full disk, a quota, a read-only file system)
raises ``OutputWriteError`` naming the output file, with no temporary file left behind. JSON
output (``write_json``, ``write_jsonl``) is strict JSON: ``null`` where a number is not finite.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Iterator, Sequence

import numpy as np

from .arrays import npz_names, read_npz
from .errors import DataFormatError, OutputWriteError

# errno values of a write the storage refused for lack of room: raised by any write inside
# ``atomic_open`` (the caller's own ``fh.write``, a library's figure writer), they name the output
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})

# the (temporary, final) paths of the innermost ``output_set`` block, None outside one
_PENDING: contextvars.ContextVar[list | None] = contextvars.ContextVar("capgap_output_set", default=None)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", **kwargs) -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; rename it onto ``path`` on success.

    Parameters
    ----------
    path : str or Path
        The output file; its folder is created when missing.
    mode, **kwargs
        As for ``open`` (a writing mode).

    Yields
    ------
    file object
        The temporary file, flushed and fsynced when the block ends.

    Raises
    ------
    OutputWriteError
        When the folder, the temporary file, a write, the flush or the rename fails with an
        ``OSError`` (from the caller's own writes in the block only for a full disk, quota or
        file size limit, ``FULL_ERRNOS``): "cannot write <path>: No space left on device".

    Notes
    -----
    On an exception the temporary file is removed and ``path`` is untouched. Inside
    ``output_set()`` the rename waits for the end of that block.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise OutputWriteError(path, e) from e
    pending = _PENDING.get()
    caller = False  # whether the exception came from the caller's block
    try:
        try:
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
            fh = os.fdopen(fd, mode, **kwargs)
        except BaseException:
            os.close(fd)
            raise
        with fh:
            try:
                yield fh
            except BaseException as e:
                caller = not (isinstance(e, OSError) and e.errno in FULL_ERRNOS)
                raise
            fh.flush()
            os.fsync(fh.fileno())
        if pending is None:
            os.replace(tmp, path)
        else:
            pending.append((tmp, path))
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if caller or not isinstance(e, OSError) or isinstance(e, OutputWriteError):
            raise
        raise OutputWriteError(path, e) from e


@contextlib.contextmanager
def output_set() -> Iterator[None]:
    """Make every ``atomic_open`` output written inside the block one set: all or none.

    Each file is written to its temporary sibling as usual; the renames onto the final names
    wait until the block ends without an exception. On an exception (a full disk on the third
    file, a bug) every temporary file is removed, and no output of the set is renamed, so
    outputs of an earlier run stay as they were. Before the renames, each earlier output is
    kept under a second, hidden name (a hard link, else a copy); should a rename itself fail,
    the outputs already renamed are put back from them, or removed where there was none: the
    folder then holds the earlier set as it was, never half of each. A block inside another
    joins the outer set.

    Raises
    ------
    OutputWriteError
        A rename failed, or an earlier output could not be kept (naming its output); the
        block's own exceptions pass through.
    """
    if _PENDING.get() is not None:
        yield
        return
    pending: list[tuple[str, Path]] = []
    token = _PENDING.set(pending)
    kept: dict[Path, str] = {}  # an earlier output -> its hidden second name
    renamed: list[Path] = []
    try:
        yield
        for tmp, path in pending:
            if path not in kept and os.path.lexists(path):
                try:
                    kept[path] = _keep(path, tmp)
                except OSError as e:
                    raise OutputWriteError(path, e) from e
        for tmp, path in pending:
            try:
                os.replace(tmp, path)
            except OSError as e:
                raise OutputWriteError(path, e) from e
            renamed.append(path)
    except BaseException:
        for tmp, _ in pending:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        for path in dict.fromkeys(renamed):
            with contextlib.suppress(OSError):
                if path in kept:
                    os.replace(kept.pop(path), path)
                else:
                    os.unlink(path)
        raise
    finally:
        for old in kept.values():
            with contextlib.suppress(OSError):
                os.unlink(old)
        _PENDING.reset(token)


def _keep(path: Path, tmp: str) -> str:
    """A second name for the earlier output ``path``, beside its temporary file ``tmp``
    (``.name.XXXX.old``): a hard link, or a copy where the file system has none."""
    old = tmp.removesuffix(".tmp") + ".old"
    try:
        os.link(path, old, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError:
        shutil.copy2(path, old, follow_symlinks=False)
    return old


def write_text(path: str | Path, text: str) -> None:
    """Atomically write ``text`` (UTF-8) to ``path``."""
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def to_strict_json(obj):
    """``obj`` with every value strict JSON can hold, recursively through dicts, lists and tuples.

    A non-finite float (Python ``float`` or numpy floating: NaN, +-inf) becomes ``None``
    (JSON ``null``); numpy integers, floats and bools become Python ``int``, ``float``, ``bool``
    (dict keys too); numpy arrays become (nested) lists. Anything else is returned as is.
    """
    if isinstance(obj, (float, np.floating)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.generic):  # numpy int, bool, str
        return obj.item()
    if isinstance(obj, np.ndarray):
        return to_strict_json(obj.tolist())
    if isinstance(obj, dict):
        return {(k.item() if isinstance(k, np.generic) else k): to_strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_strict_json(v) for v in obj]
    return obj


def write_json(path: str | Path, obj) -> None:
    """Atomically write ``obj`` as indented, key-sorted, strict JSON (RFC 8259).

    Values go through ``to_strict_json``: ``null`` stands for a non-finite number (NaN, +-inf;
    the caller documents what it means, e.g. "not computed"), numpy scalars and arrays become
    plain numbers and lists; other non-JSON objects (``Path``, ...) are written as ``str``.
    Dumped with ``allow_nan=False``, so a non-finite number that escapes the conversion raises
    ``ValueError`` instead of writing JSON's invalid ``NaN`` / ``Infinity``.
    """
    write_text(path, json.dumps(to_strict_json(obj), indent=2, sort_keys=True, default=str, allow_nan=False) + "\n")


def write_jsonl(path: str | Path, rows) -> None:
    """Atomically write an iterable of dicts, one strict JSON object per line (UTF-8).

    Like ``write_json``: each row goes through ``to_strict_json`` (``null`` stands for a
    non-finite number; the caller documents what it means) and is dumped with
    ``allow_nan=False``. Raises ``TypeError`` for a value JSON cannot hold.
    """
    with atomic_open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(to_strict_json(row), ensure_ascii=False, allow_nan=False) + "\n")


def save_npy(path: str | Path, array: np.ndarray) -> None:
    """Atomically save ``array`` in ``.npy`` format."""
    with atomic_open(path, "wb") as fh:
        np.save(fh, array, allow_pickle=False)


def save_npz(path: str | Path, **arrays: np.ndarray) -> None:
    """Atomically save ``arrays`` (name -> array; no object arrays) in one uncompressed ``.npz``."""
    with atomic_open(path, "wb") as fh:
        np.savez(fh, **arrays)


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def _load_rows(path: str | Path, query_ids: Sequence[str], key: str, what: str) -> np.ndarray:
    """Rows ``key`` ``(n, dim) float32`` of the ``.npz`` at ``path`` (beside ``query_ids``
    ``(n,) str``), in the order of ``query_ids`` (``load_witnesses``, ``load_query_embeddings``)."""
    names = npz_names(path)  # capgap.arrays: never unpickles; names the file and array of each bad input
    for name in (key, "query_ids"):
        if name not in names:
            raise DataFormatError(path, None, name, f"missing (found {sorted(names)})")
    z = read_npz(path, [key, "query_ids"])
    matrix, ids = np.asarray(z[key], dtype=np.float32), [str(q) for q in z["query_ids"]]
    if matrix.ndim != 2 or len(matrix) != len(ids):
        raise DataFormatError(path, None, key, f"shape {matrix.shape} does not match {len(ids)} query ids")
    at = {}
    for i, q in enumerate(ids):
        if q in at:
            raise DataFormatError(path, None, "query_ids", f"query id {q!r} appears twice (rows {at[q]} and {i})")
        at[q] = i
    missing = [q for q in query_ids if q not in at]
    if missing:
        raise DataFormatError(path, None, "query_ids", f"{len(missing)} queries have no {what}, e.g. {missing[:3]}")
    matrix = matrix[[at[q] for q in query_ids]]
    if not np.isfinite(matrix).all():
        bad = [query_ids[i] for i in np.flatnonzero(~np.isfinite(matrix).all(axis=1))[:3]]
        raise DataFormatError(path, None, key, f"non-finite {what} for queries {bad}")
    return matrix


def load_witnesses(path: str | Path, query_ids: Sequence[str]) -> np.ndarray:
    """The probe's w of every query, in the order of ``query_ids``.

    Parameters
    ----------
    path : str or pathlib.Path
        Rule probe's ``w.npz``: ``w`` ``(n, dim) float32`` and ``query_ids`` ``(n,) str``.
    query_ids : sequence of str
        The queries wanted, in order.

    Returns
    -------
    numpy.ndarray
        ``(len(query_ids), dim) float32``.

    Raises
    ------
    DataFormatError
        Naming the file and field: a key is missing, the shapes disagree, an id is missing or
        repeated, or a w is not finite.
    """
    return _load_rows(path, query_ids, "w", "w")


def load_query_embeddings(path: str | Path, query_ids: Sequence[str]) -> np.ndarray:
    """The pre-trained encoder's query embeddings, in the order of ``query_ids``.

    Parameters
    ----------
    path : str or pathlib.Path
        Rule pretrained's ``queries.npz``: ``q`` ``(n, dim) float32`` and ``query_ids``
        ``(n,) str``.
    query_ids : sequence of str
        The queries wanted, in order.

    Returns
    -------
    numpy.ndarray
        ``(len(query_ids), dim) float32``.

    Raises
    ------
    DataFormatError
        As ``load_witnesses``.
    """
    return _load_rows(path, query_ids, "q", "embedding")
