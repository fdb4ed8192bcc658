"""Aggregate per-job result rows into ``reports/results.csv``, ``report.md``, a figure, and a
JSON summary for ``dvc metrics``.

``results.csv`` (tidy: ``dataset, encoder, method, split, metric, k, value``) is the single
source; the Markdown tables, the figure and ``summary.json`` are all rendered from it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Sequence

import pandas as pd

from .evaluate import COLUMNS
from .io import atomic_open, write_json, write_text

METHOD_ORDER = ("probe", "pretrained", "finetuned", "bm25", "colbert")
SPLIT_ORDER = ("train", "heldout", "all")


def collect(csv_paths: Sequence[str | Path]) -> pd.DataFrame:
    """Concatenate per-job CSVs into one sorted tidy frame (raises ``ValueError`` on bad columns)."""
    frames = []
    for p in csv_paths:
        df = pd.read_csv(p, dtype={"encoder": str, "k": "Int64"}, keep_default_na=False, na_values={"k": [""]})
        if tuple(df.columns) != COLUMNS:
            raise ValueError(f"{p}: columns {tuple(df.columns)} != {COLUMNS}")
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=list(COLUMNS))
    df = pd.concat(frames, ignore_index=True)
    df["_m"] = df["method"].map({m: i for i, m in enumerate(METHOD_ORDER)}).fillna(99)
    df["_s"] = df["split"].map({s: i for i, s in enumerate(SPLIT_ORDER)}).fillna(99)
    df = df.sort_values(["dataset", "_m", "encoder", "_s", "metric", "k"], kind="stable").drop(columns=["_m", "_s"])
    return df.reset_index(drop=True)


def _md_table(header: list[str], rows: list[list]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


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


PAPER_LIMIT = (
    "Paper (arXiv 2610.02749, LIMIT, 50k documents): fine-tuned single-vector Qwen3-Embedding-4B "
    "1.000 train / 0.068 held-out recall; fine-tuned GTE-ModernColBERT 1.000 / 0.998. LIMIT paper "
    "(Weller et al. 2025): BM25 on LIMIT-small recall@2/10/20 = 0.978 / 1.0 / 1.0."
)


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
    return [
        "## Single vector vs late interaction vs BM25 (the paper's LIMIT comparison)",
        "",
        "Recall@k of the capacity probe (held-out queries), the LoRA fine-tuned single-vector encoder, "
        "the fine-tuned ColBERT (PyLate, both towers trained, MaxSim) and BM25. ColBERT ANN recall: the "
        "index's top-k (faiss or PLAID candidates re-scored) against exact MaxSim top-k on a query sample (only where an index was "
        "used; it is not relevant-document recall).",
        "",
        _md_table(["dataset", "single-vector encoder", "k", "probe held-out", "fine-tuned train", "fine-tuned held-out",
                   "ColBERT train", "ColBERT held-out", "BM25 held-out", "ColBERT ANN recall"], rows),
        "",
        PAPER_LIMIT,
        "",
    ]


def render_markdown(df: pd.DataFrame, statuses: list[dict], figure: str | None, ks: Sequence[int], ndcg_k: int = 10, curves_figure: str | None = None) -> str:
    """The report's Markdown text (tables per dataset, unavailable datasets, figure link)."""
    out = ["# capgap report", ""]
    out.append(
        "Recall@k = |top-k ∩ gold| / |gold| averaged over queries (LIMIT/MTEB); "
        f"nDCG@{ndcg_k} with linear gain (trec_eval). Splits: train, held-out, all queries. "
        "Generated from `reports/results.csv`."
    )
    out.append("")
    avail = [s for s in statuses if s.get("available")]
    missing = [s for s in statuses if not s.get("available")]
    out.append("## Datasets")
    out.append("")
    out.append(_md_table(
        ["dataset", "documents", "queries", "train", "held-out", "dropped (no gold)", "source", "split rule"],
        [[s["dataset"], s["n_docs"], s["n_queries"], s["n_train"], s["n_heldout"], s["dropped_queries_without_gold"], _source(s["source"]), s["split_rule"]] for s in avail],
    ))
    out.append("")
    if missing:
        out.append("## Datasets that could not be obtained")
        out.append("")
        for s in missing:
            out.append(f"- **{s['dataset']}**: {s['reason']}. {s['hint']}")
        out.append("")
    probe = df[df["method"] == "probe"]
    if not probe.empty:
        out.append("## Capacity probe vs the query encoders (held-out queries)")
        out.append("")
        out.append(
            "Probe = a per-query ranking SVM on the frozen index (Joachims' 1-slack cutting plane): "
            "its recall is a lower bound on what any query encoder could reach on that index; "
            "certified = every gold document ranked above every non-gold one."
        )
        out.append("")

        def one(d, e, m, split, metric, k=None):
            return _value(df, d, e, m, split, metric, k)

        rows = []
        for (d, e), _ in probe.groupby(["dataset", "encoder"], sort=False):
            rows.append([d, e] + [one(d, e, m, "heldout", "recall", k) for k in (2, 10) for m in ("probe", "pretrained", "finetuned")]
                        + [one(d, e, "finetuned", "train", "recall", 2),
                           one(d, e, "probe", "heldout", "certified"), one(d, e, "probe", "heldout", "slack_median"),
                           _count(one(d, e, "probe", "heldout", "iterations_median")), one(d, e, "probe", "heldout", "not_converged")])
        out.append(_md_table(["dataset", "encoder", "probe R@2", "pre-trained R@2", "fine-tuned R@2", "probe R@10", "pre-trained R@10",
                              "fine-tuned R@10", "fine-tuned train R@2", "certified", "median slack", "median iterations", "not converged"], rows))
        out.append("")
        out.append("Fine-tuned = LoRA on the query side, InfoNCE against the frozen index, trained on train queries only; "
                   "the columns are held-out recall unless marked train.")
        out.append("")
    out += _side_by_side(df)
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
    if figure:
        out.append("## Recall@k")
        out.append("")
        out.append(f"![recall@k per method, all queries]({figure})")
        out.append("")
    if curves_figure:
        out.append("## Fine-tuning curves")
        out.append("")
        out.append("Recall@2 of the query encoder on train and held-out queries during LoRA fine-tuning.")
        out.append("")
        out.append(f"![fine-tuning curves]({curves_figure})")
        out.append("")
    return "\n".join(out)


