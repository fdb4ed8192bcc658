"""Section "Hardness: the parity task": sizes, recall per P, chance agreement, the training-set sweep and
the figures."""

from __future__ import annotations

import re

import pandas as pd

from .. import figures
from ..figures import HARDNESS_PREFIX
from .context import ReportContext, ReportOutputs
from .format import _f, _md_table, _value
from .learners import NOT_A_FINDING, NOT_RECORDED_STATE, learner_states


def render_parity_ladder(hdf: pd.DataFrame, hsummary: dict) -> list[str]:
    """The ladder's rungs on the parity task: a table per P (with where each learner stopped),
    one sentence, and one on where the fit-all rung stopped (``parity_fit_sentence``); none
    without ladder rows."""
    t = parity_ladder(hdf, hsummary)
    if t.empty:
        return []
    states = learner_states(hdf)

    def state(P, method):
        return states.get((f"{HARDNESS_PREFIX}{P}", "", method), NOT_RECORDED_STATE).describe()

    out = [
        "The learnability ladder on the parity task (issue 29): the one-hidden-layer ReLU encoder (the perfect "
        "encoder's family, InfoNCE) fit on all queries (`head-mlp-all`) against the same learner of the train "
        "queries (`head-mlp`), recall at k = ball size, and where each learner stopped:",
        "",
    ]
    out.append(
        _md_table(
            [
                "P",
                "oracle (probe)",
                "perfect encoder held-out",
                "head-mlp-all train",
                "head-mlp-all held-out (fitted)",
                "head-mlp train",
                "head-mlp held-out",
                "random k/n",
                "head-mlp-all state",
                "head-mlp state",
            ],
            [
                [_f(v) if isinstance(v, float) else v for v in r] + [state(r.P, "head-mlp-all"), state(r.P, "head-mlp")]
                for r in t.itertuples(index=False)
            ],
        )
    )
    return out + ["", parity_ladder_sentence(t, hdf), "", parity_fit_sentence(t, hdf), ""]


def parity_fit_sentence(t: pd.DataFrame, hdf: pd.DataFrame) -> str:
    """Where the fit-all rung (``head-mlp-all``) stopped at each P of ``parity_ladder``'s table:
    one that converged below the perfect encoder's held-out recall (the oracle's where the perfect
    encoder was not measured) is reported with its final training objective (``train_loss``): the
    objective stopped improving there while a member of the family reaches the top, so the
    shortfall is the optimisation's (a plateau of the loss), not the family's ceiling; one that
    did not converge, or whose convergence was not recorded, is named with its state: its recall
    is where it stopped, not what the family fits."""
    states = learner_states(hdf)
    parts = []
    for r in t.itertuples(index=False):
        stopped = states.get((f"{HARDNESS_PREFIX}{r.P}", "", "head-mlp-all"), NOT_RECORDED_STATE)
        fit = pd.to_numeric(pd.Series([r.fit_heldout]), errors="coerce").iloc[0]
        perfect, oracle = pd.to_numeric(pd.Series([r.perfect, r.oracle]), errors="coerce").tolist()
        top, who = (perfect, "the perfect encoder") if perfect == perfect else (oracle, "the oracle")
        if not stopped.finding:
            parts.append(
                f"P = {r.P}: {stopped.describe()} "
                f"({'not converged' if stopped.recorded else 'treated as not converged'}: its recall is where "
                "it stopped, not what the family fits)"
            )
        elif fit == fit and top == top and fit < top:
            loss = (
                f"final training objective {stopped.train_loss:.4g}"
                if stopped.train_loss == stopped.train_loss
                else "final training objective not recorded"
            )
            why = (
                f"while a member of the family reaches {top:.3f}, so the shortfall is the optimisation's, not the "
                "family's"
                if who == "the perfect encoder"
                else "(the perfect encoder, a member of the family, was not measured)"
            )
            parts.append(
                f"P = {r.P}: {stopped.describe()} below {who} (held-out {fit:.3f} against {top:.3f}), "
                f"{loss}: the training objective stopped improving there {why}"
            )
        else:
            parts.append(f"P = {r.P}: {stopped.describe()}, at {who}'s recall")
    return "Where the fit-all rung (`head-mlp-all`) stopped: " + "; ".join(parts) + "."


