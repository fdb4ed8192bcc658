"""The line readers every input reader uses: UTF-8 text lines (``iter_lines``), the id check
(``check_id``), the TAB split (``split_tsv``) and JSONL records with their field checks; each
raises ``DataFormatError(path, line, field)`` on bad input (docs/data.md).
"""

from __future__ import annotations

import codecs
import json
import re
import unicodedata
from pathlib import Path
from typing import Iterator

from ..errors import DataFormatError


def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    r"""Yield ``(line number, line)`` of a UTF-8 text file, 1-based, every line (blank ones too).

    Lines end at ``\n`` only; the ``\n`` and one ``\r`` before it (CRLF files) are removed, and
    nothing else: a ``\r``, U+0085, U+2028 or U+2029 inside a line stays in it (``check_id``
    then rejects it in an id) instead of splitting the line. A UTF-8 byte-order mark at the start
    of the file is skipped. Reads the file as a stream, so large files are fine.

    Raises ``DataFormatError(path, line, None, "not valid UTF-8 (byte 0xe9 at column 5); ...")``
    for a line that is not valid UTF-8 (the column counts bytes from 1), and ``OSError`` if the
    file cannot be read.
    """
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            if raw.endswith(b"\n"):
                raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataFormatError(
                    path,
                    lineno,
                    None,
                    f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1}); save the file as UTF-8",
                ) from None


# names of the control characters users meet (unicodedata.name has none for category Cc)
_CONTROL_NAMES = {
    "\x00": "NUL",
    "\t": "TAB",
    "\n": "LF",
    "\x0b": "VT",
    "\x0c": "FF",
    "\r": "CR",
    "\x1b": "ESC",
    "\x7f": "DEL",
    "\x85": "NEL",
}


# Unicode categories Cc (U+0000-001F, U+007F-009F), Zl (U+2028) and Zp (U+2029), as one regex:
# a scan per id at C speed instead of a category lookup per character
_BAD_ID_CHAR = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def check_id(path: str | Path, lineno: int | None, field: str | None, value: str) -> str:
    r"""Return ``value`` unchanged if it is usable as an id; otherwise raise ``DataFormatError``.

    An id may not contain a control character (Unicode category Cc: TAB, LF, CR, NUL, DEL,
    U+0085, ...) or a line/paragraph separator (U+2028, U+2029, categories Zl/Zp): ids are
    written to TSV and TREC files, where these would split a column or a line. The error names
    ``path``, ``lineno``, ``field`` and the character, e.g. ``id 'piano\td9' contains a control
    character U+0009 (TAB)``. Ids are never rewritten (docs/data.md).
    """
    m = _BAD_ID_CHAR.search(value)
    if m:
        ch = m.group()
        name = _CONTROL_NAMES.get(ch) or unicodedata.name(ch, "")
        named = f" ({name})" if name else ""
        raise DataFormatError(
            path,
            lineno,
            field,
            f"id {value!r} contains a control character U+{ord(ch):04X}{named}; ids are written to TSV and TREC files",
        )
    return value


def split_tsv(path: str | Path, lineno: int, line: str) -> list[str]:
    r"""The TAB-separated columns of one line (split on TAB only, nothing stripped), refusing an
    empty column: a line ending in a TAB (``q1\td1\t1\t``) would otherwise give an empty last
    column that a reader misreads as a bad score or a wrong column count. A last column of only
    spaces counts as empty too (the line ends in a TAB and spaces); elsewhere an id may be spaces.

    Raises ``DataFormatError(path, lineno, "column N", ...)`` naming the first empty column,
    e.g. ``column 4 (of 4) is empty: the line ends in a TAB; remove the trailing TAB``."""
    cols = line.split("\t")
    for i, c in enumerate(cols, start=1):
        if c == "" or (i == len(cols) and not c.strip()):
            if i == len(cols) and i > 1:
                why = (
                    "the line ends in a TAB; remove the trailing TAB"
                    if c == ""
                    else "the line ends in a TAB and spaces"
                )
            elif i == 1:
                why = "the line starts with a TAB"
            else:
                why = f"two TABs in a row after column {i - 1}"
            raise DataFormatError(path, lineno, f"column {i}", f"column {i} (of {len(cols)}) is empty: {why}")
    return cols


class _NonFiniteJSON(ValueError):
    """Raised by ``json.loads`` (``parse_constant``) on ``NaN``, ``Infinity`` or ``-Infinity``."""


def _reject_constant(name: str):
    raise _NonFiniteJSON(name)


def _iter_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` per non-blank line of a JSON Lines file (``iter_lines``).

    Raises ``DataFormatError`` naming the line for bad UTF-8, malformed JSON, the non-standard
    constants ``NaN`` / ``Infinity`` / ``-Infinity``, or a value that is not a JSON object."""
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            # parse_float keeps a number's literal text, so a numeric id 1.50 stays "1.50" (a score
            # is parsed from that text later)
            obj = json.loads(line, parse_constant=_reject_constant, parse_float=str)
        except _NonFiniteJSON as e:
            raise DataFormatError(
                path, lineno, None, f"{e} is not valid JSON (non-finite numbers are not allowed)"
            ) from None
        except json.JSONDecodeError as e:
            raise DataFormatError(path, lineno, None, f"malformed JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise DataFormatError(path, lineno, None, "expected a JSON object")
        yield lineno, obj


def _str_field(path: Path, lineno: int, obj: dict, name: str, required: bool = True) -> str:
    if name not in obj or obj[name] is None:
        if required:
            raise DataFormatError(path, lineno, name, "missing")
        return ""
    val = obj[name]
    if isinstance(val, (int, float)) and not isinstance(val, bool):
        val = str(val)  # numeric ids occur in the wild (ints; floats keep their literal text: _iter_jsonl)
    if not isinstance(val, str):
        raise DataFormatError(path, lineno, name, f"expected a string, got {type(val).__name__}")
    return val


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)
