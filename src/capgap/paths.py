"""Paths are data: the one path the tools capgap drives cannot take, refused at start.

Every path capgap handles (checkout, data folder, results folder, data mirror, a config's
``path:``, ``capgap diagnose``'s files) is passed as an argument or quoted, so spaces, quotes and
non-ASCII letters work. One path is not: Snakemake runs each ``script:`` job through bash as
``<python> <script>`` with the interpreter's path unquoted (``"{py_exec} {fname:q}"`` in
snakemake/script/__init__.py, ``py_exec = sys.executable``), and pip's launchers name the
interpreter inside a ``/bin/sh`` line. A Python whose path holds a space, a quote or another shell
character would let the DAG parse and then fail every job with exit status 127. So the Snakefile
(``check_interpreter``) and the Makefile (``python -m capgap.paths``, before the virtualenv is
made) refuse such a path at start, naming it and the characters.

The data mirror (``$CAPGAP_DATA_MIRROR``) may hold any character, but a value that names no folder
(a literal ``~`` or quotes, a stray space, a typo) is refused at start too (``check_mirror``),
instead of every dataset being reported "not in the data mirror" after the run.

The shard jobs' file-name parts (``shard_labels``: ``1-of-n`` ... ``n-of-n``) live here too, for
the Snakefile and the report's stage-time table alike.

Public functions: ``shell_special(path)``, ``check_interpreter(executable)``, ``check_mirror(value)``,
``shard_labels(n)``, ``main(argv)``.
"""

from __future__ import annotations

import numbers
import os
import sys
from pathlib import Path

# what bash splits a word at, or expands, quotes or globs in it
SHELL_SPECIAL = frozenset(" \t\n\r\v\f'\"`$\\!*?[](){}<>|&;#~")
_NAMES = {
    " ": "a space",
    "\t": "a tab",
    "\n": "a newline",
    "\r": "a carriage return",
    "\v": "a vertical tab",
    "\f": "a form feed",
}


class PathError(ValueError):
    """A path capgap cannot use: ``path`` (as given), ``what`` it is, and the message."""

    def __init__(self, path: str, what: str, message: str):
        self.path, self.what = path, what
        super().__init__(message)


class UnsafePath(PathError):
    """A path a tool cannot take: ``path``, ``what`` it is and the offending ``chars``."""

    def __init__(self, path: str, what: str, chars: list[str], reason: str, fix: str):
        self.chars = chars
        named = ", ".join(_NAMES.get(c, repr(c)) for c in chars)
        super().__init__(path, what, f"capgap: the {what} path {path!r} holds {named}: {reason}. {fix}")


def shell_special(path: str | os.PathLike) -> list[str]:
    """The characters of ``path`` that bash would split a word at or expand (``SHELL_SPECIAL``),
    each once, in order of first appearance; ``[]`` when the path can stand unquoted in a
    command line. Non-ASCII letters are not special."""
    return list(dict.fromkeys(c for c in str(path) if c in SHELL_SPECIAL))


REASON = (
    "Snakemake runs every job's script as '<python> <script>' without quoting the interpreter's path "
    "(snakemake/script/__init__.py), so each job would fail with exit status 127"
)


def check_interpreter(executable: str | os.PathLike | None = None) -> None:
    """Refuse a Python interpreter (default ``sys.executable``: the one running Snakemake) whose
    path Snakemake cannot put in a job's command line.

    Raises
    ------
    UnsafePath
        The path holds a ``SHELL_SPECIAL`` character; the message names the path, the
        characters, why, and how to place the virtualenv elsewhere.
    """
    exe = str(executable if executable is not None else sys.executable)
    bad = shell_special(exe)
    if bad:
        raise UnsafePath(
            exe,
            "Python interpreter",
            bad,
            REASON,
            "Make the virtualenv at a path without spaces, quotes or shell characters "
            "(make run VENV=/path/to/venv; the checkout, data and results folders may keep their names).",
        )


MIRROR_ENV = "CAPGAP_DATA_MIRROR"


