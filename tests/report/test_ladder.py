"""The report's ladder section (capgap.report.ladder) from a hand-made results.csv: the rung
order, the table's values, the gap split's numbers worked out by hand, and the figure."""

import csv

import pytest

from capgap.evaluate import COLUMNS
from capgap.report import ReportContext, collect, gap_sentence, gap_split, ladder_rungs, ladder_table, render_ladder
from capgap.report import ladder as ladder_section

# held-out R-precision per rung of one cell (train values: 1 - held-out, recall@10 = R-precision + 0.05)
HELDOUT = {
    "probe": 0.90,
    "head-linear-all": 0.60,
    "head-mlp-all": 0.75,
    "head-linear": 0.20,
    "head-mlp": 0.25,
    "nn-transfer": 0.10,
    "nn-transfer-top5": 0.30,
    "finetuned": 0.28,
    "finetuned-r64": 0.35,
    "pretrained": 0.40,
    "bm25": 0.5,
    "finetuned@scifact": 0.9,
}


# where each learning rung stopped, as the trainers record it (capgap.training.ConvergenceState.rows):
# (converged, steps, max_steps, train_loss, loss_improvement or None); every rung converged by default
CONVERGED = (1.0, 400, 1000, 0.5, 0.0005)


def _csv(path, cells=(("toy", "enc"),), heldout=HELDOUT, states=None):
    """A hand-made results.csv of the ladder's rungs; ``states``: learning rung -> its state
    (default: every learning rung ``CONVERGED``; a rung mapped to None has no state rows)."""
    from capgap.report import is_trained

    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for d, e in cells:
            for m, v in heldout.items():
                enc = "" if m == "bm25" else e
                for split, x in (("heldout", v), ("train", round(1 - v, 2))):
                    w.writerow([d, enc, m, split, "rprec", "", x, ""])
                    w.writerow([d, enc, m, split, "recall", 10, round(x + 0.05, 2), ""])
                    w.writerow([d, enc, m, split, "ndcg", 10, round(x / 2, 3), ""])
                state = (states or {}).get(m, CONVERGED) if is_trained(m) else None
                if state is not None:
                    for metric, val in zip(
                        ("converged", "steps", "max_steps", "train_loss", "loss_improvement"), state
                    ):
                        if val is not None:
                            w.writerow([d, enc, m, "train", metric, "", val, ""])
    return collect([path])


def test_rung_order_and_which_rungs_learn_from_train_only():
    assert ladder_rungs(
        [
            "pretrained",
            "finetuned-r4",
            "nn-transfer-top10",
            "probe",
            "head-mlp",
            "finetuned",
            "nn-transfer-top5",
            "finetuned-full",
            "head-linear-all",
            "bm25",
            "finetuned-no-twins",
            "finetuned@x",
            "nn-transfer",
        ]
    ) == [
        "probe",
        "head-linear-all",
        "head-mlp",
        "nn-transfer",
        "nn-transfer-top5",
        "nn-transfer-top10",
        "finetuned",
        "finetuned-full",
        "finetuned-r4",
        "pretrained",
    ]
    assert [
        ladder_section.is_train_only(m)
        for m in ("head-mlp", "head-mlp-all", "nn-transfer-top5", "finetuned-r64", "probe", "pretrained")
    ] == [True, False, True, True, False, False]


