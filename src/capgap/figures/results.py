"""The figures of the main results: recall curves, the capacity gap, train against held-out,
the probe's slack, learning curves and the hardness task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from .base import HARDNESS_PREFIX, _label, _mpl, _placeholder, _save


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
