"""The report reads each trained learner's convergence state (capgap.training: rows converged,
steps, max_steps, train_loss, loss_improvement of split train) and draws findings from converged
learners only: the ladder's gap split ("not determined", naming the rung), the At-a-glance gap,
the paper's pattern, the near-miss verdicts, the parity learners; results without state rows read
"not recorded". Every expected value is worked out by hand in the test's docstring or comments."""

import json
from pathlib import Path

import pandas as pd
import pytest

from capgap import paper
from capgap.evaluate import COLUMNS
from capgap.report import (
    ReportContext,
    ReportInputs,
    ReportOutputs,
    build_report,
    gap_sentence,
    gap_split,
    is_trained,
    ladder_figure_data,
    ladder_table,
    learner_state,
    learner_table,
    mark_learners,
    near_miss_table,
    render_learners,
    render_summary,
    summary_table,
    twin_verdict,
)
from capgap.report import ladder as ladder_section
from capgap.report.learners import STATE_METRICS
from capgap.training import Convergence

from .test_ladder import CONVERGED, HELDOUT, _csv

# a learner the step cap stopped: 100 of 100 steps, the objective still falling 3.2% per window
AT_CAP = (0.0, 100, 100, 1.5, 0.032)
AT_CAP_TEXT = "stopped at the cap 100, objective still falling 3.2% per window"


def _frame(rows):
    return pd.DataFrame([(*r, "")[: len(COLUMNS)] for r in rows], columns=list(COLUMNS))


STATE_TUPLE = (
    "converged",
    "steps",
    "max_steps",
    "train_loss",
    "loss_improvement",
)  # AT_CAP's order (no early stopping)


def _state(dataset, encoder, method, state):
    return [(dataset, encoder, method, "train", m, "", v) for m, v in zip(STATE_TUPLE, state) if v is not None]


# ---- reading the state rows -------------------------------------------------------------------


def test_the_report_keeps_the_trainers_state_metrics():
    """The report keeps its own copy of the state metrics' names (its env has no torch)."""
    from capgap import training

    assert STATE_METRICS == training.STATE_METRICS


def test_state_rows_read_back_in_the_trainers_words():
    """The rows ConvergenceState.rows writes read back to the same words as its describe()."""
    rule = Convergence(tol=0.001, n_iter_no_change=1, max_iter=100)
    st = rule.state([3.0, 2.0, 1.5, 1.452], steps=100, converged=False)  # (1.5 - 1.452) / 1.5 = 0.032
    df = pd.DataFrame(st.rows("d", "e", "finetuned"))
    got = learner_state(df, "d", "e", "finetuned")
    assert got.describe() == st.describe() == AT_CAP_TEXT
    assert got.recorded and not got.converged and not got.finding and got.train_loss == pytest.approx(1.452)
    done = learner_state(
        pd.DataFrame(rule.state([2.0, 1.0, 1.0, 1.0], 40, True).rows("d", "e", "colbert")), "d", "e", "colbert"
    )
    assert done.finding and done.describe() == "converged at 40 steps"
    missing = learner_state(df, "d", "e", "colbert")
    assert not missing.recorded and not missing.finding and missing.describe() == "convergence not recorded"
    assert [
        is_trained(m)
        for m in (
            "finetuned",
            "finetuned-r16",
            "finetuned-no-twins",
            "finetuned@scifact",
            "colbert",
            "head-mlp-all",
            "trained",
            "probe",
            "nn-transfer",
            "pretrained",
            "bm25",
            "finetuned-early-stop",
            "finetuned-lr-1e-4@nfcorpus",
        )
    ] == [True, True, True, False, True, True, True, False, False, False, False, True, False]


