"""The generated report: ``reports/results.csv`` and everything rendered from it.

``results.csv`` (tidy: ``dataset, encoder, method, split, metric, k, value, compression``) is
the single source; ``report.md``, the self-contained ``report.html``, the figures (capgap.figures),
``summary.json`` (every number, nested), ``metrics.json`` (headline numbers for ``dvc
metrics``) and ``plots/recall_at_k.csv`` (``dvc plots``) are all rendered from it, with the
paper's published numbers beside ours (capgap.paper) and a provenance block
(capgap.provenance). The report states the evaluation tie rule once, splits the probe's
uncertified queries by cause (duplicate documents, tied queries, geometry), marks capacities
certified by construction, lists duplicate documents / queries per dataset (``status.json``)
and names the BM25 variant that ran (``capgap.bm25.variant_name`` of the run config); older
results without these rows or keys render with "not recorded".

Rows of rule ``compress`` (``compression`` names the index variant) feed only the section
"Capacity under index compression" and ``figures/compression.png`` (``compression_table``,
``compression_sentence``, ``render_compression``); every other output is computed from the
rows with ``compression`` empty, so it reads the same with or without them.

Rows of twin metrics (``twin_win:<type>`` etc., ``capgap.nearmiss``) and of the near-miss
adapters on transfer targets (methods ``finetuned@<source>``, ``finetuned-no-twins@<source>``)
feed the section "Near-miss twins: geometry or learning?" and ``figures/near_miss.png``
(``near_miss_table``, ``twin_verdict``, ``transfer_table``, ``transfer_sentence``,
``render_near_miss``); without them the section is absent and the figure a placeholder.
"""

from __future__ import annotations

import base64
import json
import re
import statistics
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from . import figures, paper, provenance
from .evaluate import COLUMNS, EVAL_DEFAULTS
from .figures import HARDNESS_PREFIX
from .io import atomic_open, write_json, write_text

METHOD_ORDER = ("probe", "pretrained", "finetuned", "bm25", "colbert")
SPLIT_ORDER = ("train", "heldout", "all")


def collect(csv_paths: Sequence[str | Path]) -> pd.DataFrame:
    """Concatenate per-job CSVs into one sorted tidy frame (raises ``ValueError`` on bad columns).

    ``compression`` is read as text: empty for rows measured on the frozen index as built, the
    index variant for rows of rule ``compress`` (``float32``, ``sq8``, ``pq-48x8``, ...). A
    table written before that column existed (the first seven of COLUMNS) reads with it empty.
    Rows of the frozen index come first, sorted as they always were; compress rows follow, per
    dataset x encoder in the order their job wrote the variants. ``value`` is numeric: an empty
    value (a twin gap quantile with no finite score, ``capgap.nearmiss.twin_rows``) reads as nan."""
    frames = []
    for p in csv_paths:
        df = pd.read_csv(p, dtype={"encoder": str, "k": "Int64", "compression": str}, keep_default_na=False,
                         na_values={"k": [""]})
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
    comp = df[df["compression"] != ""].sort_values(["dataset", "encoder", "_v", "_m", "_s", "metric", "k"], kind="stable")
    return pd.concat([base, comp]).drop(columns=["_m", "_s", "_v"]).reset_index(drop=True)


def uncompressed(df: pd.DataFrame) -> pd.DataFrame:
    """The rows measured on the frozen index as built (``compression`` empty): the rows every
    section, table and figure of the report is computed from, except the compression section."""
    return df[df["compression"] == ""] if "compression" in df.columns else df


def compressed(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of rule ``compress`` (``compression`` names the index variant)."""
    return df[df["compression"] != ""] if "compression" in df.columns else df.iloc[0:0]


def _md_table(header: list[str], rows: list[list]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


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
    sel = df[(df["dataset"] == dataset) & (df["encoder"] == encoder) & (df["method"] == method) & (df["split"] == split) & (df["metric"] == metric)]
    if k is not None:
        sel = sel[sel["k"] == k]
    return float(sel["value"].iloc[0]) if len(sel) else "–"


def _side_by_side(df: pd.DataFrame) -> list[str]:
    """The paper's LIMIT comparison: capacity, single-vector fine-tuned, ColBERT fine-tuned and
    BM25 per dataset (train and held-out recall@2 and @10); only datasets with a ColBERT run."""
    cb = df[df["method"] == "colbert"]
    if cb.empty:
        return []

    def one(d, e, m, split, metric, k=None):
        return _value(df, d, e, m, split, metric, k)

    rows = []
    for d in cb["dataset"].unique():
        encs = [e for e in df[(df["dataset"] == d) & (df["method"] == "finetuned")]["encoder"].unique()] or [""]
        for e in encs:
            for k in (2, 10):
                rows.append([d, e or "–", k, one(d, e, "probe", "heldout", "recall", k),
                             one(d, e, "finetuned", "train", "recall", k), one(d, e, "finetuned", "heldout", "recall", k),
                             one(d, "", "colbert", "train", "recall", k), one(d, "", "colbert", "heldout", "recall", k),
                             one(d, "", "bm25", "heldout", "recall", k), one(d, "", "colbert", "all", "ann_recall", k)])
    header = ["dataset", "single-vector encoder", "k", "probe held-out", "fine-tuned train", "fine-tuned held-out",
              "ColBERT train", "ColBERT held-out", "BM25 held-out", "ColBERT ANN recall"]
    if all(r[-1] == "–" for r in rows):  # exact MaxSim everywhere: no index, no ANN recall
        header, rows = header[:-1], [r[:-1] for r in rows]
        ann = "ColBERT scored every document by exact MaxSim here (no index), so there is no ANN recall to report."
    else:
        ann = ("ColBERT ANN recall: the index's top-k (faiss or PLAID candidates re-scored) against exact MaxSim top-k on "
               "a query sample (it is not gold-document recall; – where exact MaxSim was used).")
    return [
        "## Single vector vs late interaction vs BM25 (the paper's LIMIT comparison)",
        "",
        "Recall@k of the capacity probe (held-out queries), the LoRA fine-tuned single-vector encoder, "
        "the fine-tuned ColBERT (PyLate, both towers trained, MaxSim) and BM25. " + ann,
        "",
        _md_table(header, rows),
        "",
        "The paper's LIMIT numbers, with a verdict on each, are in \"The paper's numbers beside ours\".",
        "",
    ]


@dataclass
class ReportInputs:
    """The report rule's input files (field names are the rule's input keys).

    tables: per-job ``metrics.csv``; data: ``results/{dataset}/data`` folders (``status.json``,
    ``qrels.tsv``); curves: fine-tuning ``curve.csv``; hardness: ``[results/hardness/summary.json]``
    or empty; per_query: probe ``per_query.jsonl``; fingerprints: frozen-index
    ``fingerprint.json``; benchmarks: Snakemake ``benchmark:`` TSVs (read when present);
    runs: the pre-trained encoders' ``results/{dataset}/{encoder}/pretrained/run.trec``."""

    tables: Sequence = ()
    data: Sequence = ()
    curves: Sequence = ()
    hardness: Sequence = ()
    per_query: Sequence = ()
    fingerprints: Sequence = ()
    benchmarks: Sequence = ()
    runs: Sequence = ()

    @classmethod
    def from_named(cls, named) -> "ReportInputs":
        """From Snakemake's ``snakemake.input`` (keys absent there stay empty)."""
        return cls(**{f.name: _as_list(getattr(named, f.name, ())) for f in fields(cls)})


@dataclass
class ReportOutputs:
    """The report's output files (field names are the rule's output keys)."""

    csv: str
    md: str
    html: str
    summary: str
    metrics: str
    recall_csv: str
    recall_png: str
    gap_png: str
    scatter_png: str
    slack_png: str
    curves_png: str
    hardness_p: str
    hardness_m: str
    compression_png: str
    near_miss_png: str

    @classmethod
    def from_named(cls, named) -> "ReportOutputs":
        return cls(**{f.name: str(getattr(named, f.name)) for f in fields(cls)})

    @classmethod
    def under(cls, folder: str | Path) -> "ReportOutputs":
        """The standard layout under one folder (``reports/``)."""
        f = Path(folder)
        return cls(csv=str(f / "results.csv"), md=str(f / "report.md"), html=str(f / "report.html"),
                   summary=str(f / "summary.json"), metrics=str(f / "metrics.json"),
                   recall_csv=str(f / "plots" / "recall_at_k.csv"),
                   **{k: str(f / "figures" / v) for k, v in FIGURES.items()})


FIGURES = {"recall_png": "recall_at_k.png", "gap_png": "capacity_gap.png", "scatter_png": "train_vs_heldout.png",
           "slack_png": "probe_slack.png", "curves_png": "finetune_curves.png", "hardness_p": "hardness_vs_P.png",
           "hardness_m": "hardness_vs_m.png", "compression_png": "compression.png",
           "near_miss_png": "near_miss.png"}


def _as_list(v) -> list:
    if v is None:
        return []
    if isinstance(v, (str, Path)):
        return [str(v)]
    return [str(x) for x in v]


def gold_sizes(qrels_path: str | Path) -> dict:
    """Gold-set sizes of a prepared dataset's ``qrels.tsv`` (header ``query-id corpus-id
    score``; gold = score > 0): ``{"min", "median", "max", "fixed"}`` where ``fixed`` is the
    common size when every query has the same number of gold documents, else None.

    Raises ``DataFormatError`` naming the file, line and field on a malformed row."""
    from .data import iter_qrels

    counts: dict[str, int] = {}
    for _, q, _, score in iter_qrels(qrels_path):
        if score > 0:
            counts[q] = counts.get(q, 0) + 1
    if not counts:
        return {"min": None, "median": None, "max": None, "fixed": None}
    v = sorted(counts.values())
    return {"min": v[0], "median": statistics.median(v), "max": v[-1], "fixed": v[0] if v[0] == v[-1] else None}


def _gold_text(g: dict | None) -> str:
    if not g or g["min"] is None:
        return "–"
    if g["fixed"] is not None:
        return f"{g['fixed']} (fixed)"
    return f"{g['min']}–{g['max']} (median {_count(g['median'])})"


def dataset_infos(statuses: Sequence[dict], golds: Mapping[str, dict]) -> dict[str, paper.DatasetInfo]:
    """DatasetInfo per available dataset: size, fixed gold-set size, official files or not, the
    smallest and largest gold-set size."""
    out = {}
    for s in statuses:
        if not s.get("available"):
            continue
        src = s.get("source", {})
        official = src.get("kind") != "generated" and not src.get("expanded")
        g = golds.get(s["dataset"]) or {}
        out[s["dataset"]] = paper.DatasetInfo(int(s["n_docs"]), g.get("fixed"), official,
                                              (g["min"], g["max"]) if g.get("min") is not None else None)
    return out


def report_ks(info: paper.DatasetInfo | None, ks: Sequence[int]) -> list[int]:
    """The cut-offs of the summary table for one dataset: the gold-set size where it is fixed,
    then 10 and 100 -- those among the evaluated ``ks`` and below the corpus size (k >= the
    number of documents retrieves everything: recall 1 for every method). The first is the
    *stated* k."""
    want = ([info.gold_k] if info and info.gold_k else []) + [10, 100]
    out = [k for k in dict.fromkeys(want) if k in ks and (info is None or k < info.n_docs)]
    below = [k for k in ks if info is None or k < info.n_docs]
    return out or [max(below or [min(ks)])]  # else the largest evaluated k that does not retrieve everything


