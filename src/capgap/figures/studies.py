"""The figures of the studies beside the main results: index compression, near-miss twins and
the learnability ladder."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..data import TWIN_TYPES
from .base import _mpl, _placeholder, _save

COMPRESSION_FAMILIES = ("truncation", "pca", "sq", "binary", "pq", "other")
COMPRESSION_MARKERS = {"truncation": "o", "pca": "s", "sq": "^", "binary": "D", "pq": "v", "other": "X"}
COMPRESSION_QUANTITIES = {
    "capacity": ("capacity (probe recall@k)", "-"),
    "certified": ("certified fraction (probe)", ":"),
    "pretrained": ("pre-trained recall@k", "--"),
}


def plot_compression(table: pd.DataFrame, path: str | Path) -> bool:
    """Capacity under index compression: one panel per dataset x encoder, x = bytes per
    document (log scale), y = the probe's recall@k (solid), its certified fraction (dotted) and
    the pre-trained encoder's recall@k (dashed), all queries (split all), at the cell's k. One
    colour and marker per family (truncation, PCA, SQ, binary, PQ), each family's line starting
    at the uncompressed float32 point (black star). Writes a placeholder when there is nothing
    to plot; returns whether real panels were drawn.

    ``table``: ``capgap.report.compression_table``'s frame (columns dataset, encoder, k,
    variant, family, bytes_per_doc, capacity, certified, pretrained)."""
    plt, sns = _mpl()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    t = table[table["bytes_per_doc"].astype(float) > 0] if not table.empty else table
    if t.empty:
        _placeholder(path, "no compression results (compress not run)")
        return False
    fig, axes, cells = _index_panels(plt, t, (4.8, 3.6))
    colours = dict(zip(COMPRESSION_FAMILIES, sns.color_palette(n_colors=len(COMPRESSION_FAMILIES))))
    seen = set()
    for ax, ((d, e), cell) in zip(axes.flat, cells):
        ref = cell[cell["family"] == "float32"].head(1)
        for fam in [f for f in COMPRESSION_FAMILIES if (cell["family"] == f).any()]:
            seen.add(fam)
            pts = pd.concat([ref, cell[cell["family"] == fam].sort_values("bytes_per_doc", ascending=False)])
            for col, (_, style) in COMPRESSION_QUANTITIES.items():
                p = pts[pts[col].notna()]
                ax.plot(p["bytes_per_doc"], p[col], linestyle=style, color=colours[fam], linewidth=1.3, alpha=0.85)
                v = p[p["family"] != "float32"]
                ax.plot(
                    v["bytes_per_doc"],
                    v[col],
                    linestyle="none",
                    marker=COMPRESSION_MARKERS[fam],
                    color=colours[fam],
                    markersize=5 if col != "certified" else 4,
                    alpha=0.9,
                )
        for col in COMPRESSION_QUANTITIES:
            r = ref[ref[col].notna()]
            ax.plot(r["bytes_per_doc"], r[col], linestyle="none", marker="*", color="black", markersize=11, zorder=5)
        if not ref.empty:
            ax.annotate(
                "float32",
                (float(ref["bytes_per_doc"].iloc[0]), 1.02),
                fontsize=7,
                ha="right",
                va="bottom",
                xytext=(-4, 0),
                textcoords="offset points",
            )
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.set(
            ylim=(0, 1.08),
            xlabel="bytes per document (log scale)",
            ylabel="fraction of all queries",
            title=f"{d} × {e} (recall@{int(cell['k'].iloc[0])})",
        )
        ax.grid(True, which="major", alpha=0.3)
    handles = [
        Line2D([], [], color=colours[f], marker=COMPRESSION_MARKERS[f], label=f)
        for f in COMPRESSION_FAMILIES
        if f in seen
    ]
    handles += [
        Line2D([], [], color="grey", linestyle=style, label=name) for name, style in COMPRESSION_QUANTITIES.values()
    ]
    handles.append(
        Line2D([], [], color="black", marker="*", linestyle="none", markersize=11, label="float32 (uncompressed)")
    )
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(5, len(handles)), fontsize=8)
    fig.suptitle("Capacity under index compression (all queries)", y=1.0)
    fig.tight_layout()
    _save(fig, path)
    return True


NEAR_MISS_X = "pre-trained score gap, gold - twin (cosine)"
NEAR_MISS_Y = "probe margin, gold - twin (unit witness)"


def near_miss_points(df: pd.DataFrame) -> pd.DataFrame:
    """The points of ``plot_near_miss``: one row per dataset x encoder x twin type (types in
    ``capgap.data.TWIN_TYPES`` order, then others) with both the pre-trained encoder's and the
    probe's held-out ``twin_gap`` rows. Columns dataset, encoder, type, x, x25, x75 (pre-trained
    median and quartiles of score(gold) - score(twin), cosine), y, y25, y75 (the probe's
    geometric margin, witness scaled to unit norm); quartiles nan when not recorded."""
    cols = ["dataset", "encoder", "type", "x", "x25", "x75", "y", "y25", "y75"]
    d = df[
        (df["split"] == "heldout")
        & df["method"].isin(["pretrained", "probe"])
        & df["metric"].astype(str).str.startswith("twin_gap")
    ]
    if d.empty:
        return pd.DataFrame(columns=cols)
    d = d.assign(name=d["metric"].str.split(":", n=1).str[0], type=d["metric"].str.split(":", n=1).str[1])
    wide = d.pivot_table(
        index=["dataset", "encoder", "type"], columns=["method", "name"], values="value", aggfunc="first"
    )
    order = {t: i for i, t in enumerate(TWIN_TYPES)}
    rows = []
    for (ds, enc, t), r in wide.iterrows():

        def g(method, name):
            return float(r.get((method, name), float("nan")))

        if g("pretrained", "twin_gap") == g("pretrained", "twin_gap") and g("probe", "twin_gap") == g(
            "probe", "twin_gap"
        ):
            rows.append(
                {
                    "dataset": ds,
                    "encoder": enc,
                    "type": t,
                    "x": g("pretrained", "twin_gap"),
                    "x25": g("pretrained", "twin_gap_p25"),
                    "x75": g("pretrained", "twin_gap_p75"),
                    "y": g("probe", "twin_gap"),
                    "y25": g("probe", "twin_gap_p25"),
                    "y75": g("probe", "twin_gap_p75"),
                    "_o": (order.get(t, len(order)), t),
                }
            )
    p = pd.DataFrame(rows, columns=cols + ["_o"])
    firsts = list(dict.fromkeys(zip(df["dataset"], df["encoder"])))  # cells in results.csv order
    p["_c"] = [firsts.index((a, b)) for a, b in zip(p["dataset"], p["encoder"])]
    return p.sort_values(["_c", "_o"], kind="stable").drop(columns=["_o", "_c"]).reset_index(drop=True)


def _bars(mid: pd.Series, lo: pd.Series, hi: pd.Series) -> list:
    """Asymmetric error bar lengths ``[below, above]`` from quartiles (0 where not recorded)."""
    return [(mid - lo).clip(lower=0).fillna(0).tolist(), (hi - mid).clip(lower=0).fillna(0).tolist()]


def plot_near_miss(df: pd.DataFrame, path: str | Path) -> bool:
    """Near-miss twins, geometry against the encoder: per twin type (and dataset x encoder) one
    point at x = the pre-trained encoder's held-out median score gap gold - twin (cosine), y =
    the probe's held-out median margin (witness scaled to unit norm), bars p25-p75 on both axes,
    dashed x = 0 and y = 0 lines, each point labelled with its type. Points right of x = 0:
    the encoder already prefers the gold; above y = 0: the index separates it. Writes a
    placeholder when no near-miss dataset has probe and pre-trained twin rows; returns whether
    real points were drawn.

    ``df``: results.csv rows (``twin_gap:<type>``, ``twin_gap_p25:<type>``, ``twin_gap_p75:<type>``
    of methods probe and pretrained, split heldout; see ``near_miss_points``)."""
    plt, sns = _mpl()
    p = near_miss_points(df)
    if p.empty:
        _placeholder(path, "no near-miss twin gaps (no near-miss dataset, or probe / pre-trained not run)")
        return False
    cells = list(dict.fromkeys(zip(p["dataset"], p["encoder"])))
    colours = dict(zip(cells, sns.color_palette(n_colors=len(cells))))
    fig, ax = plt.subplots(figsize=(6.5, 5))
    ax.axvline(0, color="grey", linestyle="--", linewidth=1)
    ax.axhline(0, color="grey", linestyle="--", linewidth=1)
    for cell in cells:
        q = p[(p["dataset"] == cell[0]) & (p["encoder"] == cell[1])]
        ax.errorbar(
            q["x"],
            q["y"],
            xerr=_bars(q["x"], q["x25"], q["x75"]),
            yerr=_bars(q["y"], q["y25"], q["y75"]),
            fmt="o",
            color=colours[cell],
            capsize=3,
            markersize=6,
            label=f"{cell[0]} / {cell[1]}",
        )
        for r in q.itertuples(index=False):
            ax.annotate(r.type.replace("_", " "), (r.x, r.y), fontsize=8, xytext=(5, 4), textcoords="offset points")
    ax.set(xlabel=NEAR_MISS_X, ylabel=NEAR_MISS_Y, title="Near-miss twins: geometry vs encoder (held-out, p25-p75)")
    ax.grid(True, alpha=0.3)
    if len(cells) > 1:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    _save(fig, path)
    return True


def _index_panels(plt, frame: pd.DataFrame, size: tuple[float, float]):
    """One panel per dataset x encoder of ``frame`` (in order of appearance), at most three per
    row, each ``size`` inches (width, height); panels past the last cell are hidden. Returns
    ``(fig, axes, cells)``: ``axes`` a 2-d array, ``cells`` the ``((dataset, encoder), rows)`` pairs."""
    cells = list(frame.groupby(["dataset", "encoder"], sort=False))
    ncols = min(3, len(cells))
    nrows = -(-len(cells) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(size[0] * ncols, size[1] * nrows), squeeze=False)
    for ax in list(axes.flat)[len(cells) :]:
        ax.set_visible(False)
    return fig, axes, cells


def plot_ladder(points: pd.DataFrame, path: str | Path) -> bool:
    """The learnability ladder: one panel per dataset x encoder, the rungs on the x-axis (oracle
    first, pre-trained last: ``capgap.report.ladder_table``'s order), the value the report's gap
    sentence reads (R-precision; recall@10 only in a cell without R-precision rows: the panel's
    y-axis says which) on train queries (dashed, squares) and on held-out queries (solid,
    circles). A rung that learns and did not converge (or whose state was not recorded) is drawn
    hollow, with a legend entry. Writes a placeholder without ladder rows; returns whether real
    panels were drawn.

    ``points``: ``capgap.report.ladder.ladder_figure_data``'s frame (columns dataset, encoder,
    rung, split ``held-out`` / ``train``, value, metric, not_converged)."""
    plt, sns = _mpl()
    from matplotlib.lines import Line2D

    if points.empty:
        _placeholder(path, "no ladder results (ladder not run)")
        return False
    fig, axes, cells = _index_panels(plt, points, (5.2, 3.8))
    colours = sns.color_palette(n_colors=2)
    looks = {"held-out": ("-", "o", colours[0]), "train": ("--", "s", colours[1])}
    for ax, ((d, e), cell) in zip(axes.flat, cells):
        rungs = list(dict.fromkeys(cell["rung"]))
        where = {r: i for i, r in enumerate(rungs)}
        hollow_here = False
        for split, (style, marker, colour) in looks.items():
            c = cell[cell["split"] == split]
            if c.empty:
                continue
            x, y = [where[r] for r in c["rung"]], c["value"].astype(float).tolist()
            ax.plot(x, y, linestyle=style, color=colour, linewidth=1.4)
            for hollow in (False, True):
                sel = [(xi, yi) for xi, yi, h in zip(x, y, c["not_converged"].astype(bool)) if h == hollow]
                if sel:
                    hollow_here |= hollow
                    ax.plot(
                        *zip(*sel),
                        linestyle="none",
                        marker=marker,
                        markersize=6,
                        color=colour,
                        markerfacecolor="white" if hollow else colour,
                        markeredgewidth=1.4,
                    )
        ax.set_xticks(range(len(rungs)))
        ax.set_xticklabels(rungs, rotation=45, ha="right", fontsize=7)
        ax.set(ylim=(0, 1.02), ylabel=str(cell["metric"].iloc[0]), title=f"{d} × {e}")
        ax.yaxis.label.set_size(8)
        ax.grid(True, alpha=0.3)
        handles = [
            Line2D([], [], linestyle=st, marker=mk, color=col, label=split) for split, (st, mk, col) in looks.items()
        ]
        if hollow_here:
            handles.append(
                Line2D(
                    [],
                    [],
                    linestyle="none",
                    marker="o",
                    color="grey",
                    markerfacecolor="white",
                    label="hollow: not converged",
                )
            )
        ax.legend(handles=handles, fontsize=7)
    fig.suptitle(
        "The learnability ladder: oracle to pre-trained (train dashed, held-out solid; hollow: not converged)", y=1.0
    )
    fig.tight_layout()
    _save(fig, path)
    return True