def test_a_model_evaluated_as_loaded_is_not_a_learner():
    """Zero-shot ColBERT writes steps 0 of a 0-step cap: no learner row, no 'not recorded', and
    its numbers are findings (a pre-trained model's); a learner early stopping chose is counted
    apart from the converged ones: 1 converged, 1 early-stopped, 1 at the cap of 3."""
    df = _frame(
        [
            ("d", "", "colbert", "heldout", "recall", 2, 0.9),
            ("d", "", "colbert", "train", "steps", "", 0.0),
            ("d", "", "colbert", "train", "max_steps", "", 0.0),
            ("d", "e", "finetuned", "heldout", "recall", 2, 0.3),
            *_state("d", "e", "finetuned", AT_CAP),
            ("d", "e", "head-mlp", "heldout", "recall", 2, 0.2),
            *_state("d", "e", "head-mlp", (0.0, 250, 500, 3.0, 0.2)),
            ("d", "e", "head-mlp", "train", "early_stopped", "", 1.0),
            ("d", "e", "head-mlp-all", "heldout", "recall", 2, 0.7),
            *_state("d", "e", "head-mlp-all", (1.0, 450, 500, 3.0, 0.004)),
        ]
    )
    st = learner_state(df, "d", "", "colbert")
    assert st.finding and st.describe() == "not trained (evaluated as loaded)"
    t = learner_table(df)
    assert t["method"].tolist() == ["finetuned", "head-mlp-all", "head-mlp"]
    md = "\n".join(render_learners(t))
    assert (
        "1 of 3 trained learners converged; 1 more stopped by early stopping on a validation split (findings too)."
        in md
    )


def test_the_learners_section_lists_every_trained_learner():
    df = _frame(
        [
            ("d", "e", "finetuned", "heldout", "recall", 2, 0.3),
            ("d", "", "colbert", "heldout", "recall", 2, 0.9),
            ("d", "e", "probe", "heldout", "recall", 2, 1.0),
            *_state("d", "e", "finetuned", AT_CAP),
            *_state("d", "", "colbert", (1.0, 400, 1000, 0.25, None)),
        ]
    )
    t = learner_table(df)
    assert t[["method", "state"]].values.tolist() == [["finetuned", AT_CAP_TEXT], ["colbert", "converged at 400 steps"]]
    md = "\n".join(render_learners(t))
    assert f"| d | e | `finetuned` | {AT_CAP_TEXT} | 100 | 100 | 1.5 | 3.2% |" in md
    assert (
        "| d | – | `colbert` | converged at 400 steps | 400 | 1,000 | 0.25 | – |" in md
    )  # too few points: no improvement row
    assert "1 of 2 trained learners converged." in md and "Convergence was not recorded" not in md
    old = "\n".join(render_learners(learner_table(df[~df["metric"].isin(STATE_METRICS)])))
    assert (
        "Convergence was not recorded in these results" in old
        and "| d | e | `finetuned` | convergence not recorded |" in old
    )


# ---- the ladder's gap split -------------------------------------------------------------------


def test_all_rungs_converged_gives_the_split_by_hand(tmp_path):
    """Every learning rung converged (CONVERGED: 400 of 1,000 steps): oracle 0.90 - best fit-all
    head-mlp-all 0.75 = 0.150; 0.75 - best train-only finetuned-r64 0.35 = 0.400; the sentence
    names both rungs' states."""
    s = gap_split(ladder_table(_csv(tmp_path / "r.csv")))
    assert (s["representational"], s["generalisation"]) == pytest.approx((0.15, 0.40))
    assert s["fit_skipped"] == [] and s["best_skipped"] == []
    text = gap_sentence("toy", "enc", s)
    assert text == (
        "toy × enc, held-out R-precision: the oracle reaches 0.900 and the best shared head fit on all queries "
        "(`head-mlp-all`) 0.750, so the representational gap is 0.150; the best rung trained on train queries "
        "only (`finetuned-r64`) reaches 0.350, so the generalisation gap is 0.400. Read from `head-mlp-all` "
        "converged at 400 steps, `finetuned-r64` converged at 400 steps."
    )