# capgap.probe.OUTCOMES (the report env has no quadprog, so it must not import capgap.probe; a test checks the two agree)
OUTCOMES = ("certified", "duplicate", "geometry", "tied", "undecided")
CAUSES = {"duplicate": "duplicate documents", "tied": "tied queries", "geometry": "geometry"}
SUMMARY_COLUMNS = ["dataset", "encoder", "k", "stated", "capacity", "certified", *(f"uncertified_{c}" for c in CAUSES),
                   "by_construction", "pretrained", "finetuned_train", "finetuned_heldout", "gap", "gap_of", "bm25", "colbert",
                   "colbert_train", "gold_note"]
RPREC = paper.RPREC  # the summary table's k of its R-precision rows (results.csv metric rprec)


def _k_text(k) -> str:
    """A summary row's cut-off for display: "2", or "R-precision"."""
    return "R-precision" if k == RPREC else str(k)


def summary_table(df: pd.DataFrame, infos: Mapping[str, paper.DatasetInfo], ks: Sequence[int]) -> pd.DataFrame:
    """The paper-layout summary: one row per dataset x single-vector encoder x cut-off.

    Cut-offs: ``report_ks``; on a dataset whose gold-set sizes vary (``paper.reads_rprec``:
    known to vary, and results.csv has its ``rprec`` rows) an R-precision row (``k`` = RPREC,
    every recall value its ``rprec``: recall at each query's own gold-set size) comes first and
    is the stated one, ``gold_note`` saying by how much ("gold sets vary 1–475"; "" on every
    other row). Every value is a held-out recall@k from results.csv (nan when that stage was not
    run or the row was not recorded), except ``certified`` (fraction of held-out queries the probe
    certifies), ``uncertified_duplicate`` / ``uncertified_tied`` / ``uncertified_geometry``
    (fractions of held-out queries left uncertified, by cause), ``by_construction`` (fraction of
    *all* queries certified by construction) and ``finetuned_train``/``colbert_train``. ``gap`` =
    capacity − fine-tuned held-out (or − pre-trained held-out where fine-tuning did not run;
    ``gap_of`` says which)."""
    def val(d, e, m, split, metric="recall", k=None):
        if metric == "recall" and k == RPREC:
            metric, k = "rprec", None
        v = _value(df, d, e, m, split, metric, k)
        return float("nan") if v == "–" else v

    rows = []
    for d in df["dataset"].unique():
        encs = [e for e in df[(df["dataset"] == d) & df["method"].isin(["probe", "pretrained", "finetuned"])]["encoder"].unique()] or [""]
        rprec = paper.reads_rprec(infos.get(d), df, d)
        for e in encs:
            for i, k in enumerate(([RPREC] if rprec else []) + report_ks(infos.get(d), ks)):
                cap = val(d, e, "probe", "heldout", k=k)
                ft, pt = val(d, e, "finetuned", "heldout", k=k), val(d, e, "pretrained", "heldout", k=k)
                ref, of = (ft, "fine-tuned") if ft == ft else (pt, "pre-trained")
                rows.append({"dataset": d, "encoder": e or "–", "k": k, "stated": i == 0, "capacity": cap,
                             "certified": val(d, e, "probe", "heldout", "certified"),
                             **{f"uncertified_{c}": val(d, e, "probe", "heldout", f"uncertified_{c}") for c in CAUSES},
                             "by_construction": val(d, e, "probe", "all", "certified_by_construction"), "pretrained": pt,
                             "finetuned_train": val(d, e, "finetuned", "train", k=k), "finetuned_heldout": ft,
                             "gap": cap - ref, "gap_of": of if cap == cap and ref == ref else "",
                             "bm25": val(d, "", "bm25", "heldout", k=k), "colbert": val(d, "", "colbert", "heldout", k=k),
                             "colbert_train": val(d, "", "colbert", "train", k=k),
                             "gold_note": infos[d].gold_varies_text() if k == RPREC else ""})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def _f(v) -> str:
    """A table cell: 3 decimals, "–" for a value not measured."""
    if v is None or (isinstance(v, float) and v != v) or v == "–":
        return "–"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


NOT_RUN_HINT = {"probe": "probe.enabled", "pretrained": "an encoder for the dataset", "finetuned": "finetune.enabled",
                "bm25": "bm25.enabled", "colbert": "colbert.enabled / colbert.datasets"}


MARK = "¹"  # a capacity certified by construction
TIE_RULE = ("Identical documents score identically; a non-gold document tied with a gold one ranks first (pessimistic), "
            "in every method, so the probe's capacity stays a lower bound on any encoder; a document a method does not "
            "retrieve (BM25: no query term in it) is not ranked; recall@k and nDCG@k are computed from each gold "
            "document's rank in the full ranking.")
CONSTRUCTION_RULES = ("n_docs <= dim + 1 with affinely independent documents, or a single gold document among distinct "
                      "documents of equal norm")


def _constructed(r) -> bool:
    """Whether a summary row's probe certified every query by construction (split all)."""
    return r.by_construction == 1.0


def _capacity_cell(r) -> str:
    """The summary table's capacity cell: the value, marked when certified by construction."""
    return _f(r.capacity) + (MARK if _constructed(r) else "")


def _causes(r) -> list[float] | None:
    """A summary row's uncertified fractions by cause (CAUSES order); None when not recorded."""
    vals = [getattr(r, f"uncertified_{c}") for c in CAUSES]
    return None if any(v != v for v in vals) else vals


def _causes_cell(r) -> str:
    """The summary table's cause split: "0.020 / 0.000 / 0.000"; "not recorded" when the probe
    ran without recording causes (older results); "–" when the probe did not run."""
    vals = _causes(r)
    if vals is not None:
        return " / ".join(f"{v:.3f}" for v in vals)
    return "not recorded" if r.certified == r.certified else "–"


def _glance(r) -> str:
    """One "At a glance" bullet (a summary row at its stated k; R-precision where gold-set
    sizes vary, and the bullet says so)."""
    at = f"R-precision, held-out; {r.gold_note}" if r.k == RPREC else f"recall@{r.k}, held-out"
    bits = [f"**{r.dataset} / {r.encoder}** ({at}):"]
    if r.capacity == r.capacity:
        cert = f", {r.certified:.0%} of queries certified" if r.certified == r.certified else ""
        vals = _causes(r)
        if vals is not None and r.certified < 1:
            cert += " (uncertified: " + ", ".join(f"{v:.1%} {n}" for v, n in zip(vals, CAUSES.values())) + ")"
        built = f"{MARK} (certified by construction)" if _constructed(r) else ""
        bits.append(f"the index supports {r.capacity:.3f}{built}{cert};")
    else:
        bits.append("capacity not measured (probe not run);")
    if r.gap == r.gap:
        bits.append(f"the {r.gap_of} encoder reaches {(r.finetuned_heldout if r.gap_of == 'fine-tuned' else r.pretrained):.3f}, "
                    f"leaving **{r.gap:.3f} of capacity unused**.")
        if r.gap_of == "fine-tuned" and r.pretrained == r.pretrained and r.pretrained > r.finetuned_heldout:
            bits.append(f"Fine-tuning lowered held-out recall (pre-trained {r.pretrained:.3f}; train rose to {r.finetuned_train:.3f}).")
    elif r.pretrained == r.pretrained:
        bits.append(f"the pre-trained encoder reaches {r.pretrained:.3f}.")
    extra = [f"{n} {v:.3f}" for n, v in (("ColBERT", r.colbert), ("BM25", r.bm25)) if v == v]
    if extra:
        bits.append("For reference: " + ", ".join(extra) + ".")
    return "- " + " ".join(bits)


def _construction_note(table: pd.DataFrame, construction: Mapping[tuple[str, str], str]) -> list[str]:
    """The footnote of the capacity cells marked certified by construction (none: no lines)."""
    pairs = list(dict.fromkeys((r.dataset, r.encoder) for r in table.itertuples(index=False) if _constructed(r)))
    if not pairs:
        return []
    why = "; ".join(f"{d} / {e}: {construction.get((d, e), CONSTRUCTION_RULES)}" for d, e in pairs)
    return [f"{MARK} Certified by construction: every query's certificate was guaranteed before any optimisation, so "
            f"this capacity is a property of the index's shape, not something the probe had to find ({why}).", ""]


def bm25_variant(config: Mapping | None) -> str | None:
    """The name of the BM25 variant a run config selects (``capgap.bm25.variant_name`` of
    ``config["bm25"]`` minus ``enabled``; keys it does not take are ignored); None when there is
    no config or no ``bm25`` section; a note instead of a name for an unknown backend/method."""
    import inspect

    from .bm25 import variant_name

    cfg = (config or {}).get("bm25")
    if not isinstance(cfg, Mapping):
        return None
    known = inspect.signature(variant_name).parameters
    args = {k: v for k, v in cfg.items() if k != "enabled" and k in known}
    try:
        return variant_name(**args)
    except ValueError as e:
        return f"unknown variant ({e})"


def _bm25_text(variant: str | None) -> str:
    return f"`{variant}`" if variant else "not recorded (no run config)"


def render_summary(table: pd.DataFrame, df: pd.DataFrame, bm25: str | None = None,
                   construction: Mapping[tuple[str, str], str] | None = None) -> list[str]:
    """The "At a glance" bullets and the paper-layout summary table (``bm25``: the BM25 variant's
    name, see ``bm25_variant``; ``construction``: (dataset, encoder) -> why the probe's
    certificates were guaranteed, for the footnote of cells marked certified by construction)."""
    out = ["## At a glance: capacity vs what the encoders reach", ""]
    if table.empty:
        return out + ["No dataset was available, so nothing was measured.", ""]
    out += [_glance(r) for r in table[table["stated"]].itertuples(index=False)]
    out.append("")
    out.append("Held-out recall@k at each dataset's stated k (the gold-set size where it is fixed), then @10 and @100 "
               "(a k at or above the corpus size is left out: it retrieves every document). "
               "Capacity = the probe's recall: a lower bound on the best recall a query vector can reach on this index. "
               "Certified = fraction of held-out queries whose gold documents the probe ranks strictly above every other; "
               "the uncertified rest by cause: duplicate documents (a gold document has an identical non-gold copy: no "
               "vector separates them), tied queries (identical query text with a different gold set: one vector must "
               "serve both), geometry (the index itself). "
               "Gap = capacity − fine-tuned held-out recall (pre-trained where fine-tuning did not run).")
    if (table["k"] == RPREC).any():
        out[-1] += (" Where gold-set sizes vary, the stated row is R-precision (recall at k = each query's own gold-set "
                    "size, |top-|gold| ∩ gold| / |gold|; trec_eval's Rprec), so no query is judged at a k below its gold "
                    "set: " + ", ".join(f"{r.dataset} ({r.gold_note})" for r in
                                       table[table["k"] == RPREC].drop_duplicates("dataset").itertuples(index=False)) + ".")
    out.append("")
    if "bm25" in set(df["method"]):
        out += [f"BM25 = {_bm25_text(bm25)}.", ""]
    out.append(_md_table(["dataset", "encoder", "k", "capacity (probe)", "certified", "uncertified: duplicate / tied / geometry",
                          "pre-trained", "fine-tuned train", "fine-tuned held-out", "gap", "BM25", "ColBERT"],
                         [[r.dataset, r.encoder, f"{_k_text(r.k)}{' (stated)' if r.stated else ''}", _capacity_cell(r), _f(r.certified),
                           _causes_cell(r), _f(r.pretrained), _f(r.finetuned_train), _f(r.finetuned_heldout), _f(r.gap),
                           _f(r.bm25), _f(r.colbert)]
                          for r in table.itertuples(index=False)]))
    out.append("")
    out += _construction_note(table, construction or {})
    missing = [m for m in METHOD_ORDER if m not in set(df["method"])]
    if missing:
        out.append("Not run in this config (their columns show –): " + ", ".join(f"{m} ({NOT_RUN_HINT[m]})" for m in missing) + ".")
        out.append("")
    return out


