"""One section per dataset: per split, every method's query count, recall@k at each evaluated
k and nDCG@``ndcg_k``."""

from __future__ import annotations

from .context import ReportContext
from .format import _label, _md_table
from .results import SPLIT_ORDER


def render(ctx: ReportContext) -> list[str]:
    """A ``## <dataset>`` section per dataset (sorted), a table per split that has rows."""
    df, ks, ndcg_k = ctx.df, ctx.ks, ctx.ndcg_k
    out = []
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
                rows.append(
                    [_label(method, enc), int(n.iloc[0]) if len(n) else "–"]
                    + [val("recall", k) for k in ks]
                    + [val("ndcg", ndcg_k)]
                )
            out.append(f"**{split}**")
            out.append("")
            out.append(_md_table(header, rows))
            out.append("")
    return out
