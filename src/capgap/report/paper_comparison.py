"""Section "The paper's numbers beside ours": every claim of ``capgap/paper_reference.yaml`` with our
nearest runs and a verdict, and the train-vs-held-out figure with the paper's points. A pattern
read from a trained learner that had not converged (or whose convergence was not recorded) keeps
its numbers and is marked *not a finding* (``mark_learners``)."""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from .. import figures, paper
from .context import ReportContext, ReportOutputs
from .format import _figure, _md_table
from .learners import NOT_A_FINDING, NOT_RECORDED_STATE, learner_states

# the learner a claim's pattern is read from, by the claim's method, and how the sentence names it
LEARNER_NAMES = {"finetuned": "the fine-tuning", "colbert": "the ColBERT fine-tuning"}


def _run_members(claim: dict, run: str, df: pd.DataFrame) -> list[tuple[str, str]]:
    """The (dataset, encoder) pairs of one ``paper.compare`` row of ``claim``: "dataset /
    encoder" (encoder empty where the row names the method, e.g. "limit / colbert"), or, for a
    mean over categories ("mean of 2/12 categories / encoder"), the claim's datasets with rows of
    its method and that encoder."""
    if " / " not in run:
        return []
    head, enc = run.rsplit(" / ", 1)
    if enc == claim["method"] and not ((df["method"] == claim["method"]) & (df["encoder"] == enc)).any():
        enc = ""
    if head.startswith("mean of "):
        sel = df[
            (df["method"] == claim["method"]) & (df["encoder"] == enc) & df["dataset"].isin(claim.get("datasets", []))
        ]
        return [(d, enc) for d in dict.fromkeys(sel["dataset"])]
    return [(head, enc)]


def mark_learners(rows: Sequence[dict], df: pd.DataFrame) -> list[dict]:
    """``paper.compare``'s rows with every pattern verdict ("holds" / "does not hold") read from
    a trained learner that had not converged, or whose convergence was not recorded, marked: the
    verdict and its numbers stay, followed by "; not a finding: the fine-tuning had not converged
    (stopped at the cap ...)". The learners of a row: its run's own (claims of method
    ``finetuned`` or ``colbert``, ``LEARNER_NAMES``) and, for the late-interaction pattern, the
    single-vector fine-tunings of the same dataset it is compared with."""
    claims = {c["claim"]: c for c in paper.load_reference()["claims"]}
    states = learner_states(df)
    out = []
    for r in rows:
        c = claims.get(r["claim"])
        r = dict(r)
        if (
            c is None
            or c["method"] not in LEARNER_NAMES
            or not str(r["pattern"]).startswith(("holds", "does not hold"))
        ):
            out.append(r)
            continue
        why = []
        members = _run_members(c, str(r["run"]), df)
        for d, e in members:
            s = states.get((d, e, c["method"]), NOT_RECORDED_STATE)
            if not s.finding:
                who = LEARNER_NAMES[c["method"]] + (f" on {d}" if len(members) > 1 else "")
                why.append(s.why_not(who))
        if c["pattern"] == "late_interaction":
            for d, _ in members:
                for e in dict.fromkeys(df[(df["dataset"] == d) & (df["method"] == "finetuned")]["encoder"]):
                    s = states.get((d, e, "finetuned"), NOT_RECORDED_STATE)
                    if not s.finding:
                        why.append(s.why_not(f"the single-vector fine-tuning it is compared with ({e})"))
        if why:
            r["pattern"] = f"{r['pattern']}; {NOT_A_FINDING}: " + "; ".join(why)
        out.append(r)
    return out


def _not_a_finding(row: dict) -> bool:
    return f"; {NOT_A_FINDING}: " in str(row["pattern"])