def render_paper(rows: Sequence[dict]) -> list[str]:
    """The paper's published numbers beside ours, one verdict per claim and run."""
    out = ["## The paper's numbers beside ours", "",
           "Every claim of the checked-in reference table (`capgap/paper_reference.yaml`) with our nearest runs. "
           "*Verdict* compares numbers only where our run uses the paper's data and model (reproduced within the "
           "stated tolerance, or not reproduced by how much); otherwise it says why the runs are not comparable. "
           f"*Pattern* checks the paper's qualitative finding on our run: generalisation gap = train − held-out ≥ {paper.GAP} "
           f"and capacity − held-out ≥ {paper.GAP}; late interaction = held-out ≥ {paper.LATE} and ≥ {paper.GAP} above the best "
           f"fine-tuned single-vector held-out; capacity high / saturated = ≥ {paper.HIGH}. The paper's summary does not "
           "state its recall cut-off: we compare at the gold-set size (LIMIT: 2)"
           + ("; where gold-set sizes vary, at R-precision (recall at each query's own gold-set size)"
              if any(str(r["k"]).startswith("R-precision") for r in rows) else "") + ".", ""]
    out.append(_md_table(["claim", "our run", "k", "paper", "ours", "verdict", "pattern"],
                         [[r["claim"] if i == 0 or rows[i - 1]["claim"] != r["claim"] else "″", r["run"], r["k"], r["paper"],
                           r["ours"], r["verdict"], r["pattern"]] for i, r in enumerate(rows)]))
    out.append("")
    holds = [r for r in rows if r["pattern"].startswith("holds")]
    measured = [r for r in rows if r["pattern"].startswith(("holds", "does not hold"))]
    untested = [r for r in rows if r["pattern"].startswith("not tested")]
    n = {v: sum(r["verdict"].startswith(v) for r in rows) for v in ("reproduced", "not reproduced", "not comparable")}
    out.append(f"**The paper's pattern holds on {len(holds)} of the {len(measured)} runs where it could be checked.** "
               + (f"{len(untested)} more could not test it (the encoder did not fit its train queries). " if untested else "")
               + 
               f"Numerically: {n['reproduced']} of {len(rows)} rows reproduced, {n['not reproduced']} not reproduced, "
               f"{n['not comparable']} not comparable (a different model or different data).")
    out.append("")
    out.append("Sources:")
    out.append("")
    out += [f"- {s}" for s in dict.fromkeys(r["source"] for r in rows)]
    out.append("")
    return out


def render_markdown(df: pd.DataFrame, statuses: list[dict], ks: Sequence[int], ndcg_k: int = EVAL_DEFAULTS["ndcg_k"], *,
                    golds: Mapping[str, dict] | None = None, table: pd.DataFrame | None = None,
                    paper_rows: Sequence[dict] = (), figs: Mapping[str, str | None] | None = None,
                    bm25: str | None = None, construction: Mapping[tuple[str, str], str] | None = None) -> str:
    """The report's Markdown text, hardness and provenance sections excluded.

    ``figs``: figure key (see FIGURES) -> path relative to the report, or None when the
    figure is a placeholder (its stage not run: the section says so). ``bm25``: the BM25
    variant's name (``bm25_variant``; None: not recorded). ``construction``: (dataset,
    encoder) -> why the probe's certificates were guaranteed (``construction_reasons``)."""
    figs = figs or {}
    golds = golds or {}
    construction = construction or {}
    out = ["# capgap report", ""]
    out.append(
        "Is retrieval failing because the index can't represent the answer, or because the query encoder can't "
        "learn it? Recall@k = |top-k ∩ gold| / |gold| averaged over queries (LIMIT/MTEB); "
        f"nDCG@{ndcg_k} with linear gain (trec_eval). Splits: train, held-out, all queries. "
        "Generated from `reports/results.csv`."
    )
    out.append("")
    out += ["**How numbers are computed.** " + TIE_RULE, ""]
    if table is not None:
        out += render_summary(table, df, bm25, construction)
        out += _figure(figs, "gap_png", "Capacity vs held-out recall", "capacity vs held-out recall per dataset", "the probe")
    if paper_rows:
        out += render_paper(paper_rows)
        out += _figure(figs, "scatter_png", "Train vs held-out", "train vs held-out recall, ours and the paper's", "fine-tuning")
    avail = [s for s in statuses if s.get("available")]
    missing = [s for s in statuses if not s.get("available")]
    out += render_datasets(avail, df, golds, bm25)
    if missing:
        out.append("## Datasets that could not be obtained")
        out.append("")
        for s in missing:
            out.append(f"- **{s['dataset']}**: {s['reason']}. {s['hint']}")
        out.append("")
    probe = df[df["method"] == "probe"]
    out.append("## Capacity probe vs the query encoders (held-out queries)")
    out.append("")
    if probe.empty:
        out += ["Not run (probe.enabled is false, or no dataset was available).", ""]
    else:
        out.append(
            "Probe = a per-query ranking SVM on the frozen index (Joachims' 1-slack cutting plane): "
            "its recall is a lower bound on the best recall any query vector can reach on that index; "
            "certified = every gold document ranked above every non-gold one; not converged = fraction of "
            "queries that hit the iteration cap."
        )
        out.append("")

        def one(d, e, m, split, metric, k=None):
            return _value(df, d, e, m, split, metric, k)

        rows = []
        for (d, e), _ in probe.groupby(["dataset", "encoder"], sort=False):
            rows.append([d, e] + [one(d, e, m, "heldout", "recall", k) for k in (2, 10) for m in ("probe", "pretrained", "finetuned")]
                        + [one(d, e, "finetuned", "train", "recall", 2),
                           one(d, e, "probe", "heldout", "certified"), _sci(one(d, e, "probe", "heldout", "slack_median")),
                           _count(one(d, e, "probe", "heldout", "iterations_median")), one(d, e, "probe", "heldout", "not_converged")])
        out.append(_md_table(["dataset", "encoder", "probe R@2", "pre-trained R@2", "fine-tuned R@2", "probe R@10", "pre-trained R@10",
                              "fine-tuned R@10", "fine-tuned train R@2", "certified", "median slack", "median iterations", "not converged (fraction)"], rows))
        out.append("")
        out.append("Fine-tuned = LoRA on the query side, InfoNCE against the frozen index, trained on train queries only; "
                   "the columns are held-out recall unless marked train.")
        out.append("")
        out += render_certification(probe, construction)
    out += _figure(figs, "slack_png", "Probe slack distribution", "the probe's per-query slack", "the probe",
                   "Per-query slack (pair-averaged hinge loss) of the probe's cutting-plane solution at the final C. The "
                   "cutting plane stops once the most violated constraint exceeds the working set's slack by at most eps "
                   "(dotted line), so slack at or below eps is solver tolerance; certified queries separate every gold "
                   "document strictly, whatever their slack.")
    out += _side_by_side(df)
    out += render_near_miss(df, figs.get("near_miss_png"), ndcg_k)
    for ds in sorted(df["dataset"].unique()):
        sub = df[df["dataset"] == ds]
        out.append(f"## {ds}")
        out.append("")
        for split in SPLIT_ORDER:
            part = sub[sub["split"] == split]
            if part.empty:
                continue
            header = ["method", "queries"] + [f"R@{k}" for k in ks] + [f"nDCG@{ndcg_k}"]
            rows = []
            for (method, enc), g in part.groupby(["method", "encoder"], sort=False):
                def val(metric, k):
                    v = g[(g["metric"] == metric) & (g["k"] == k)]["value"]
                    return float(v.iloc[0]) if len(v) else "–"

                n = g[g["metric"] == "n_queries"]["value"]
                rows.append([_label(method, enc), int(n.iloc[0]) if len(n) else "–"] + [val("recall", k) for k in ks] + [val("ndcg", ndcg_k)])
            out.append(f"**{split}**")
            out.append("")
            out.append(_md_table(header, rows))
            out.append("")
    out += _figure(figs, "recall_png", "Recall@k", "held-out recall@k per method", "any retrieval",
                   f"Held-out recall@k for every method at k = {', '.join(map(str, ks))}.")
    out += _figure(figs, "curves_png", "Fine-tuning curves", "fine-tuning curves", "fine-tuning",
                   "Recall@2 of the query encoder on train and held-out queries during fine-tuning.")
    return "\n".join(out)


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
    per = ", ".join(f"{lab} {sum(u.get(sp, {}).get(r, 0) for r in ('absent', 'empty', 'excluded'))}"
                    for sp, lab in (("train", "train"), ("heldout", "held-out")))
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


def render_datasets(avail: Sequence[dict], df: pd.DataFrame, golds: Mapping[str, dict], bm25: str | None = None) -> list[str]:
    """The "Datasets" section: sizes, gold sets, gold no method can find (``_unfindable_cell``),
    duplicate document / query groups (with up to 3 example groups each), tied queries, source
    and split rule; the BM25 variant when BM25 ran."""
    out = ["## Datasets", ""]
    out.append(_md_table(
        ["dataset", "documents", "queries", "train", "held-out", "gold per query", "dropped (no gold)", "duplicate documents",
         "duplicate queries", "tied queries (probe)", "source", "split rule", "gold no method can find"],
        [[s["dataset"], s["n_docs"], s["n_queries"], s["n_train"], s["n_heldout"], _gold_text(golds.get(s["dataset"])),
          s["dropped_queries_without_gold"], _duplicates_cell(s, "duplicate_documents", "documents"),
          _duplicates_cell(s, "duplicate_queries", "queries"), _tied_queries(df, s["dataset"]), _source(s["source"]),
          s["split_rule"], _unfindable_cell(s)] for s in avail],
    ))
    out.append("")
    norms = sorted({str(s["text_normalization"]) for s in avail if s.get("text_normalization")})
    norm = f"after {'/'.join(norms)} normalisation and whitespace collapsing" if norms else "(text normalisation not recorded)"
    out.append("Duplicate documents: groups of documents with identical text (they score identically in every method). "
               f"Duplicate queries: groups of queries with identical text {norm}; any text encoder gives them one vector, "
               "so the probe gives them one w. Tied queries: the probe's count of queries sharing their text with another. "
               "Gold no method can find: gold pairs whose document is absent from the corpus, empty (left out) or excluded "
               "for that query; as in BRIGHT's, BEIR's and MTEB's own evaluation they stay in the gold set and are never "
               "found, so every recall and nDCG here is over the full gold set. "
               "\"not recorded\": the files predate these counts.")
    out.append("")
    bullets = []
    for s in avail:
        ex = [f"duplicate {noun} {e}" for noun in ("documents", "queries") if (e := _duplicate_examples(s, f"duplicate_{noun}"))]
        if ex:
            bullets.append(f"- **{s['dataset']}**: " + "; ".join(ex) + ".")
    if bullets:
        out += ["Examples (up to 3 groups each):", "", *bullets, ""]
    if "bm25" in set(df["method"]):
        out += [f"BM25 (every BM25 number in this report): {_bm25_text(bm25)}.", ""]
    return out


