"""Section "Geometrically easy but missed": the queries the probe shows the index admits but the
pre-trained encoder's exact run misses (the encoder-limited verdict of ``capgap diagnose``)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from ..diagnosis import admitted_but_missed, load_qrels_file
from ..trec import read_run
from .context import ReportContext
from .format import _md_table, _read_jsonl
from .table import RPREC


def render_missed(
    table: pd.DataFrame,
    per_query: Sequence[str | Path],
    runs: Sequence[str | Path],
    data_dirs: Sequence[str | Path],
    examples: int = 5,
) -> list[str]:
    """ "Geometrically easy but missed": per dataset x encoder at the stated k (where that is
    R-precision, at the table's next, numeric k), the queries the
    probe shows the index admits but the pre-trained encoder's exact run misses
    (``capgap.diagnosis.admitted_but_missed``, the encoder-limited verdict of ``capgap diagnose``).
    Run files are read by ``capgap.trec.read_run``: their percent-encoded ids are decoded, so
    the ids passed on are the dataset's own."""
    out = ["## Geometrically easy but missed (pre-trained encoder)", ""]
    if not per_query or not runs:
        return out + ["Not computed: the probe or the pre-trained evaluation was not run.", ""]
    probe_of = {(Path(p).parts[-4], Path(p).parts[-3]): p for p in per_query}
    run_of = {(Path(p).parts[-4], Path(p).parts[-3]): p for p in runs}
    qrels_of = {Path(d).parts[-2]: Path(d) / "qrels.tsv" for d in data_dirs}
    rows = []
    # the stated k, or the first after R-precision
    numeric = table[table["k"] != RPREC].drop_duplicates(["dataset", "encoder"])
    for r in numeric.itertuples(index=False):
        key = (r.dataset, r.encoder)
        if key not in probe_of or key not in run_of or r.dataset not in qrels_of:
            continue
        prows = _read_jsonl(probe_of[key])
        run = {q: [d for d, _ in docs] for q, docs in read_run(run_of[key]).items()}
        missed = admitted_but_missed(prows, run, load_qrels_file(qrels_of[r.dataset]), int(r.k))
        ex = ", ".join(
            f"{m['query_id']} (best gold rank {m['best_gold_rank'] or '> run depth'})" for m in missed[:examples]
        )
        rows.append([r.dataset, r.encoder, r.k, len(prows), len(missed), ex or "–"])
    out.append(
        "Queries whose gold set the frozen index admits at k (the probe certifies them or ranks every gold "
        "document in its top k) but whose pre-trained query embedding misses a gold document at k: the "
        "encoder-limited verdict of `capgap diagnose`, run on the DAG's own probe and retrieval outputs."
    )
    out.append("")
    out.append(_md_table(["dataset", "encoder", "k", "queries", "admitted but missed", f"first {examples}"], rows))
    out.append("")
    return out


def render(ctx: ReportContext) -> list[str]:
    """The section from the probe's per-query lines, the pre-trained runs and the data folders."""
    return render_missed(ctx.table, ctx.inputs.per_query, ctx.inputs.runs, ctx.inputs.data)
