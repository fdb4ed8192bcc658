"""Capacity under index compression" (rule ``compress``): per dataset x encoder x index variant
the probe's capacity, its certified fraction and the pre-trained encoder's recall, where each
starts to cost, and the figure."""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from .. import figures, paper
from ..compress import parse_variant
from .context import ReportContext, ReportOutputs
from .format import _count, _f, _md_table, _value
from .results import compressed
from .table import report_ks

COMPRESSION_TOL = 0.01  # absolute recall: a variant "costs" a quantity when it falls more than this below float32
COMPRESSION_COLUMNS = [
    "dataset",
    "encoder",
    "k",
    "variant",
    "family",
    "bytes_per_doc",
    "capacity",
    "certified",
    "pretrained",
]


def compression_family(variant: str) -> str:
    """The family of a compression variant name (``capgap.compress.parse_variant``):
    ``float32``, ``truncation``, ``pca``, ``sq``, ``binary`` or ``pq``; ``other`` for a name
    that does not parse (a newer variant this code does not know)."""
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
            rows.append(
                {
                    "dataset": d,
                    "encoder": e,
                    "k": k,
                    "variant": v,
                    "family": compression_family(v),
                    "bytes_per_doc": b if b == b else val("pretrained", "bytes_per_doc"),
                    "capacity": val("probe", "recall", k),
                    "certified": val("probe", "certified"),
                    "pretrained": val("pretrained", "recall", k),
                    "_cell": c,
                    "_ref": v != "float32",
                    "_o": i,
                }
            )
    t = pd.DataFrame(rows, columns=COMPRESSION_COLUMNS + ["_cell", "_ref", "_o"])
    t = t.assign(_b=-t["bytes_per_doc"].astype(float)).sort_values(
        ["_cell", "_ref", "_b", "_o"], kind="stable", na_position="last"
    )
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
        return (
            f"{name} is {r0[column]:.3f} at {_bytes(r0.bytes_per_doc)} (float32); no compressed variant was measured"
        ), None
    on = compression_onset(cell, column, tol)
    if on is None:
        last = measured.iloc[-1]
        return (
            f"{name} stays within {tol:g} of its float32 value {r0[column]:.3f} ({_bytes(r0.bytes_per_doc)}) "
            f"at every variant measured, down to {_bytes(last.bytes_per_doc)} "
            f"({last.variant}, {last[column]:.3f})"
        ), None
    at = f"{_bytes(on['bytes_per_doc'])} ({on['variant']}, {on[column]:.3f})"
    below = f"{r0[column] - tol:.3f}"
    if on["previous"]["variant"] == "float32":
        return (
            f"{name} ({r0[column]:.3f} at {_bytes(r0.bytes_per_doc)} in float32) drops below {below} already at "
            f"the largest variant, {at}"
        ), on
    p = on["previous"]
    return (
        f"{name} holds within {tol:g} of its float32 value {r0[column]:.3f} ({_bytes(r0.bytes_per_doc)}) down to "
        f"{_bytes(p['bytes_per_doc'])} ({p['variant']}) and first drops below {below} at {at}"
    ), on


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
            order = (pos.index(c_on["variant"]) > pos.index(e_on["variant"])) - (
                pos.index(c_on["variant"]) < pos.index(e_on["variant"])
            )
        verdict = {
            1: "compression costs the encoder's recall before it costs capacity.",
            -1: "compression costs capacity before it costs the encoder's recall.",
            0: f"compression costs capacity and the encoder's recall at the same size ({_bytes(cb)}).",
        }[order]
    return f"{r.dataset} × {r.encoder}: {cap}; {enc} — {verdict}"


def render_compression(ctable: pd.DataFrame, fig: str | None, tol: float = COMPRESSION_TOL) -> list[str]:
    """The report's "Capacity under index compression" section from ``compression_table``: what
    is measured, the figure (``fig``: its path relative to the report; None: not drawn), then
    per dataset x encoder the sentence (``compression_sentence``) and a table of every variant
    (bytes/doc, capacity recall@k, certified, pre-trained recall@k). No rows: no lines."""
    if ctable.empty:
        return []
    out = [
        "## Capacity under index compression",
        "",
        "Rule `compress` re-runs the capacity probe and the pre-trained encoder on compressed variants of each "
        "frozen index (`capgap.compress`: truncation, PCA, scalar quantisation, binarisation, product "
        "quantisation; how to read it: docs/compression.md). Capacity = the probe's recall@k on the compressed "
        "documents (a lower bound on the best recall any query vector can reach there, which bounds every query "
        "encoder on that index from above); certified = fraction of queries whose gold documents the probe ranks "
        "strictly first; pre-trained = the pre-trained encoder's recall@k with its float32 query vectors scored "
        "against the compressed documents (asymmetric; truncation and PCA map the query too). Every number is over "
        "all queries (split all: the probe fits each query on its own, nothing is learnt from train queries), at "
        "each dataset's stated k; float32 is the compress job's own uncompressed run. Bytes per document count the "
        "per-document code only (shared PCA matrices, SQ ranges and PQ codebooks excluded). A quantity starts to "
        f"cost at the first variant, by decreasing bytes, where it falls more than {tol:g} (absolute) below its "
        "float32 value.",
        "",
    ]
    if fig:
        out += [f"![capacity and pre-trained recall against bytes per document]({fig})", ""]
    for _, cell in ctable.groupby(["dataset", "encoder"], sort=False):
        k = cell["k"].iloc[0]
        out += [compression_sentence(cell, tol), ""]
        out.append(
            _md_table(
                ["variant", "bytes/doc", f"capacity (probe R@{k})", "certified", f"pre-trained R@{k}"],
                [
                    [
                        r.variant,
                        _count(r.bytes_per_doc) if r.bytes_per_doc == r.bytes_per_doc else "–",
                        _f(r.capacity),
                        _f(r.certified),
                        _f(r.pretrained),
                    ]
                    for r in cell.itertuples(index=False)
                ],
            )
        )
        out.append("")
    return out


def _table(ctx: ReportContext) -> pd.DataFrame:
    return compression_table(compressed(ctx.df_all), ctx.infos, ctx.ks)


def draw(ctx: ReportContext, outputs: ReportOutputs) -> dict[str, bool]:
    """Capacity and pre-trained recall against bytes per document (a placeholder without compress rows)."""
    return {"compression_png": figures.plot_compression(_table(ctx), outputs.compression_png)}


def render(ctx: ReportContext) -> list[str]:
    """The section (no compress rows: no lines)."""
    return render_compression(_table(ctx), ctx.figs.get("compression_png"))