def render_certification(probe: pd.DataFrame, construction: Mapping[tuple[str, str], str] | None = None) -> list[str]:
    """The probe's certificates by cause, per dataset x encoder x split (``probe``: results.csv
    rows of method probe): certified, uncertified by cause (duplicate documents, tied queries,
    geometry), the counts by outcome (``queries_<outcome>``; – in results from before they were
    recorded), tied queries (count) and the fraction certified by construction, with the reason
    where it is not zero. Older results without these rows: a sentence saying so, no table."""
    names = [f"uncertified_{c}" for c in CAUSES] + ["tied_queries", "certified_by_construction"]
    if not probe["metric"].isin(names).any():
        return ["Why uncertified queries stay uncertified was not recorded in these results (probe runs from before "
                "causes were recorded): certified counts every cause together.", ""]
    rows, built = [], []
    for (d, e), g in probe.groupby(["dataset", "encoder"], sort=False):
        for split in [s for s in SPLIT_ORDER if (g["split"] == s).any()]:
            v = {m: _value(g, d, e, "probe", split, m) for m in ["certified", *names]}
            dec = [_value(g, d, e, "probe", split, f"queries_{o}") for o in OUTCOMES]
            rows.append([d, e, split, _f(v["certified"]), *(_f(v[f"uncertified_{c}"]) for c in CAUSES),
                         " / ".join(_count(x) for x in dec), _count(v["tied_queries"]), _f(v["certified_by_construction"])])
        frac = _value(g, d, e, "probe", "all", "certified_by_construction")
        if frac != "–" and frac > 0:
            built.append(f"- {d} / {e}: {'every query' if frac == 1 else f'{frac:.3f} of all queries'} certified by construction "
                         f"({(construction or {}).get((d, e), CONSTRUCTION_RULES)}).")
    out = ["Certificates by cause: a query the probe does not certify is counted under *duplicate documents* when a gold "
           "document has an identical non-gold copy in the index (no vector separates identical rows) and the gold set is "
           "not proven inseparable with those copies set aside, under *tied queries* "
           "when another query with the same text has a different gold set (one vector must serve both), else under "
           "*geometry* (the index itself). Certified by construction = the certificate was guaranteed before any "
           f"optimisation ({CONSTRUCTION_RULES}). – = not recorded. *Decided* counts queries by how the probe decided them: "
           "certified / certified up to identical copies (the gold set separated once a gold document's identical non-gold "
           "copies are set aside: recall is then the best any vector reaches from k = |gold| + |copies| on) / proven not "
           "separable (an inseparability proof or the exact LP) / text-tied with crossing gold sets / undecided.", ""]
    out.append(_md_table(["dataset", "encoder", "split", "certified", *(f"uncertified: {n}" for n in CAUSES.values()),
                          "decided: certified / copies / not separable / tied / undecided", "queries sharing their text", "certified by construction"], rows))
    out.append("")
    return out + (built + [""] if built else [])


def _read_jsonl(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def construction_reasons(per_query: Sequence[str | Path], fps: Sequence[dict] = ()) -> dict[tuple[str, str], str]:
    """(dataset, encoder) -> why the probe's certificates were guaranteed: the distinct
    ``by_construction`` reasons of its ``results/{dataset}/{encoder}/probe/per_query.jsonl``
    lines, with the index's size from its fingerprint (``fps``: ``provenance.fingerprints``)
    when known. Pairs whose lines record no reason are left out (callers fall back to
    CONSTRUCTION_RULES)."""
    size = {(f["dataset"], f["encoder"]): f"{f['n_docs']} documents in {f['dim']} dimensions"
            for f in fps if f.get("n_docs") is not None and f.get("dim") is not None}
    out = {}
    for p in per_query:
        key = (Path(p).parts[-4], Path(p).parts[-3])
        reasons = list(dict.fromkeys(r["by_construction"] for r in _read_jsonl(p) if r.get("by_construction")))
        if reasons:
            out[key] = "; ".join(reasons) + (f"; {size[key]}" if key in size else "")
    return out


def _figure(figs: Mapping[str, str | None], key: str, title: str, alt: str, stage: str, text: str = "") -> list[str]:
    if key not in figs:
        return []
    out = [f"## {title}", ""]
    if figs[key] is None:
        return out + [f"Not drawn: {stage} was not run in this config.", ""]
    if text:
        out += [text, ""]
    return out + [f"![{alt}]({figs[key]})", ""]


def render_missed(table: pd.DataFrame, per_query: Sequence[str | Path], runs: Sequence[str | Path],
                  data_dirs: Sequence[str | Path], examples: int = 5) -> list[str]:
    """"Geometrically easy but missed": per dataset x encoder at the stated k (where that is
    R-precision, at the table's next, numeric k), the queries the
    probe shows the index admits but the pre-trained encoder's exact run misses
    (``capgap.diagnosis.admitted_but_missed``, the encoder-limited verdict of ``capgap diagnose``).
    Run files are read by ``capgap.trec.read_run``: their percent-encoded ids are decoded, so
    the ids passed on are the dataset's own."""
    from .diagnosis import admitted_but_missed, load_qrels_file
    from .trec import read_run

    out = ["## Geometrically easy but missed (pre-trained encoder)", ""]
    if not per_query or not runs:
        return out + ["Not computed: the probe or the pre-trained evaluation was not run.", ""]
    probe_of = {(Path(p).parts[-4], Path(p).parts[-3]): p for p in per_query}
    run_of = {(Path(p).parts[-4], Path(p).parts[-3]): p for p in runs}
    qrels_of = {Path(d).parts[-2]: Path(d) / "qrels.tsv" for d in data_dirs}
    rows = []
    numeric = table[table["k"] != RPREC].drop_duplicates(["dataset", "encoder"])  # the stated k, or the first after R-precision
    for r in numeric.itertuples(index=False):
        key = (r.dataset, r.encoder)
        if key not in probe_of or key not in run_of or r.dataset not in qrels_of:
            continue
        prows = _read_jsonl(probe_of[key])
        run = {q: [d for d, _ in docs] for q, docs in read_run(run_of[key]).items()}
        missed = admitted_but_missed(prows, run, load_qrels_file(qrels_of[r.dataset]), int(r.k))
        ex = ", ".join(f"{m['query_id']} (best gold rank {m['best_gold_rank'] or '> run depth'})" for m in missed[:examples])
        rows.append([r.dataset, r.encoder, r.k, len(prows), len(missed), ex or "–"])
    out.append("Queries whose gold set the frozen index admits at k (the probe certifies them or ranks every gold document "
               "in its top k) but whose pre-trained query embedding misses a gold document at k: the encoder-limited "
               "verdict of `capgap diagnose`, run on the DAG's own probe and retrieval outputs.")
    out.append("")
    out.append(_md_table(["dataset", "encoder", "k", "queries", "admitted but missed", f"first {examples}"], rows))
    out.append("")
    return out


def _bm25_provenance(config: Mapping | None) -> list[str]:
    """The provenance block's BM25 line: the variant the config selects, and whether it ran."""
    bm = (config or {}).get("bm25")
    if not isinstance(bm, Mapping):
        return ["**BM25**: variant not recorded (no run config).", ""]
    off = "" if bm["enabled"] else " (bm25.enabled is false: not run)"
    return [f"**BM25**: {_bm25_text(bm25_variant(config))}{off}", ""]


def _code_rows(by_code: Mapping[str, list[str]]) -> dict[str, str]:
    """Provenance rows naming the capgap code the jobs ran (from their logs) and the report's
    own: one row when every job ran the same code, one per version otherwise."""
    rows = {}
    if len(by_code) == 1:
        (code, jobs), = by_code.items()
        rows["capgap code (every job)"] = f"{code} ({len(jobs)} jobs)"
    else:
        for i, (code, jobs) in enumerate(sorted(by_code.items(), key=lambda kv: -len(kv[1])), start=1):
            rows[f"capgap code, version {i} of {len(by_code)}"] = f"{code}: {len(jobs)} jobs, e.g. {', '.join(jobs[:3])}"
    rows["capgap code (this report)"] = provenance.code_summary()
    return rows


def render_provenance(config: Mapping | None, statuses: Sequence[dict], fps: Sequence[dict], times: Sequence[dict],
                      packages: Mapping[str, str], host: Mapping[str, str], colbert_model: str | None = None) -> list[str]:
    """The provenance block: config hash, machine, packages, data hashes, model fingerprints,
    wall time per stage."""
    out = ["## Provenance", ""]
    out.append(f"Config sha256 `{provenance.config_hash(config) if config is not None else 'unknown'}` (canonical JSON of "
               f"the run's config). Rendered {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.")
    out.append("")
    out.append("**Machine** (the one that rendered this report; per-job times below are where each job ran)")
    out.append("")
    out.append(_md_table(["", "value"], [[k, v] for k, v in host.items()]))
    out.append("")
    out.append("**Packages**")
    out.append("")
    out.append(_md_table(["package", "version"], [[k, v] for k, v in packages.items()]))
    out.append("")
    out.append("**Data**")
    out.append("")
    rows = []
    for s in statuses:
        if not s.get("available"):
            continue
        src = s.get("source", {})
        where = src.get("folder") or src.get("url") or src.get("path") or "–"
        hashes = ", ".join(f"{f} `{h[:16]}`" for f, h in sorted((src.get("sha256") or {}).items())) or "– (generated from the seeded config)"
        rows.append([s["dataset"], _source(src), where, hashes])
    out.append(_md_table(["dataset", "source", "location", "file sha256 (first 16 hex)"], rows) if rows else "No dataset available.")
    out.append("")
    out += _bm25_provenance(config)
    out.append("**Models** (frozen-index fingerprints)")
    out.append("")
    if fps:
        out.append(_md_table(["dataset", "encoder", "model", "weights sha256 (first 16 hex)", "dim", "documents", "corpus sha256 (first 16 hex)"],
                             [[f["dataset"], f["encoder"], f.get("model", "–"), f"`{str(f.get('weights_sha256', '–'))[:16]}`",
                               f.get("dim", "–"), f.get("n_docs", "–"), f"`{str(f.get('corpus_sha256', '–'))[:16]}`"] for f in fps]))
    else:
        out.append("No frozen index was built.")
    if colbert_model:
        out += ["", f"ColBERT (late interaction): `{colbert_model}`, fine-tuned per dataset."]
    out.append("")
    out.append("**Wall time per stage** (Snakemake `benchmark:` files; jobs may have shared the cores)")
    out.append("")
    if times:
        t = pd.DataFrame(times)
        out.append(_md_table(["rule", "job", "wall (s)", "max RSS (MB)", "CPU (s)"],
                             [[r.rule, r.job, f"{r.s:.1f}", f"{r.max_rss:.0f}", f"{r.cpu_time:.1f}"] for r in t.itertuples(index=False)]))
        out.append("")
        per = t.groupby("rule", sort=False)["s"].sum()
        out.append("Total " + f"{t['s'].sum() / 60:.1f} min of job wall time: " + ", ".join(f"{r} {v:.0f} s" for r, v in per.items()) + ".")
    else:
        out.append("No benchmark files (stages run outside Snakemake).")
    out.append("")
    return out


HTML_STYLE = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;line-height:1.45}"
              "table{border-collapse:collapse;margin:1em 0;font-size:.85em}th,td{border:1px solid #ccc;padding:3px 6px}"
              "th{background:#f3f3f3}img{max-width:100%}code{background:#f6f6f6}")


