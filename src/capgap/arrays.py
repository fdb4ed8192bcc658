"""Reading numpy files (``.npy``, ``.npz``) as people save them, never unpickling.

Every array capgap reads from disk comes through here: ``capgap diagnose``'s embeddings, the
index folder's ``embeddings.npy`` and its build parts, the DAG's ``.npz`` outputs. Files are
recognised by their first bytes, not their suffix (as ``numpy.load`` does): the ``.npy`` magic
``\\x93NUMPY`` or a zip archive (``.npz``). The ``.npy`` header is parsed here (a Python literal,
read with ``ast.literal_eval``) before numpy reads any data, so each way a file goes wrong gets
one ``DataFormatError`` naming the file and what it holds instead of numpy's own text:

- no ``.npy`` magic: a git-LFS pointer (with its oid and size), an HTML page (a failed
  download), a Python pickle, a Parquet or Arrow table, an empty file, or raw bytes
  (``arr.tofile()``: no dtype, no shape) with the bytes it starts with;
- a malformed header;
- dtype ``object`` (pickled Python objects: a list of vectors, a dict saved with
  ``np.savez(path, d)``): refused, never unpickled (``allow_pickle=False`` everywhere);
- fewer data bytes than the header declares (a truncated copy), or more (bytes after the data,
  e.g. two ``.npy`` files joined with ``cat``, named when a second ``\\x93NUMPY`` header follows):
  both counts named.

Big-endian arrays (``>f4``, ``>f8``, ``>f2``, saved on another machine or by another tool) are
read and byte-swapped into a native-order copy in memory: the same values, so every result is
the same as for the native file. Native ``.npy`` files are memory-mapped read-only when asked.

Public API: ``numpy_format(path)``, ``read_npy(path, mmap=True)``, ``npz_names(path)``,
``read_npz(path, names=None)``.
"""

from __future__ import annotations

import ast
import os
import re
import struct
import zipfile
from pathlib import Path
from typing import IO, Sequence

import numpy as np

from .errors import DataFormatError

MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip's first local file header, or an empty zip
_MAX_HEADER = 1 << 16  # numpy's own limit is 10,000 characters; a header beyond this is no .npy


def _what_it_is(head: bytes, size: int) -> str:
    """What a file that is neither ``.npy`` nor zip holds, from its first bytes ``head`` and its
    ``size`` in bytes: the end of an error message that begins ``not a .npy file``."""
    if size == 0:
        return ": the file is empty (0 bytes)"
    if head.startswith(b"version https://git-lfs"):
        text = head.decode("ascii", "replace")
        oid = re.search(r"oid (\S+)", text)
        real = re.search(r"size (\d+)", text)
        about = ", ".join(
            x for x in (oid and "oid " + oid.group(1)[:19] + "...", real and f"{real.group(1)} bytes kept in LFS") if x
        )
        return (
            f": it is a git-LFS pointer{f' ({about})' if about else ''}, not the array: "
            "fetch the file with 'git lfs pull'"
        )
    low = head.lstrip().lower()
    if low.startswith((b"<!doctype html", b"<html", b"<?xml", b"<head")):
        return (
            f": it is an HTML/XML page (starts with {head[:16]!r}), e.g. a failed download's error page: "
            "download the file again"
        )
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return (
            f": it is a Python pickle (starts with {head[:8]!r}), which capgap never loads: "
            "save the array with numpy.save"
        )
    if head.startswith(b"PAR1"):
        return ": it is a Parquet file: name it .parquet"
    if head.startswith(b"ARROW1"):
        return ": it is an Arrow IPC (Feather) file: name it .arrow or .feather"
    text = _as_text(head, size)
    if text is not None:
        kind = "JSON text" if text.lstrip()[:1] in ("{", "[") else "text"
        return (
            f": it is {kind} ({size} bytes, starts with {text[:40]!r}), not an array, e.g. a server's error reply "
            "saved under the array's name: fetch or save the array again"
        )
    if size % 2:
        return (
            f" (no \\x93NUMPY magic; it starts with {head[:16]!r}): {size} bytes, not a multiple of 2, 4 or 8, so "
            "not raw float16/float32/float64 values either; save the array with numpy.save"
        )
    return (
        f" (no \\x93NUMPY magic; it starts with {head[:16]!r}): {size} bytes of raw data, as arr.tofile() writes, "
        "with no dtype or shape; save the array with numpy.save"
    )


