"""Section "The learnability ladder" (issue 29; ``capgap.ladder``, docs/ladder.md): per dataset x
encoder, every rung from the oracle down (the probe, the shared heads fit on all queries and on
train queries, nearest-train transfer, fine-tuning and its regimes, the pre-trained encoder) with
its train and held-out R-precision, recall@10 and nDCG@10 and, for every rung that learns, where it
stopped (``capgap.report.learners``), one figure, and one sentence that splits the held-out gap
into a representational and a generalisation part, read from converged rungs only."""

from __future__ import annotations

import re

import pandas as pd

from .. import figures, paper
from .context import ReportContext, ReportOutputs
from .format import _f, _md_table, _num
from .learners import NOT_RECORDED, NOT_RECORDED_STATE, is_regime, is_trained, learner_states

LADDER_K = 10  # the table's and figure's recall cut-off
GAP_METRIC = ("rprec", "")  # the gap sentence's metric: R-precision, where capacity is read when gold sets vary
FIT_ALL = ("head-linear-all", "head-mlp-all")
TRAIN_ONLY_HEADS = ("head-linear", "head-mlp")
LADDER_COLUMNS = [
    "dataset",
    "encoder",
    "rung",
    "train_rprec",
    "heldout_rprec",
    f"train_recall@{LADDER_K}",
    f"heldout_recall@{LADDER_K}",
    "train_ndcg",
    "heldout_ndcg",
    "state",
]
NO_TRAINING = "–"  # the state cell of a rung that does not learn by gradient (oracle, transfer, pre-trained)


def ladder_rungs(methods) -> list[str]:
    """The ladder's rungs among ``methods`` (a cell's method names), oracle first: ``probe``,
    the fit-all heads, the train-only heads, ``nn-transfer`` then ``nn-transfer-top<m>`` (by
    m), ``finetuned``, ``finetuned-<regime>`` (in name order; ``finetuned@<set>`` transfer rows
    and ``finetuned-no-twins`` are not rungs), ``pretrained``. Methods absent are left out."""
    have = set(methods)
    top = sorted((m for m in have if re.fullmatch(r"nn-transfer-top\d+", m)), key=lambda m: int(m.rsplit("top", 1)[1]))
    regimes = sorted(m for m in have if is_regime(m))
    order = ["probe", *FIT_ALL, *TRAIN_ONLY_HEADS, "nn-transfer", *top, "finetuned", *regimes, "pretrained"]
    return [m for m in order if m in have]


def is_train_only(rung: str) -> bool:
    """Whether a rung learns from train queries only (its held-out rows measure generalisation):
    the train-only heads, nearest-train transfer, fine-tuning and its regimes."""
    return rung in TRAIN_ONLY_HEADS or rung.startswith("nn-transfer") or rung.startswith("finetuned")


def ladder_table(df: pd.DataFrame, ndcg_k: int = 10) -> pd.DataFrame:
    """One row per dataset x encoder x rung (``LADDER_COLUMNS``, then ``learned`` and
    ``converged``) for every cell that has ladder rows (a ``head-*`` method), rungs in
    ``ladder_rungs`` order. Values are results.csv's (fractions in [0, 1]; nan where not
    recorded): R-precision, recall@``LADDER_K`` and nDCG@``ndcg_k`` on the train and held-out
    splits. ``learned``: the rung learns by gradient (``capgap.report.learners.is_trained``: the
    heads, fine-tuning and its regimes); ``converged``: 1.0 it converged, 0.0 it did not or its
    state was not recorded, nan for a rung that does not learn; ``state``: the words for it
    (``capgap.training.describe_state``, "convergence not recorded", or "–")."""
    rows = []
    states = learner_states(df)
    for (d, e), g in df.groupby(["dataset", "encoder"], sort=False):
        if not g["method"].isin(FIT_ALL + TRAIN_ONLY_HEADS).any():
            continue
        for m in ladder_rungs(g["method"].unique()):
            v = {"dataset": d, "encoder": e, "rung": m}
            for s, name in (("train", "train"), ("heldout", "heldout")):
                v[f"{name}_rprec"] = _num(g, d, e, m, s, "rprec")
                v[f"{name}_recall@{LADDER_K}"] = _num(g, d, e, m, s, "recall", LADDER_K)
                v[f"{name}_ndcg"] = _num(g, d, e, m, s, "ndcg", ndcg_k)
            learned = is_trained(m)
            stopped = states.get((d, e, m), NOT_RECORDED_STATE)
            v.update(
                state=stopped.describe() if learned else NO_TRAINING,
                learned=learned,
                converged=(1.0 if stopped.finding else 0.0) if learned else float("nan"),
            )
            rows.append(v)
    return pd.DataFrame(rows, columns=LADDER_COLUMNS + ["learned", "converged"])