def check_mirror(value: str | None = None) -> None:
    """Refuse a data mirror (default ``$CAPGAP_DATA_MIRROR``; unset or empty: no mirror) that is
    not a folder, at start: otherwise every dataset it should provide would be listed as "not in
    the data mirror" after the run. The message names the value as given and the likely cause:
    a ``~`` or quotes kept literally (the shell expands or strips them only outside quotes),
    surrounding whitespace, a file, or a relative path resolved against the current folder; and
    a folder that holds ``corpus.jsonl`` itself (one dataset's folder, one level too deep).

    Raises
    ------
    PathError
        The value names no folder.
    """
    value = os.environ.get(MIRROR_ENV) if value is None else value
    if not value:
        return
    if Path(value).is_dir():
        if (Path(value) / "corpus.jsonl").is_file():  # one dataset's own folder, one level too deep
            raise PathError(
                value,
                "data mirror",
                f"capgap: ${MIRROR_ENV} is {value!r}, which holds corpus.jsonl "
                "itself: it is one dataset's folder; point it at the folder above "
                f"({str(Path(value).parent)!r}), which holds one BEIR-layout folder per dataset",
            )
        return
    if value != value.strip():
        why = "it has leading or trailing whitespace, which is part of the path"
    elif value[0] in "'\"" and value[-1] == value[0]:
        why = "the quotes around it are part of the value (an env file, a Makefile or nested quoting keeps them)"
    elif value.startswith("~"):
        why = (
            "'~' is not expanded here (the shell expands it only unquoted); "
            f"did you mean {os.path.expanduser(value)!r}?"
        )
    elif Path(value).exists():
        why = "it is a file, not a folder"
    elif not os.path.isabs(value):
        why = f"no such folder, relative to the current folder {os.getcwd()!r}"
    else:
        why = "no such folder"
    raise PathError(
        value,
        "data mirror",
        f"capgap: ${MIRROR_ENV} is {value!r}, which is not a folder: {why}. Point it "
        "at the folder holding one BEIR-layout folder per dataset, or unset it to run without a mirror.",
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m capgap.paths [VENV]``: exit 2 with the reason on stderr when the virtualenv
    folder VENV (default ``$CAPGAP_VENV``, else ``.venv``; relative to the current folder) has
    a path Snakemake's job commands cannot hold; else exit 0, printing nothing. The Makefile
    runs it before making the virtualenv. Reading VENV from the environment keeps its
    characters away from any shell."""
    args = sys.argv[1:] if argv is None else argv
    venv = args[0] if args else os.environ.get("CAPGAP_VENV") or ".venv"
    path = str(Path(os.path.abspath(venv)))
    bad = shell_special(path)
    if bad:
        print(
            UnsafePath(
                path,
                "virtualenv",
                bad,
                REASON,
                "Put the virtualenv at a path without spaces, quotes or shell characters: "
                "make run VENV=/path/without/spaces/venv (the same VENV= for make test); "
                "the checkout itself may keep its path.",
            ),
            file=sys.stderr,
        )
        return 2
    return 0


def shard_labels(n) -> list[str]:
    """The shard jobs' names for a shard count ``n`` (config ``index.shards`` /
    ``probe.shards``): ``["1-of-n", ..., "n-of-n"]`` (Snakemake's scattergather naming,
    ``shard_of``'s inverse), none when n = 1 (the rule then does the whole job
    itself). ``n`` may be an integral float (``2.0``: the schema's integer admits it). Raises
    ``ValueError`` for anything else: non-integral, below 1, or not a number (a string, a bool)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Real) or not float(n).is_integer() or n < 1:
        raise ValueError(f"shards {n!r}: expected a positive integer")
    n = int(n)
    return [] if n == 1 else [f"{i}-of-{n}" for i in range(1, n + 1)]


def shard_of(item: str) -> tuple[int, int]:
    """``"<i>-of-<n>"`` (a shard as the rules name it, ``shard_labels``; Snakemake's
    scattergather convention, i from 1) -> ``(i - 1, n)``: the 0-based shard and the count.
    Raises ``ValueError`` for another form or i outside 1..n."""
    i, sep, n = str(item).partition("-of-")
    if not (sep and i.isdigit() and n.isdigit() and 1 <= int(i) <= int(n)):
        raise ValueError(f"shard {item!r}: expected '<i>-of-<n>' with 1 <= i <= n")
    return int(i) - 1, int(n)


if __name__ == "__main__":
    sys.exit(main())
