"""Specific exceptions, raised once at the boundary where bad data enters."""

from __future__ import annotations

from pathlib import Path


class CapgapError(Exception):
    """Base class of every error capgap raises on purpose."""


class DataFormatError(CapgapError, ValueError):
    """A data file is malformed.

    Attributes: ``path`` (the file), ``line`` (1-based line number, or None when the
    problem is not tied to one line), ``field`` (the offending field, or None) and
    ``reason``. ``str(err)`` reads ``path:line: field 'x': reason``.
    """

    def __init__(self, path: str | Path, line: int | None, field: str | None, reason: str):
        self.path = str(path)
        self.line = line
        self.field = field
        self.reason = reason
        where = self.path if line is None else f"{self.path}:{line}"
        what = f" field '{field}':" if field else ""
        super().__init__(f"{where}:{what} {reason}")


class OutputWriteError(CapgapError, OSError):
    """An output file could not be written: the disk is full, a quota is exceeded, the file
    system is read-only, ...

    Attributes: ``path`` (the output file, under its final name, never the temporary one it was
    being written to), ``reason`` (the system's words, e.g. "No space left on device") and
    ``errno`` (the underlying ``OSError``'s). ``str(err)`` reads ``cannot write path: reason``.
    An ``OSError``, so code that tolerates a failed write (``except OSError``) still does.
    """

    def __init__(self, path: str | Path, error: OSError):
        self.path = str(path)
        self.reason = error.strerror or str(error)
        super().__init__(error.errno, self.reason)

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.reason}"


class FingerprintMismatch(CapgapError):
    """A frozen index was built by a different encoder/corpus than the one asked for.

    Attributes: ``expected`` and ``found`` (fingerprint dicts) and ``keys`` (the keys
    that differ).
    """

    def __init__(self, path: str | Path, expected: dict, found: dict):
        self.path = str(path)
        self.expected = expected
        self.found = found
        self.keys = sorted(k for k in set(expected) | set(found) if expected.get(k) != found.get(k))
        diffs = "; ".join(f"{k}: expected {expected.get(k)!r}, found {found.get(k)!r}" for k in self.keys)
        super().__init__(f"{self.path}: index fingerprint mismatch ({diffs})")


class ModelIntegrityError(CapgapError):
    """A model's weights file does not have the pinned sha256."""


class ModelNotFound(CapgapError):
    """No local path, bundled package or (online) hub copy of a model could be found."""


class DatasetUnavailable(CapgapError):
    """A dataset could not be obtained (no mirror copy, offline, or download failed).

    ``hint`` tells the user how to provide it.
    """

    def __init__(self, name: str, reason: str, hint: str):
        self.name = name
        self.reason = reason
        self.hint = hint
        super().__init__(f"dataset '{name}' unavailable: {reason}. {hint}")
