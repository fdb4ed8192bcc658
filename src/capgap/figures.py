"""The report's seaborn figures. Every function writes its PNG atomically, and writes a
placeholder saying why when there is nothing to plot (a stage not run), so the declared
outputs always exist.

Inputs are results.csv rows (tidy: dataset, encoder, method, split, metric, k, value,
compression; see capgap.report.collect) unless stated otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from .data import TWIN_TYPES
from .io import atomic_open

HARDNESS_PREFIX = "parity-P"
METHOD_NAMES = {
    "probe": "capacity (probe)",
    "pretrained": "pre-trained",
    "finetuned": "fine-tuned",
    "bm25": "BM25",
    "colbert": "ColBERT",
    "finetuned-no-twins": "fine-tuned without twins",
}


def _mpl():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    return plt, sns


def _save(fig, path) -> None:
    plt, _ = _mpl()
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def _label(method: str, encoder: str) -> str:
    name = METHOD_NAMES.get(method, method)
    return f"{name} ({encoder})" if encoder else name


def plot_recall_curves(df: pd.DataFrame, path: str | Path) -> bool:
    """Recall@k against k (log axis, every configured k up to 100) for every method, one panel
    per dataset, held-out queries. Returns whether real curves were drawn."""
    plt, sns = _mpl()
    d = df[(df["metric"] == "recall") & (df["split"] == "heldout")].copy()
    if d.empty:
        _placeholder(path, "no recall results (no dataset available)")
        return False
    d["method"] = [_label(m, e) for m, e in zip(d["method"], d["encoder"])]
    d["k"] = d["k"].astype(int)
    g = sns.relplot(
        data=d,
        x="k",
        y="value",
        hue="method",
        style="method",
        col="dataset",
        kind="line",
        markers=True,
        dashes=True,
        alpha=0.8,
        col_wrap=min(3, d["dataset"].nunique()),
        height=3.2,
        facet_kws={"sharex": False},
    )
    g.set(xscale="log", ylim=(0, 1.02), ylabel="held-out recall@k")
    _save(g.figure, path)
    return True


def plot_gap(summary_rows: pd.DataFrame, path: str | Path) -> bool:
    """Capacity vs held-out recall per dataset x encoder: grouped bars of the probe, the
    pre-trained and fine-tuned encoders, ColBERT and BM25 at each dataset's stated k
    (R-precision where gold-set sizes vary: ``summary_table``'s k ``"rprec"``).

    ``summary_rows``: capgap.report.summary_table's frame at the stated k only."""
    plt, sns = _mpl()
    cols = {
        "capacity": "capacity (probe)",
        "pretrained": "pre-trained",
        "finetuned_heldout": "fine-tuned",
        "colbert": "ColBERT",
        "bm25": "BM25",
    }
    if summary_rows.empty or summary_rows["capacity"].isna().all():
        _placeholder(path, "no capacity probe results (probe not run)")
        return False
    s = summary_rows.copy()
    s["run"] = [
        f"{d}\n{e} " + ("(R-precision)" if k == "rprec" else f"(k={k})")  # rprec: report.RPREC
        for d, e, k in zip(s["dataset"], s["encoder"], s["k"])
    ]
    long = s.melt(id_vars=["run"], value_vars=list(cols), var_name="method", value_name="recall").dropna()
    long["method"] = long["method"].map(cols)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * s["run"].nunique()), 4))
    sns.barplot(
        data=long,
        x="run",
        y="recall",
        hue="method",
        hue_order=[c for c in cols.values() if c in set(long["method"])],
        ax=ax,
    )
    ax.set(ylim=(0, 1.05), xlabel="", ylabel="held-out recall@k", title="Capacity vs what the encoders reach (the gap)")
    ax.legend(fontsize=8, loc="upper right", bbox_to_anchor=(1.0, -0.18), ncol=5)
    _save(fig, path)
    return True