def test_an_unconverged_fit_all_head_leaves_the_split_not_determined(tmp_path):
    """The only fit-all head, head-mlp-all, stopped at the cap: the representational part (oracle -
    fit-all) and the generalisation part (fit-all - train-only) both lack their fit-all bound:
    both "not determined", the first naming head-mlp-all with its state; the best converged
    train-only rung (finetuned-r64, 0.350) is still reported."""
    rows = {m: v for m, v in HELDOUT.items() if m != "head-linear-all"}
    t = ladder_table(_csv(tmp_path / "r.csv", heldout=rows, states={"head-mlp-all": AT_CAP}))
    assert t.set_index("rung").loc["head-mlp-all", "state"] == AT_CAP_TEXT
    assert t.set_index("rung").loc["nn-transfer", "state"] == "–"  # does not learn by gradient
    s = gap_split(t)
    assert s["representational"] is None and s["generalisation"] is None and s["fit_rung"] is None
    assert s["best_rung"] == "finetuned-r64" and s["fit_skipped"] == [(0.75, "head-mlp-all", AT_CAP_TEXT)]
    text = gap_sentence("toy", "enc", s)
    assert text == (
        "toy × enc, held-out R-precision: the oracle reaches 0.900; representational gap: not determined "
        f"(`head-mlp-all` {AT_CAP_TEXT}); the best rung trained on train queries only (`finetuned-r64`) reaches "
        "0.350, but the generalisation gap is not determined (it is measured down from the fit-all head). "
        "Read from `finetuned-r64` converged at 400 steps."
    )
    assert "representational gap is" not in text and "generalisation gap is 0" not in text
    assert text in ladder_section.render_ladder(t, None)


def test_unconverged_rungs_are_left_out_of_the_split(tmp_path):
    """head-mlp-all (0.75) and finetuned-r64 (0.35) stopped at the cap: the split reads the best
    converged rungs, head-linear-all 0.60 and nn-transfer-top5 0.30 (no training): representational
    0.90 - 0.60 = 0.300, generalisation 0.60 - 0.30 = 0.300; both left-out rungs are named with
    their held-out values (they lie above the rungs used)."""
    t = ladder_table(_csv(tmp_path / "r.csv", states={"head-mlp-all": AT_CAP, "finetuned-r64": AT_CAP}))
    s = gap_split(t)
    assert (s["fit_rung"], s["best_rung"]) == ("head-linear-all", "nn-transfer-top5")
    assert (s["representational"], s["generalisation"]) == pytest.approx((0.30, 0.30))
    text = gap_sentence("toy", "enc", s)
    assert "so the representational gap is 0.300" in text and "so the generalisation gap is 0.300" in text
    assert "Read from `head-linear-all` converged at 400 steps, `nn-transfer-top5` (no training)." in text
    assert (
        f"Left out as not converged, above the rung used: `head-mlp-all` {AT_CAP_TEXT} (held-out 0.750); "
        f"`finetuned-r64` {AT_CAP_TEXT} (held-out 0.350)."
    ) in text


def test_no_converged_train_only_rung_leaves_generalisation_not_determined(tmp_path):
    """Every train-only rung that learns stopped at the cap, and there is no transfer rung: the
    generalisation part is not determined, naming the best of them (finetuned-r64, 0.35)."""
    rows = {m: v for m, v in HELDOUT.items() if not m.startswith("nn-transfer")}
    stopped = {m: AT_CAP for m in ("head-linear", "head-mlp", "finetuned", "finetuned-r64")}
    s = gap_split(ladder_table(_csv(tmp_path / "r.csv", heldout=rows, states=stopped)))
    assert s["representational"] == pytest.approx(0.15) and s["generalisation"] is None
    assert [r for _, r, _ in s["best_skipped"]] == ["finetuned-r64", "finetuned", "head-mlp", "head-linear"]
    assert gap_sentence("toy", "enc", s).endswith(
        f"so the representational gap is 0.150; generalisation gap: not determined (`finetuned-r64` {AT_CAP_TEXT}). "
        "Read from `head-mlp-all` converged at 400 steps."
    )


def test_results_without_state_rows_say_not_recorded(tmp_path):
    """Old results (no state rows): every learning rung reads "convergence not recorded" and is
    treated as not converged: no part of the gap is determined; the transfer rung is still read."""
    t = ladder_table(_csv(tmp_path / "r.csv", states={m: None for m in HELDOUT}))
    assert set(t[t["learned"]]["state"]) == {"convergence not recorded"}
    text = gap_sentence("toy", "enc", gap_split(t))
    assert "representational gap: not determined (`head-mlp-all`: convergence not recorded)" in text
    assert "(`nn-transfer-top5`) reaches 0.300, but the generalisation gap is not determined" in text
    md = "\n".join(ladder_section.render_ladder(t, None))
    assert "| `head-mlp` | 0.750 | 0.250 | 0.800 | 0.300 | 0.375 | 0.125 | convergence not recorded |" in md