def render_html(md: str, base: str | Path, title: str = "capgap report") -> str:
    """A self-contained HTML page from the report's Markdown: every ``![alt](path)`` image
    (relative to ``base``) is embedded as a base64 ``data:`` URI, so the page opens offline.

    Raises ``FileNotFoundError`` when a referenced figure is missing."""
    import markdown

    def embed(m):
        alt, path = m.group(1), m.group(2)
        data = base64.b64encode((Path(base) / path).read_bytes()).decode("ascii")
        return f"![{alt}](data:image/png;base64,{data})"

    body = markdown.markdown(re.sub(r"!\[([^\]]*)\]\(([^)\s]+\.png)\)", embed, md), extensions=["tables"])
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>"
            f"<style>{HTML_STYLE}</style></head><body>\n{body}\n</body></html>\n")


def headline_metrics(table: pd.DataFrame, hdf: pd.DataFrame) -> dict:
    """Headline numbers for ``dvc metrics`` (``reports/metrics.json``): per dataset and
    encoder at the stated k -- capacity, certified, pre-trained, fine-tuned train/held-out, gap
    -- plus BM25 and ColBERT held-out (keys ``capacity@2``, ...; ``capacity@rprec``, ... where the
    stated row is R-precision, see ``summary_table``); per parity P the perfect, best trained
    and random held-out recall. Values not measured are left out."""
    out: dict = {}

    def put(d: dict, key: str, v) -> None:
        if v == v and v is not None:
            d[key] = round(float(v), 6)

    for r in table[table["stated"]].itertuples(index=False):
        e = out.setdefault(r.dataset, {}).setdefault(r.encoder, {})
        for name in ("capacity", "pretrained", "finetuned_train", "finetuned_heldout", "gap"):
            put(e, f"{name}@{r.k}", getattr(r, name))
        put(e, "certified", r.certified)
        put(out[r.dataset].setdefault("bm25", {}), f"heldout@{r.k}", r.bm25)
        put(out[r.dataset].setdefault("colbert", {}), f"heldout@{r.k}", r.colbert)
        out[r.dataset] = {k: v for k, v in out[r.dataset].items() if v}
    rec = hdf[(hdf["metric"] == "recall") & (hdf["split"] == "heldout")]
    for ds, g in rec.groupby("dataset", sort=False):
        p = out.setdefault("parity", {}).setdefault(ds.removeprefix(HARDNESS_PREFIX).join(("P", "")), {})
        for m in ("perfect", "random"):
            put(p, m, g[g["method"] == m]["value"].max() if (g["method"] == m).any() else None)
        tr = g[(g["method"] == "trained") & ~g["encoder"].str.contains(r"-m\d+$")]
        put(p, "best_trained", tr["value"].max() if len(tr) else None)
    return out


def recall_plot_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Held-out recall@k of every method as a long table for ``dvc plots`` (columns
    ``run, dataset, method, encoder, k, recall``; ``run`` = "dataset / method (encoder)")."""
    d = df[(df["metric"] == "recall") & (df["split"] == "heldout")]
    rows = [{"run": f"{r.dataset} / {figures._label(r.method, r.encoder)}", "dataset": r.dataset, "method": r.method,
             "encoder": r.encoder, "k": int(r.k), "recall": round(float(r.value), 6)} for r in d.itertuples(index=False)]
    return pd.DataFrame(rows, columns=["run", "dataset", "method", "encoder", "k", "recall"])


def paper_points() -> list[dict]:
    """The paper's train / held-out points of the reference table (for the scatter figure)."""
    pts = []
    for c in paper.load_reference()["claims"]:
        v = c.get("values", {})
        if "train" in v and "heldout" in v:
            pts.append({"label": c.get("short", c["id"]), "train": float(v["train"]), "heldout": float(v["heldout"])})
    return pts



def summary(df: pd.DataFrame, ks: Sequence[int], ndcg_k: int = EVAL_DEFAULTS["ndcg_k"]) -> dict:
    """Every number as a nested dict (``summary.json``): dataset -> method[/encoder] -> split -> metric@k -> value
    (just ``metric`` for metrics without a cut-off: certified, slack_median, ...). Rows of
    compressed index variants (``compression`` not empty) are left out: they are the
    compression section's (``compression_table``), and so are empty values (nan)."""
    out: dict = {}
    df = uncompressed(df)
    for r in df[(df["metric"] != "n_queries") & df["value"].notna()].itertuples(index=False):
        key = f"{r.method}/{r.encoder}" if r.encoder else r.method
        name = r.metric if pd.isna(r.k) or r.k == "" else f"{r.metric}@{r.k}"  # certified, slack_median: no k
        out.setdefault(r.dataset, {}).setdefault(key, {}).setdefault(r.split, {})[name] = round(float(r.value), 6)
    return out


def build_report(inputs: ReportInputs, outputs: ReportOutputs, ks: Sequence[int], ndcg_k: int = EVAL_DEFAULTS["ndcg_k"], *,
                 config: Mapping | None = None, models: Mapping[str, str] | None = None,
                 colbert_model: str | None = None) -> pd.DataFrame:
    """Render every report output from the per-job tables; return results.csv's frame.

    ``models``: encoder name -> model id (for the paper comparison and provenance);
    ``colbert_model``: the ColBERT model id when ColBERT ran. Rows of the parity task
    (datasets ``parity-P*``) go to results.csv and summary.json like every row, and to their
    own section and figures (``inputs.hardness``: the hardness rule's summary.json; empty when
    hardness is disabled). Rows of compressed index variants (rule ``compress``, column
    ``compression`` not empty) go to results.csv and to the compression section and figure
    only: every other section, figure, summary.json, metrics.json and plots/recall_at_k.csv is
    computed from the rows of the frozen index as built, as if they were absent."""
    df_all = collect(inputs.tables)
    frozen = uncompressed(df_all)
    hard = frozen["dataset"].astype(str).str.startswith(HARDNESS_PREFIX)
    df, hdf = frozen[~hard], frozen[hard]
    statuses = [json.loads((Path(d) / "status.json").read_text(encoding="utf-8")) for d in inputs.data]
    golds = {s["dataset"]: gold_sizes(Path(d) / "qrels.tsv") for d, s in zip(inputs.data, statuses)
             if s.get("available") and (Path(d) / "qrels.tsv").is_file()}
    infos = dataset_infos(statuses, golds)
    table = summary_table(df, infos, ks)
    model_of = {(m, e): (models or {}).get(e, e) for m, e in df[["method", "encoder"]].drop_duplicates().itertuples(index=False)}
    model_of.update({("bm25", ""): "bm25", ("colbert", ""): colbert_model or "colbert"})
    paper_rows = paper.compare(df, infos, model_of)

    with atomic_open(outputs.csv, "w", encoding="utf-8", newline="") as fh:
        df_all.to_csv(fh, index=False, lineterminator="\n")
    base = Path(outputs.md).parent
    rel = {k: str(Path(getattr(outputs, k)).relative_to(base)) for k in FIGURES}
    drawn = {
        "recall_png": figures.plot_recall_curves(df, outputs.recall_png),
        "gap_png": figures.plot_gap(table[table["stated"]], outputs.gap_png),
        "scatter_png": figures.plot_train_vs_heldout(table[table["stated"]], paper_points(), outputs.scatter_png),
        "slack_png": figures.plot_slack(inputs.per_query, outputs.slack_png, eps=((config or {}).get("probe") or {}).get("eps")),
        "curves_png": figures.plot_curves(inputs.curves, outputs.curves_png),
        "near_miss_png": figures.plot_near_miss(df, outputs.near_miss_png),
    }
    figs = {k: (rel[k] if ok else None) for k, ok in drawn.items()}
    fps = provenance.fingerprints(inputs.fingerprints)
    md = render_markdown(df, statuses, ks, ndcg_k, golds=golds, table=table, paper_rows=paper_rows, figs=figs,
                         bm25=bm25_variant(config), construction=construction_reasons(inputs.per_query, fps))
    md = md.rstrip("\n") + "\n\n" + "\n".join(render_missed(table, inputs.per_query, inputs.runs, inputs.data))
    ctable = compression_table(compressed(df_all), infos, ks)
    drew = figures.plot_compression(ctable, outputs.compression_png)
    if not ctable.empty:  # the section exists only where rule compress ran
        md = md.rstrip("\n") + "\n\n" + "\n".join(render_compression(ctable, rel["compression_png"] if drew else None))
    figures.plot_hardness(hdf, outputs.hardness_p, outputs.hardness_m)
    hs = json.loads(Path(inputs.hardness[0]).read_text(encoding="utf-8")) if inputs.hardness else None
    md = md.rstrip("\n") + "\n\n" + "\n".join(render_hardness(hdf, hs, rel["hardness_p"] if hs else None, rel["hardness_m"] if hs else None))
    md = md.rstrip("\n") + "\n\n" + "\n".join(render_provenance(
        config, statuses, fps, provenance.stage_times(inputs.benchmarks),
        {**provenance.package_versions(), **_code_rows(provenance.job_code(inputs.benchmarks))}, provenance.machine(), colbert_model if "colbert" in set(df["method"]) else None)) + "\n"
    write_text(outputs.md, md)
    write_text(outputs.html, render_html(md, base))
    write_json(outputs.summary, summary(frozen, ks, ndcg_k))
    write_json(outputs.metrics, headline_metrics(table, hdf))
    with atomic_open(outputs.recall_csv, "w", encoding="utf-8", newline="") as fh:
        recall_plot_rows(df).to_csv(fh, index=False, lineterminator="\n")
    return df_all



