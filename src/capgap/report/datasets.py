"""Section "Datasets": sizes, gold sets, gold no method can find, duplicate documents / queries, tied
queries, source and split rule; then the datasets that could not be obtained."""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from .context import ReportContext
from .format import _bm25_text, _count, _md_table, _source


def _gold_text(g: dict | None) -> str:
    if not g or g["min"] is None:
        return "–"
    if g["fixed"] is not None:
        return f"{g['fixed']} (fixed)"
    return f"{g['min']}–{g['max']} (median {_count(g['median'])})"


def _duplicates_cell(status: Mapping, key: str, noun: str) -> str:
    """A status's duplicate groups (``duplicate_documents`` / ``duplicate_queries``) as a cell:
    "2 groups (5 documents)", "none", or "not recorded" (a status file older than the count)."""
    d = status.get(key)
    if not isinstance(d, Mapping) or "groups" not in d:
        return "not recorded"
    if not d["groups"]:
        return "none"
    return f"{d['groups']} group{'s' if d['groups'] != 1 else ''} ({d.get('items', '?')} {noun})"


def _duplicate_examples(status: Mapping, key: str, n: int = 3) -> str | None:
    """Up to ``n`` example groups of a status's duplicates, "(`d1`, `d7`), (`d3`, `d4`)" (None:
    none recorded)."""
    d = status.get(key)
    groups = d.get("examples") if isinstance(d, Mapping) else None
    if not groups:
        return None
    return ", ".join("(" + ", ".join(f"`{i}`" for i in g) + ")" for g in groups[:n])


def _unfindable_cell(status: Mapping) -> str:
    """A status's gold that no method can find (``unfindable_gold``, ``capgap.data.gold_rule``) as
    a cell: "2 of 21 gold pairs (absent 1, empty 1; train 0, held-out 2)", "none", or "not
    recorded" (a status file older than the count); queries dropped because none of their gold
    can be found are added."""
    u = status.get("unfindable_gold")
    if not isinstance(u, Mapping) or "all" not in u:
        return "not recorded"
    a = u["all"]
    n = sum(a.get(r, 0) for r in ("absent", "empty", "excluded"))
    dropped = status.get("dropped_queries_gold_unfindable") or 0
    tail = f"; {dropped} quer{'y' if dropped == 1 else 'ies'} with none findable dropped" if dropped else ""
    if not n:
        return "none" + tail
    why = ", ".join(f"{r} {a[r]}" for r in ("absent", "empty", "excluded") if a.get(r))
    per = ", ".join(
        f"{lab} {sum(u.get(sp, {}).get(r, 0) for r in ('absent', 'empty', 'excluded'))}"
        for sp, lab in (("train", "train"), ("heldout", "held-out"))
    )
    return f"{n} of {a.get('gold_pairs', '?')} gold pairs ({why}; {per}){tail}"


def _tied_queries(df: pd.DataFrame, dataset: str) -> str:
    """A dataset's queries that share their text with another query: the probe's ``tied_queries``
    (split all; text ties do not depend on the encoder); "not recorded" when the probe ran
    without counting them, "–" when it did not run."""
    probe = df[(df["dataset"] == dataset) & (df["method"] == "probe")]
    sel = probe[(probe["split"] == "all") & (probe["metric"] == "tied_queries")]
    if len(sel):
        return _count(float(sel["value"].max()))
    return "not recorded" if len(probe) else "–"


def render_datasets(
    avail: Sequence[dict], df: pd.DataFrame, golds: Mapping[str, dict], bm25: str | None = None
) -> list[str]:
    """The "Datasets" section: sizes, gold sets, gold no method can find (``_unfindable_cell``),
    duplicate document / query groups (with up to 3 example groups each), tied queries, source
    and split rule; the BM25 variant when BM25 ran."""
    out = ["## Datasets", ""]
    out.append(
        _md_table(
            [
                "dataset",
                "documents",
                "queries",
                "train",
                "held-out",
                "gold per query",
                "dropped (no gold)",
                "duplicate documents",
                "duplicate queries",
                "tied queries (probe)",
                "source",
                "split rule",
                "gold no method can find",
            ],
            [
                [
                    s["dataset"],
                    s["n_docs"],
                    s["n_queries"],
                    s["n_train"],
                    s["n_heldout"],
                    _gold_text(golds.get(s["dataset"])),
                    s["dropped_queries_without_gold"],
                    _duplicates_cell(s, "duplicate_documents", "documents"),
                    _duplicates_cell(s, "duplicate_queries", "queries"),
                    _tied_queries(df, s["dataset"]),
                    _source(s["source"]),
                    s["split_rule"],
                    _unfindable_cell(s),
                ]
                for s in avail
            ],
        )
    )
    out.append("")
    norms = sorted({str(s["text_normalization"]) for s in avail if s.get("text_normalization")})
    norm = (
        f"after {'/'.join(norms)} normalisation and whitespace collapsing"
        if norms
        else "(text normalisation not recorded)"
    )
    out.append(
        "Duplicate documents: groups of documents with identical text (they score identically in every "
        f"method). Duplicate queries: groups of queries with identical text {norm}; any text encoder gives them "
        "one vector, so the probe gives them one w. Tied queries: the probe's count of queries sharing their "
        "text with another. Gold no method can find: gold pairs whose document is absent from the corpus, "
        "empty (left out) or excluded for that query; as in BRIGHT's, BEIR's and MTEB's own evaluation they "
        "stay in the gold set and are never found, so every recall and nDCG here is over the full gold set. "
        '"not recorded": the files predate these counts.'
    )
    out.append("")
    bullets = []
    for s in avail:
        ex = [
            f"duplicate {noun} {e}"
            for noun in ("documents", "queries")
            if (e := _duplicate_examples(s, f"duplicate_{noun}"))
        ]
        if ex:
            bullets.append(f"- **{s['dataset']}**: " + "; ".join(ex) + ".")
    if bullets:
        out += ["Examples (up to 3 groups each):", "", *bullets, ""]
    if "bm25" in set(df["method"]):
        out += [f"BM25 (every BM25 number in this report): {_bm25_text(bm25)}.", ""]
    return out


def render(ctx: ReportContext) -> list[str]:
    """The available datasets' table, then one line per dataset that could not be obtained."""
    avail = [s for s in ctx.statuses if s.get("available")]
    missing = [s for s in ctx.statuses if not s.get("available")]
    out = render_datasets(avail, ctx.df, ctx.golds, ctx.bm25)
    if missing:
        out.append("## Datasets that could not be obtained")
        out.append("")
        for s in missing:
            out.append(f"- **{s['dataset']}**: {s['reason']}. {s['hint']}")
        out.append("")
    return out
