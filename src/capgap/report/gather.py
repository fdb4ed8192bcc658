"""Reading the report rule's inputs into a ``ReportContext``: results.csv's frame split into
the frozen index's rows, the parity task's and rule ``compress``'s, the data statuses, gold-set
sizes, dataset infos, the summary table, the paper comparison, MTEB's published numbers beside
the pre-trained rows, the fingerprints and why capacities were certified by construction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

from .. import mteb, paper, provenance
from ..evaluate import EVAL_DEFAULTS
from ..figures import HARDNESS_PREFIX
from .certification import construction_reasons
from .context import ReportContext, ReportInputs, bm25_variant, dataset_infos, gold_sizes
from .results import collect, uncompressed
from .table import summary_table


def gather(
    inputs: ReportInputs,
    ks: Sequence[int],
    ndcg_k: int = EVAL_DEFAULTS["ndcg_k"],
    *,
    config: Mapping | None = None,
    models: Mapping[str, str] | None = None,
    colbert_model: str | None = None,
) -> ReportContext:
    """Everything the sections read, from the report rule's input files (``figs`` left empty:
    the figures are drawn by ``build_report``). ``models``: encoder name -> model id (for the
    paper comparison); ``colbert_model``: the ColBERT model id when ColBERT ran."""
    df_all = collect(inputs.tables)
    frozen = uncompressed(df_all)
    hard = frozen["dataset"].astype(str).str.startswith(HARDNESS_PREFIX)
    df, hdf = frozen[~hard], frozen[hard]
    statuses = [json.loads((Path(d) / "status.json").read_text(encoding="utf-8")) for d in inputs.data]
    golds = {
        s["dataset"]: gold_sizes(Path(d) / "qrels.tsv")
        for d, s in zip(inputs.data, statuses)
        if s.get("available") and (Path(d) / "qrels.tsv").is_file()
    }
    infos = dataset_infos(statuses, golds)
    model_of = {
        (m, e): (models or {}).get(e, e) for m, e in df[["method", "encoder"]].drop_duplicates().itertuples(index=False)
    }
    model_of.update({("bm25", ""): "bm25", ("colbert", ""): colbert_model or "colbert"})
    fps = provenance.fingerprints(inputs.fingerprints)
    hs = json.loads(Path(inputs.hardness[0]).read_text(encoding="utf-8")) if inputs.hardness else None
    return ReportContext(
        df=df,
        statuses=statuses,
        ks=ks,
        ndcg_k=ndcg_k,
        df_all=df_all,
        hdf=hdf,
        golds=golds,
        infos=infos,
        table=summary_table(df, infos, ks),
        paper_rows=paper.compare(df, infos, model_of),
        bm25=bm25_variant(config),
        construction=construction_reasons(inputs.per_query, fps),
        config=config,
        colbert_model=colbert_model,
        fps=fps,
        hardness_summary=hs,
        inputs=inputs,
        mteb_rows=mteb.compare(df, statuses, models or {}),
        mteb_not_run=mteb.not_run(df, models or {}),
    )
