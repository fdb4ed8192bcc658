"""Near-miss twins: geometry or learning?" (``capgap.nearmiss``): per near-miss dataset x encoder
x twin type the twin_win of every method, one verdict sentence per type, and the figure; the
transfer tables follow (``capgap.report.transfer``)."""

from __future__ import annotations

import re
from typing import Mapping

import pandas as pd

from ..data import TWIN_TYPES as TYPES
from .format import _count, _f, _md_table, _num
from .learners import NOT_A_FINDING, NOT_RECORDED_STATE, learner_states

TWIN_SOLVED = 0.95  # held-out twin_win at or above this: the method separates the gold statement from that twin type
NO_TWINS = "finetuned-no-twins"  # the near-miss adapter trained with the twins left out of the InfoNCE softmax
# order the twin pair count is taken in
TWIN_METHODS = ("probe", "pretrained", "finetuned", NO_TWINS, "bm25", "colbert")
TRANSFER_METHOD = re.compile(r"^(finetuned|finetuned-no-twins)@(.+)$")  # finetuned[-no-twins]@<near-miss source>
NEAR_MISS_COLUMNS = [
    "dataset",
    "encoder",
    "type",
    "pairs",
    "probe_win",
    "probe_gap",
    "pretrained_win",
    "finetuned_train",
    "finetuned_heldout",
    "no_twins_heldout",
    "bm25_win",
    "bm25_tie",
    "colbert_win",
    "colbert_tie",
    "finetuned_state",
    "finetuned_finding",
    "no_twins_state",
    "no_twins_finding",
    "colbert_state",
    "colbert_finding",
]


def _twin_metric(metric: str) -> tuple[str, str] | None:
    """``"twin_win:role_swap"`` -> ``("twin_win", "role_swap")``; None for any other metric."""
    name, sep, kind = str(metric).partition(":")
    return (name, kind) if sep and name.startswith("twin_") and kind else None


def twin_metric_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The results.csv rows of twin metrics (``twin_pairs:<type>``, ``twin_win:<type>``, ...)."""
    return df[[_twin_metric(m) is not None for m in df["metric"]]] if len(df) else df


def twin_types(df: pd.DataFrame) -> list[str]:
    """The twin types that have rows in ``df``: ``capgap.data.TWIN_TYPES`` order, then any other
    type (a newer edit rule) alphabetically."""
    seen = {t[1] for t in map(_twin_metric, df["metric"]) if t}
    return [t for t in TYPES if t in seen] + sorted(seen - set(TYPES))


def _twin_encoders(tw: pd.DataFrame, dataset: str) -> list[str]:
    """The single-vector encoders with twin rows on ``dataset`` (``[""]`` when only BM25 /
    ColBERT, which have no encoder, measured it)."""
    encs = tw[(tw["dataset"] == dataset) & (tw["encoder"] != "")]["encoder"].unique()
    return list(encs) or [""]


def near_miss_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per near-miss dataset x single-vector encoder x twin type present, columns
    NEAR_MISS_COLUMNS, from the twin rows of results.csv (``df``; none: an empty frame).

    ``pairs``: held-out (query, gold, twin) triples (the first method of TWIN_METHODS that
    recorded it); every ``*_win`` column is a held-out ``twin_win`` (fraction in [0, 1] of those
    triples whose gold document scores strictly above its twin) except ``finetuned_train``;
    ``probe_gap``: the probe's held-out median geometric margin (witness scaled to unit norm);
    ``bm25_tie`` / ``colbert_tie``: held-out ``twin_tie`` (fraction of exact ties). BM25 and
    ColBERT (no encoder) repeat on every encoder's rows. nan: not measured. ``*_state``: where
    the dataset's fine-tuned adapter (twins as negatives), the one without twins and ColBERT
    stopped (``capgap.report.learners``; "convergence not recorded" for results without it; None
    where the method has no twin rows); ``*_finding``: that learner is a finding (converged,
    chosen by early stopping, or not trained: a verdict on what it does is drawn only then)."""
    tw = twin_metric_rows(df)
    states = learner_states(df)
    rows = []
    for d in tw["dataset"].unique():
        sub = tw[tw["dataset"] == d]
        for e in _twin_encoders(tw, d):
            for t in twin_types(sub):

                def v(method, name, split="heldout"):
                    return _num(sub, d, "" if method in ("bm25", "colbert") else e, method, split, f"{name}:{t}")

                pairs = next((p for p in (v(m, "twin_pairs") for m in TWIN_METHODS) if p == p), float("nan"))
                rows.append(
                    {
                        "dataset": d,
                        "encoder": e,
                        "type": t,
                        "pairs": pairs,
                        "probe_win": v("probe", "twin_win"),
                        "probe_gap": v("probe", "twin_gap"),
                        "pretrained_win": v("pretrained", "twin_win"),
                        "finetuned_train": v("finetuned", "twin_win", "train"),
                        "finetuned_heldout": v("finetuned", "twin_win"),
                        "no_twins_heldout": v(NO_TWINS, "twin_win"),
                        "bm25_win": v("bm25", "twin_win"),
                        "bm25_tie": v("bm25", "twin_tie"),
                        "colbert_win": v("colbert", "twin_win"),
                        "colbert_tie": v("colbert", "twin_tie"),
                    }
                )
                for key, method, enc in (
                    ("finetuned", "finetuned", e),
                    ("no_twins", NO_TWINS, e),
                    ("colbert", "colbert", ""),
                ):
                    measured = ((sub["method"] == method) & (sub["encoder"] == enc)).any()
                    stopped = states.get((d, enc, method), NOT_RECORDED_STATE)
                    rows[-1][f"{key}_state"] = stopped.describe() if measured else None
                    rows[-1][f"{key}_finding"] = stopped.finding if measured else None
    return pd.DataFrame(rows, columns=NEAR_MISS_COLUMNS)