def _eligible(cell: pd.DataFrame) -> dict[str, bool]:
    """rung -> whether the gap split may read it: a rung that does not learn, or one that
    converged (a frame without the state columns: every learning rung is not recorded)."""
    out = {}
    for r in cell.to_dict("records"):
        learned = r.get("learned", is_trained(r["rung"]))
        out[r["rung"]] = (not learned) or r.get("converged", 0.0) == 1.0
    return out


def _states(cell: pd.DataFrame) -> dict[str, str]:
    return {
        r["rung"]: r.get("state", NOT_RECORDED if is_trained(r["rung"]) else NO_TRAINING)
        for r in cell.to_dict("records")
    }


def gap_split(cell: pd.DataFrame) -> dict | None:
    """The held-out gap of one dataset x encoder cell of ``ladder_table``, split in two
    (issue 29), on held-out R-precision, from converged rungs only:

    - ``representational`` = oracle (``probe``) - the best converged fit-all head (``head-*-all``:
      one shared map fit on every query, train and held-out): what no map of that family fits;
    - ``generalisation`` = that best fit-all head - the best held-out rung among the train-only
      rungs (``is_train_only``) that converged or do not learn by gradient (``nn-transfer*``):
      what a learner of train queries alone does not reach.

    A rung that learns and did not converge (or whose state was not recorded) bounds no part: a
    part none of whose bounding rungs converged is *not determined* (None), and
    ``fit_skipped`` / ``best_skipped`` name the rungs left out: ``(held-out value, rung,
    state)``, best first, those above the rung used (all of them when the part is not
    determined).

    Returns ``{"oracle", "fit", "fit_rung", "fit_state", "best", "best_rung", "best_state",
    "representational", "generalisation", "fit_skipped", "best_skipped"}`` (fractions; ``fit`` /
    ``best`` and their rung and state None when no such rung converged; a negative part means the
    lower rung came out above the higher one), or None when the oracle, a fit-all head or a
    train-only rung is missing altogether. Ties go to the rung that comes first in ladder order."""
    val = {r.rung: r.heldout_rprec for r in cell.itertuples() if r.heldout_rprec == r.heldout_rprec}
    ok, states = _eligible(cell), _states(cell)
    fits = [(val[m], m) for m in FIT_ALL if m in val]
    learners = [(val[m], m) for m in ladder_rungs(val) if is_train_only(m)]
    if "probe" not in val or not fits or not learners:
        return None

    def pick(cands):
        usable = [t for t in cands if ok[t[1]]]
        top = max(usable, key=lambda t: t[0]) if usable else (None, None)  # max keeps the first of equal values
        skipped = sorted(
            ((v, m, states[m]) for v, m in cands if not ok[m] and (top[0] is None or v > top[0])), key=lambda t: -t[0]
        )
        return top, skipped

    (fit, fit_rung), fit_skipped = pick(fits)
    (best, best_rung), best_skipped = pick(learners)
    return {
        "oracle": val["probe"],
        "fit": fit,
        "fit_rung": fit_rung,
        "fit_state": states.get(fit_rung),
        "best": best,
        "best_rung": best_rung,
        "best_state": states.get(best_rung),
        "representational": None if fit is None else val["probe"] - fit,
        "generalisation": None if fit is None or best is None else fit - best,
        "fit_skipped": fit_skipped,
        "best_skipped": best_skipped,
    }


