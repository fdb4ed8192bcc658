"""The paper's published numbers beside capgap's, with a one-line verdict per claim.

The claims live in ``paper_reference.yaml`` (checked in, with their sources). Every claim gets
at least one row in the report, never silently omitted:

- **reproduced** / **not reproduced (by how much)**: a run on exactly the paper's data with the
  paper's model, compared at the claim's k within its tolerance (or against its bound);
- **not comparable (why)**: a run of the same dataset family with a different model or
  different data (e.g. MiniLM on LIMIT-small for the paper's Qwen3-4B on LIMIT), shown as the
  nearest analog, or "not run here" when the config has no dataset of that family.

Independently of the numbers, each row says whether the claim's qualitative *pattern* holds on
that run (e.g. "train − held-out ≥ 0.3 and capacity − held-out ≥ 0.3"), which is what a reader
needs to answer "does the paper's finding hold on my index?".
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Mapping

import pandas as pd
import yaml

GAP = 0.3  # the pattern thresholds (also stated in paper_reference.yaml and the report)
HIGH = 0.95
LATE = 0.9
FIT = 0.5  # below this train recall the encoder did not fit its train queries: the pattern is untested
FALLBACK_K = 10  # claims at k="gold" on datasets whose gold-set size varies, in results without R-precision rows
RPREC = "rprec"  # the cut-off "k = each query's own gold-set size": R-precision (results.csv metric rprec, k empty)


@lru_cache(maxsize=1)
def load_reference() -> dict:
    """The checked-in reference table (``capgap/paper_reference.yaml``) as a dict."""
    return yaml.safe_load(resources.files("capgap").joinpath("paper_reference.yaml").read_text(encoding="utf-8"))


def family(dataset: str) -> str:
    """Dataset family for matching claims: ``limit`` (limit, limit-small, generated and
    expanded LIMIT-style sets), ``bright`` (``bright-<category>``), else ``beir``/``other``."""
    ref = load_reference()
    if dataset.startswith("limit"):
        return "limit"
    if dataset.startswith("bright-"):
        return "bright"
    return "beir" if dataset in ref["beir"] else "other"


@dataclass(frozen=True)
class DatasetInfo:
    """What the comparison needs to know about one of our datasets.

    ``gold_k``: the gold-set size when every query has the same number of gold documents, else
    None. ``official``: the files are the benchmark's own (not generated, not expanded).
    ``gold_range``: ``(smallest, largest)`` gold-set size, None when not known."""

    n_docs: int
    gold_k: int | None
    official: bool
    gold_range: tuple[int, int] | None = None

    @property
    def gold_varies(self) -> bool:
        """Whether the gold-set sizes are known to vary (then "k = gold-set size" is R-precision)."""
        return self.gold_k is None and self.gold_range is not None and self.gold_range[0] != self.gold_range[1]

    def gold_varies_text(self) -> str:
        """ "gold sets vary 1–475" (only meaningful where ``gold_varies``)."""
        lo, hi = self.gold_range or ("?", "?")
        return f"gold sets vary {lo}–{hi}"


def reads_rprec(info: DatasetInfo | None, df: pd.DataFrame, dataset: str) -> bool:
    """Whether a dataset's "k = gold-set size" numbers are read at R-precision: its gold-set
    sizes vary (``info.gold_varies``) and ``df`` (results.csv rows) has its ``rprec`` rows
    (results written before R-precision existed keep the fixed fallback k)."""
    return bool(
        info is not None and info.gold_varies and ((df["dataset"] == dataset) & (df["metric"] == "rprec")).any()
    )


def claim_k(info: DatasetInfo | None, k, rprec: bool = False) -> tuple[int | str, str]:
    """The cut-off a claim is compared at on one dataset, and how it was chosen: k = "gold" is
    the gold-set size where it is fixed, R-precision (``RPREC``: recall at each query's own
    gold-set size) where it varies and ``rprec`` says the results have it (``reads_rprec``),
    else FALLBACK_K."""
    if k != "gold":
        return int(k), ""
    if info is not None and info.gold_k is not None:
        return info.gold_k, f"k = gold-set size ({info.gold_k})"
    if rprec and info is not None and info.gold_varies:
        return RPREC, f"R-precision ({info.gold_varies_text()})"
    return FALLBACK_K, f"gold-set size varies: k = {FALLBACK_K}"


def _at(df: pd.DataFrame, k) -> pd.Series:
    """The rows of recall at cut-off ``k`` (``RPREC``: the R-precision rows)."""
    return df["metric"] == "rprec" if k == RPREC else (df["metric"] == "recall") & (df["k"] == k)


def _get(df: pd.DataFrame, dataset, encoder, method, split, k):
    sel = df[
        (df["dataset"] == dataset)
        & (df["encoder"] == encoder)
        & (df["method"] == method)
        & (df["split"] == split)
        & _at(df, k)
    ]
    return float(sel["value"].iloc[0]) if len(sel) else None


def _fmt(v) -> str:
    return "–" if v is None else f"{v:.3f}"


def _pattern(
    kind: str, df: pd.DataFrame, ds: str, enc: str, method: str, k: int, ours: Mapping[str, float | None]
) -> str:
    """Whether the claim's qualitative finding holds on one run, with the numbers."""
    if kind == "generalization_gap":
        tr, ho = ours.get("train"), ours.get("heldout")
        cap = _get(df, ds, enc, "probe", "heldout", k)
        if tr is None or ho is None:
            return "not measured"
        if tr < FIT:
            return (
                f"not tested: the encoder did not fit its train queries (train {tr:.3f} < {FIT}; "
                "more fine-tuning steps needed before the pattern can show)"
            )
        parts = [f"train − held-out {tr - ho:+.3f}"]
        ok = tr - ho >= GAP
        if cap is not None:
            parts.append(f"capacity − held-out {cap - ho:+.3f}")
            ok = ok and cap - ho >= GAP
        else:
            parts.append("no probe run")
        return ("holds" if ok else "does not hold") + f" ({', '.join(parts)}; threshold {GAP})"
    if kind == "late_interaction":
        ho = ours.get("heldout")
        sv = df[(df["dataset"] == ds) & (df["method"] == "finetuned") & (df["split"] == "heldout") & _at(df, k)][
            "value"
        ]
        if ho is None:
            return "not measured"
        if sv.empty:
            return (
                "holds" if ho >= LATE else "does not hold"
            ) + f" (held-out {ho:.3f} vs {LATE}; no single-vector run to compare)"
        best = float(sv.max())
        ok = ho >= LATE and ho - best >= GAP
        return (
            "holds" if ok else "does not hold"
        ) + f" (held-out {ho:.3f}; best fine-tuned single-vector held-out {best:.3f}, {ho - best:+.3f})"
    if kind == "capacity_high":
        v = ours.get("heldout")
        if v is None:
            return "not measured"
        return ("holds" if v >= HIGH else "does not hold") + f" (probe held-out {v:.3f} vs {HIGH})"
    if kind == "saturated":
        vals = [v for v in ours.values() if v is not None]
        if not vals:
            return "not measured"
        return ("holds" if min(vals) >= HIGH else "does not hold") + f" (minimum {min(vals):.3f} vs {HIGH})"
    raise ValueError(f"unknown pattern {kind!r} in paper_reference.yaml")