def _type_name(t: str) -> str:
    """A twin type for display: ``role_swap`` -> ``role swap``."""
    return t.replace("_", " ")


def twin_verdict_kind(r: Mapping) -> str:
    """The verdict on one twin type (``r``: a ``near_miss_table`` row as a mapping), from
    held-out twin_win only, with TWIN_SOLVED = 0.95:

    1. ``"index-limited"`` if the probe's twin_win < TWIN_SOLVED: the witness the probe found for
       each query's whole gold set (uncertified queries: the best it could do) leaves the twin
       above the gold statement; not an upper bound on one pair (any two distinct vectors are
       separable), a statement about ranking the gold set first with the twin behind;
    2. else ``"encoder-limited"`` if the pre-trained encoder's twin_win < TWIN_SOLVED: the
       geometry allows it, the encoder does not find it (the sentence adds whether fine-tuning
       closes it on held-out combinations: fine-tuned held-out twin_win >= TWIN_SOLVED);
    3. else ``"lexically blind"`` if BM25's twin_win < TWIN_SOLVED: the index and the encoder
       separate it, the lexical baseline does not;
    4. else ``"solved"``: solved by every method (the sentence names any other method that
       was measured and falls below TWIN_SOLVED: fine-tuned, fine-tuned without twins, ColBERT).

    ``"not decided"`` when a value the rule needs was not measured: the probe's, or (probe at
    or above TWIN_SOLVED) the pre-trained encoder's. A BM25 that did not run skips step 3."""
    if r["probe_win"] != r["probe_win"]:
        return "not decided"
    if r["probe_win"] < TWIN_SOLVED:
        return "index-limited"
    if r["pretrained_win"] != r["pretrained_win"]:
        return "not decided"
    if r["pretrained_win"] < TWIN_SOLVED:
        return "encoder-limited"
    if r["bm25_win"] == r["bm25_win"] and r["bm25_win"] < TWIN_SOLVED:
        return "lexically blind"
    return "solved"