def render_hardness(hdf: pd.DataFrame, hsummary: dict | None, fig_p: str | None, fig_m: str | None) -> list[str]:
    """The report's hardness section: sizes, recall per P (perfect encoder, probe, trained
    encoders train/held-out, random k/n), chance agreement, figures."""
    if hdf.empty or not hsummary:
        return ["## Hardness: the parity task", "", "Not run (hardness.enabled is false).", ""]
    out = ["## Hardness: the parity task", "",
           "Queries are P-bit keyword indicators, documents the 2^d hypercube vertices, the gold set the Hamming "
           "ball of radius rho around c = Aq mod 2 (arXiv 2610.02749). Recall is at k = ball size; the random "
           "baseline is k/n.", ""]
    out.append(_md_table(["P", "d", "n", "k", "k/n", "log2 #intents (dP)", "perfect net hidden units", "perfect net parameters"],
                         [[s["P"], s["d"], s["n"], s["k"], s["k_over_n"], s["log2_intents"],
                           s["perfect_hidden"], s["perfect_parameters"]] for s in hsummary["sizes"]]))
    out.append("")
    out.append("d = documents' dimension, n = 2^d documents, k = ball size (the gold-set size); the perfect net is the "
               "explicit one-hidden-layer ReLU encoder that reaches recall 1 (hidden units and weights + biases). The paper's "
               f"statistical-query lower bound is {hsummary['sizes'][0].get('sq_lower_bound', '2^Omega(P)')} queries for any "
               "SQ learner to beat k/n by an inverse-polynomial margin (quoted, not computed).")
    out.append("")
    encs = [e for e in hdf[(hdf["method"] == "trained")]["encoder"].unique() if not re.search(r"-m\d+$", e)]
    rows = []
    for s in hsummary["sizes"]:
        ds = f"{HARDNESS_PREFIX}{s['P']}"
        rows.append([s["P"], _value(hdf, ds, "", "perfect", "heldout", "recall"), _value(hdf, ds, "", "probe", "all", "certified"),
                     s["k_over_n"]] + [_value(hdf, ds, e, "trained", sp, "recall") for e in encs for sp in ("train", "heldout")])
    out.append(_md_table(["P", "perfect encoder held-out", "probe certified", "random k/n"]
                         + [f"{e} {sp}" for e in encs for sp in ("train", "held-out")], rows))
    out.append("")
    ch = pd.DataFrame(hsummary["chance_agreement"])
    if not ch.empty:
        ch["diff"] = (ch["measured"] - ch["theory"]).abs()
        g = ch.groupby("P").agg(pairs=("measured", "size"), measured=("measured", "mean"), theory=("theory", "mean"),
                                max_abs_diff=("diff", "max")).reset_index()
        out.append("Chance agreement: for random intent pairs (A, A'), the fraction of random queries with Aq = A'q "
                   "against 2^-rank(A-A') (means over the pairs):")
        out.append("")
        out.append(_md_table(["P", "pairs", "measured", "theory", "max abs(measured - theory)"],
                             [[int(r.P), int(r.pairs), r.measured, r.theory, r.max_abs_diff] for r in g.itertuples()]))
        out.append("")
    if fig_p:
        out += [f"![recall vs P]({fig_p})", ""]
    sw = hdf[(hdf["method"] == "trained") & hdf["encoder"].str.contains(r"-m\d+$") & (hdf["metric"] == "recall")]
    if not sw.empty:
        sw = sw.assign(m=sw["encoder"].str.extract(r"-m(\d+)$")[0].astype(int))
        ds = sw["dataset"].iloc[0]
        base = _value(hdf, ds, "", "random", "heldout", "recall")
        out.append(f"Training-set sweep at {ds.replace(HARDNESS_PREFIX, 'P = ')}: recall@k of the MLP (InfoNCE) against the number "
                   f"of training queries m (random baseline k/n = {_f(base)}):")
        out.append("")
        out.append(_md_table(["m", "train", "held-out"],
                             [[int(m), _f(_value(g, ds, g["encoder"].iloc[0], "trained", "train", "recall")),
                               _f(_value(g, ds, g["encoder"].iloc[0], "trained", "heldout", "recall"))]
                              for m, g in sw.groupby("m", sort=True)]))
        out.append("")
    if fig_m:
        out += [f"![recall vs training queries]({fig_m})", ""]
    return out


# ---- Capacity under index compression (rule compress) ----------------------------------------

COMPRESSION_TOL = 0.01  # absolute recall: a variant "costs" a quantity when it falls more than this below float32
COMPRESSION_COLUMNS = ["dataset", "encoder", "k", "variant", "family", "bytes_per_doc", "capacity", "certified", "pretrained"]


def compression_family(variant: str) -> str:
    """The family of a compression variant name (``capgap.compress.parse_variant``):
    ``float32``, ``truncation``, ``pca``, ``sq``, ``binary`` or ``pq``; ``other`` for a name
    that does not parse (a newer variant this code does not know)."""
    from .compress import parse_variant

    try:
        return parse_variant(variant).family
    except (TypeError, ValueError):
        return "other"


def compression_table(cdf: pd.DataFrame, infos: Mapping[str, paper.DatasetInfo], ks: Sequence[int]) -> pd.DataFrame:
    """One row per dataset x encoder x index variant of rule ``compress``'s rows (``cdf``:
    results.csv rows with ``compression`` set; see ``compressed``), columns COMPRESSION_COLUMNS.

    ``k``: the cell's headline k (``report_ks``' first, the summary table's stated k, among the
    cut-offs its compress rows have); ``bytes_per_doc``: bytes per document of the variant
    (shared tables excluded; nan when not recorded); ``capacity``: the probe's recall@k,
    ``certified``: the fraction of queries the probe certifies, ``pretrained``: the pre-trained
    encoder's recall@k (fractions in [0, 1]; nan when not recorded), all on split ``all`` (the
    probe fits each query on its own, nothing is learnt from train queries). Within a cell the
    float32 reference comes first, then the variants by decreasing bytes per document (ties in
    the order the job wrote them). Cells without recall rows are left out."""
    rows = []
    for c, ((d, e), g) in enumerate(cdf.groupby(["dataset", "encoder"], sort=False)):
        have = sorted({int(k) for k in pd.to_numeric(g.loc[g["metric"] == "recall", "k"], errors="coerce").dropna()})
        if not have:
            continue
        k = report_ks(infos.get(d), [x for x in ks if x in have] or have)[0]
        for i, (v, gv) in enumerate(g.groupby("compression", sort=False)):
            def val(method, metric, kk=None):
                x = _value(gv, d, e, method, "all", metric, kk)
                return float("nan") if x == "–" else x

            b = val("probe", "bytes_per_doc")
            rows.append({"dataset": d, "encoder": e, "k": k, "variant": v, "family": compression_family(v),
                         "bytes_per_doc": b if b == b else val("pretrained", "bytes_per_doc"),
                         "capacity": val("probe", "recall", k), "certified": val("probe", "certified"),
                         "pretrained": val("pretrained", "recall", k), "_cell": c, "_ref": v != "float32", "_o": i})
    t = pd.DataFrame(rows, columns=COMPRESSION_COLUMNS + ["_cell", "_ref", "_o"])
    t = t.assign(_b=-t["bytes_per_doc"].astype(float)).sort_values(["_cell", "_ref", "_b", "_o"], kind="stable", na_position="last")
    return t.drop(columns=["_cell", "_ref", "_o", "_b"]).reset_index(drop=True)


def compression_onset(cell: pd.DataFrame, column: str, tol: float = COMPRESSION_TOL) -> dict | None:
    """Where compression starts to cost ``column`` (``capacity``, ``certified`` or
    ``pretrained``) in one dataset x encoder cell of ``compression_table``: the first variant,
    in decreasing bytes per document, whose value falls more than ``tol`` (absolute, same unit
    as the column) below the float32 value.

    Returns that row as a dict with ``previous`` (the row before it in that order: the last
    that held, or the float32 row when the first variant already drops) and ``reference`` (the
    float32 value); None when no measured variant drops or the float32 value is missing.
    Variants without a value are skipped."""
    ref = cell[cell["variant"] == "float32"]
    if ref.empty or ref[column].iloc[0] != ref[column].iloc[0]:
        return None
    r0 = ref.iloc[0].to_dict()
    prev = r0
    for r in cell[(cell["variant"] != "float32") & cell[column].notna()].to_dict("records"):
        if r0[column] - r[column] > tol + 1e-9:
            return {**r, "previous": prev, "reference": r0[column]}
        prev = r
    return None


def _bytes(b) -> str:
    """Bytes per document for display: 1536.0 -> "1536 bytes/doc"; "? bytes/doc" when not recorded."""
    return f"{_count(float(b))} bytes/doc" if b == b else "? bytes/doc"


def _onset_phrase(cell: pd.DataFrame, column: str, name: str, tol: float) -> tuple[str, dict | None]:
    """The half-sentence on where compression starts to cost one quantity, and its onset."""
    ref = cell[cell["variant"] == "float32"]
    if ref.empty or ref[column].iloc[0] != ref[column].iloc[0]:
        return f"{name} has no float32 reference, so its loss is not stated", None
    r0 = ref.iloc[0]
    measured = cell[(cell["variant"] != "float32") & cell[column].notna()]
    if measured.empty:
        return f"{name} is {r0[column]:.3f} at {_bytes(r0.bytes_per_doc)} (float32); no compressed variant was measured", None
    on = compression_onset(cell, column, tol)
    if on is None:
        last = measured.iloc[-1]
        return (f"{name} stays within {tol:g} of its float32 value {r0[column]:.3f} ({_bytes(r0.bytes_per_doc)}) at every "
                f"variant measured, down to {_bytes(last.bytes_per_doc)} ({last.variant}, {last[column]:.3f})"), None
    at = f"{_bytes(on['bytes_per_doc'])} ({on['variant']}, {on[column]:.3f})"
    below = f"{r0[column] - tol:.3f}"
    if on["previous"]["variant"] == "float32":
        return (f"{name} ({r0[column]:.3f} at {_bytes(r0.bytes_per_doc)} in float32) drops below {below} already at the "
                f"largest variant, {at}"), on
    p = on["previous"]
    return (f"{name} holds within {tol:g} of its float32 value {r0[column]:.3f} ({_bytes(r0.bytes_per_doc)}) down to "
            f"{_bytes(p['bytes_per_doc'])} ({p['variant']}) and first drops below {below} at {at}"), on


def compression_sentence(cell: pd.DataFrame, tol: float = COMPRESSION_TOL) -> str:
    """One sentence per dataset x encoder cell of ``compression_table``: where compression
    starts to cost capacity (the probe's recall@k) and where it starts to cost the pre-trained
    encoder's recall@k (``compression_onset``: the first variant, in decreasing bytes per
    document, more than ``tol`` absolute recall below float32), and which comes first -- or
    that neither drops within the variants measured. E.g. "scifact × minilm: capacity (probe
    recall@10) holds within 0.01 of its float32 value 1.000 (1536 bytes/doc) down to 48
    bytes/doc (binary) and first drops below 0.990 at 24 bytes/doc (pq-24x8, 0.930);
    pre-trained recall@10 ... — compression costs the encoder's recall before it costs
    capacity." """
    r = cell.iloc[0]
    cap, c_on = _onset_phrase(cell, "capacity", f"capacity (probe recall@{r.k})", tol)
    enc, e_on = _onset_phrase(cell, "pretrained", f"pre-trained recall@{r.k}", tol)
    if c_on is None and e_on is None:
        verdict = f"neither falls more than {tol:g} below float32 within the variants measured."
    elif c_on is None:
        verdict = "compression costs the encoder's recall but not capacity within the variants measured."
    elif e_on is None:
        verdict = "compression costs capacity but not the encoder's recall within the variants measured."
    else:
        cb, eb = c_on["bytes_per_doc"], e_on["bytes_per_doc"]
        if cb == cb and eb == eb:
            order = (cb < eb) - (cb > eb)  # -1: capacity drops at a larger size, i.e. first
        else:
            pos = list(cell["variant"])
            order = (pos.index(c_on["variant"]) > pos.index(e_on["variant"])) - (pos.index(c_on["variant"]) < pos.index(e_on["variant"]))
        verdict = {1: "compression costs the encoder's recall before it costs capacity.",
                   -1: "compression costs capacity before it costs the encoder's recall.",
                   0: f"compression costs capacity and the encoder's recall at the same size ({_bytes(cb)})."}[order]
    return f"{r.dataset} × {r.encoder}: {cap}; {enc} — {verdict}"