def _as_text(head: bytes, size: int) -> str | None:
    """``head`` (a file's first bytes) decoded as UTF-8 text, or None when it is no text: it does
    not decode (a character cut at the end of ``head`` aside, when the file goes on), or holds a
    control character other than tab, newline or carriage return."""
    cut = len(head) < size
    for drop in (0, 1, 2, 3) if cut else (0,):
        try:
            text = head[: len(head) - drop].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return text if text and all(c.isprintable() or c in "\t\n\r" for c in text) else None
    return None


def numpy_format(path: str | Path) -> str:
    """Which numpy format ``path`` holds, by its first bytes: ``"npy"`` or ``"npz"`` (a zip).

    Raises
    ------
    DataFormatError
        Naming the file and what it holds instead (``_what_it_is``), e.g. ``docs.npy: not a .npy
        file (no \\x93NUMPY magic; it starts with b'\\xc8...'): 192 bytes of raw data, as
        arr.tofile() writes, ...`` or ``docs.npy: not a .npy file: it is a git-LFS pointer (oid
        sha256:..., 192 bytes kept in LFS), not the array: ...``.
    OSError
        The file cannot be read.
    """
    path = Path(path)
    with open(path, "rb") as fh:
        head = fh.read(256)
    if head.startswith(MAGIC):
        return "npy"
    if head.startswith(_ZIP_MAGIC):
        return "npz"
    kind = path.suffix if path.suffix in (".npy", ".npz") else ".npy"
    raise DataFormatError(path, None, None, f"not a {kind} file{_what_it_is(head, os.path.getsize(path))}")