def _finetune_clause(r: Mapping) -> str:
    """The encoder-limited verdict's clause on fine-tuning (held-out, train in brackets)."""
    ft, tr, nt = r["finetuned_heldout"], r["finetuned_train"], r["no_twins_heldout"]
    if ft != ft:
        return "fine-tuning was not run"
    train = f", train {tr:.3f}" if tr == tr else ""
    without = f"; without twins in the softmax it reaches {nt:.3f}" if nt == nt else ""
    if ft >= TWIN_SOLVED:
        text = f"fine-tuning closes it on held-out combinations (fine-tuned held-out {ft:.3f}{train}{without})"
    else:
        text = (
            f"fine-tuning does not close it on held-out combinations (fine-tuned held-out {ft:.3f} < "
            f"{TWIN_SOLVED}{train}{without})"
        )
    return text + _unfinished(r)


def _unfinished(r: Mapping) -> str:
    """ " — not a finding: the fine-tuning had not converged (...)" when the row records that the
    fine-tuned adapter (or, where measured, the one without twins) did not converge or that its
    convergence was not recorded; "" otherwise (also for a row without state columns)."""
    why = []
    for key, what in (("finetuned", "the fine-tuning"), ("no_twins", "the fine-tuning without twins")):
        found = r.get(f"{key}_finding")
        if found is not None and found == found and not bool(found):
            state = r.get(f"{key}_state")
            why.append(
                f"the convergence of {what} was not recorded"
                if state == "convergence not recorded"
                else f"{what} had not converged ({state})"
            )
    return f" — {NOT_A_FINDING}: " + "; ".join(why) if why else ""


def _not_a_finding(r: Mapping, key: str) -> str:
    """ " (not a finding: <state>)" when the row records that learner ``key`` (finetuned,
    no_twins, colbert) is not a finding (not converged, or not recorded); "" otherwise."""
    found = r.get(f"{key}_finding")
    if found is None or found != found or bool(found):
        return ""
    return f" ({NOT_A_FINDING}: {r.get(f'{key}_state')})"


def _solved_clause(r: Mapping) -> str:
    """The solved verdict's text: "solved by every method", or the methods measured below TWIN_SOLVED."""
    checked = f"probe {r['probe_win']:.3f}, pre-trained {r['pretrained_win']:.3f}" + (
        f", BM25 {r['bm25_win']:.3f}" if r["bm25_win"] == r["bm25_win"] else ", BM25 not run"
    )
    below = [
        f"{name} {r[c]:.3f}" + _not_a_finding(r, key)
        for c, key, name in (
            ("finetuned_heldout", "finetuned", "fine-tuned"),
            ("no_twins_heldout", "no_twins", "fine-tuned without twins"),
            ("colbert_win", "colbert", "ColBERT"),
        )
        if r[c] == r[c] and r[c] < TWIN_SOLVED
    ]
    if below:
        return (
            f"solved by the index, the pre-trained encoder and BM25 ({checked}, all >= {TWIN_SOLVED}), "
            f"but not by {', '.join(below)}"
        )
    unfinished = [
        f"{name} {r.get(f'{key}_state')}"
        for c, key, name in (
            ("finetuned_heldout", "finetuned", "fine-tuned"),
            ("no_twins_heldout", "no_twins", "fine-tuned without twins"),
            ("colbert_win", "colbert", "ColBERT"),
        )
        if r[c] == r[c] and _not_a_finding(r, key)
    ]
    mark = f" — {NOT_A_FINDING} for " + "; ".join(unfinished) if unfinished else ""
    return f"solved by every method ({checked}, all >= {TWIN_SOLVED}, and every other method measured){mark}"