def _numeric_verdict(claim: dict, ours: Mapping, paper: Mapping) -> str:
    missing = [s for s in paper if ours.get(s) is None]
    if missing:
        return f"not comparable: {', '.join(map(str, missing))} not measured"
    if claim["relation"] == ">=":
        short = {s: paper[s] - ours[s] for s in paper if ours[s] < paper[s]}
        if not short:
            return f"reproduced (≥ {', '.join(_fmt(v) for v in paper.values())})"
        return "not reproduced: " + ", ".join(f"{_key(s)} {d:.3f} below {paper[s]:.3f}" for s, d in short.items())
    tol = float(claim["tolerance"])
    diffs = {s: ours[s] - paper[s] for s in paper}
    if all(abs(d) <= tol + 1e-12 for d in diffs.values()):
        return f"reproduced (within ±{tol})"
    return (
        "not reproduced: "
        + ", ".join(f"{_key(s)} {d:+.3f}" for s, d in diffs.items() if abs(d) > tol + 1e-12)
        + f" (ours − paper, beyond ±{tol})"
    )


def compare(df: pd.DataFrame, infos: Mapping[str, DatasetInfo], models: Mapping[tuple[str, str], str]) -> list[dict]:
    """One row per (claim, run) for the report's "paper beside ours" table.

    ``df``: results.csv rows (tidy: dataset, encoder, method, split, metric, k, value).
    ``infos``: dataset name -> DatasetInfo. ``models``: (method, encoder) -> model id of every
    run in ``df`` (``("bm25", "")`` -> "bm25").

    Returns dicts with keys ``claim, source, run, k, paper, ours, verdict, pattern`` (strings).
    """
    ref = load_reference()
    rows = []
    for c in ref["claims"]:
        runs = []
        for (ds, enc), _ in df[df["method"] == c["method"]].groupby(["dataset", "encoder"], sort=True):
            if ds in c.get("exclude", []) or (c["family"] != "all" and family(ds) != c["family"]):
                continue
            runs.append((ds, enc))
        if not runs:
            fam = "any" if c["family"] == "all" else f"no {c['family'].upper()}"
            rows.append(
                dict(
                    claim=c["claim"],
                    source=c["source"],
                    run="–",
                    k="–",
                    paper=_paper_text(c, None),
                    ours="–",
                    verdict=f"not comparable: not run here ({fam} dataset with method {c['method']} in this config)",
                    pattern="–",
                )
            )
            continue
        # Aggregated claims (BRIGHT means): comparable runs are averaged per model.
        groups: dict = {}
        for ds, enc in runs:
            model = models.get((c["method"], enc), enc)
            info = infos.get(ds)
            same_data = ds in c["datasets"] and (info is None or info.official)
            comparable = same_data and model in c["model"]
            key = ("mean", enc, comparable) if c.get("aggregate") == "mean" and comparable else (ds, enc, comparable)
            groups.setdefault(key, []).append((ds, enc, model, info, same_data))
        for key, members in groups.items():
            comparable = key[2]
            ds0, enc, model, info, same_data = members[0]
            k, k_note = claim_k(info, c.get("k", "gold"), reads_rprec(info, df, ds0)) if "values" in c else (None, "")
            if "values" in c:
                paper = {s: float(v) for s, v in c["values"].items()}
                per = [
                    {
                        s: _get(df, d, enc, c["method"], s, claim_k(i, c.get("k", "gold"), reads_rprec(i, df, d))[0])
                        for s in paper
                    }
                    for d, _, _, i, _ in members
                ]
                ours = {
                    s: (sum(p[s] for p in per) / len(per) if all(p[s] is not None for p in per) else None)
                    for s in paper
                }
            else:
                paper = {int(kk): float(v) for kk, v in c["values_at_k"].items()}
                ours = {kk: _get(df, ds0, enc, c["method"], c.get("split", "all"), kk) for kk in paper}
            run = (
                f"{ds0} / {enc or c['method']}"
                if len(members) == 1
                else f"mean of {len(members)}/{len(c['datasets'])} categories / {enc}"
            )
            if comparable:
                verdict = _numeric_verdict(c, ours, paper)
            else:
                why = []
                if model not in c["model"]:
                    why.append(f"different model (ours {model}; paper: {' or '.join(c['model'])})")
                if not same_data:
                    what = f"{ds0}, {info.n_docs:,} documents" if info else ds0
                    if info is not None and not info.official:
                        what += ", not the official files"
                    why.append(f"different data (ours {what}; paper: {c['data']})")
                verdict = "not comparable: " + "; ".join(why)
            pk = k if k is not None else min(paper)
            pattern = _pattern(c["pattern"], df, ds0, enc, c["method"], pk, ours)
            rows.append(
                dict(
                    claim=c["claim"],
                    source=c["source"],
                    run=run,
                    k=(k_note or f"k = {k}") if k is not None else "k = " + " / ".join(map(str, paper)),
                    paper=_paper_text(c, paper),
                    ours=_ours_text(ours),
                    verdict=verdict,
                    pattern=pattern,
                )
            )
    return rows


def _paper_text(c: dict, paper) -> str:
    if paper is None:
        paper = c.get("values") or c.get("values_at_k")
    rel = "≥ " if c["relation"] == ">=" else ""
    return " / ".join(f"{_key(s)} {rel}{float(v):.3f}" for s, v in paper.items())


def _key(s) -> str:
    """A values key for display: a split name ("held-out") or a cut-off ("R@2")."""
    return f"R@{s}" if isinstance(s, int) else {"heldout": "held-out"}.get(s, s)


def _ours_text(ours: Mapping) -> str:
    return " / ".join(f"{_key(s)} {_fmt(v)}" for s, v in ours.items())
