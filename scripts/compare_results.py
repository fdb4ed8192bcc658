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

def read(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, encoding="utf-8", newline="") as fh:
        r = csv.DictReader(fh)
        return list(r.fieldnames or []), list(r)


def main(argv: list[str]) -> int:
    allow = "--allow-additions" in argv
    argv = [a for a in argv if a != "--allow-additions"]
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    old, new = Path(argv[0]), Path(argv[1])
    if old.read_bytes() == new.read_bytes():
        print(f"identical: {new} == {old} ({len(read(old)[1])} rows)")
        return 0
    (cols_a, rows_a), (cols_b, rows_b) = read(old), read(new)
    added_cols = [c for c in cols_b if c not in cols_a]
    key_cols = [c for c in cols_a if c != "value" and c in cols_b] + added_cols

    def keyed(rows):
        return {tuple(r.get(c, "") for c in key_cols): r["value"] for r in rows}

    a, b = keyed(rows_a), keyed(rows_b)
    if allow and not set(cols_a) - set(cols_b):
        kept = [tuple(r.get(c, "") for c in key_cols) for r in rows_b]
        recorded = [tuple(r.get(c, "") for c in key_cols) for r in rows_a]
        if all(k in b and b[k] == v for k, v in a.items()) and [k for k in kept if k in a] == recorded:
            print(f"recorded rows identical: {len(a)} rows, same values and order; {len(b) - len(a)} rows added"
                  + (f", columns added: {added_cols}" if added_cols else ""))
            return 0
    for k in sorted(a.keys() - b.keys()):
        print("only in recorded:", ",".join(k), a[k])
    for k in sorted(b.keys() - a.keys()):
        print("only in new:     ", ",".join(k), b[k])
    for k in sorted(a.keys() & b.keys()):
        if a[k] != b[k]:
            print("changed:         ", ",".join(k), a[k], "->", b[k])
    if a == b:
        print("same rows and values, different bytes (row order or formatting)")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
