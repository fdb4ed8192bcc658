"""The probe's certificates by cause (certified, uncertified by duplicate documents / tied
queries / geometry, certified by construction) and why a capacity is certified by construction."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from .format import _count, _f, _md_table, _read_jsonl, _value
from .results import SPLIT_ORDER
from .table import CAUSES

# capgap.probe.OUTCOMES (the report env has no quadprog, so it must not import capgap.probe;
# a test checks the two agree)
OUTCOMES = ("certified", "duplicate", "geometry", "tied", "undecided")
CONSTRUCTION_RULES = (
    "n_docs <= dim + 1 with affinely independent documents, or a single gold document among distinct "
    "documents of equal norm"
)


def construction_reasons(per_query: Sequence[str | Path], fps: Sequence[dict] = ()) -> dict[tuple[str, str], str]:
    """(dataset, encoder) -> why the probe's certificates were guaranteed: the distinct
    ``by_construction`` reasons of its ``results/{dataset}/{encoder}/probe/per_query.jsonl``
    lines, with the index's size from its fingerprint (``fps``: ``provenance.fingerprints``)
    when known. Pairs whose lines record no reason are left out (callers fall back to
    CONSTRUCTION_RULES)."""
    size = {
        (f["dataset"], f["encoder"]): f"{f['n_docs']} documents in {f['dim']} dimensions"
        for f in fps
        if f.get("n_docs") is not None and f.get("dim") is not None
    }
    out = {}
    for p in per_query:
        key = (Path(p).parts[-4], Path(p).parts[-3])
        reasons = list(dict.fromkeys(r["by_construction"] for r in _read_jsonl(p) if r.get("by_construction")))
        if reasons:
            out[key] = "; ".join(reasons) + (f"; {size[key]}" if key in size else "")
    return out


def render_certification(probe: pd.DataFrame, construction: Mapping[tuple[str, str], str] | None = None) -> list[str]:
    """The probe's certificates by cause, per dataset x encoder x split (``probe``: results.csv
    rows of method probe): certified, uncertified by cause (duplicate documents, tied queries,
    geometry), the counts by outcome (``queries_<outcome>``; – in results from before they were
    recorded), tied queries (count) and the fraction certified by construction, with the reason
    where it is not zero. Older results without these rows: a sentence saying so, no table."""
    names = [f"uncertified_{c}" for c in CAUSES] + ["tied_queries", "certified_by_construction"]
    if not probe["metric"].isin(names).any():
        return [
            "Why uncertified queries stay uncertified was not recorded in these results (probe runs from before "
            "causes were recorded): certified counts every cause together.",
            "",
        ]
    rows, built = [], []
    for (d, e), g in probe.groupby(["dataset", "encoder"], sort=False):
        for split in [s for s in SPLIT_ORDER if (g["split"] == s).any()]:
            v = {m: _value(g, d, e, "probe", split, m) for m in ["certified", *names]}
            dec = [_value(g, d, e, "probe", split, f"queries_{o}") for o in OUTCOMES]
            rows.append(
                [
                    d,
                    e,
                    split,
                    _f(v["certified"]),
                    *(_f(v[f"uncertified_{c}"]) for c in CAUSES),
                    " / ".join(_count(x) for x in dec),
                    _count(v["tied_queries"]),
                    _f(v["certified_by_construction"]),
                ]
            )
        frac = _value(g, d, e, "probe", "all", "certified_by_construction")
        if frac != "–" and frac > 0:
            built.append(
                f"- {d} / {e}: {'every query' if frac == 1 else f'{frac:.3f} of all queries'} certified by "
                f"construction ({(construction or {}).get((d, e), CONSTRUCTION_RULES)})."
            )
    out = [
        "Certificates by cause: a query the probe does not certify is counted under *duplicate documents* when a "
        "gold document has an identical non-gold copy in the index (no vector separates identical rows) and the "
        "gold set is not proven inseparable with those copies set aside, under *tied queries* when another query "
        "with the same text has a different gold set (one vector must serve both), else under *geometry* (the "
        "index itself). Certified by construction = the certificate was guaranteed before any optimisation "
        f"({CONSTRUCTION_RULES}). – = not recorded. *Decided* counts queries by how the probe decided them: "
        "certified / certified up to identical copies (the gold set separated once a gold document's identical "
        "non-gold copies are set aside: recall is then the best any vector reaches from k = |gold| + |copies| on) "
        "/ proven not separable (an inseparability proof or the exact LP) / text-tied with crossing gold sets / "
        "undecided.",
        "",
    ]
    out.append(
        _md_table(
            [
                "dataset",
                "encoder",
                "split",
                "certified",
                *(f"uncertified: {n}" for n in CAUSES.values()),
                "decided: certified / copies / not separable / tied / undecided",
                "queries sharing their text",
                "certified by construction",
            ],
            rows,
        )
    )
    out.append("")
    return out + (built + [""] if built else [])