def test_the_gap_sentence_splits_the_gap_by_hand(tmp_path):
    """Hand-made rows: oracle 0.90, best fit-all head head-mlp-all 0.75 (over head-linear-all
    0.60): representational 0.90 - 0.75 = 0.15; best train-only rung finetuned-r64 0.35 (over
    nn-transfer-top5 0.30, finetuned 0.28, head-mlp 0.25, head-linear 0.20, nn-transfer 0.10;
    the pre-trained encoder's 0.40 and BM25's 0.5 are not train-only rungs, finetuned@scifact's
    0.9 not a rung): generalisation 0.75 - 0.35 = 0.40."""
    df = _csv(tmp_path / "results.csv")
    t = ladder_table(df)
    assert t["rung"].tolist() == [
        "probe",
        "head-linear-all",
        "head-mlp-all",
        "head-linear",
        "head-mlp",
        "nn-transfer",
        "nn-transfer-top5",
        "finetuned",
        "finetuned-r64",
        "pretrained",
    ]
    r = t[t["rung"] == "head-mlp"].iloc[0]
    assert (
        r["heldout_rprec"],
        r["train_rprec"],
        r["heldout_recall@10"],
        r["train_recall@10"],
        r["heldout_ndcg"],
    ) == pytest.approx((0.25, 0.75, 0.30, 0.80, 0.125))
    s = gap_split(t)
    assert s["fit_rung"] == "head-mlp-all" and s["best_rung"] == "finetuned-r64"
    assert (s["oracle"], s["fit"], s["best"]) == pytest.approx((0.90, 0.75, 0.35))
    assert (s["representational"], s["generalisation"]) == pytest.approx((0.15, 0.40))
    text = gap_sentence("toy", "enc", s)
    assert "representational gap is 0.150" in text and "generalisation gap is 0.400" in text
    assert "`head-mlp-all`) 0.750" in text and "`finetuned-r64`) reaches 0.350" in text
    lines = render_ladder(t, "figures/ladder.png")
    assert lines[0] == "## The learnability ladder" and "![the learnability ladder](figures/ladder.png)" in lines
    assert "| `head-mlp` | 0.750 | 0.250 | 0.800 | 0.300 | 0.375 | 0.125 |" in "\n".join(lines)
    assert text in lines


def test_no_split_without_a_fit_all_head_and_no_section_without_ladder_rows(tmp_path):
    rows = {m: v for m, v in HELDOUT.items() if not m.endswith("-all")}
    t = ladder_table(_csv(tmp_path / "a.csv", heldout=rows))
    assert gap_split(t) is None and "no gap split" in gap_sentence("toy", "enc", None)
    plain = {m: HELDOUT[m] for m in ("probe", "pretrained", "finetuned")}
    assert ladder_table(_csv(tmp_path / "b.csv", heldout=plain)).empty
    assert render_ladder(ladder_table(_csv(tmp_path / "b.csv", heldout=plain)), None) == []


def test_the_ladder_figure_one_panel_per_cell(tmp_path):
    from types import SimpleNamespace as NS

    df = _csv(tmp_path / "results.csv", cells=(("toy", "enc"), ("toy", "enc2")))
    ctx = ReportContext(df=df, statuses=[], ks=[10])
    out = NS(ladder_png=str(tmp_path / "ladder.png"))
    assert ladder_section.draw(ctx, out) == {"ladder_png": True}
    assert (tmp_path / "ladder.png").stat().st_size > 5000
    ctx.figs = {"ladder_png": "figures/ladder.png"}
    md = "\n".join(ladder_section.render(ctx))
    assert md.count("representational gap is 0.150") == 2  # one sentence per dataset x encoder
    assert ladder_section.draw(ReportContext(df=df.iloc[0:0], statuses=[], ks=[10]), out) == {"ladder_png": False}