def render_compression(ctable: pd.DataFrame, fig: str | None, tol: float = COMPRESSION_TOL) -> list[str]:
    """The report's "Capacity under index compression" section from ``compression_table``: what
    is measured, the figure (``fig``: its path relative to the report; None: not drawn), then
    per dataset x encoder the sentence (``compression_sentence``) and a table of every variant
    (bytes/doc, capacity recall@k, certified, pre-trained recall@k). No rows: no lines."""
    if ctable.empty:
        return []
    out = ["## Capacity under index compression", "",
           "Rule `compress` re-runs the capacity probe and the pre-trained encoder on compressed variants of each frozen "
           "index (`capgap.compress`: truncation, PCA, scalar quantisation, binarisation, product quantisation; how to read "
           "it: docs/compression.md). Capacity = the probe's recall@k on the compressed documents (a lower bound on the best "
           "recall any query vector can reach there, which bounds every query encoder on that index from above); certified "
           "= fraction of queries whose gold documents the probe ranks strictly first; pre-trained = the pre-trained "
           "encoder's recall@k with its float32 query vectors scored against the compressed documents (asymmetric; "
           "truncation and PCA map the query too). Every number is over all queries (split all: the probe fits each query "
           "on its own, nothing is learnt from train queries), at each dataset's stated k; float32 is the compress job's "
           "own uncompressed run. Bytes per document count the per-document code only (shared PCA matrices, SQ ranges and "
           f"PQ codebooks excluded). A quantity starts to cost at the first variant, by decreasing bytes, where it falls "
           f"more than {tol:g} (absolute) below its float32 value.", ""]
    if fig:
        out += [f"![capacity and pre-trained recall against bytes per document]({fig})", ""]
    for _, cell in ctable.groupby(["dataset", "encoder"], sort=False):
        k = cell["k"].iloc[0]
        out += [compression_sentence(cell, tol), ""]
        out.append(_md_table(["variant", "bytes/doc", f"capacity (probe R@{k})", "certified", f"pre-trained R@{k}"],
                             [[r.variant, _count(r.bytes_per_doc) if r.bytes_per_doc == r.bytes_per_doc else "–",
                               _f(r.capacity), _f(r.certified), _f(r.pretrained)] for r in cell.itertuples(index=False)]))
        out.append("")
    return out


# ---- Near-miss twins: geometry or learning? (capgap.nearmiss) --------------------------------

TWIN_SOLVED = 0.95  # held-out twin_win at or above this: the method separates the gold statement from that twin type
NO_TWINS = "finetuned-no-twins"  # the near-miss adapter trained with the twins left out of the InfoNCE softmax
TWIN_METHODS = ("probe", "pretrained", "finetuned", NO_TWINS, "bm25", "colbert")  # order the twin pair count is taken in
TRANSFER_METHOD = re.compile(r"^(finetuned|finetuned-no-twins)@(.+)$")  # finetuned[-no-twins]@<near-miss source>
NEAR_MISS_COLUMNS = ["dataset", "encoder", "type", "pairs", "probe_win", "probe_gap", "pretrained_win", "finetuned_train",
                     "finetuned_heldout", "no_twins_heldout", "bm25_win", "bm25_tie", "colbert_win", "colbert_tie"]
TRANSFER_COLUMNS = ["target", "encoder", "source", "row", "method", "recall", "ndcg", "twin_win_mean"]


def _twin_metric(metric: str) -> tuple[str, str] | None:
    """``"twin_win:role_swap"`` -> ``("twin_win", "role_swap")``; None for any other metric."""
    name, sep, kind = str(metric).partition(":")
    return (name, kind) if sep and name.startswith("twin_") and kind else None


def twin_metric_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The results.csv rows of twin metrics (``twin_pairs:<type>``, ``twin_win:<type>``, ...)."""
    return df[[_twin_metric(m) is not None for m in df["metric"]]] if len(df) else df


def twin_types(df: pd.DataFrame) -> list[str]:
    """The twin types that have rows in ``df``: ``capgap.nearmiss.TYPES`` order, then any other
    type (a newer edit rule) alphabetically."""
    from .nearmiss import TYPES

    seen = {t[1] for t in map(_twin_metric, df["metric"]) if t}
    return [t for t in TYPES if t in seen] + sorted(seen - set(TYPES))


def _num(df: pd.DataFrame, dataset, encoder, method, split, metric, k=None) -> float:
    """``_value`` as a float: nan when the row is absent or its value empty."""
    v = _value(df, dataset, encoder, method, split, metric, k)
    return float("nan") if v == "–" else float(v)


def _twin_encoders(tw: pd.DataFrame, dataset: str) -> list[str]:
    """The single-vector encoders with twin rows on ``dataset`` (``[""]`` when only BM25 /
    ColBERT, which have no encoder, measured it)."""
    encs = tw[(tw["dataset"] == dataset) & (tw["encoder"] != "")]["encoder"].unique()
    return list(encs) or [""]


def near_miss_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per near-miss dataset x single-vector encoder x twin type present, columns
    NEAR_MISS_COLUMNS, from the twin rows of results.csv (``df``; none: an empty frame).

    ``pairs``: held-out (query, gold, twin) triples (the first method of TWIN_METHODS that
    recorded it); every ``*_win`` column is a held-out ``twin_win`` (fraction in [0, 1] of those
    triples whose gold document scores strictly above its twin) except ``finetuned_train``;
    ``probe_gap``: the probe's held-out median geometric margin (witness scaled to unit norm);
    ``bm25_tie`` / ``colbert_tie``: held-out ``twin_tie`` (fraction of exact ties). BM25 and
    ColBERT (no encoder) repeat on every encoder's rows. nan: not measured."""
    tw = twin_metric_rows(df)
    rows = []
    for d in tw["dataset"].unique():
        sub = tw[tw["dataset"] == d]
        for e in _twin_encoders(tw, d):
            for t in twin_types(sub):
                def v(method, name, split="heldout"):
                    return _num(sub, d, "" if method in ("bm25", "colbert") else e, method, split, f"{name}:{t}")

                pairs = next((p for p in (v(m, "twin_pairs") for m in TWIN_METHODS) if p == p), float("nan"))
                rows.append({"dataset": d, "encoder": e, "type": t, "pairs": pairs, "probe_win": v("probe", "twin_win"),
                             "probe_gap": v("probe", "twin_gap"), "pretrained_win": v("pretrained", "twin_win"),
                             "finetuned_train": v("finetuned", "twin_win", "train"),
                             "finetuned_heldout": v("finetuned", "twin_win"), "no_twins_heldout": v(NO_TWINS, "twin_win"),
                             "bm25_win": v("bm25", "twin_win"), "bm25_tie": v("bm25", "twin_tie"),
                             "colbert_win": v("colbert", "twin_win"), "colbert_tie": v("colbert", "twin_tie")})
    return pd.DataFrame(rows, columns=NEAR_MISS_COLUMNS)


def _type_name(t: str) -> str:
    """A twin type for display: ``role_swap`` -> ``role swap``."""
    return t.replace("_", " ")


def twin_verdict_kind(r: Mapping) -> str:
    """The verdict on one twin type (``r``: a ``near_miss_table`` row as a mapping), from
    held-out twin_win only, with TWIN_SOLVED = 0.95:

    1. ``"index-limited"`` if the probe's twin_win < TWIN_SOLVED: the witness the probe found for
       each query's whole gold set (uncertified queries: the best it could do) leaves the twin
       above the gold statement; not an upper bound on one pair (any two distinct vectors are
       separable), a statement about ranking the gold set first with the twin behind;
    2. else ``"encoder-limited"`` if the pre-trained encoder's twin_win < TWIN_SOLVED: the
       geometry allows it, the encoder does not find it (the sentence adds whether fine-tuning
       closes it on held-out combinations: fine-tuned held-out twin_win >= TWIN_SOLVED);
    3. else ``"lexically blind"`` if BM25's twin_win < TWIN_SOLVED: the index and the encoder
       separate it, the lexical baseline does not;
    4. else ``"solved"``: solved by every method (the sentence names any other method that
       was measured and falls below TWIN_SOLVED: fine-tuned, fine-tuned without twins, ColBERT).

    ``"not decided"`` when a value the rule needs was not measured: the probe's, or (probe at
    or above TWIN_SOLVED) the pre-trained encoder's. A BM25 that did not run skips step 3."""
    if r["probe_win"] != r["probe_win"]:
        return "not decided"
    if r["probe_win"] < TWIN_SOLVED:
        return "index-limited"
    if r["pretrained_win"] != r["pretrained_win"]:
        return "not decided"
    if r["pretrained_win"] < TWIN_SOLVED:
        return "encoder-limited"
    if r["bm25_win"] == r["bm25_win"] and r["bm25_win"] < TWIN_SOLVED:
        return "lexically blind"
    return "solved"


def _finetune_clause(r: Mapping) -> str:
    """The encoder-limited verdict's clause on fine-tuning (held-out, train in brackets)."""
    ft, tr, nt = r["finetuned_heldout"], r["finetuned_train"], r["no_twins_heldout"]
    if ft != ft:
        return "fine-tuning was not run"
    train = f", train {tr:.3f}" if tr == tr else ""
    without = f"; without twins in the softmax it reaches {nt:.3f}" if nt == nt else ""
    if ft >= TWIN_SOLVED:
        return f"fine-tuning closes it on held-out combinations (fine-tuned held-out {ft:.3f}{train}{without})"
    return f"fine-tuning does not close it on held-out combinations (fine-tuned held-out {ft:.3f} < {TWIN_SOLVED}{train}{without})"


def _solved_clause(r: Mapping) -> str:
    """The solved verdict's text: "solved by every method", or the methods measured below TWIN_SOLVED."""
    checked = f"probe {r['probe_win']:.3f}, pre-trained {r['pretrained_win']:.3f}" + (
        f", BM25 {r['bm25_win']:.3f}" if r["bm25_win"] == r["bm25_win"] else ", BM25 not run")
    below = [f"{name} {r[c]:.3f}" for c, name in (("finetuned_heldout", "fine-tuned"), ("no_twins_heldout", "fine-tuned without twins"),
                                                   ("colbert_win", "ColBERT")) if r[c] == r[c] and r[c] < TWIN_SOLVED]
    if below:
        return (f"solved by the index, the pre-trained encoder and BM25 ({checked}, all >= {TWIN_SOLVED}), "
                f"but not by {', '.join(below)}")
    return f"solved by every method ({checked}, all >= {TWIN_SOLVED}, and every other method measured)"


def twin_verdict(r: Mapping) -> str:
    """One sentence per twin type: ``twin_verdict_kind``'s verdict with the held-out numbers
    of the row (``near_miss_table``) that decide it, plus, whenever BM25's tie rate >= 0.5, that
    BM25 is lexically blind to this type. E.g. "**role swap** (150 held-out pairs):
    encoder-limited — the geometry allows it (...) but the pre-trained encoder does not find it
    (...); fine-tuning closes it on held-out combinations (...)." """
    kind, t = twin_verdict_kind(r), _type_name(r["type"])
    head = f"**{t}** ({_count(r['pairs']) if r['pairs'] == r['pairs'] else '?'} held-out pairs): "
    probe = f"probe {r['probe_win']:.3f}, median margin {_f(r['probe_gap'])}" if r["probe_win"] == r["probe_win"] else ""
    if kind == "not decided":
        what = "the probe" if not probe else "the pre-trained encoder"
        text = f"not decided — {what} did not measure this twin type"
    elif kind == "index-limited":
        text = (f"index-limited — the frozen index does not rank the gold set first with its twin behind: the probe's "
                f"witness (the best query vector it found for each query's whole gold set) ranks the gold above its twin "
                f"on only {r['probe_win']:.3f} of held-out pairs (< {TWIN_SOLVED}; median margin {_f(r['probe_gap'])}); a "
                f"single pair of distinct vectors is always separable, so an encoder may still order this pair right "
                f"(pre-trained {_f(r['pretrained_win'])})")
    elif kind == "encoder-limited":
        text = (f"encoder-limited — the geometry allows it ({probe}) but the pre-trained encoder does not find it "
                f"(twin_win {r['pretrained_win']:.3f} < {TWIN_SOLVED}); {_finetune_clause(r)}")
    elif kind == "lexically blind":
        text = (f"lexically blind — the frozen index and the pre-trained encoder separate the gold from its twin "
                f"({probe}; pre-trained {r['pretrained_win']:.3f}), BM25 does not ({r['bm25_win']:.3f} < {TWIN_SOLVED})")
    else:
        text = _solved_clause(r)
    tie = r["bm25_tie"]
    if tie == tie and tie >= 0.5:
        text += (f". BM25 is lexically blind to {t} (ties on {tie:.0%} of pairs; the evaluation's tie rule ranks the "
                 "twin first)")
    return head + text + "."


