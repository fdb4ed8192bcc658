"""Section "Hardness: the parity task": sizes, recall per P, chance agreement, the training-set sweep and
the figures."""

from __future__ import annotations

import re

import pandas as pd

from .. import figures
from ..figures import HARDNESS_PREFIX
from .context import ReportContext, ReportOutputs
from .format import _f, _md_table, _value


def render_hardness(hdf: pd.DataFrame, hsummary: dict | None, fig_p: str | None, fig_m: str | None) -> list[str]:
    """The report's hardness section: sizes, recall per P (perfect encoder, probe, trained
    encoders train/held-out, random k/n), chance agreement, figures."""
    if hdf.empty or not hsummary:
        return ["## Hardness: the parity task", "", "Not run (hardness.enabled is false).", ""]
    out = ["## Hardness: the parity task", "",
           "Queries are P-bit keyword indicators, documents the 2^d hypercube vertices, the gold set the Hamming "
           "ball of radius rho around c = Aq mod 2 (arXiv 2610.02749). Recall is at k = ball size; the random "
           "baseline is k/n.", ""]
    out.append(_md_table(["P", "d", "n", "k", "k/n", "log2 #intents (dP)", "perfect net hidden units", "perfect net parameters"],
                         [[s["P"], s["d"], s["n"], s["k"], s["k_over_n"], s["log2_intents"],
                           s["perfect_hidden"], s["perfect_parameters"]] for s in hsummary["sizes"]]))
    out.append("")
    out.append("d = documents' dimension, n = 2^d documents, k = ball size (the gold-set size); the perfect net is the "
               "explicit one-hidden-layer ReLU encoder that reaches recall 1 (hidden units and weights + biases). The paper's "
               f"statistical-query lower bound is {hsummary['sizes'][0].get('sq_lower_bound', '2^Omega(P)')} queries for any "
               "SQ learner to beat k/n by an inverse-polynomial margin (quoted, not computed).")
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
    sw = hdf[(hdf["method"] == "trained") & hdf["encoder"].str.contains(r"-m\d+$") & (hdf["metric"] == "recall")]
    if not sw.empty:
        sw = sw.assign(m=sw["encoder"].str.extract(r"-m(\d+)$")[0].astype(int))
        ds = sw["dataset"].iloc[0]
        base = _value(hdf, ds, "", "random", "heldout", "recall")
        out.append(f"Training-set sweep at {ds.replace(HARDNESS_PREFIX, 'P = ')}: recall@k of the MLP (InfoNCE) against the number "
                   f"of training queries m (random baseline k/n = {_f(base)}):")
        out.append("")
        out.append(_md_table(["m", "train", "held-out"],
                             [[int(m), _f(_value(g, ds, g["encoder"].iloc[0], "trained", "train", "recall")),
                               _f(_value(g, ds, g["encoder"].iloc[0], "trained", "heldout", "recall"))]
                              for m, g in sw.groupby("m", sort=True)]))
        out.append("")
    if fig_m:
        out += [f"![recall vs training queries]({fig_m})", ""]
    return out


def draw(ctx: ReportContext, outputs: ReportOutputs) -> dict[str, bool]:
    """The figures against P and against the number of training queries (shown when the hardness rule ran)."""
    figures.plot_hardness(ctx.hdf, outputs.hardness_p, outputs.hardness_m)
    return {"hardness_p": bool(ctx.hardness_summary), "hardness_m": bool(ctx.hardness_summary)}


def render(ctx: ReportContext) -> list[str]:
    """The section ("Not run" when the hardness rule did not run)."""
    return render_hardness(ctx.hdf, ctx.hardness_summary, ctx.figs.get("hardness_p"), ctx.figs.get("hardness_m"))