def render_hardness(hdf: pd.DataFrame, hsummary: dict | None, fig_p: str | None, fig_m: str | None) -> list[str]:
    """The report's hardness section: sizes, recall per P (perfect encoder, probe, trained
    encoders train/held-out, random k/n), chance agreement, figures."""
    if hdf.empty or not hsummary:
        return ["## Hardness: the parity task", "", "Not run (hardness.enabled is false).", ""]
    out = [
        "## Hardness: the parity task",
        "",
        "Queries are P-bit keyword indicators, documents the 2^d hypercube vertices, the gold set the Hamming "
        "ball of radius rho around c = Aq mod 2 (arXiv 2610.02749). Recall is at k = ball size; the random "
        "baseline is k/n.",
        "",
    ]
    out.append(
        _md_table(
            ["P", "d", "n", "k", "k/n", "log2 #intents (dP)", "perfect net hidden units", "perfect net parameters"],
            [
                [
                    s["P"],
                    s["d"],
                    s["n"],
                    s["k"],
                    s["k_over_n"],
                    s["log2_intents"],
                    s["perfect_hidden"],
                    s["perfect_parameters"],
                ]
                for s in hsummary["sizes"]
            ],
        )
    )
    out.append("")
    out.append(
        "d = documents' dimension, n = 2^d documents, k = ball size (the gold-set size); the perfect net is "
        "the explicit one-hidden-layer ReLU encoder that reaches recall 1 (hidden units and weights + biases). "
        "The paper's statistical-query lower bound is "
        f"{hsummary['sizes'][0].get('sq_lower_bound', '2^Omega(P)')} queries for any SQ learner to beat k/n by "
        "an inverse-polynomial margin (quoted, not computed)."
    )
    out.append("")
    encs = [e for e in hdf[(hdf["method"] == "trained")]["encoder"].unique() if not re.search(r"-m\d+$", e)]
    rows = []
    for s in hsummary["sizes"]:
        ds = f"{HARDNESS_PREFIX}{s['P']}"
        rows.append(
            [
                s["P"],
                _value(hdf, ds, "", "perfect", "heldout", "recall"),
                _value(hdf, ds, "", "probe", "all", "certified"),
                s["k_over_n"],
            ]
            + [_value(hdf, ds, e, "trained", sp, "recall") for e in encs for sp in ("train", "heldout")]
        )
    out.append(
        _md_table(
            ["P", "perfect encoder held-out", "probe certified", "random k/n"]
            + [f"{e} {sp}" for e in encs for sp in ("train", "held-out")],
            rows,
        )
    )
    out.append("")
    states = learner_states(hdf)
    if encs:
        out.append(
            "Where each trained encoder stopped (`capgap.training.Convergence`; a recall of an encoder that "
            "did not converge is where it stopped, not what it learns):"
        )
        out.append("")
        out.append(
            _md_table(
                ["P"] + encs,
                [
                    [s["P"]]
                    + [
                        states.get((f"{HARDNESS_PREFIX}{s['P']}", e, "trained"), NOT_RECORDED_STATE).describe()
                        for e in encs
                    ]
                    for s in hsummary["sizes"]
                ],
            )
        )
        out.append("")
    ch = pd.DataFrame(hsummary["chance_agreement"])
    if not ch.empty:
        ch["diff"] = (ch["measured"] - ch["theory"]).abs()
        g = (
            ch.groupby("P")
            .agg(
                pairs=("measured", "size"),
                measured=("measured", "mean"),
                theory=("theory", "mean"),
                max_abs_diff=("diff", "max"),
            )
            .reset_index()
        )
        out.append(
            "Chance agreement: for random intent pairs (A, A'), the fraction of random queries with Aq = A'q "
            "against 2^-rank(A-A') (means over the pairs):"
        )
        out.append("")
        out.append(
            _md_table(
                ["P", "pairs", "measured", "theory", "max abs(measured - theory)"],
                [[int(r.P), int(r.pairs), r.measured, r.theory, r.max_abs_diff] for r in g.itertuples()],
            )
        )
        out.append("")
    out += render_parity_ladder(hdf, hsummary)
    if fig_p:
        out += [f"![recall vs P]({fig_p})", ""]
    sw = hdf[(hdf["method"] == "trained") & hdf["encoder"].str.contains(r"-m\d+$") & (hdf["metric"] == "recall")]
    if not sw.empty:
        sw = sw.assign(m=sw["encoder"].str.extract(r"-m(\d+)$")[0].astype(int))
        ds = sw["dataset"].iloc[0]
        base = _value(hdf, ds, "", "random", "heldout", "recall")
        out.append(
            f"Training-set sweep at {ds.replace(HARDNESS_PREFIX, 'P = ')}: recall@k of the MLP (InfoNCE) "
            f"against the number of training queries m (random baseline k/n = {_f(base)}):"
        )
        out.append("")
        out.append(
            _md_table(
                ["m", "train", "held-out", "state"],
                [
                    [
                        int(m),
                        _f(_value(g, ds, g["encoder"].iloc[0], "trained", "train", "recall")),
                        _f(_value(g, ds, g["encoder"].iloc[0], "trained", "heldout", "recall")),
                        states.get((ds, g["encoder"].iloc[0], "trained"), NOT_RECORDED_STATE).describe(),
                    ]
                    for m, g in sw.groupby("m", sort=True)
                ],
            )
        )
        out.append("")
    if fig_m:
        out += [f"![recall vs training queries]({fig_m})", ""]
    return out