def render_paper(rows: Sequence[dict]) -> list[str]:
    """The paper's published numbers beside ours, one verdict per claim and run."""
    out = [
        "## The paper's numbers beside ours",
        "",
        "Every claim of the checked-in reference table (`capgap/paper_reference.yaml`) with our nearest runs. "
        "*Verdict* compares numbers only where our run uses the paper's data and model (reproduced within the "
        "stated tolerance, or not reproduced by how much); otherwise it says why the runs are not comparable. "
        "*Pattern* checks the paper's qualitative finding on our run: generalisation gap = train − held-out "
        f"≥ {paper.GAP} and capacity − held-out ≥ {paper.GAP}; late interaction = held-out ≥ {paper.LATE} "
        f"and ≥ {paper.GAP} above the best fine-tuned single-vector held-out; capacity high / saturated = "
        f"≥ {paper.HIGH}. "
        "The paper's summary does not state its recall cut-off: we compare at the gold-set size (LIMIT: 2)"
        + (
            "; where gold-set sizes vary, at R-precision (recall at each query's own gold-set size)"
            if any(str(r["k"]).startswith("R-precision") for r in rows)
            else ""
        )
        + ". A pattern read from a trained "
        "learner (fine-tuning, ColBERT) that had not converged, or whose convergence was not recorded, keeps its "
        'numbers and is marked *not a finding* (section "Trained learners").',
        "",
    ]
    out.append(
        _md_table(
            ["claim", "our run", "k", "paper", "ours", "verdict", "pattern"],
            [
                [
                    r["claim"] if i == 0 or rows[i - 1]["claim"] != r["claim"] else "″",
                    r["run"],
                    r["k"],
                    r["paper"],
                    r["ours"],
                    r["verdict"],
                    r["pattern"],
                ]
                for i, r in enumerate(rows)
            ],
        )
    )
    out.append("")
    unfinished = [r for r in rows if _not_a_finding(r)]
    holds = [r for r in rows if r["pattern"].startswith("holds") and not _not_a_finding(r)]
    measured = [r for r in rows if r["pattern"].startswith(("holds", "does not hold")) and not _not_a_finding(r)]
    untested = [r for r in rows if r["pattern"].startswith("not tested")]
    n = {v: sum(r["verdict"].startswith(v) for r in rows) for v in ("reproduced", "not reproduced", "not comparable")}
    out.append(
        f"**The paper's pattern holds on {len(holds)} of the {len(measured)} runs where it could be checked.** "
        + (f"{len(untested)} more could not test it (the encoder did not fit its train queries). " if untested else "")
        + (
            f"{len(unfinished)} more {'was' if len(unfinished) == 1 else 'were'} read from a learner that had "
            "not converged or whose convergence was not recorded: not findings (marked in the table). "
            if unfinished
            else ""
        )
        + f"Numerically: {n['reproduced']} of {len(rows)} rows reproduced, {n['not reproduced']} not reproduced, "
        f"{n['not comparable']} not comparable (a different model or different data)."
    )
    out.append("")
    out.append("Sources:")
    out.append("")
    out += [f"- {s}" for s in dict.fromkeys(r["source"] for r in rows)]
    out.append("")
    return out


def paper_points() -> list[dict]:
    """The paper's train / held-out points of the reference table (for the scatter figure)."""
    pts = []
    for c in paper.load_reference()["claims"]:
        v = c.get("values", {})
        if "train" in v and "heldout" in v:
            pts.append({"label": c.get("short", c["id"]), "train": float(v["train"]), "heldout": float(v["heldout"])})
    return pts


def draw(ctx: ReportContext, outputs: ReportOutputs) -> dict[str, bool]:
    """The train-vs-held-out scatter (ours at the stated k, and the paper's points)."""
    return {
        "scatter_png": figures.plot_train_vs_heldout(
            ctx.table[ctx.table["stated"]], paper_points(), outputs.scatter_png
        )
    }


def render(ctx: ReportContext) -> list[str]:
    """The comparison and the scatter figure (no paper rows: no lines)."""
    if not ctx.paper_rows:
        return []
    return render_paper(mark_learners(ctx.paper_rows, ctx.df)) + _figure(
        ctx.figs, "scatter_png", "Train vs held-out", "train vs held-out recall, ours and the paper's", "fine-tuning"
    )
