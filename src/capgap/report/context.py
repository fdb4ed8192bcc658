"""What every section reads: the report rule's inputs and outputs, the datasets' infos (sizes,
gold-set sizes), the BM25 variant of the run config, and ``ReportContext`` bundling them with
the results table and the figures' paths."""

from __future__ import annotations

import inspect
import statistics
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from .. import paper
from ..bm25 import variant_name
from ..data import iter_qrels
from ..evaluate import EVAL_DEFAULTS


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
    ladder_png: str

    @classmethod
    def from_named(cls, named) -> "ReportOutputs":
        return cls(**{f.name: str(getattr(named, f.name)) for f in fields(cls)})

    @classmethod
    def under(cls, folder: str | Path) -> "ReportOutputs":
        """The standard layout under one folder (``reports/``)."""
        f = Path(folder)
        return cls(
            csv=str(f / "results.csv"),
            md=str(f / "report.md"),
            html=str(f / "report.html"),
            summary=str(f / "summary.json"),
            metrics=str(f / "metrics.json"),
            recall_csv=str(f / "plots" / "recall_at_k.csv"),
            **{k: str(f / "figures" / v) for k, v in FIGURES.items()},
        )


FIGURES = {
    "recall_png": "recall_at_k.png",
    "gap_png": "capacity_gap.png",
    "scatter_png": "train_vs_heldout.png",
    "slack_png": "probe_slack.png",
    "curves_png": "finetune_curves.png",
    "hardness_p": "hardness_vs_P.png",
    "hardness_m": "hardness_vs_m.png",
    "compression_png": "compression.png",
    "near_miss_png": "near_miss.png",
    "ladder_png": "ladder.png",
}


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
    counts: dict[str, int] = {}
    for _, q, _, score in iter_qrels(qrels_path):
        if score > 0:
            counts[q] = counts.get(q, 0) + 1
    if not counts:
        return {"min": None, "median": None, "max": None, "fixed": None}
    v = sorted(counts.values())
    return {"min": v[0], "median": statistics.median(v), "max": v[-1], "fixed": v[0] if v[0] == v[-1] else None}


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
        out[s["dataset"]] = paper.DatasetInfo(
            int(s["n_docs"]), g.get("fixed"), official, (g["min"], g["max"]) if g.get("min") is not None else None
        )
    return out


def bm25_variant(config: Mapping | None) -> str | None:
    """The name of the BM25 variant a run config selects (``capgap.bm25.variant_name`` of
    ``config["bm25"]`` minus ``enabled``; keys it does not take are ignored); None when there is
    no config or no ``bm25`` section; a note instead of a name for an unknown backend/method."""
    cfg = (config or {}).get("bm25")
    if not isinstance(cfg, Mapping):
        return None
    known = inspect.signature(variant_name).parameters
    args = {k: v for k, v in cfg.items() if k != "enabled" and k in known}
    try:
        return variant_name(**args)
    except ValueError as e:
        return f"unknown variant ({e})"


@dataclass
class ReportContext:
    """What a section renders from besides results.csv's frame.

    ``df``: the rows of the frozen index as built, parity task excluded; ``df_all``: every row
    (compress rows included); ``hdf``: the parity task's rows; ``statuses``: each data folder's
    ``status.json``; ``golds``: dataset -> ``gold_sizes``; ``infos``: ``dataset_infos``;
    ``table``: ``summary_table`` (None: no summary section); ``paper_rows``:
    ``capgap.paper.compare``; ``figs``: figure key (see FIGURES) -> path relative to the report,
    or None when the figure is a placeholder (a key absent: no figure block); ``bm25``: the BM25
    variant's name (``bm25_variant``; None: not recorded); ``construction``: (dataset, encoder)
    -> why the probe's certificates were guaranteed (``construction_reasons``); ``fps``: the
    frozen-index fingerprints (``capgap.provenance.fingerprints``); ``hardness_summary``: the
    hardness rule's summary.json (None: not run); ``mteb_rows``: ``capgap.mteb.compare``
    (MTEB's published values beside the pre-trained rows), ``mteb_not_run``:
    ``capgap.mteb.not_run``; the rest are the report rule's inputs and parameters."""

    df: pd.DataFrame
    statuses: Sequence[dict]
    ks: Sequence[int]
    ndcg_k: int = EVAL_DEFAULTS["ndcg_k"]
    df_all: pd.DataFrame | None = None
    hdf: pd.DataFrame | None = None
    golds: Mapping[str, dict] = field(default_factory=dict)
    infos: Mapping[str, paper.DatasetInfo] = field(default_factory=dict)
    table: pd.DataFrame | None = None
    paper_rows: Sequence[dict] = ()
    figs: dict[str, str | None] = field(default_factory=dict)
    bm25: str | None = None
    construction: Mapping[tuple[str, str], str] = field(default_factory=dict)
    config: Mapping | None = None
    colbert_model: str | None = None
    fps: Sequence[dict] = ()
    hardness_summary: dict | None = None
    mteb_rows: Sequence[dict] = ()
    mteb_not_run: Sequence[str] = ()
    inputs: ReportInputs = field(default_factory=ReportInputs)
