"""Section "At a glance": one bullet per dataset x encoder at its stated k, the paper-layout summary
table, and the capacity-gap figure."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from .. import figures
from .certification import CONSTRUCTION_RULES
from .context import ReportContext, ReportOutputs
from .format import _bm25_text, _f, _figure, _md_table
from .learners import NOT_A_FINDING, NOT_RECORDED_STATE, LearnerState, learner_states
from .results import METHOD_ORDER
from .table import CAUSES, RPREC, _k_text

NOT_RUN_HINT = {
    "probe": "probe.enabled",
    "pretrained": "an encoder for the dataset",
    "finetuned": "finetune.enabled",
    "bm25": "bm25.enabled",
    "colbert": "colbert.enabled / colbert.datasets",
}
MARK = "¹"  # a capacity certified by construction


def _constructed(r) -> bool:
    """Whether a summary row's probe certified every query by construction (split all)."""
    return r.by_construction == 1.0


def _capacity_cell(r) -> str:
    """The summary table's capacity cell: the value, marked when certified by construction."""
    return _f(r.capacity) + (MARK if _constructed(r) else "")


def _causes(r) -> list[float] | None:
    """A summary row's uncertified fractions by cause (CAUSES order); None when not recorded."""
    vals = [getattr(r, f"uncertified_{c}") for c in CAUSES]
    return None if any(v != v for v in vals) else vals


def _causes_cell(r) -> str:
    """The summary table's cause split: "0.020 / 0.000 / 0.000"; "not recorded" when the probe
    ran without recording causes (older results); "–" when the probe did not run."""
    vals = _causes(r)
    if vals is not None:
        return " / ".join(f"{v:.3f}" for v in vals)
    return "not recorded" if r.certified == r.certified else "–"


def _glance(r, finetuned: LearnerState | None = None, colbert: LearnerState | None = None) -> str:
    """One "At a glance" bullet (a summary row at its stated k; R-precision where gold-set
    sizes vary, and the bullet says so). ``finetuned`` / ``colbert``: where the dataset x
    encoder's fine-tuning and the dataset's ColBERT stopped (``capgap.report.learners``; None:
    not recorded). The gap read from a fine-tuning that had not converged, or whose convergence
    was not recorded, keeps its number and is marked *not a finding*."""
    at = f"R-precision, held-out; {r.gold_note}" if r.k == RPREC else f"recall@{r.k}, held-out"
    bits = [f"**{r.dataset} / {r.encoder}** ({at}):"]
    if r.capacity == r.capacity:
        cert = f", {r.certified:.0%} of queries certified" if r.certified == r.certified else ""
        vals = _causes(r)
        if vals is not None and r.certified < 1:
            cert += " (uncertified: " + ", ".join(f"{v:.1%} {n}" for v, n in zip(vals, CAUSES.values())) + ")"
        built = f"{MARK} (certified by construction)" if _constructed(r) else ""
        bits.append(f"the index supports {r.capacity:.3f}{built}{cert};")
    else:
        bits.append("capacity not measured (probe not run);")
    ft = finetuned or NOT_RECORDED_STATE
    if r.gap == r.gap:
        if r.gap_of == "fine-tuned":
            state = f"fine-tuning: {ft.describe()}" if not ft.recorded else f"fine-tuning {ft.describe()}"
            text = (
                f"the fine-tuned encoder reaches {r.finetuned_heldout:.3f} ({state}), "
                f"leaving **{r.gap:.3f} of capacity unused**"
            )
            if not ft.finding:
                text += f" — {NOT_A_FINDING}: " + (
                    "the fine-tuning had not converged"
                    if ft.recorded
                    else "the fine-tuning is not known to have converged"
                )
            bits.append(text + ".")
        else:
            bits.append(
                f"the pre-trained encoder reaches {r.pretrained:.3f}, leaving **{r.gap:.3f} of capacity unused**."
            )
        if r.gap_of == "fine-tuned" and r.pretrained == r.pretrained and r.pretrained > r.finetuned_heldout:
            mark = "" if ft.finding else f" — {NOT_A_FINDING}: " + (ft.why_not("the fine-tuning", state=False))
            bits.append(
                f"Fine-tuning lowered held-out recall (pre-trained {r.pretrained:.3f}; train rose to "
                f"{r.finetuned_train:.3f}){mark}."
            )
    elif r.pretrained == r.pretrained:
        bits.append(f"the pre-trained encoder reaches {r.pretrained:.3f}.")
    cb = colbert or NOT_RECORDED_STATE
    extra = [
        f"{n} {v:.3f}" + (f" ({cb.describe()})" if n == "ColBERT" else "")
        for n, v in (("ColBERT", r.colbert), ("BM25", r.bm25))
        if v == v
    ]
    if extra:
        bits.append("For reference: " + ", ".join(extra) + ".")
    return "- " + " ".join(bits)