def _win_cell(win: float, extra: float, fmt: str) -> str:
    """A twin_win cell with a second number in brackets (``fmt``: e.g. ``"({:.3f})"``); "–" when not measured."""
    if win != win:
        return "–"
    return f"{win:.3f}" + (" " + fmt.format(extra) if extra == extra else "")


def _near_miss_cell_table(cell: pd.DataFrame, no_twins: bool) -> str:
    """The Markdown table of one dataset x encoder of ``near_miss_table`` (``no_twins``: with
    the column of the adapter trained without twins)."""
    header = ["twin type", "pairs (held-out)", "capacity: probe (median margin)", "pre-trained", "fine-tuned train",
              "fine-tuned held-out", *(["fine-tuned without twins"] if no_twins else []), "BM25 (tie rate)", "ColBERT"]
    rows = [[_type_name(r["type"]), _count(r["pairs"]) if r["pairs"] == r["pairs"] else "–",
             _win_cell(r["probe_win"], r["probe_gap"], "({:.3f})"), _f(r["pretrained_win"]), _f(r["finetuned_train"]),
             _f(r["finetuned_heldout"]), *([_f(r["no_twins_heldout"])] if no_twins else []),
             _win_cell(r["bm25_win"], r["bm25_tie"], "(ties {:.3f})"), _f(r["colbert_win"])]
            for r in cell.to_dict("records")]
    return _md_table(header, rows)


def transfer_table(df: pd.DataFrame, k: int = 10, ndcg_k: int = EVAL_DEFAULTS["ndcg_k"]) -> pd.DataFrame:
    """The near-miss adapters on their transfer targets: for every target dataset x encoder x
    near-miss source with ``finetuned@<source>`` or ``finetuned-no-twins@<source>`` rows, three
    rows (``row``: ``pretrained``, ``without twins``, ``with twins``; ``method``: the target's
    method name), columns TRANSFER_COLUMNS plus ``twin_win:<type>`` per type of the source.

    ``recall`` / ``ndcg``: the target's held-out recall@``k`` and nDCG@``ndcg_k`` (the
    pre-trained row: the target's own ``pretrained``, the "before"); ``twin_win_mean``: the
    unweighted mean over the source's twin types of the matching source method's held-out
    twin_win (``pretrained``, ``finetuned-no-twins``, ``finetuned``), ``twin_win:<type>`` each
    type's. nan: not measured."""
    found = []
    for (d, e, m) in df[["dataset", "encoder", "method"]].drop_duplicates().itertuples(index=False):
        hit = TRANSFER_METHOD.match(str(m))
        if hit and (d, e, hit.group(2)) not in found:
            found.append((d, e, hit.group(2)))
    rows, types = [], []
    for d, e, src in found:
        src_types = twin_types(twin_metric_rows(df[df["dataset"] == src]))
        types += [t for t in src_types if t not in types]
        for row, target_m, source_m in (("pretrained", "pretrained", "pretrained"),
                                        ("without twins", f"{NO_TWINS}@{src}", NO_TWINS), ("with twins", f"finetuned@{src}", "finetuned")):
            wins = {f"twin_win:{t}": _num(df, src, e, source_m, "heldout", f"twin_win:{t}") for t in src_types}
            got = [w for w in wins.values() if w == w]
            rows.append({"target": d, "encoder": e, "source": src, "row": row, "method": target_m,
                         "recall": _num(df, d, e, target_m, "heldout", "recall", k), "ndcg": _num(df, d, e, target_m, "heldout", "ndcg", ndcg_k),
                         "twin_win_mean": sum(got) / len(got) if got else float("nan"), **wins})
    return pd.DataFrame(rows, columns=TRANSFER_COLUMNS + [f"twin_win:{t}" for t in types])


def transfer_reference() -> dict:
    """The published reference the transfer sentence quotes (``paper_reference.yaml``,
    ``references.near_miss_transfer``: Ralev et al. 2026, Table 1). Raises ``KeyError`` when the
    checked-in table lacks it."""
    return paper.load_reference()["references"]["near_miss_transfer"]


def transfer_sentence(group: pd.DataFrame, ref: Mapping, ndcg_k: int = EVAL_DEFAULTS["ndcg_k"]) -> str:
    """One target x encoder x source of ``transfer_table``: the change in the target's held-out
    nDCG@``ndcg_k`` from the adapter trained without twins to the one trained with them
    (absolute, and in % of the without-twins value), the pre-trained "before", the source's mean
    held-out twin_win of both, then the published reference ``ref`` (``transfer_reference``)
    and why the settings differ."""
    by = {r["row"]: r for r in group.to_dict("records")}
    d, e, src = group["target"].iloc[0], group["encoder"].iloc[0], group["source"].iloc[0]
    a, b, p = by["without twins"]["ndcg"], by["with twins"]["ndcg"], by["pretrained"]["ndcg"]
    who = f"{d} × {e}" if e else d
    if a != a or b != b:
        ours = (f"{who}: the change in held-out nDCG@{ndcg_k} from the {src} adapter without twins to the one with twins "
                "is not measured (an adapter's rows are missing).")
    else:
        pct = f"{(b - a) / a * 100:+.1f}%" if a else "% undefined: 0 without twins"
        before = f"; pre-trained {p:.3f}" if p == p else ""
        ta, tb = by["without twins"]["twin_win_mean"], by["with twins"]["twin_win_mean"]
        twins = (f" On {src} itself, held-out twin_win (mean over types) goes from {ta:.3f} without twins to {tb:.3f} with them."
                 if ta == ta and tb == tb else "")
        ours = (f"{who}: training the {src} adapter with its twins as InfoNCE negatives changes {d}'s held-out "
                f"nDCG@{ndcg_k} from {a:.3f} (without twins) to {b:.3f} (with twins), {b - a:+.3f} ({pct}{before}).{twins}")
    theirs = (f"For reference, {ref['citation']} (\"{ref['title']}\", {ref['table']}) report {ref['model']} {ref['benchmark']} "
              f"{ref['metric']} {ref['before']:.3f} -> {ref['after']:.3f} ({ref['change_percent']:+.1f}%) with "
              f"{ref['negatives']}; their setting is {ref['setting']}, capgap's a LoRA query adapter trained on {src} and "
              f"applied to {d}'s queries against {d}'s frozen index, so the two compare in direction, not in size.")
    return ours + " " + theirs


def _transfer_lines(ttable: pd.DataFrame, k: int, ndcg_k: int) -> list[str]:
    """The transfer tables and sentences of ``transfer_table`` (no rows: no lines)."""
    if ttable.empty:
        return []
    types = [c.split(":", 1)[1] for c in ttable.columns if c.startswith("twin_win:")]
    out = ["### Transfer: does training against twins cost generalisation?", "",
           "The near-miss adapters applied to another data set's queries against its own frozen index (same encoder): "
           "without twins = twins left out of the InfoNCE softmax, with twins = twins as negatives (the fine-tuned "
           "adapter above). The last columns are the near-miss source's held-out twin_win of the matching method "
           "(pre-trained, fine-tuned without twins, fine-tuned), the mean unweighted over types.", ""]
    ref = transfer_reference()
    for _, g in ttable.groupby(["target", "encoder", "source"], sort=False):
        d, src = g["target"].iloc[0], g["source"].iloc[0]
        label = {"pretrained": "pre-trained", "without twins": f"fine-tuned on {src} without twins",
                 "with twins": f"fine-tuned on {src} with twins"}
        out.append(_md_table(["query encoder", f"{d} held-out R@{k}", f"{d} held-out nDCG@{ndcg_k}",
                              f"{src} twin_win (mean)", *(f"{src} {_type_name(t)}" for t in types)],
                             [[label[r["row"]], _f(r["recall"]), _f(r["ndcg"]), _f(r["twin_win_mean"]),
                               *(_f(r.get(f"twin_win:{t}", float("nan"))) for t in types)] for r in g.to_dict("records")]))
        out += ["", transfer_sentence(g, ref, ndcg_k), ""]
    return out


def render_near_miss(df: pd.DataFrame, fig: str | None, ndcg_k: int = EVAL_DEFAULTS["ndcg_k"], k: int = 10) -> list[str]:
    """The report's "Near-miss twins: geometry or learning?" section: what is measured, per
    near-miss dataset x encoder a table (``near_miss_table``) and one verdict sentence per twin
    type (``twin_verdict``), the figure (``fig``: its path relative to the report; None: not
    drawn) and, where ``finetuned@<source>`` rows exist, the transfer tables (``transfer_table``
    at recall@``k`` and nDCG@``ndcg_k``). No twin rows and no transfer rows: no lines."""
    table = near_miss_table(df)
    ttable = transfer_table(df, k, ndcg_k)
    if table.empty and ttable.empty:
        return []
    out = ["## Near-miss twins: geometry or learning?", "",
           "Each statement (gold document) of a near-miss data set has twins that flip its meaning with a minimal edit "
           "(negation, role swap, spatial / order flip; `capgap.nearmiss`), non-gold for its queries. twin_win = fraction "
           "of held-out (query, gold, twin) triples whose gold document scores strictly above its twin (a tie counts as a "
           "loss: the evaluation's tie rule ranks the twin first). Capacity = the probe's twin_win, with its median "
           "geometric margin (witness scaled to unit norm) in brackets; fine-tuned = LoRA query adapter with the twins as "
           "InfoNCE negatives, trained on train queries (train column) and measured on held-out combinations; fine-tuned "
           "without twins = the same training with the twins left out of the softmax; BM25 with its tie rate in "
           f"brackets. Verdict per type at {TWIN_SOLVED}: index-limited (probe below), else encoder-limited (pre-trained "
           "below), else lexically blind (BM25 below), else solved. – = not measured.", ""]
    for (d, e), cell in table.groupby(["dataset", "encoder"], sort=False):
        out += [f"**{d} / {e}**" if e else f"**{d}**", ""]
        out.append(_near_miss_cell_table(cell, bool(cell["no_twins_heldout"].notna().any())))
        out.append("")
        out += [f"- {twin_verdict(r)}" for r in cell.to_dict("records")] + [""]
    if not table.empty:
        out += ([f"![near-miss twins: probe margin vs pre-trained score gap]({fig})", "",
                 "Per twin type: x = the pre-trained encoder's median score gap gold − twin (cosine), y = the probe's median "
                 "margin (unit witness), held-out, bars p25–p75. Right of x = 0 the encoder already prefers the gold; above "
                 "y = 0 the index separates it.", ""] if fig else
                ["Figure not drawn: the probe or the pre-trained encoder has no twin gaps.", ""])
    return out + _transfer_lines(ttable, k, ndcg_k)