def _read_header(fh: IO[bytes], path: Path, where: str = "") -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """Parse the ``.npy`` header at the start of ``fh`` (magic included).

    Returns ``(shape, fortran_order, dtype, data_offset)``. Raises ``DataFormatError`` naming
    ``path`` (and ``where``, e.g. ``"array 'a': "``) for a missing magic, an unknown version or
    a malformed header. Never evaluates anything but Python literals."""
    pre = fh.read(len(MAGIC) + 2)
    if len(pre) < len(MAGIC) + 2 or not pre.startswith(MAGIC):
        raise DataFormatError(path, None, None, f"{where}not a .npy (no \\x93NUMPY magic)")
    major, minor = pre[-2], pre[-1]
    if major not in (1, 2, 3):
        raise DataFormatError(
            path, None, None, f"{where}.npy format version {major}.{minor} is unknown (1.0, 2.0 or 3.0)"
        )
    size_fmt = "<H" if major == 1 else "<I"
    raw_len = fh.read(struct.calcsize(size_fmt))
    if len(raw_len) < struct.calcsize(size_fmt):
        raise DataFormatError(path, None, None, f"{where}truncated .npy header ({len(pre) + len(raw_len)} bytes)")
    (hlen,) = struct.unpack(size_fmt, raw_len)
    if hlen > _MAX_HEADER:
        raise DataFormatError(path, None, None, f"{where}malformed .npy header: it declares {hlen} bytes")
    raw = fh.read(hlen)
    offset = len(pre) + len(raw_len) + hlen
    if len(raw) < hlen:
        raise DataFormatError(
            path, None, None, f"{where}truncated .npy header: it declares {hlen} bytes, {len(raw)} are there"
        )
    try:
        d = ast.literal_eval(raw.decode("utf-8" if major == 3 else "latin1"))
    except (SyntaxError, ValueError, UnicodeDecodeError, MemoryError, RecursionError):
        raise DataFormatError(path, None, None, f"{where}malformed .npy header: {raw[:60]!r}") from None
    if not isinstance(d, dict) or set(d) != {"descr", "fortran_order", "shape"}:
        raise DataFormatError(
            path,
            None,
            None,
            f"{where}malformed .npy header: expected the keys descr, fortran_order and shape, got {raw[:60]!r}",
        )
    shape = d["shape"]
    if not (isinstance(shape, tuple) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise DataFormatError(path, None, None, f"{where}malformed .npy header: shape {shape!r}")
    if not isinstance(d["fortran_order"], bool):
        raise DataFormatError(path, None, None, f"{where}malformed .npy header: fortran_order {d['fortran_order']!r}")
    try:
        dtype = np.lib.format.descr_to_dtype(d["descr"])
    except (TypeError, ValueError) as e:
        raise DataFormatError(path, None, None, f"{where}malformed .npy header: dtype {d['descr']!r} ({e})") from None
    return shape, d["fortran_order"], dtype, offset


def _check_data(
    path: Path, where: str, shape: tuple, dtype: np.dtype, offset: int, data_bytes: int, after: bytes = b""
) -> None:
    """Refuse an object dtype (pickled Python objects), or fewer or more data bytes than the
    header declares; ``after``: the first bytes after the declared data, to tell a second
    ``.npy`` header there."""
    if dtype.hasobject:
        held = (
            "a pickled Python object (dtype object, shape ()), e.g. a dict or list saved whole "
            "(np.savez(path, d) instead of np.savez(path, **d))"
            if shape == ()
            else f"pickled Python objects (dtype object, shape {shape}), e.g. a list of vectors saved without stacking"
        )
        raise DataFormatError(
            path,
            None,
            None,
            f"{where}holds {held}, not a (n, dim) float16/float32/float64 array; "
            "capgap never loads pickled data: stack the vectors (numpy.vstack) and "
            "save the array itself",
        )
    need = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if data_bytes < need:
        raise DataFormatError(
            path,
            None,
            None,
            f"{where}truncated: the header declares shape {shape} {dtype.name} "
            f"({need} bytes of data), the file holds {data_bytes} bytes after its "
            f"{offset}-byte header",
        )
    if data_bytes > need:
        joined = (
            "; a second .npy header (\\x93NUMPY) follows the data: two .npy files joined into one (e.g. with "
            "cat)? save the rows as one array (numpy.concatenate, numpy.save)"
            if after.startswith(MAGIC)
            else ": save the array again with numpy.save"
        )
        raise DataFormatError(
            path,
            None,
            None,
            f"{where}{data_bytes - need} bytes after the data: the header declares "
            f"shape {shape} {dtype.name} ({need} bytes of data), the file holds "
            f"{data_bytes} bytes after its {offset}-byte header{joined}",
        )


def _native(a: np.ndarray) -> np.ndarray:
    """``a`` itself when its byte order is native, else a native-order copy of the same values."""
    if a.dtype.isnative or a.dtype.fields is not None:
        return a
    return np.array(a, dtype=a.dtype.newbyteorder("="))  # a plain array, not a memmap subclass


def read_npy(path: str | Path, mmap: bool = True) -> np.ndarray:
    """The array of an ``.npy`` file, checked before numpy reads it, never unpickled.

    Parameters
    ----------
    path : str or pathlib.Path
        An ``.npy`` file (format 1.0, 2.0 or 3.0); a zip (``.npz``) or anything else is refused.
    mmap : bool
        Memory-map the data read-only (``numpy.memmap``; the file is never written) instead of
        reading it into memory.

    Returns
    -------
    numpy.ndarray
        The array as stored (any shape, any non-object dtype), in native byte order: a
        big-endian file (``>f4``, ``>f8``, ``>f2``) is byte-swapped into an in-memory copy of
        the same values (not memory-mapped).

    Raises
    ------
    DataFormatError
        Naming the file: not an ``.npy`` (what it is instead: ``numpy_format``), a malformed
        header, dtype ``object`` (``docs.npy: holds pickled Python objects (dtype object, shape
        (3,)) ...``), or fewer data bytes than the header declares (``docs.npy: truncated: the
        header declares shape (6, 8) float32 (192 bytes of data), the file holds 100 bytes after
        its 128-byte header``), or more (``docs.npy: 256 bytes after the data: the header declares
        ...``, saying so when a second ``.npy`` header follows: files joined with ``cat``).
    """
    path = Path(path)
    if numpy_format(path) != "npy":
        raise DataFormatError(path, None, None, "is an .npz (zip) archive, not a single .npy array")
    with open(path, "rb") as fh:
        shape, fortran, dtype, offset = _read_header(fh, path)
        fh.seek(offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        after = fh.read(len(MAGIC))
    _check_data(path, "", shape, dtype, offset, os.path.getsize(path) - offset, after)
    try:
        a = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:  # checked above; a file changed meanwhile, or an unreadable one
        raise DataFormatError(path, None, None, f"cannot be read as .npy ({type(e).__name__})") from None
    return _native(a)


def _open_zip(path: Path) -> zipfile.ZipFile:
    """The zip archive of an ``.npz``; ``DataFormatError`` naming the file when it is no zip or a damaged one."""
    if numpy_format(path) != "npz":
        raise DataFormatError(path, None, None, "is a single .npy array, not an .npz (zip) archive")
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise DataFormatError(
            path, None, None, f"not a readable .npz: the zip archive is damaged or truncated ({e})"
        ) from None


def npz_names(path: str | Path) -> list[str]:
    """The names of the arrays in an ``.npz``, in archive order (``"arr_0"`` for
    ``np.savez(path, a)``). Raises ``DataFormatError`` naming the file when it is not a zip
    archive (``numpy_format``) or a damaged one."""
    path = Path(path)
    with _open_zip(path) as z:
        return [n[:-4] for n in z.namelist() if n.endswith(".npy")]


def read_npz(path: str | Path, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Arrays of an ``.npz`` (plain or compressed), read into memory, checked as ``read_npy``
    checks an ``.npy`` and never unpickled.

    Parameters
    ----------
    path : str or pathlib.Path
        The archive.
    names : sequence of str, optional
        The arrays to read (default: all); a name the archive lacks is left out of the result,
        so the caller names what is missing.

    Returns
    -------
    dict of str to numpy.ndarray
        Name -> array as stored, in native byte order (big-endian arrays byte-swapped).

    Raises
    ------
    DataFormatError
        Naming the file and the array (``docs.npz: array 'arr_0' holds a pickled Python
        object (dtype object, shape ()) ...``): not a zip, a damaged archive, a malformed
        ``.npy`` header, dtype ``object``, or an array with fewer or more data bytes than its
        header declares.
    """
    path = Path(path)
    out: dict[str, np.ndarray] = {}
    with _open_zip(path) as z:
        for member in z.infolist():
            name = member.filename[:-4] if member.filename.endswith(".npy") else None
            if name is None or (names is not None and name not in names):
                continue
            where = f"array {name!r} "
            try:
                with z.open(member) as fh:
                    shape, fortran, dtype, offset = _read_header(fh, path, where)
                _check_data(path, where, shape, dtype, offset, member.file_size - offset)
                with z.open(member) as fh:
                    a = np.lib.format.read_array(fh, allow_pickle=False)
            except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
                if isinstance(e, DataFormatError):
                    raise
                why = f": {e}" if isinstance(e, zipfile.BadZipFile) else ""  # zipfile's reason; never numpy's text
                raise DataFormatError(
                    path,
                    None,
                    None,
                    f"{where}cannot be read: the zip archive is damaged or truncated ({type(e).__name__}{why})",
                ) from None
            out[name] = _native(a)
    return out
