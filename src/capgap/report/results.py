"""results.csv, the report's single source: collecting the per-job tables, and the rows of the
frozen index as built (``uncompressed``) apart from those of rule ``compress`` (``compressed``)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from ..evaluate import COLUMNS

METHOD_ORDER = ("probe", "pretrained", "finetuned", "bm25", "colbert")
SPLIT_ORDER = ("train", "heldout", "all")


def collect(csv_paths: Sequence[str | Path]) -> pd.DataFrame:
    """Concatenate per-job CSVs into one sorted tidy frame (raises ``ValueError`` on bad columns).

    ``compression`` is read as text: empty for rows measured on the frozen index as built, the
    index variant for rows of rule ``compress`` (``float32``, ``sq8``, ``pq-48x8``, ...). A
    table written before that column existed (the first seven of COLUMNS) reads with it empty.
    Rows of the frozen index come first, sorted as they always were; compress rows follow, per
    dataset x encoder in the order their job wrote the variants. ``value`` is numeric: an empty
    value (a twin gap quantile with no finite score, ``capgap.evaluate.twin_rows``) reads as nan."""
    frames = []
    for p in csv_paths:
        df = pd.read_csv(
            p, dtype={"encoder": str, "k": "Int64", "compression": str}, keep_default_na=False, na_values={"k": [""]}
        )
        if tuple(df.columns) == COLUMNS[:-1]:  # an older job's table: no compressed variants
            df["compression"] = ""
        if tuple(df.columns) != COLUMNS:
            raise ValueError(f"{p}: columns {tuple(df.columns)} != {COLUMNS}")
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=list(COLUMNS))
    df = pd.concat(frames, ignore_index=True)
    df["compression"] = df["compression"].fillna("").astype(str)
    df["value"] = pd.to_numeric(df["value"], errors="coerce")  # empty (a twin gap with no finite score): nan
    df["_m"] = df["method"].map({m: i for i, m in enumerate(METHOD_ORDER)}).fillna(99)
    df["_s"] = df["split"].map({s: i for i, s in enumerate(SPLIT_ORDER)}).fillna(99)
    df["_v"] = pd.factorize(df["compression"])[0]  # variants in the order the jobs wrote them
    base = df[df["compression"] == ""].sort_values(["dataset", "_m", "encoder", "_s", "metric", "k"], kind="stable")
    comp = df[df["compression"] != ""].sort_values(
        ["dataset", "encoder", "_v", "_m", "_s", "metric", "k"], kind="stable"
    )
    return pd.concat([base, comp]).drop(columns=["_m", "_s", "_v"]).reset_index(drop=True)


def uncompressed(df: pd.DataFrame) -> pd.DataFrame:
    """The rows measured on the frozen index as built (``compression`` empty): the rows every
    section, table and figure of the report is computed from, except the compression section."""
    return df[df["compression"] == ""] if "compression" in df.columns else df


def compressed(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of rule ``compress`` (``compression`` names the index variant)."""
    return df[df["compression"] != ""] if "compression" in df.columns else df.iloc[0:0]