def test_the_parity_ladder_table_and_sentence_by_hand():
    """Hand-made parity rows for P = 8 and 16: perfect encoder 1.0 and 1.0, oracle 1.0 and
    1.0; the fit-all rung's held-out recall 0.98 and 0.60 (range 0.600 to 0.980), train-only
    held-out 0.30 and 0.05 (largest 0.300; generalisation gap min(0.98 - 0.30, 0.60 - 0.05) =
    0.55), k/n 0.25 and 0.125 (the largest 0.25)."""
    import pandas as pd

    from capgap.report.hardness import parity_ladder, parity_ladder_sentence, render_parity_ladder

    vals = {8: (1.0, 0.99, 0.98, 1.0, 0.30), 16: (1.0, 0.61, 0.60, 1.0, 0.05)}
    rows = []
    for P, (o, ft, fh, ot, oh) in vals.items():
        ds = f"parity-P{P}"
        rows += [
            (ds, "probe", "all", o),
            (ds, "perfect", "heldout", 1.0),
            (ds, "head-mlp-all", "train", ft),
            (ds, "head-mlp-all", "heldout", fh),
            (ds, "head-mlp", "train", ot),
            (ds, "head-mlp", "heldout", oh),
        ]
    hdf = pd.DataFrame(
        [
            {"dataset": d, "encoder": "", "method": m, "split": s, "metric": "recall", "k": 4, "value": v}
            for d, m, s, v in rows
        ]
    )
    summary = {"sizes": [{"P": 8, "k_over_n": 0.25}, {"P": 16, "k_over_n": 0.125}, {"P": 24, "k_over_n": 0.1}]}
    t = parity_ladder(hdf, summary)
    assert t["P"].tolist() == [8, 16]  # P = 24 has no ladder rows
    assert t.iloc[1].tolist() == [16, 1.0, 1.0, 0.61, 0.60, 1.0, 0.05, 0.125]
    text = parity_ladder_sentence(t)
    assert "perfect encoder reaches at least 1.000" in text and "reaches 0.600 to 0.980" in text
    assert "at most 0.300 on held-out" in text and "k/n: at most 0.250" in text and "at least 0.550)" in text
    lines = render_parity_ladder(hdf, summary)
    assert "| 16 | 1.000 | 1.000 | 0.610 | 0.600 | 1.000 | 0.050 | 0.125 |" in lines[2]
    # no state rows: every learner is named after the sentence as not a finding
    marked = next(line for line in lines if line.startswith(text[:-1]))
    assert (
        marked
        == text
        + " — not a finding where a learner had not converged: "
        + "; ".join(f"P = {P}, `{m}` convergence not recorded" for P in (8, 16) for m in ("head-mlp-all", "head-mlp"))
        + "."
    )
    conv = pd.DataFrame(
        [
            {"dataset": f"parity-P{P}", "encoder": "", "method": m, "split": "train", "metric": k, "k": "", "value": v}
            for P in (8, 16)
            for m in ("head-mlp-all", "head-mlp")
            for k, v in (("converged", 1.0), ("steps", 100.0), ("max_steps", 3000.0))
        ]
    )
    assert parity_ladder_sentence(t, pd.concat([hdf, conv])) == text  # every learner converged: no mark
    assert render_parity_ladder(hdf[hdf["method"] == "probe"], summary) == []


def test_run_grid_writes_the_parity_ladder_rows():
    """rule hardness with ``ladder``: head-mlp-all on train, held-out and all queries, its train
    value consistent with the other two (the splits are disjoint: all = (n_tr train + n_ho
    held-out) / n), and head-mlp the mlp-infonce learner's own numbers; without ``ladder``
    neither method."""
    from capgap.config import section_defaults
    from capgap.hardness import run_grid

    d = section_defaults("hardness")
    cfg = {
        **{k: v for k, v in d.items() if k != "enabled"},
        "P": [6],
        "m_train": 24,
        "m_heldout": 16,
        "m_sweep": None,
        "archs": ["mlp"],
        "losses": ["infonce"],
        "chance_pairs": 0,
        "steps": 40,
    }
    rows, _ = run_grid(cfg)
    v = {(r["method"], r["encoder"], r["split"]): r["value"] for r in rows if r["metric"] == "recall"}
    tr, ho, al = (v[("head-mlp-all", "", s)] for s in ("train", "heldout", "all"))
    assert al == pytest.approx((24 * tr + 16 * ho) / 40)
    assert v[("head-mlp", "", "heldout")] == v[("trained", "mlp-infonce", "heldout")]
    assert v[("head-mlp", "", "train")] == v[("trained", "mlp-infonce", "train")]
    assert not {r["method"] for r in run_grid({**cfg, "ladder": False})[0]} & {"head-mlp-all", "head-mlp"}


def test_the_parity_figure_draws_with_the_ladder_rows(tmp_path):
    import pandas as pd

    from capgap.figures import plot_hardness

    rows = [
        {"dataset": f"parity-P{P}", "encoder": e, "method": m, "split": s, "metric": "recall", "k": 4, "value": v}
        for P in (8, 16)
        for e, m, s, v in (
            ("", "perfect", "heldout", 1.0),
            ("", "random", "heldout", 0.25),
            ("mlp-infonce", "trained", "train", 0.9),
            ("mlp-infonce", "trained", "heldout", 0.3),
            ("", "head-mlp-all", "all", 0.8),
            ("", "head-mlp-all", "heldout", 0.7),
            ("", "head-mlp", "heldout", 0.3),
            ("", "probe", "all", 1.0),
        )
    ]
    plot_hardness(pd.DataFrame(rows), tmp_path / "p.png", tmp_path / "m.png")
    assert (tmp_path / "p.png").stat().st_size > 5000
