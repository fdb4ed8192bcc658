#!/usr/bin/env python3
"""Compare a run's reports/results.csv with a recorded one, byte for byte.

    python scripts/compare_results.py RECORDED.csv NEW.csv

Exit 0 when the files are byte-identical. Otherwise prints how they differ (rows only in one
file, and rows whose value changed, keyed by dataset, encoder, method, split, metric, k) and
exits 1. Used to check that a behaviour-preserving change preserves every number: the
recorded files in benchmarks/baselines/ come from the tiny test config and the default config
(see benchmarks/baselines/README.md for the commit they were made at).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

KEY = ("dataset", "encoder", "method", "split", "metric", "k")


def rows(path: Path) -> dict[tuple, str]:
    with open(path, encoding="utf-8", newline="") as fh:
        return {tuple(r[c] for c in KEY): r["value"] for r in csv.DictReader(fh)}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    old, new = Path(argv[0]), Path(argv[1])
    if old.read_bytes() == new.read_bytes():
        print(f"identical: {new} == {old} ({len(rows(old))} rows)")
        return 0
    a, b = rows(old), rows(new)
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