def parity_ladder(hdf: pd.DataFrame, hsummary: dict) -> pd.DataFrame:
    """The learnability ladder on the parity task, one row per P with ladder rows (rule
    hardness with ``hardness.ladder``): ``oracle`` (the probe's recall, all queries),
    ``perfect`` (the explicit perfect encoder's held-out recall: the family's ceiling),
    ``fit_train`` / ``fit_heldout`` (``head-mlp-all``: the ReLU family fit on every query),
    ``only_train`` / ``only_heldout`` (``head-mlp``: trained on train queries only) and
    ``random`` (k/n); recall at k = ball size, "–" where not recorded."""
    rows = []
    for s in hsummary["sizes"]:
        ds = f"{HARDNESS_PREFIX}{s['P']}"
        if not ((hdf["dataset"] == ds) & (hdf["method"] == "head-mlp-all")).any():
            continue
        rows.append(
            {
                "P": s["P"],
                "oracle": _value(hdf, ds, "", "probe", "all", "recall"),
                "perfect": _value(hdf, ds, "", "perfect", "heldout", "recall"),
                "fit_train": _value(hdf, ds, "", "head-mlp-all", "train", "recall"),
                "fit_heldout": _value(hdf, ds, "", "head-mlp-all", "heldout", "recall"),
                "only_train": _value(hdf, ds, "", "head-mlp", "train", "recall"),
                "only_heldout": _value(hdf, ds, "", "head-mlp", "heldout", "recall"),
                "random": s["k_over_n"],
            }
        )
    return pd.DataFrame(
        rows, columns=["P", "oracle", "perfect", "fit_train", "fit_heldout", "only_train", "only_heldout", "random"]
    )


def parity_ladder_sentence(t: pd.DataFrame, hdf: pd.DataFrame | None = None) -> str:
    """One generated sentence from ``parity_ladder``'s table, over P: the smallest held-out
    recall of the perfect encoder (one member of the ReLU family: what the family can
    represent) and of the oracle; the range of the fit-all rung's held-out recall (what
    gradient training of that family fits on every query, a lower bound at its steps); the
    largest held-out recall of the train-only rung against the largest k/n; and the smallest
    per-P generalisation gap, fit-all held-out - train-only held-out. With ``hdf`` (the parity
    rows with the learners' states), a learner that had not converged (nor was chosen by early
    stopping) is named after the sentence, marked "not a finding" (``learners.NOT_A_FINDING``)."""
    num = lambda c: pd.to_numeric(t[c], errors="coerce")  # noqa: E731
    fit, oracle, perfect, only, rnd = (
        num("fit_heldout"),
        num("oracle"),
        num("perfect"),
        num("only_heldout"),
        num("random"),
    )
    P = t["P"].tolist()
    return (
        f"For P = {P[0]}..{P[-1]}: the ReLU family can represent the oracle (the perfect encoder reaches at least "
        f"{perfect.min():.3f} held-out recall, the probe at least {oracle.min():.3f}); fit by gradient on every "
        f"query it reaches {fit.min():.3f} to {fit.max():.3f} (a lower bound: the optimiser's, at these steps); "
        f"trained on the train queries only it reaches at most {only.max():.3f} on held-out queries (random k/n: "
        f"at most {rnd.max():.3f}; generalisation gap, fit-all minus train-only, at least "
        f"{(fit - only).min():.3f})." + _unfinished(t, hdf)
    )


def _unfinished(t: pd.DataFrame, hdf: pd.DataFrame | None) -> str:
    """ " — not a finding where ...": the parity learners of ``t``'s P that are not findings."""
    if hdf is None:
        return ""
    states = learner_states(hdf)
    bad = [
        (P, m, states.get((f"{HARDNESS_PREFIX}{P}", "", m), NOT_RECORDED_STATE))
        for P in t["P"]
        for m in ("head-mlp-all", "head-mlp")
    ]
    bad = [f"P = {P}, `{m}` {stopped.describe()}" for P, m, stopped in bad if not stopped.finding]
    return f" — {NOT_A_FINDING} where a learner had not converged: " + "; ".join(bad) + "." if bad else ""


def draw(ctx: ReportContext, outputs: ReportOutputs) -> dict[str, bool]:
    """The figures against P and against the number of training queries (shown when the hardness rule ran)."""
    figures.plot_hardness(ctx.hdf, outputs.hardness_p, outputs.hardness_m)
    return {"hardness_p": bool(ctx.hardness_summary), "hardness_m": bool(ctx.hardness_summary)}


def render(ctx: ReportContext) -> list[str]:
    """The section ("Not run" when the hardness rule did not run)."""
    return render_hardness(ctx.hdf, ctx.hardness_summary, ctx.figs.get("hardness_p"), ctx.figs.get("hardness_m"))