def _named(rung: str, state: str) -> str:
    """ "`head-mlp-all` stopped at the cap 100, ..." / "`head-mlp-all`: convergence not recorded"."""
    return f"`{rung}`: {state}" if state == NOT_RECORDED else f"`{rung}` {state}"


def gap_sentence(dataset: str, encoder: str, split: dict | None) -> str:
    """The generated sentence of ``gap_split``'s numbers (3 decimals), or a line saying why there
    is none. A part whose bounding rung did not converge reads "not determined" and names that
    rung with its state; the converged rungs read are named with theirs, and a rung left out as
    not converged whose held-out value lies above the one used is named too."""
    if split is None:
        return (
            f"{dataset} × {encoder}: no gap split (it needs the probe, a fit-all head and a train-only rung "
            "with held-out R-precision)."
        )
    text = f"{dataset} × {encoder}, held-out R-precision: the oracle reaches {split['oracle']:.3f}"
    fit, best = split["fit"], split["best"]
    if fit is not None:
        text += (
            f" and the best shared head fit on all queries (`{split['fit_rung']}`) {fit:.3f}, so the "
            f"representational gap is {split['representational']:.3f}"
        )
    else:
        _, rung, state = split["fit_skipped"][0]
        text += f"; representational gap: not determined ({_named(rung, state)})"
    if best is not None:
        text += f"; the best rung trained on train queries only (`{split['best_rung']}`) reaches {best:.3f}"
        if fit is not None:
            text += f", so the generalisation gap is {split['generalisation']:.3f}."
        else:
            text += ", but the generalisation gap is not determined (it is measured down from the fit-all head)."
    else:
        _, rung, state = split["best_skipped"][0]
        text += f"; generalisation gap: not determined ({_named(rung, state)})."
    used = [(split[f"{p}_rung"], split[f"{p}_state"]) for p in ("fit", "best") if split[f"{p}_rung"] is not None]
    if used:
        text += (
            " Read from "
            + ", ".join(f"`{r}` (no training)" if s == NO_TRAINING else _named(r, s) for r, s in used)
            + "."
        )
    left = [t for p in ("fit", "best") if split[p] is not None for t in split[f"{p}_skipped"]]
    if left:
        text += (
            " Left out as not converged, above the rung used: "
            + "; ".join(f"{_named(r, s)} (held-out {v:.3f})" for v, r, s in left)
            + "."
        )
    return text


def render_ladder(table: pd.DataFrame, fig: str | None, ndcg_k: int = 10) -> list[str]:
    """The section's lines: a table (with each rung's state) and a sentence per dataset x
    encoder, the figure; none without ladder rows."""
    if table.empty:
        return []
    out = [
        "## The learnability ladder",
        "",
        "Between the oracle (the probe: one optimised vector per query) and the pre-trained encoder, what one "
        "*shared* query map reaches on the same frozen index (docs/ladder.md): `head-linear-all` / `head-mlp-all` "
        "are fit on every query, train and held-out (a representational ceiling of that family, as far as its "
        "optimiser gets), `head-linear` / `head-mlp` on train queries only; `nn-transfer` borrows the oracle "
        "vector of the most similar train query (`-top<m>`: the mean of m); `finetuned*` are the fine-tuning "
        "regimes. Gaps are read on held-out R-precision, from converged rungs only: a rung that learns and stopped "
        "at its step cap (or early, or whose convergence was not recorded) bounds no part of the gap, and a part "
        "left without a converged bounding rung is *not determined*. State: where each learning rung stopped "
        '("Trained learners"); – for a rung that does not learn by gradient.',
        "",
    ]
    if "state" not in table.columns:
        table = table.assign(state=[NOT_RECORDED if is_trained(r) else NO_TRAINING for r in table["rung"]])
    for (d, e), cell in table.groupby(["dataset", "encoder"], sort=False):
        out.append(f"**{d} × {e}**")
        out.append("")
        out.append(
            _md_table(
                [
                    "rung",
                    "train R-prec",
                    "held-out R-prec",
                    f"train R@{LADDER_K}",
                    f"held-out R@{LADDER_K}",
                    f"train nDCG@{ndcg_k}",
                    f"held-out nDCG@{ndcg_k}",
                    "state",
                ],
                [[f"`{r['rung']}`"] + [_f(r[c]) for c in LADDER_COLUMNS[3:]] for r in cell.to_dict("records")],
            )
        )
        out.append("")
        out.append(gap_sentence(d, e, gap_split(cell)))
        out.append("")
    if fig:
        out += [
            f"![the learnability ladder]({fig})",
            "",
            "The figure plots what the sentences read: R-precision (recall@10 only in a cell without R-precision "
            "rows), train dashed, held-out solid; hollow markers are rungs that learn and did not converge (or "
            "whose convergence was not recorded).",
            "",
        ]
    return out


