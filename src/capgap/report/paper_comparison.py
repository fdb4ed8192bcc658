"""Section "The paper's numbers beside ours": every claim of ``capgap/paper_reference.yaml`` with our
nearest runs and a verdict, and the train-vs-held-out figure with the paper's points."""

from __future__ import annotations

from typing import Sequence

from .. import figures, paper
from .context import ReportContext, ReportOutputs
from .format import _figure, _md_table


def render_paper(rows: Sequence[dict]) -> list[str]:
    """The paper's published numbers beside ours, one verdict per claim and run."""
    out = ["## The paper's numbers beside ours", "",
           "Every claim of the checked-in reference table (`capgap/paper_reference.yaml`) with our nearest runs. "
           "*Verdict* compares numbers only where our run uses the paper's data and model (reproduced within the "
           "stated tolerance, or not reproduced by how much); otherwise it says why the runs are not comparable. "
           f"*Pattern* checks the paper's qualitative finding on our run: generalisation gap = train − held-out ≥ {paper.GAP} "
           f"and capacity − held-out ≥ {paper.GAP}; late interaction = held-out ≥ {paper.LATE} and ≥ {paper.GAP} above the best "
           f"fine-tuned single-vector held-out; capacity high / saturated = ≥ {paper.HIGH}. The paper's summary does not "
           "state its recall cut-off: we compare at the gold-set size (LIMIT: 2)"
           + ("; where gold-set sizes vary, at R-precision (recall at each query's own gold-set size)"
              if any(str(r["k"]).startswith("R-precision") for r in rows) else "") + ".", ""]
    out.append(_md_table(["claim", "our run", "k", "paper", "ours", "verdict", "pattern"],
                         [[r["claim"] if i == 0 or rows[i - 1]["claim"] != r["claim"] else "″", r["run"], r["k"], r["paper"],
                           r["ours"], r["verdict"], r["pattern"]] for i, r in enumerate(rows)]))
    out.append("")
    holds = [r for r in rows if r["pattern"].startswith("holds")]
    measured = [r for r in rows if r["pattern"].startswith(("holds", "does not hold"))]
    untested = [r for r in rows if r["pattern"].startswith("not tested")]
    n = {v: sum(r["verdict"].startswith(v) for r in rows) for v in ("reproduced", "not reproduced", "not comparable")}
    out.append(f"**The paper's pattern holds on {len(holds)} of the {len(measured)} runs where it could be checked.** "
               + (f"{len(untested)} more could not test it (the encoder did not fit its train queries). " if untested else "")
               + 
               f"Numerically: {n['reproduced']} of {len(rows)} rows reproduced, {n['not reproduced']} not reproduced, "
               f"{n['not comparable']} not comparable (a different model or different data).")
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
    return {"scatter_png": figures.plot_train_vs_heldout(ctx.table[ctx.table["stated"]], paper_points(), outputs.scatter_png)}


def render(ctx: ReportContext) -> list[str]:
    """The comparison and the scatter figure (no paper rows: no lines)."""
    if not ctx.paper_rows:
        return []
    return render_paper(ctx.paper_rows) + _figure(ctx.figs, "scatter_png", "Train vs held-out",
                                                  "train vs held-out recall, ours and the paper's", "fine-tuning")
