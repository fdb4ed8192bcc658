"""Section "The learnability ladder" (issue 29; ``capgap.ladder``, docs/ladder.md): per dataset x
encoder, every rung from the oracle down (the probe, the shared heads fit on all queries and on
train queries, nearest-train transfer, fine-tuning and its regimes, the pre-trained encoder) with
its train and held-out R-precision, recall@10 and nDCG@10, one figure, and one sentence that
splits the held-out gap into a representational and a generalisation part."""

from __future__ import annotations

import re

import pandas as pd

from .. import figures
from .context import ReportContext, ReportOutputs
from .format import _f, _md_table, _num

LADDER_K = 10  # the table's and figure's recall cut-off
GAP_METRIC = ("rprec", "")  # the gap sentence's metric: R-precision, where capacity is read when gold sets vary
FIT_ALL = ("head-linear-all", "head-mlp-all")
TRAIN_ONLY_HEADS = ("head-linear", "head-mlp")
LADDER_COLUMNS = ["dataset", "encoder", "rung", "train_rprec", "heldout_rprec", f"train_recall@{LADDER_K}",
                  f"heldout_recall@{LADDER_K}", "train_ndcg", "heldout_ndcg"]


def ladder_rungs(methods) -> list[str]:
    """The ladder's rungs among ``methods`` (a cell's method names), oracle first: ``probe``,
    the fit-all heads, the train-only heads, ``nn-transfer`` then ``nn-transfer-top<m>`` (by
    m), ``finetuned``, ``finetuned-<regime>`` (in name order; ``finetuned@<set>`` transfer rows
    and ``finetuned-no-twins`` are not rungs), ``pretrained``. Methods absent are left out."""
    have = set(methods)
    top = sorted((m for m in have if re.fullmatch(r"nn-transfer-top\d+", m)), key=lambda m: int(m.rsplit("top", 1)[1]))
    regimes = sorted(m for m in have if re.fullmatch(r"finetuned-[A-Za-z0-9_.]+", m) and m != "finetuned-no-twins")
    order = ["probe", *FIT_ALL, *TRAIN_ONLY_HEADS, "nn-transfer", *top, "finetuned", *regimes, "pretrained"]
    return [m for m in order if m in have]


def is_train_only(rung: str) -> bool:
    """Whether a rung learns from train queries only (its held-out rows measure generalisation):
    the train-only heads, nearest-train transfer, fine-tuning and its regimes."""
    return rung in TRAIN_ONLY_HEADS or rung.startswith("nn-transfer") or rung.startswith("finetuned")


def ladder_table(df: pd.DataFrame, ndcg_k: int = 10) -> pd.DataFrame:
    """One row per dataset x encoder x rung (``LADDER_COLUMNS``) for every cell that has ladder
    rows (a ``head-*`` method), rungs in ``ladder_rungs`` order. Values are results.csv's
    (fractions in [0, 1]; nan where not recorded): R-precision, recall@``LADDER_K`` and
    nDCG@``ndcg_k`` on the train and held-out splits."""
    rows = []
    for (d, e), g in df.groupby(["dataset", "encoder"], sort=False):
        if not g["method"].isin(FIT_ALL + TRAIN_ONLY_HEADS).any():
            continue
        for m in ladder_rungs(g["method"].unique()):
            v = {"dataset": d, "encoder": e, "rung": m}
            for s, name in (("train", "train"), ("heldout", "heldout")):
                v[f"{name}_rprec"] = _num(g, d, e, m, s, "rprec")
                v[f"{name}_recall@{LADDER_K}"] = _num(g, d, e, m, s, "recall", LADDER_K)
                v[f"{name}_ndcg"] = _num(g, d, e, m, s, "ndcg", ndcg_k)
            rows.append(v)
    return pd.DataFrame(rows, columns=LADDER_COLUMNS)


