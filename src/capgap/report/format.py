"""Formatting helpers shared by the report's sections: Markdown tables, table cells, a value of
results.csv at given keys, figure blocks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

import pandas as pd


def _md_table(header: list[str], rows: list[list]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def _f(v) -> str:
    """A table cell: 3 decimals, "–" for a value not measured."""
    if v is None or (isinstance(v, float) and v != v) or v == "–":
        return "–"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def _sci(v) -> str:
    """A small positive value for display (slack): 8.4e-04; "–" when absent."""
    return v if isinstance(v, str) else f"{v:.1e}"


def _count(v):
    """A count for display: 11.0 -> "11" (medians of integers may end in .5)."""
    return v if isinstance(v, str) else (str(int(v)) if float(v).is_integer() else f"{v:.1f}")


def _source(src: dict) -> str:
    """Where a dataset came from; an expanded corpus says how many distractors were generated."""
    kind = src.get("kind", "")
    ex = src.get("expanded")
    if ex:
        kind += f" + {ex['n_docs'] - ex['n_real']:,} generated LIMIT-style distractors (not the official LIMIT corpus)"
    return kind


def _label(method: str, encoder: str) -> str:
    return f"{method} ({encoder})" if encoder else method


def _value(df: pd.DataFrame, dataset, encoder, method, split, metric, k=None):
    """The one value of results.csv at these keys (k=None: any k), or "–" when absent."""
    sel = df[
        (df["dataset"] == dataset)
        & (df["encoder"] == encoder)
        & (df["method"] == method)
        & (df["split"] == split)
        & (df["metric"] == metric)
    ]
    if k is not None:
        sel = sel[sel["k"] == k]
    return float(sel["value"].iloc[0]) if len(sel) else "–"


def _num(df: pd.DataFrame, dataset, encoder, method, split, metric, k=None) -> float:
    """``_value`` as a float: nan when the row is absent or its value empty."""
    v = _value(df, dataset, encoder, method, split, metric, k)
    return float("nan") if v == "–" else float(v)


def _bm25_text(variant: str | None) -> str:
    return f"`{variant}`" if variant else "not recorded (no run config)"


def _read_jsonl(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def _figure(figs: Mapping[str, str | None], key: str, title: str, alt: str, stage: str, text: str = "") -> list[str]:
    if key not in figs:
        return []
    out = [f"## {title}", ""]
    if figs[key] is None:
        return out + [f"Not drawn: {stage} was not run in this config.", ""]
    if text:
        out += [text, ""]
    return out + [f"![{alt}]({figs[key]})", ""]