LADDER_FIGURE_COLUMNS = ["dataset", "encoder", "rung", "split", "value", "metric", "not_converged"]


def ladder_figure_data(table: pd.DataFrame, infos=None) -> pd.DataFrame:
    """The points of ``figures.plot_ladder``: per dataset x encoder cell of ``ladder_table``,
    per rung (ladder order) and split (``held-out``, ``train``), the value the gap sentence reads,
    R-precision, in every cell that has R-precision rows. Where gold-set sizes vary
    (``paper.DatasetInfo.gold_varies``) recall@10 would be capped by the large gold sets, and
    where they are fixed R-precision is recall at the gold-set size, so R-precision is the one
    metric that reads the same everywhere; a cell without R-precision rows (results written
    before they existed) falls back to recall@``LADDER_K``. ``metric``: the cell's y-axis label
    (e.g. "held-out R-precision (gold sets vary 1–475)"); ``not_converged``: the rung learns and
    did not converge (or its state was not recorded): drawn hollow. ``infos``: dataset ->
    ``paper.DatasetInfo`` (for the label; None: not known)."""
    infos = infos or {}
    rows = []
    for (d, e), cell in table.groupby(["dataset", "encoder"], sort=False):
        info = infos.get(d)
        rprec = bool(cell[["train_rprec", "heldout_rprec"]].notna().to_numpy().any())
        if rprec:
            cols = {"held-out": "heldout_rprec", "train": "train_rprec"}
            label = "R-precision"
            if isinstance(info, paper.DatasetInfo) and info.gold_varies:
                label += f" ({info.gold_varies_text()})"
            elif isinstance(info, paper.DatasetInfo) and info.gold_k:
                label += f" (= recall@{info.gold_k}: every gold set has {info.gold_k})"
        else:
            cols = {"held-out": f"heldout_recall@{LADDER_K}", "train": f"train_recall@{LADDER_K}"}
            label = f"recall@{LADDER_K} (no R-precision rows)"
        ok = _eligible(cell)
        for r in cell.to_dict("records"):
            for split, col in cols.items():
                rows.append(
                    {
                        "dataset": d,
                        "encoder": e,
                        "rung": r["rung"],
                        "split": split,
                        "value": float(r[col]),
                        "metric": label,
                        "not_converged": not ok[r["rung"]],
                    }
                )
    return pd.DataFrame(rows, columns=LADDER_FIGURE_COLUMNS)


def draw(ctx: ReportContext, outputs: ReportOutputs) -> dict[str, bool]:
    """The ladder figure (a placeholder without ladder rows): ``ladder_figure_data``."""
    data = ladder_figure_data(ladder_table(ctx.df, ctx.ndcg_k), ctx.infos)
    return {"ladder_png": figures.plot_ladder(data, outputs.ladder_png)}


def render(ctx: ReportContext) -> list[str]:
    """The section (absent without ladder rows)."""
    return render_ladder(ladder_table(ctx.df, ctx.ndcg_k), ctx.figs.get("ladder_png"), ctx.ndcg_k)