# ---- the ladder figure ------------------------------------------------------------------------


def test_the_ladder_figure_reads_rprec_where_gold_sets_vary(tmp_path):
    """Gold sets of 1 to 40 documents: the figure's points are the R-precision values the sentence
    reads (held-out head-mlp-all 0.75, train 0.25), not recall@10 (0.80 / 0.30); head-mlp-all,
    stopped at the cap, is drawn hollow, the oracle (no training) filled."""
    t = ladder_table(_csv(tmp_path / "r.csv", states={"head-mlp-all": AT_CAP}))
    varies = {"toy": paper.DatasetInfo(500, None, True, (1, 40))}
    pts = ladder_figure_data(t, varies)
    mlp = pts[pts["rung"] == "head-mlp-all"].set_index("split")
    assert mlp.loc["held-out", "value"] == pytest.approx(0.75) and mlp.loc["train", "value"] == pytest.approx(0.25)
    assert set(pts["metric"]) == {"R-precision (gold sets vary 1–40)"}
    assert pts[pts["not_converged"]]["rung"].unique().tolist() == ["head-mlp-all"]
    assert pts["rung"].drop_duplicates().tolist() == t["rung"].tolist()  # ladder order
    out = tmp_path / "ladder.png"
    ctx = ReportContext(
        df=_csv(tmp_path / "r.csv", states={"head-mlp-all": AT_CAP}), statuses=[], ks=[10], infos=varies
    )
    assert ladder_section.draw(ctx, type("O", (), {"ladder_png": str(out)})()) == {"ladder_png": True}
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    # fixed gold sets: R-precision is recall at the gold-set size, and the label says so
    fixed = ladder_figure_data(t, {"toy": paper.DatasetInfo(46, 2, True, (2, 2))})
    assert set(fixed["metric"]) == {"R-precision (= recall@2: every gold set has 2)"}
    # results without R-precision rows fall back to recall@10 (held-out head-mlp-all 0.80)
    df = _csv(tmp_path / "r.csv")
    old = ladder_figure_data(ladder_table(df[df["metric"] != "rprec"]), varies)
    assert set(old["metric"]) == {"recall@10 (no R-precision rows)"}
    assert old[(old["rung"] == "head-mlp-all") & (old["split"] == "held-out")]["value"].iloc[0] == pytest.approx(0.80)


# ---- At a glance and the paper's pattern ------------------------------------------------------


def _glance_rows(state=None):
    """limit-small x e at recall@2: capacity 1.0, fine-tuned train 0.9 / held-out 0.3, so the gap
    is 1.0 - 0.3 = 0.700 (train - held-out 0.600, capacity - held-out 0.700: the paper's
    generalisation-gap pattern holds at threshold 0.3)."""
    rows = [
        ("limit-small", "e", m, s, "recall", k, v)
        for k in (2, 10)
        for m, s, v in (
            ("probe", "heldout", 1.0),
            ("pretrained", "heldout", 0.2),
            ("finetuned", "train", 0.9),
            ("finetuned", "heldout", 0.3),
        )
    ]
    return _frame(rows + (_state("limit-small", "e", "finetuned", state) if state else []))


def _glance(df) -> str:
    t = summary_table(df, {"limit-small": paper.DatasetInfo(46, 2, True)}, [2, 10])
    return next(line for line in render_summary(t, df) if line.startswith("- **limit-small / e**"))


def test_an_unconverged_fine_tuning_is_not_a_finding_at_a_glance():
    assert _glance(_glance_rows(AT_CAP)) == (
        "- **limit-small / e** (recall@2, held-out): the index supports 1.000; the fine-tuned encoder reaches 0.300 "
        f"(fine-tuning {AT_CAP_TEXT}), leaving **0.700 of capacity unused** — not a finding: the fine-tuning had not "
        "converged."
    )
    assert _glance(_glance_rows(CONVERGED)) == (
        "- **limit-small / e** (recall@2, held-out): the index supports 1.000; the fine-tuned encoder reaches 0.300 "
        "(fine-tuning converged at 400 steps), leaving **0.700 of capacity unused**."
    )
    assert _glance(_glance_rows()) == (
        "- **limit-small / e** (recall@2, held-out): the index supports 1.000; the fine-tuned encoder reaches 0.300 "
        "(fine-tuning: convergence not recorded), leaving **0.700 of capacity unused** — not a finding: the fine-tuning is "
        "not known to have converged."
    )