def twin_verdict(r: Mapping) -> str:
    """One sentence per twin type: ``twin_verdict_kind``'s verdict with the held-out numbers
    of the row (``near_miss_table``) that decide it, plus, whenever BM25's tie rate >= 0.5, that
    BM25 is lexically blind to this type. E.g. "**role swap** (150 held-out pairs):
    encoder-limited — the geometry allows it (...) but the pre-trained encoder does not find it
    (...); fine-tuning closes it on held-out combinations (...)." """
    kind, t = twin_verdict_kind(r), _type_name(r["type"])
    head = f"**{t}** ({_count(r['pairs']) if r['pairs'] == r['pairs'] else '?'} held-out pairs): "
    probe = (
        f"probe {r['probe_win']:.3f}, median margin {_f(r['probe_gap'])}" if r["probe_win"] == r["probe_win"] else ""
    )
    if kind == "not decided":
        what = "the probe" if not probe else "the pre-trained encoder"
        text = f"not decided — {what} did not measure this twin type"
    elif kind == "index-limited":
        text = (
            "index-limited — the frozen index does not rank the gold set first with its twin behind: the probe's "
            "witness (the best query vector it found for each query's whole gold set) ranks the gold above its "
            f"twin on only {r['probe_win']:.3f} of held-out pairs (< {TWIN_SOLVED}; median margin "
            f"{_f(r['probe_gap'])}); a single pair of distinct vectors is always separable, so an encoder may "
            f"still order this pair right (pre-trained {_f(r['pretrained_win'])})"
        )
    elif kind == "encoder-limited":
        text = (
            f"encoder-limited — the geometry allows it ({probe}) but the pre-trained encoder does not find it "
            f"(twin_win {r['pretrained_win']:.3f} < {TWIN_SOLVED}); {_finetune_clause(r)}"
        )
    elif kind == "lexically blind":
        text = (
            "lexically blind — the frozen index and the pre-trained encoder separate the gold from its twin "
            f"({probe}; pre-trained {r['pretrained_win']:.3f}), BM25 does not "
            f"({r['bm25_win']:.3f} < {TWIN_SOLVED})"
        )
    else:
        text = _solved_clause(r)
    tie = r["bm25_tie"]
    if tie == tie and tie >= 0.5:
        text += (
            f". BM25 is lexically blind to {t} (ties on {tie:.0%} of pairs; the evaluation's tie rule ranks the "
            "twin first)"
        )
    return head + text + "."


def _win_cell(win: float, extra: float, fmt: str) -> str:
    """A twin_win cell with a second number in brackets (``fmt``: e.g. ``"({:.3f})"``); "–" when not measured."""
    if win != win:
        return "–"
    return f"{win:.3f}" + (" " + fmt.format(extra) if extra == extra else "")


def _near_miss_cell_table(cell: pd.DataFrame, no_twins: bool) -> str:
    """The Markdown table of one dataset x encoder of ``near_miss_table`` (``no_twins``: with
    the column of the adapter trained without twins)."""
    header = [
        "twin type",
        "pairs (held-out)",
        "capacity: probe (median margin)",
        "pre-trained",
        "fine-tuned train",
        "fine-tuned held-out",
        *(["fine-tuned without twins"] if no_twins else []),
        "BM25 (tie rate)",
        "ColBERT",
    ]
    rows = [
        [
            _type_name(r["type"]),
            _count(r["pairs"]) if r["pairs"] == r["pairs"] else "–",
            _win_cell(r["probe_win"], r["probe_gap"], "({:.3f})"),
            _f(r["pretrained_win"]),
            _f(r["finetuned_train"]),
            _f(r["finetuned_heldout"]),
            *([_f(r["no_twins_heldout"])] if no_twins else []),
            _win_cell(r["bm25_win"], r["bm25_tie"], "(ties {:.3f})"),
            _f(r["colbert_win"]),
        ]
        for r in cell.to_dict("records")
    ]
    return _md_table(header, rows)


def _learners_line(cell: pd.DataFrame) -> list[str]:
    """One line on where the cell's trained learners stopped (none measured: no lines)."""
    r = cell.iloc[0]
    parts = [
        f"{name} {r[c]}" if r[c] != "convergence not recorded" else f"{name}: {r[c]}"
        for c, name in (
            ("finetuned_state", "fine-tuned (twins as negatives)"),
            ("no_twins_state", "fine-tuned without twins"),
            ("colbert_state", "ColBERT"),
        )
        if c in cell.columns and isinstance(r[c], str)
    ]
    return [f"Learners: {'; '.join(parts)}.", ""] if parts else []