def _construction_note(table: pd.DataFrame, construction: Mapping[tuple[str, str], str]) -> list[str]:
    """The footnote of the capacity cells marked certified by construction (none: no lines)."""
    pairs = list(dict.fromkeys((r.dataset, r.encoder) for r in table.itertuples(index=False) if _constructed(r)))
    if not pairs:
        return []
    why = "; ".join(f"{d} / {e}: {construction.get((d, e), CONSTRUCTION_RULES)}" for d, e in pairs)
    return [
        f"{MARK} Certified by construction: every query's certificate was guaranteed before any optimisation, so "
        f"this capacity is a property of the index's shape, not something the probe had to find ({why}).",
        "",
    ]


def render_summary(
    table: pd.DataFrame,
    df: pd.DataFrame,
    bm25: str | None = None,
    construction: Mapping[tuple[str, str], str] | None = None,
) -> list[str]:
    """The "At a glance" bullets and the paper-layout summary table (``bm25``: the BM25 variant's
    name, see ``bm25_variant``; ``construction``: (dataset, encoder) -> why the probe's
    certificates were guaranteed, for the footnote of cells marked certified by construction)."""
    out = ["## At a glance: capacity vs what the encoders reach", ""]
    if table.empty:
        return out + ["No dataset was available, so nothing was measured.", ""]
    states = learner_states(df)
    out += [
        _glance(r, states.get((r.dataset, r.encoder, "finetuned")), states.get((r.dataset, "", "colbert")))
        for r in table[table["stated"]].itertuples(index=False)
    ]
    out.append("")
    out.append(
        "Held-out recall@k at each dataset's stated k (the gold-set size where it is fixed), then @10 and @100 "
        "(a k at or above the corpus size is left out: it retrieves every document). Capacity = the probe's "
        "recall: a lower bound on the best recall a query vector can reach on this index. Certified = fraction "
        "of held-out queries whose gold documents the probe ranks strictly above every other; the uncertified "
        "rest by cause: duplicate documents (a gold document has an identical non-gold copy: no vector "
        "separates them), tied queries (identical query text with a different gold set: one vector must serve "
        "both), geometry (the index itself). Gap = capacity − fine-tuned held-out recall (pre-trained where "
        "fine-tuning did not run); a gap read from a fine-tuning that had not converged (or whose convergence "
        "was not recorded) keeps its number but is marked *not a finding*: a learner stopped early measures "
        "where it stopped, not what fine-tuning reaches."
    )
    if (table["k"] == RPREC).any():
        out[-1] += (
            " Where gold-set sizes vary, the stated row is R-precision (recall at k = each query's own "
            "gold-set size, |top-|gold| ∩ gold| / |gold|; trec_eval's Rprec), so no query is judged at a k "
            "below its gold set: "
            + ", ".join(
                f"{r.dataset} ({r.gold_note})"
                for r in table[table["k"] == RPREC].drop_duplicates("dataset").itertuples(index=False)
            )
            + "."
        )
    out.append("")
    if "bm25" in set(df["method"]):
        out += [f"BM25 = {_bm25_text(bm25)}.", ""]
    out.append(
        _md_table(
            [
                "dataset",
                "encoder",
                "k",
                "capacity (probe)",
                "certified",
                "uncertified: duplicate / tied / geometry",
                "pre-trained",
                "fine-tuned train",
                "fine-tuned held-out",
                "gap",
                "BM25",
                "ColBERT",
            ],
            [
                [
                    r.dataset,
                    r.encoder,
                    f"{_k_text(r.k)}{' (stated)' if r.stated else ''}",
                    _capacity_cell(r),
                    _f(r.certified),
                    _causes_cell(r),
                    _f(r.pretrained),
                    _f(r.finetuned_train),
                    _f(r.finetuned_heldout),
                    _f(r.gap),
                    _f(r.bm25),
                    _f(r.colbert),
                ]
                for r in table.itertuples(index=False)
            ],
        )
    )
    out.append("")
    out += _construction_note(table, construction or {})
    missing = [m for m in METHOD_ORDER if m not in set(df["method"])]
    if missing:
        out.append(
            "Not run in this config (their columns show –): "
            + ", ".join(f"{m} ({NOT_RUN_HINT[m]})" for m in missing)
            + "."
        )
        out.append("")
    return out


def draw(ctx: ReportContext, outputs: ReportOutputs) -> dict[str, bool]:
    """The capacity-gap figure (the summary table at each dataset's stated k)."""
    return {"gap_png": figures.plot_gap(ctx.table[ctx.table["stated"]], outputs.gap_png)}


def render(ctx: ReportContext) -> list[str]:
    """The glance bullets and summary table, then the capacity-gap figure (no table: no lines)."""
    if ctx.table is None:
        return []
    return render_summary(ctx.table, ctx.df, ctx.bm25, ctx.construction) + _figure(
        ctx.figs, "gap_png", "Capacity vs held-out recall", "capacity vs held-out recall per dataset", "the probe"
    )