def test_an_unconverged_fine_tuning_marks_the_paper_pattern():
    def pattern(df):
        rows = mark_learners(
            paper.compare(df, {"limit-small": paper.DatasetInfo(46, 2, True)}, {("finetuned", "e"): "m"}), df
        )
        return next(r["pattern"] for r in rows if r["claim"].startswith("LIMIT (50k documents), fine-tuned Qwen3"))

    held = "holds (train − held-out +0.600, capacity − held-out +0.700; threshold 0.3)"
    assert pattern(_glance_rows(CONVERGED)) == held
    assert pattern(_glance_rows(AT_CAP)) == f"{held}; not a finding: the fine-tuning had not converged ({AT_CAP_TEXT})"
    assert pattern(_glance_rows()) == f"{held}; not a finding: the convergence of the fine-tuning was not recorded"
    from capgap.report import render_paper

    df = _glance_rows(AT_CAP)
    rows = mark_learners(
        paper.compare(df, {"limit-small": paper.DatasetInfo(46, 2, True)}, {("finetuned", "e"): "m"}), df
    )
    md = "\n".join(render_paper(rows))
    # the capacity claim holds (probe 1.0); the fine-tuning's pattern is not counted
    assert (
        "**The paper's pattern holds on 1 of the 1 runs where it could be checked.** 1 more was read from a learner that "
        "had not converged or whose convergence was not recorded: not findings (marked in the table)."
    ) in md


# ---- near-miss twins and the parity task ------------------------------------------------------


def test_an_unconverged_adapter_marks_the_near_miss_verdict():
    """Encoder-limited twin type (probe 1.0, pre-trained 0.8) that fine-tuning closes (0.96): the
    verdict's fine-tuning clause is marked when the adapter stopped at the cap."""
    rows = [
        ("nm", "" if m == "colbert" else "e", m, "heldout", f"{name}:negation", "", v)
        for m, win in (("probe", 1.0), ("pretrained", 0.8), ("finetuned", 0.96))
        for name, v in (("twin_pairs", 10), ("twin_win", win), ("twin_tie", 0.0), ("twin_gap", 0.1))
    ]
    df = _frame(rows + _state("nm", "e", "finetuned", AT_CAP))
    r = near_miss_table(df).to_dict("records")[0]
    assert r["finetuned_state"] == AT_CAP_TEXT and r["finetuned_finding"] is False and r["no_twins_state"] is None
    assert twin_verdict(r).endswith(
        "fine-tuning closes it on held-out combinations (fine-tuned held-out 0.960) — not a finding: the fine-tuning had "
        f"not converged ({AT_CAP_TEXT})."
    )
    ok = near_miss_table(_frame(rows + _state("nm", "e", "finetuned", CONVERGED))).to_dict("records")[0]
    assert twin_verdict(ok).endswith("(fine-tuned held-out 0.960).")
    from capgap.report import render_near_miss

    assert f"Learners: fine-tuned (twins as negatives) {AT_CAP_TEXT}." in render_near_miss(df, None)


