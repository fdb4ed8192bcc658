"""The near-miss adapters on their transfer targets: does training against twins cost
generalisation? Tables and sentences beside the published reference."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from .. import paper
from ..evaluate import EVAL_DEFAULTS
from .format import _f, _md_table, _num
from .learners import NOT_A_FINDING, NOT_RECORDED_STATE, learner_states
from .twins import NO_TWINS, TRANSFER_METHOD, _type_name, twin_metric_rows, twin_types

TRANSFER_COLUMNS = [
    "target",
    "encoder",
    "source",
    "row",
    "method",
    "recall",
    "ndcg",
    "twin_win_mean",
    "state",
    "finding",
]


def transfer_table(df: pd.DataFrame, k: int = 10, ndcg_k: int = EVAL_DEFAULTS["ndcg_k"]) -> pd.DataFrame:
    """The near-miss adapters on their transfer targets: for every target dataset x encoder x
    near-miss source with ``finetuned@<source>`` or ``finetuned-no-twins@<source>`` rows, three
    rows (``row``: ``pretrained``, ``without twins``, ``with twins``; ``method``: the target's
    method name), columns TRANSFER_COLUMNS plus ``twin_win:<type>`` per type of the source.

    ``recall`` / ``ndcg``: the target's held-out recall@``k`` and nDCG@``ndcg_k`` (the
    pre-trained row: the target's own ``pretrained``, the "before"); ``twin_win_mean``: the
    unweighted mean over the source's twin types of the matching source method's held-out
    twin_win (``pretrained``, ``finetuned-no-twins``, ``finetuned``), ``twin_win:<type>`` each
    type's. nan: not measured. ``state`` / ``finding``: where the source's adapter stopped and
    whether it converged (``capgap.report.learners``; None on the pre-trained row)."""
    states = learner_states(df)
    found = []
    for d, e, m in df[["dataset", "encoder", "method"]].drop_duplicates().itertuples(index=False):
        hit = TRANSFER_METHOD.match(str(m))
        if hit and (d, e, hit.group(2)) not in found:
            found.append((d, e, hit.group(2)))
    rows, types = [], []
    for d, e, src in found:
        src_types = twin_types(twin_metric_rows(df[df["dataset"] == src]))
        types += [t for t in src_types if t not in types]
        for row, target_m, source_m in (
            ("pretrained", "pretrained", "pretrained"),
            ("without twins", f"{NO_TWINS}@{src}", NO_TWINS),
            ("with twins", f"finetuned@{src}", "finetuned"),
        ):
            wins = {f"twin_win:{t}": _num(df, src, e, source_m, "heldout", f"twin_win:{t}") for t in src_types}
            got = [w for w in wins.values() if w == w]
            stopped = states.get((src, e, source_m), NOT_RECORDED_STATE) if source_m != "pretrained" else None
            rows.append(
                {
                    "target": d,
                    "encoder": e,
                    "source": src,
                    "row": row,
                    "method": target_m,
                    "state": stopped.describe() if stopped else None,
                    "finding": stopped.finding if stopped else None,
                    "recall": _num(df, d, e, target_m, "heldout", "recall", k),
                    "ndcg": _num(df, d, e, target_m, "heldout", "ndcg", ndcg_k),
                    "twin_win_mean": sum(got) / len(got) if got else float("nan"),
                    **wins,
                }
            )
    return pd.DataFrame(rows, columns=TRANSFER_COLUMNS + [f"twin_win:{t}" for t in types])


def transfer_reference() -> dict:
    """The published reference the transfer sentence quotes (``paper_reference.yaml``,
    ``references.near_miss_transfer``: Ralev et al. 2026, Table 1). Raises ``KeyError`` when the
    checked-in table lacks it."""
    return paper.load_reference()["references"]["near_miss_transfer"]


def transfer_sentence(group: pd.DataFrame, ref: Mapping, ndcg_k: int = EVAL_DEFAULTS["ndcg_k"]) -> str:
    """One target x encoder x source of ``transfer_table``: the change in the target's held-out
    nDCG@``ndcg_k`` from the adapter trained without twins to the one trained with them
    (absolute, and in % of the without-twins value), the pre-trained "before", the source's mean
    held-out twin_win of both, then the published reference ``ref`` (``transfer_reference``)
    and why the settings differ."""
    by = {r["row"]: r for r in group.to_dict("records")}
    d, e, src = group["target"].iloc[0], group["encoder"].iloc[0], group["source"].iloc[0]
    a, b, p = by["without twins"]["ndcg"], by["with twins"]["ndcg"], by["pretrained"]["ndcg"]
    who = f"{d} × {e}" if e else d
    if a != a or b != b:
        ours = (
            f"{who}: the change in held-out nDCG@{ndcg_k} from the {src} adapter without twins to the one with "
            "twins is not measured (an adapter's rows are missing)."
        )
    else:
        pct = f"{(b - a) / a * 100:+.1f}%" if a else "% undefined: 0 without twins"
        before = f"; pre-trained {p:.3f}" if p == p else ""
        ta, tb = by["without twins"]["twin_win_mean"], by["with twins"]["twin_win_mean"]
        twins = (
            f" On {src} itself, held-out twin_win (mean over types) goes from {ta:.3f} without twins to {tb:.3f} "
            "with them."
            if ta == ta and tb == tb
            else ""
        )
        ours = (
            f"{who}: training the {src} adapter with its twins as InfoNCE negatives changes {d}'s held-out "
            f"nDCG@{ndcg_k} from {a:.3f} (without twins) to {b:.3f} (with twins), {b - a:+.3f} "
            f"({pct}{before}).{twins}"
        )
        why = []
        for row, what in (("with twins", "the adapter with twins"), ("without twins", "the adapter without twins")):
            found, state = by[row].get("finding"), by[row].get("state")
            if found is not None and found == found and not bool(found):
                why.append(
                    f"the convergence of {what} was not recorded"
                    if state == "convergence not recorded"
                    else f"{what} had not converged ({state})"
                )
        if why:
            ours += f" This change is {NOT_A_FINDING}: " + "; ".join(why) + "."
    theirs = (
        f'For reference, {ref["citation"]} ("{ref["title"]}", {ref["table"]}) report {ref["model"]} '
        f"{ref['benchmark']} {ref['metric']} {ref['before']:.3f} -> {ref['after']:.3f} "
        f"({ref['change_percent']:+.1f}%) with {ref['negatives']}; their setting is {ref['setting']}, capgap's a "
        f"LoRA query adapter trained on {src} and applied to {d}'s queries against {d}'s frozen index, so the "
        "two compare in direction, not in size."
    )
    return ours + " " + theirs


def _transfer_lines(ttable: pd.DataFrame, k: int, ndcg_k: int) -> list[str]:
    """The transfer tables and sentences of ``transfer_table`` (no rows: no lines)."""
    if ttable.empty:
        return []
    types = [c.split(":", 1)[1] for c in ttable.columns if c.startswith("twin_win:")]
    out = [
        "### Transfer: does training against twins cost generalisation?",
        "",
        "The near-miss adapters applied to another data set's queries against its own frozen index (same encoder): "
        "without twins = twins left out of the InfoNCE softmax, with twins = twins as negatives (the fine-tuned "
        "adapter above). The last columns are the near-miss source's held-out twin_win of the matching method "
        "(pre-trained, fine-tuned without twins, fine-tuned), the mean unweighted over types.",
        "",
    ]
    ref = transfer_reference()
    for _, g in ttable.groupby(["target", "encoder", "source"], sort=False):
        d, src = g["target"].iloc[0], g["source"].iloc[0]
        label = {
            "pretrained": "pre-trained",
            "without twins": f"fine-tuned on {src} without twins",
            "with twins": f"fine-tuned on {src} with twins",
        }
        out.append(
            _md_table(
                [
                    "query encoder",
                    f"{d} held-out R@{k}",
                    f"{d} held-out nDCG@{ndcg_k}",
                    f"{src} twin_win (mean)",
                    *(f"{src} {_type_name(t)}" for t in types),
                ],
                [
                    [
                        label[r["row"]],
                        _f(r["recall"]),
                        _f(r["ndcg"]),
                        _f(r["twin_win_mean"]),
                        *(_f(r.get(f"twin_win:{t}", float("nan"))) for t in types),
                    ]
                    for r in g.to_dict("records")
                ],
            )
        )
        out += ["", transfer_sentence(g, ref, ndcg_k), ""]
    return out