def gap_split(cell: pd.DataFrame) -> dict | None:
    """The held-out gap of one dataset x encoder cell of ``ladder_table``, split in two
    (issue 29), on held-out R-precision:

    - ``representational`` = oracle (``probe``) - the best fit-all head (``head-*-all``: one
      shared map fit on every query, train and held-out): what no map of that family fits;
    - ``generalisation`` = that best fit-all head - the best held-out rung among the train-only
      rungs (``is_train_only``): what a learner of train queries alone does not reach.

    Returns ``{"oracle", "fit", "fit_rung", "best", "best_rung", "representational",
    "generalisation"}`` (fractions; a negative part means the lower rung came out above the
    higher one), or None when the oracle, a fit-all head or a train-only rung is missing. Ties
    go to the rung that comes first in ladder order."""
    val = {r.rung: r.heldout_rprec for r in cell.itertuples() if r.heldout_rprec == r.heldout_rprec}
    fits = [(val[m], m) for m in FIT_ALL if m in val]
    learners = [(val[m], m) for m in ladder_rungs(val) if is_train_only(m)]
    if "probe" not in val or not fits or not learners:
        return None
    fit, fit_rung = max(fits, key=lambda t: t[0])  # max keeps the first of equal values
    best, best_rung = max(learners, key=lambda t: t[0])
    return {"oracle": val["probe"], "fit": fit, "fit_rung": fit_rung, "best": best, "best_rung": best_rung,
            "representational": val["probe"] - fit, "generalisation": fit - best}


def gap_sentence(dataset: str, encoder: str, split: dict | None) -> str:
    """The generated sentence of ``gap_split``'s numbers (3 decimals), or a line saying why there is none."""
    if split is None:
        return (f"{dataset} × {encoder}: no gap split (it needs the probe, a fit-all head and a train-only rung "
                "with held-out R-precision).")
    return (f"{dataset} × {encoder}, held-out R-precision: the oracle reaches {split['oracle']:.3f} and the best shared head "
            f"fit on all queries (`{split['fit_rung']}`) {split['fit']:.3f}, so the representational gap is "
            f"{split['representational']:.3f}; the best rung trained on train queries only (`{split['best_rung']}`) reaches "
            f"{split['best']:.3f}, so the generalisation gap is {split['generalisation']:.3f}.")


def render_ladder(table: pd.DataFrame, fig: str | None, ndcg_k: int = 10) -> list[str]:
    """The section's lines: a table and a sentence per dataset x encoder, the figure; none
    without ladder rows."""
    if table.empty:
        return []
    out = ["## The learnability ladder", "",
           "Between the oracle (the probe: one optimised vector per query) and the pre-trained encoder, what one *shared* "
           "query map reaches on the same frozen index (docs/ladder.md): `head-linear-all` / `head-mlp-all` are fit on "
           "every query, train and held-out (a representational ceiling of that family, as far as its optimiser gets), "
           "`head-linear` / `head-mlp` on train queries only; `nn-transfer` borrows the oracle vector of the most "
           "similar train query (`-top<m>`: the mean of m); `finetuned*` are the fine-tuning regimes. "
           "Gaps are read on held-out R-precision.", ""]
    for (d, e), cell in table.groupby(["dataset", "encoder"], sort=False):
        out.append(f"**{d} × {e}**")
        out.append("")
        out.append(_md_table(["rung", "train R-prec", "held-out R-prec", f"train R@{LADDER_K}", f"held-out R@{LADDER_K}",
                              f"train nDCG@{ndcg_k}", f"held-out nDCG@{ndcg_k}"],
                             [[f"`{r['rung']}`"] + [_f(r[c]) for c in LADDER_COLUMNS[3:]] for r in cell.to_dict("records")]))
        out.append("")
        out.append(gap_sentence(d, e, gap_split(cell)))
        out.append("")
    if fig:
        out += [f"![the learnability ladder]({fig})", ""]
    return out


def draw(ctx: ReportContext, outputs: ReportOutputs) -> dict[str, bool]:
    """The ladder figure (a placeholder without ladder rows)."""
    return {"ladder_png": figures.plot_ladder(ladder_table(ctx.df, ctx.ndcg_k), outputs.ladder_png)}


def render(ctx: ReportContext) -> list[str]:
    """The section (absent without ladder rows)."""
    return render_ladder(ladder_table(ctx.df, ctx.ndcg_k), ctx.figs.get("ladder_png"), ctx.ndcg_k)