def test_the_parity_learners_states_and_a_fit_all_rung_converged_below_the_oracle():
    """P = 8: head-mlp-all stopped at the cap 300 (objective still falling 2.0% per window); P = 16:
    it converged at 250 steps at held-out 0.600, below the perfect encoder's 1.000, with final
    training objective 1.234, reported as such; head-mlp converged at 300 steps at both P."""
    from capgap.report.hardness import parity_fit_sentence, parity_ladder, render_parity_ladder

    rows = []
    for P, fh, fit_state in ((8, 0.98, (0.0, 300, 300, 0.5, 0.02)), (16, 0.60, (1.0, 250, 300, 1.234, 0.0001))):
        ds = f"parity-P{P}"
        rows += [
            (ds, "", m, s, "recall", 4, v)
            for m, s, v in (
                ("probe", "all", 1.0),
                ("perfect", "heldout", 1.0),
                ("head-mlp-all", "train", fh),
                ("head-mlp-all", "heldout", fh),
                ("head-mlp", "train", 1.0),
                ("head-mlp", "heldout", 0.1),
            )
        ]
        rows += _state(ds, "", "head-mlp-all", fit_state) + _state(ds, "", "head-mlp", (1.0, 300, 300, 0.1, 0.0))
    hdf = _frame(rows)
    summary = {"sizes": [{"P": 8, "k_over_n": 0.25}, {"P": 16, "k_over_n": 0.125}]}
    text = parity_fit_sentence(parity_ladder(hdf, summary), hdf)
    assert text == (
        "Where the fit-all rung (`head-mlp-all`) stopped: P = 8: stopped at the cap 300, objective still falling "
        "2.0% per window (not converged: its recall is where it stopped, not what the family fits); P = 16: "
        "converged at 250 steps below the perfect encoder (held-out 0.600 against 1.000), final training objective "
        "1.234: the training objective stopped improving there while a member of the family reaches 1.000, so "
        "the shortfall is the optimisation's, not the family's."
    )
    lines = render_parity_ladder(hdf, summary)
    assert text in lines
    assert (
        "| 16 | 1.000 | 1.000 | 0.600 | 0.600 | 1.000 | 0.100 | 0.125 | converged at 250 steps | converged at 300 steps |"
        in lines[2]
    )


# ---- the whole report -------------------------------------------------------------------------


def test_build_report_wires_states_into_every_section(tmp_path):
    """A results.csv with ladder rows (head-mlp-all stopped at the cap) and a data folder whose
    gold sets vary (1 and 3 documents): the learners section lists every learning rung, the ladder
    sentence says "not determined", and the figure is drawn."""
    df = _csv(tmp_path / "in.csv", states={"head-mlp-all": AT_CAP, "head-linear-all": AT_CAP})
    res = tmp_path / "results.csv"
    df.to_csv(res, index=False)
    d = tmp_path / "toy" / "data"
    d.mkdir(parents=True)
    from .test_build import _status

    (d / "status.json").write_text(json.dumps(_status("toy", 500, "mirror")))
    (d / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq2\td3\t1\nq2\td4\t1\n")
    out = ReportOutputs.under(tmp_path / "reports")
    build_report(ReportInputs(tables=[str(res)], data=[str(d)]), out, [10], 10)
    md = Path(out.md).read_text(encoding="utf-8")
    learners = md.split("## Trained learners: converged or stopped", 1)[1].split("\n## ", 1)[0]
    assert "4 of 6 trained learners converged." in learners  # 4 heads + finetuned + finetuned-r64; two at the cap
    assert f"| toy | enc | `head-mlp-all` | {AT_CAP_TEXT} | 100 | 100 | 1.5 | 3.2% |" in learners
    assert f"representational gap: not determined (`head-mlp-all` {AT_CAP_TEXT})" in md
    assert "![the learnability ladder](figures/ladder.png)" in md and Path(out.ladder_png).stat().st_size > 5000


def test_hyphenated_regimes_are_rungs_and_decay_steps_read_back():
    """finetuned-<regime> with hyphens is a ladder rung (finetuned-no-twins and finetuned@<set>
    are not); a state with a decay phase and an earlier validation point reads back in the
    trainer's words."""
    from capgap.report.ladder import ladder_rungs

    assert ladder_rungs(
        ["pretrained", "finetuned-no-twins", "finetuned@x", "finetuned-early-stop", "probe", "finetuned-r4"]
    ) == ["probe", "finetuned-early-stop", "finetuned-r4", "pretrained"]
    rule = Convergence(tol=0.01, n_iter_no_change=1, max_iter=1000)
    st = rule.state([3.0, 2.0, 1.999], 650, True, early_stopped=True)
    from dataclasses import replace

    st = replace(st, decay_steps=130)
    got = learner_state(pd.DataFrame(st.rows("d", "e", "head-mlp")), "d", "e", "head-mlp")
    assert (
        got.describe()
        == st.describe()
        == "converged at 650 steps, then 130 decay steps; weights of an earlier point chosen on its validation split"
    )
    assert got.finding