def plot_recall_curves(df: pd.DataFrame, path: str | Path) -> None:
    """Seaborn figure: recall@k against k, one panel per dataset, all queries (atomic PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    d = df[(df["metric"] == "recall") & (df["split"] == "all")].copy()
    if d.empty:  # still write the declared figure, saying why it is empty
        fig = plt.figure(figsize=(4, 1.5))
        fig.text(0.5, 0.5, "no recall results (no dataset available)", ha="center", va="center")
        with atomic_open(path, "wb") as fh:
            fig.savefig(fh, format="png", dpi=110)
        plt.close(fig)
        return
    d["method"] = [_label(m, e) for m, e in zip(d["method"], d["encoder"])]
    d["k"] = d["k"].astype(int)
    g = sns.relplot(data=d, x="k", y="value", hue="method", col="dataset", kind="line", marker="o", col_wrap=min(3, d["dataset"].nunique()), height=3.2, facet_kws={"sharex": False})
    g.set(xscale="log", ylim=(0, 1.02), ylabel="recall@k")
    with atomic_open(path, "wb") as fh:
        g.figure.savefig(fh, format="png", dpi=110, bbox_inches="tight")
    plt.close(g.figure)


def plot_curves(curve_paths: Sequence[str | Path], path: str | Path) -> bool:
    """Seaborn figure of fine-tuning curves (train vs held-out recall@2 per step).

    Always writes ``path`` (a placeholder saying why when there is nothing to plot); returns
    whether real curves were drawn.

    ``curve_paths``: ``results/{dataset}/{encoder}/finetune/curve.csv`` and
    ``results/{dataset}/colbert/curve.csv`` files (a curve without recall points, e.g. ColBERT on
    a corpus above ``curve_max_docs``, is left out of the figure).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

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
    g = sns.relplot(data=long, x="step", y="recall@2", hue="split", col="run", kind="line", marker="o", col_wrap=min(3, long["run"].nunique()), height=3.0)
    g.set(ylim=(0, 1.02))
    with atomic_open(path, "wb") as fh:
        g.figure.savefig(fh, format="png", dpi=110, bbox_inches="tight")
    plt.close(g.figure)
    return True


def summary(df: pd.DataFrame, ks: Sequence[int], ndcg_k: int = 10) -> dict:
    """Nested dict for ``dvc metrics``: dataset -> method[/encoder] -> split -> metric@k -> value
    (just ``metric`` for metrics without a cut-off: certified, slack_median, ...)."""
    out: dict = {}
    for r in df[df["metric"] != "n_queries"].itertuples(index=False):
        key = f"{r.method}/{r.encoder}" if r.encoder else r.method
        name = r.metric if pd.isna(r.k) or r.k == "" else f"{r.metric}@{r.k}"  # certified, slack_median: no k
        out.setdefault(r.dataset, {}).setdefault(key, {}).setdefault(r.split, {})[name] = round(float(r.value), 6)
    return out


