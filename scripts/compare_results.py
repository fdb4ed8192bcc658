#!/usr/bin/env python3
"""Compare a run's reports/results.csv with a recorded one, byte for byte.

    python scripts/compare_results.py [--allow-additions] RECORDED.csv NEW.csv

Exit 0 when the files are byte-identical. Otherwise prints how they differ (rows only in one
file, and rows whose value changed, keyed by dataset, encoder, method, split, metric, k and
any column both files have) and exits 1. With ``--allow-additions`` it also exits 0 when NEW
only adds: every recorded row is in NEW with the same value text, in the same order, and NEW's
other rows are new ones (a column NEW adds must be empty on the recorded rows, e.g.
``compression``, which names the index variant of the compress rule's rows). Used to check that a behaviour-preserving change preserves every number: the
recorded files in benchmarks/baselines/ come from the tiny test config and the default config
(see benchmarks/baselines/README.md for the commit they were made at).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path


def _fail(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(2)


def read(path: Path) -> tuple[list[str], list[dict]]:
    """Header and rows of a results CSV. Exits 2 for a row whose width
    differs from the header's or two rows with one key (every column but ``value``)."""
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, [])
        rows = []
        for line, cells in enumerate(reader, start=2):
            if len(cells) != len(header):
                _fail(f"{path}:{line}: {len(cells)} cells, the header has {len(header)}")
            rows.append(dict(zip(header, cells)))
    if "value" not in header:
        _fail(f"{path}: no 'value' column")
    seen = {}
    for i, r in enumerate(rows, start=2):
        k = tuple((c, r[c]) for c in header if c != "value")
        if k in seen:
            _fail(f"{path}:{i}: the same key as line {seen[k]}: {dict(k)}")
        seen[k] = i
    return header, rows


def main(argv: list[str]) -> int:
    allow = "--allow-additions" in argv
    argv = [a for a in argv if a != "--allow-additions"]
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    old, new = Path(argv[0]), Path(argv[1])
    (cols_a, rows_a), (cols_b, rows_b) = read(old), read(new)
    if old.read_bytes() == new.read_bytes():
        print(f"identical: {new} == {old} ({len(rows_a)} rows)")
        return 0
    missing_cols = [c for c in cols_a if c not in cols_b]
    added_cols = [c for c in cols_b if c not in cols_a]
    key_cols = [c for c in cols_b if c != "value"]

    def key(r):
        return tuple(r.get(c, "") for c in key_cols)  # a column the recorded file lacks is empty there

    a = {key(r): r["value"] for r in rows_a}
    b = {key(r): r["value"] for r in rows_b}
    if allow and not missing_cols:
        kept = [key(r) for r in rows_b if key(r) in a]
        if all(k in b and b[k] == v for k, v in a.items()) and kept == [key(r) for r in rows_a]:
            print(
                f"recorded rows identical: {len(a)} rows, same values and order; {len(b) - len(a)} rows added"
                + (f", columns added: {added_cols}" if added_cols else "")
            )
            return 0
    if missing_cols:
        print("columns only in recorded:", missing_cols)
    for k in a.keys() - b.keys():
        print("only in recorded:", ",".join(k), a[k])
    for k in b.keys() - a.keys():
        print("only in new:     ", ",".join(k), b[k])
    for k in a.keys() & b.keys():
        if a[k] != b[k]:
            print("changed:         ", ",".join(k), a[k], "->", b[k])
    if a == b and not missing_cols:
        print("same rows and values, different bytes (row order, columns or formatting)")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