def plot_train_vs_heldout(summary_rows: pd.DataFrame, paper_points: Sequence[Mapping], path: str | Path) -> bool:
    """Train vs held-out recall at the stated k for the fine-tuned encoders and ColBERT
    (ours: filled markers), with the paper's published points (crosses) and the diagonal.

    ``paper_points``: dicts with ``label, train, heldout``."""
    plt, sns = _mpl()
    pts = []
    for r in summary_rows.itertuples(index=False):
        if pd.notna(r.finetuned_train) and pd.notna(r.finetuned_heldout):
            pts.append(
                {
                    "run": f"{r.dataset} / {r.encoder}",
                    "train": r.finetuned_train,
                    "heldout": r.finetuned_heldout,
                    "model": "fine-tuned single-vector",
                }
            )
    for r in summary_rows.drop_duplicates(["dataset"]).itertuples(index=False):
        if pd.notna(r.colbert_train) and pd.notna(r.colbert):
            pts.append(
                {
                    "run": f"{r.dataset} / ColBERT",
                    "train": r.colbert_train,
                    "heldout": r.colbert,
                    "model": "fine-tuned ColBERT",
                }
            )
    if not pts:
        _placeholder(path, "no fine-tuned runs (finetune and colbert not run)")
        return False
    p = pd.DataFrame(pts)
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
    sns.scatterplot(
        data=p,
        x="train",
        y="heldout",
        hue="run",
        style="model",
        s=70,
        ax=ax,
        markers={"fine-tuned single-vector": "o", "fine-tuned ColBERT": "s"},
    )
    for q in paper_points:
        ax.scatter([q["train"]], [q["heldout"]], marker="x", color="black", s=50)
        ax.annotate(
            f"paper: {q['label']}",
            (q["train"], q["heldout"]),
            fontsize=7,
            xytext=(-8, 0),
            textcoords="offset points",
            ha="right",
            va="center",
            zorder=1,
            bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.6},
        )
    for c in ax.collections[:1]:  # our points above the paper's labels
        c.set_zorder(5)
    ax.set(
        xlim=(0, 1.05),
        ylim=(0, 1.08),
        xlabel="train recall@k",
        ylabel="held-out recall@k",
        title="Fitting vs generalising (x: the paper)",
    )
    sns.move_legend(ax, "upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
    _save(fig, path)
    return True


def plot_slack(per_query_paths: Sequence[str | Path], path: str | Path, eps: float | None = None) -> bool:
    """The probe's per-query slack distribution (ECDF, log axis; 0 is drawn at 1e-9), one
    curve per dataset / encoder, certified fraction in the legend; ``eps`` (the cutting
    plane's tolerance) as a dotted line.

    ``per_query_paths``: ``results/{dataset}/{encoder}/probe/per_query.jsonl`` files."""
    plt, sns = _mpl()
    frames = []
    for pth in per_query_paths:
        parts = Path(pth).parts
        rows = [json.loads(line) for line in Path(pth).read_text(encoding="utf-8").splitlines() if line.strip()]
        if not rows:
            continue
        f = pd.DataFrame({"slack": [r["slack"] for r in rows], "certified": [bool(r["certified"]) for r in rows]})
        f["run"] = f"{parts[-4]} / {parts[-3]} ({f['certified'].mean():.0%} certified)"
        frames.append(f)
    if not frames:
        _placeholder(path, "no probe results (probe not run)")
        return False
    d = pd.concat(frames, ignore_index=True)
    d["slack"] = d["slack"].clip(lower=1e-9)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    sns.ecdfplot(data=d, x="slack", hue="run", log_scale=True, ax=ax)
    styles = ["-", "--", "-.", ":"]
    for i, line in enumerate(ax.get_lines()):  # overlapping curves stay distinguishable
        line.set_linestyle(styles[i % len(styles)])
    if ax.get_legend() is not None:
        for i, h in enumerate(ax.get_legend().legend_handles[::-1]):
            h.set_linestyle(styles[i % len(styles)])
    if eps:
        ax.axvline(float(eps), color="grey", linestyle=":", linewidth=1)
        ax.annotate(
            f"eps = {eps:g}", (float(eps), 0.02), fontsize=8, color="grey", xytext=(3, 0), textcoords="offset points"
        )
    ax.set(
        xlabel="per-query slack (1-slack cutting plane, at the final C)",
        ylabel="fraction of queries",
        title="Capacity probe: slack distribution",
    )
    sns.move_legend(ax, "upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, title=None)
    _save(fig, path)
    return True


def plot_curves(curve_paths: Sequence[str | Path], path: str | Path) -> bool:
    """Seaborn figure of fine-tuning curves (train vs held-out recall@2 per step).

    Always writes ``path`` (a placeholder saying why when there is nothing to plot); returns
    whether real curves were drawn.

    ``curve_paths``: ``results/{dataset}/{encoder}/finetune/curve.csv`` and
    ``results/{dataset}/colbert/curve.csv`` files (a curve without recall points, e.g. ColBERT on
    a corpus above ``curve_max_docs``, is left out of the figure).
    """
    plt, sns = _mpl()

    def placeholder(text):
        _placeholder(path, text)
        return False

    frames = []
    for p in curve_paths:
        c = pd.read_csv(p)
        parts = Path(p).parts
        c["run"] = f"{parts[-3]} / ColBERT" if parts[-2] == "colbert" else f"{parts[-4]} / {parts[-3]}"
        frames.append(c)
    if not frames:
        return placeholder("no fine-tuning runs (finetune disabled or no dataset)")
    c = pd.concat(frames, ignore_index=True)
    cols = [x for x in ("train_recall@2", "heldout_recall@2") if x in c.columns]
    if not cols:
        return placeholder("fine-tuning curves have no recall@2 points")
    long = c.melt(id_vars=["run", "step"], value_vars=cols, var_name="split", value_name="recall@2").dropna()
    if long.empty:
        return placeholder("fine-tuning curves have no recall@2 points")
    g = sns.relplot(
        data=long,
        x="step",
        y="recall@2",
        hue="split",
        col="run",
        kind="line",
        marker="o",
        col_wrap=min(3, long["run"].nunique()),
        height=3.0,
    )
    g.set(ylim=(0, 1.02))
    _save(g.figure, path)
    return True


def _placeholder(path, text):
    plt, _ = _mpl()
    fig = plt.figure(figsize=(4, 1.5))
    fig.text(0.5, 0.5, text, ha="center", va="center")
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)


def plot_hardness(hdf: pd.DataFrame, out_p: str | Path, out_m: str | Path) -> None:
    """Two seaborn figures from the parity rows: recall@k vs P (trained encoders' train and
    held-out, the perfect encoder, the ladder's rungs ``head-mlp-all`` / ``head-mlp`` held-out
    when present, and the random baseline k/n), and held-out recall vs the
    number of training queries (encoders named ``...-m{m}``). Placeholders when absent."""
    plt, sns = _mpl()

    if hdf.empty:
        _placeholder(out_p, "hardness disabled")
        _placeholder(out_m, "hardness disabled")
        return
    r = hdf[hdf["metric"] == "recall"].copy()
    r["P"] = r["dataset"].str.removeprefix(HARDNESS_PREFIX).astype(int)
    main = r[(r["method"] != "trained") | ~r["encoder"].str.contains(r"-m\d+$")]
    # the ladder's head-mlp-all has an "all" row too
    main = main[(main["method"] != "probe") & (main["split"] != "all")].copy()
    main["curve"] = [f"{m} {e}".strip() if m == "trained" else m for m, e in zip(main["method"], main["encoder"])]
    names = sorted(main["curve"].unique())
    palette = dict(zip(names, sns.color_palette(n_colors=len(names))))  # train (dashed) keeps its curve's colour
    fig, ax = plt.subplots(figsize=(7, 4))
    sns.lineplot(data=main[main["split"] != "train"], x="P", y="value", hue="curve", palette=palette, marker="o", ax=ax)
    tr = main[(main["split"] == "train") & (main["method"] == "trained")]
    sns.lineplot(
        data=tr, x="P", y="value", hue="curve", palette=palette, marker="x", linestyle="--", ax=ax, legend=False
    )
    ax.set(ylabel="recall@k (k = ball size); dashed: train", ylim=(0, 1.02), title="Parity task: held-out recall vs P")
    sns.move_legend(ax, "upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
    _save(fig, out_p)
    sw = r[(r["method"] == "trained") & r["encoder"].str.contains(r"-m\d+$")].copy()
    if sw.empty:
        _placeholder(out_m, "no training-set-size sweep configured")
        return
    sw["m"] = sw["encoder"].str.extract(r"-m(\d+)$")[0].astype(int)
    fig, ax = plt.subplots(figsize=(6, 4))
    sns.lineplot(data=sw, x="m", y="value", hue="split", marker="o", ax=ax)
    base = r[(r["method"] == "random") & (r["dataset"].isin(sw["dataset"]))]["value"]
    if len(base):
        ax.axhline(float(base.iloc[0]), color="grey", linestyle=":", label="random k/n")
    ax.set(
        xscale="log", ylabel="recall@k", ylim=(0, 1.02), title=f"{sw['dataset'].iloc[0]}: recall vs training queries"
    )
    ax.legend()
    _save(fig, out_m)


# capgap.compress.FAMILIES (less float32) plus "other"; not imported: the report env has no faiss/quadprog
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