def build_report(csv_paths, status_paths, out_csv, out_md, out_png, out_summary, ks: Sequence[int], ndcg_k: int = 10,
                 curve_paths: Sequence[str | Path] = (), out_curves_png: str | Path | None = None,
                 hardness_summary: str | Path | None = None, out_hardness_p: str | Path | None = None,
                 out_hardness_m: str | Path | None = None) -> pd.DataFrame:
    """Write ``results.csv``, the figures, ``report.md`` and ``summary.json``; return the frame.

    Rows of the parity task (datasets ``parity-P*``) go to results.csv and summary.json like
    every row, and to their own report section and figures (``hardness_summary``: the hardness
    rule's summary.json; absent when hardness is disabled)."""
    df_all = collect(csv_paths)
    hard = df_all["dataset"].astype(str).str.startswith(HARDNESS_PREFIX)
    df, hdf = df_all[~hard], df_all[hard]
    statuses = [json.loads(Path(p).read_text()) for p in status_paths]
    with atomic_open(out_csv, "w", encoding="utf-8", newline="") as fh:
        df_all.to_csv(fh, index=False, lineterminator="\n")
    plot_recall_curves(df, out_png)
    rel = Path(out_png).relative_to(Path(out_md).parent)
    curves = None
    if out_curves_png and plot_curves(curve_paths, out_curves_png):
        curves = str(Path(out_curves_png).relative_to(Path(out_md).parent))
    md = render_markdown(df, statuses, str(rel), ks, ndcg_k, curves)
    if out_hardness_p and out_hardness_m:
        plot_hardness(hdf, out_hardness_p, out_hardness_m)
        hs = json.loads(Path(hardness_summary).read_text()) if hardness_summary else None
        base = Path(out_md).parent
        md = md.rstrip("\n") + "\n\n" + "\n".join(render_hardness(hdf, hs, str(Path(out_hardness_p).relative_to(base)) if hs else None,
                                         str(Path(out_hardness_m).relative_to(base)) if hs else None)) + "\n"
    write_text(out_md, md)
    write_json(out_summary, summary(df_all, ks, ndcg_k))
    return df_all


HARDNESS_PREFIX = "parity-P"


def _placeholder(path, text):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(4, 1.5))
    fig.text(0.5, 0.5, text, ha="center", va="center")
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)


def plot_hardness(hdf: pd.DataFrame, out_p: str | Path, out_m: str | Path) -> None:
    """Two seaborn figures from the parity rows: recall@k vs P (trained encoders' train and
    held-out, the perfect encoder, and the random baseline k/n), and held-out recall vs the
    number of training queries (encoders named ``...-m{m}``). Placeholders when absent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    if hdf.empty:
        _placeholder(out_p, "hardness disabled")
        _placeholder(out_m, "hardness disabled")
        return
    r = hdf[hdf["metric"] == "recall"].copy()
    r["P"] = r["dataset"].str.removeprefix(HARDNESS_PREFIX).astype(int)
    main = r[(r["method"] != "trained") | ~r["encoder"].str.contains(r"-m\d+$")]
    main = main[(main["method"] != "probe")].copy()
    main["curve"] = [f"{m} {e}".strip() if m == "trained" else m for m, e in zip(main["method"], main["encoder"])]
    names = sorted(main["curve"].unique())
    palette = dict(zip(names, sns.color_palette(n_colors=len(names))))  # train (dashed) keeps its curve's colour
    fig, ax = plt.subplots(figsize=(7, 4))
    sns.lineplot(data=main[main["split"] != "train"], x="P", y="value", hue="curve", palette=palette, marker="o", ax=ax)
    tr = main[(main["split"] == "train") & (main["method"] == "trained")]
    sns.lineplot(data=tr, x="P", y="value", hue="curve", palette=palette, marker="x", linestyle="--", ax=ax, legend=False)
    ax.set(ylabel="recall@k (k = ball size); dashed: train", ylim=(0, 1.02), title="Parity task: held-out recall vs P")
    with atomic_open(out_p, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
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
    ax.set(xscale="log", ylabel="recall@k", ylim=(0, 1.02), title=f"{sw['dataset'].iloc[0]}: recall vs training queries")
    ax.legend()
    with atomic_open(out_m, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def render_hardness(hdf: pd.DataFrame, hsummary: dict | None, fig_p: str | None, fig_m: str | None) -> list[str]:
    """The report's hardness section: sizes, recall per P (perfect encoder, probe, trained
    encoders train/held-out, random k/n), chance agreement, figures."""
    if hdf.empty or not hsummary:
        return ["## Hardness: the parity task", "", "Not run (hardness.enabled is false).", ""]
    out = ["## Hardness: the parity task", "",
           "Queries are P-bit keyword indicators, documents the 2^d hypercube vertices, the gold set the Hamming "
           "ball of radius rho around c = Aq mod 2 (arXiv 2610.02749). Recall is at k = ball size; the random "
           "baseline is k/n.", ""]
    out.append(_md_table(["P", "d", "n", "k", "k/n", "log2 #intents (dP)", "SQ lower bound", "perfect net hidden", "parameters"],
                         [[s["P"], s["d"], s["n"], s["k"], s["k_over_n"], s["log2_intents"], s["sq_lower_bound"],
                           s["perfect_hidden"], s["perfect_parameters"]] for s in hsummary["sizes"]]))
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
    if fig_m:
        out += [f"![recall vs training queries]({fig_m})", ""]
    return out
