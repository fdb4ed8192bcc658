"""capgap diagnose independent of the units of the vectors: L2 verdicts under a common power-of-two
scale, float64 inputs outside float32's range, a failing dual QP, and the capacity as the better
of the probe's and the user's own query vector."""

import numpy as np
import pytest

from capgap.diagnosis import diagnose

DOCS = [f"d{i}" for i in range(6)]
QIDS = [f"q{i}" for i in range(4)]
GOLDS = [[0, 3], [1], [2, 5], [4]]
QRELS = {q: {DOCS[g]: 1 for g in gs} for q, gs in zip(QIDS, GOLDS)}


def _base():
    """6 documents and 4 queries in 8 dimensions (seeded), float32: the documents are affinely
    independent, so under ip every gold set is separable, and under l2 too (they lie on one
    sphere, centre z: ``|q - d|^2`` ranks as ``(q - z).(d - z)``, any direction of which is
    reachable)."""
    rng = np.random.default_rng(0)
    return rng.standard_normal((6, 8)).astype(np.float32), rng.standard_normal((4, 8)).astype(np.float32)


def _recall64(D, Q, golds, k, metric):
    """Capped recall@k per query in float64 (pessimistic ties): the reference."""
    out = []
    for q, gold in zip(np.asarray(Q, np.float64), golds):
        Dd = np.asarray(D, np.float64)
        s = Dd @ q if metric == "ip" else -((Dd - q) ** 2).sum(1)
        others = ~np.isin(np.arange(len(s)), gold)
        found = sum(np.sum(s > s[g]) + np.sum((s == s[g]) & others) < k for g in gold)
        out.append(found / min(k, len(gold)))
    return out


def _col(diag, key):
    return [r[key] for r in diag.rows]


@pytest.mark.parametrize("scale", [2800.0, 1e4, 1e8, 1e9, 2.0**40])
def test_l2_verdicts_do_not_depend_on_the_units(scale):
    """The base vectors times a common factor (float32): L2 ranks as at scale 1, so the encoder's
    recall is the float64 reference's and every gold set stays separable: all certified, each
    query ok where the reference's recall is 1, else encoder-limited; no proof of inseparability."""
    D0, Q0 = _base()
    D, Q = D0 * np.float32(scale), Q0 * np.float32(scale)
    diag = diagnose(D, Q, QRELS, DOCS, QIDS, k=2, metric="l2")
    expect = _recall64(D, Q, GOLDS, 2, "l2")
    assert expect == _recall64(D0, Q0, GOLDS, 2, "l2")
    assert _col(diag, "encoder_recall@2") == expect
    assert all(_col(diag, "certified")) and set(_col(diag, "proof")) == {None}
    assert _col(diag, "verdict") == ["ok" if e == 1 else "encoder-limited" for e in expect]


def test_l2_pixel_scale_vectors_are_diagnosed():
    """Raw 0-255 vectors, far from the origin and of norm ~2,000 (the lift's last coordinate
    ~2e6): every document is its own nearest point, so each single-gold query is certified."""
    rng = np.random.default_rng(1)
    D = rng.integers(0, 256, (40, 128)).astype(np.float32)
    Q = rng.integers(0, 256, (10, 128)).astype(np.float32)
    docs, qids = [f"d{i}" for i in range(40)], [f"q{i}" for i in range(10)]
    qrels = {q: {f"d{3 * i}": 1} for i, q in enumerate(qids)}
    diag = diagnose(D, Q, qrels, docs, qids, k=1, metric="l2")
    assert all(_col(diag, "certified")) and _col(diag, "probe_recall@1") == [1.0] * 10
    assert _col(diag, "encoder_recall@1") == _recall64(D, Q, [[3 * i] for i in range(10)], 1, "l2")
    r = max(np.linalg.norm(D.astype(np.float64), axis=1).max(), np.linalg.norm(Q.astype(np.float64), axis=1).max())
    expect = 2.0 ** -(np.floor(np.log2(r)) + 1)  # the common power of two bringing the largest norm into [0.5, 1)
    assert diag.summary["score_scale"]["documents"] == diag.summary["score_scale"]["queries"] == expect


def test_l2_same_vectors_up_to_a_power_of_two_give_identical_rows():
    """The same vectors times 2^-8 and times 2^20 (exact in float32): every per-query number and
    verdict is identical, and the scales recorded differ by exactly the inverse factors."""
    rng = np.random.default_rng(2)
    D = rng.integers(0, 256, (60, 6)).astype(np.float32)
    Q = rng.integers(0, 256, (12, 6)).astype(np.float32)
    docs, qids = [f"d{i}" for i in range(60)], [f"q{i}" for i in range(12)]
    qrels = {q: {f"d{(5 * i + j) % 60}": 1 for j in range(3)} for i, q in enumerate(qids)}
    out = [
        diagnose(D * np.float32(f), Q * np.float32(f), qrels, docs, qids, k=5, metric="l2")
        for f in (1.0, 2.0**-8, 2.0**20)
    ]
    keys = ("probe_recall@5", "certified", "cause", "encoder_recall@5", "capacity@5", "proof", "verdict", "slack")
    for other in out[1:]:
        for key in keys:
            assert _col(other, key) == _col(out[0], key), key
    s = [d.summary["score_scale"]["documents"] for d in out]
    assert s[1] == s[0] * 2.0**8 and s[2] == s[0] * 2.0**-20


@pytest.mark.parametrize("metric", ["ip", "l2"])
@pytest.mark.parametrize("exp", [-660, 133, 650])
def test_float64_outside_float32_is_scaled_not_zeroed(metric, exp):
    """float64 vectors ~1e-199 (each squared norm underflows float64), ~1e40 (beyond float32) and
    ~1e196: scored times a power of two, they rank as the base does: the float64 reference's
    encoder recall, every query certified, ok or encoder-limited as that recall says."""
    D0, Q0 = _base()
    D, Q = np.ldexp(D0.astype(np.float64), exp), np.ldexp(Q0.astype(np.float64), exp)
    diag = diagnose(D, Q, QRELS, DOCS, QIDS, k=2, metric=metric)
    expect = _recall64(D0, Q0, GOLDS, 2, metric)
    assert _col(diag, "encoder_recall@2") == expect and diag.summary["encoder_recall@2"] == pytest.approx(
        np.mean(expect)
    )
    assert all(_col(diag, "certified")) and diag.summary["probe_recall@2"] == 1.0
    assert _col(diag, "verdict") == ["ok" if e == 1 else "encoder-limited" for e in expect]
    assert any("changes no ranking" in n for n in diag.notes)


def test_float64_nan_still_refused():
    D0, Q0 = _base()
    Q = Q0.astype(np.float64)
    Q[2, 5] = np.nan
    with pytest.raises(ValueError, match=r"queries: row 2 \(0-based\) is not finite: column 5 holds nan"):
        diagnose(D0, Q, QRELS, DOCS, QIDS, k=2)


@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_failing_dual_qp_gives_undetermined_not_a_crash(monkeypatch, metric):
    """quadprog refusing every QP: no exception, no query proven index-limited. A query is
    certified only by a float64-checked witness (then ok or encoder-limited as the float64
    reference's encoder recall says); every other query is undetermined, its cause 'solver'
    (at w = 0 nothing is separated, so with the exact LP off some are)."""
    import quadprog

    def refuse(*a, **kw):
        raise ValueError("constraints are inconsistent, no solution")

    monkeypatch.setattr(quadprog, "solve_qp", refuse)
    rng = np.random.default_rng(4)
    D = rng.standard_normal((30, 4)).astype(np.float32)
    Q = rng.standard_normal((5, 4)).astype(np.float32)
    docs, qids = [f"d{i}" for i in range(30)], [f"q{i}" for i in range(5)]
    golds = [[i, i + 10] for i in range(5)]
    qrels = {q: {docs[g]: 1 for g in gs} for q, gs in zip(qids, golds)}
    diag = diagnose(D, Q, qrels, docs, qids, k=2, metric=metric, probe_cfg={"lp_check_max_docs": 0})
    enc = _recall64(D, Q, golds, 2, metric)
    assert _col(diag, "encoder_recall@2") == enc
    assert _col(diag, "verdict") == [
        ("ok" if e == 1 else "encoder-limited") if r["certified"] else ("ok" if e == 1 else "undetermined")
        for r, e in zip(diag.rows, enc)
    ]
    assert "undetermined" in _col(diag, "verdict")
    assert all(r["cause"] == "solver" and r["proof"] is None for r in diag.rows if not r["certified"])
    assert any("dual QP failed" in n for n in diag.notes)


def test_capacity_is_at_least_what_the_query_vector_reaches():
    """Three documents on a line (x = 0, 1, 2), inner product, k 2. q0's gold {d0, d2} has d1
    between them: no w ranks both strictly first (index-limited), yet its own vector (1, 0.5)
    ranks d2 first, d1, d0: recall 0.5. q1 (gold d1) ranks d1 second: recall 1. Capacity per
    query: 0.5 and 1 (mean 0.75) = encoder recall, so no unused capacity."""
    D = np.array([[0, 0], [1, 0], [2, 0]], dtype=np.float32)
    Q = np.array([[1, 0.5], [1, 0.2]], dtype=np.float32)
    qrels = {"q0": {"d0": 1, "d2": 1}, "q1": {"d1": 1}}
    diag = diagnose(D, Q, qrels, ["d0", "d1", "d2"], ["q0", "q1"], k=2)
    assert _col(diag, "encoder_recall@2") == [0.5, 1.0]
    assert _col(diag, "capacity@2") == [0.5, 1.0]
    assert _col(diag, "verdict") == ["index-limited", "ok"]
    s = diag.summary
    assert s["capacity@2"] == 0.75 and s["unused_capacity"] == 0.0
    assert "the index admits 0.750 recall" in s["reading"]
    assert all(r["capacity@2"] >= max(r["probe_recall@2"], r["encoder_recall@2"]) for r in diag.rows)


@pytest.mark.parametrize("scale", [1e200, 1e160, 1e-6, 1e-200])
def test_cosine_rows_far_outside_float32_are_normalised_exactly(scale):
    """Cosine ignores each row's scale: float64 rows times 1e200 or 1e160 (their squares beyond
    float64) or 1e-6 give the verdicts of the unscaled base; the encoder's recall is the float64
    reference's on the unit rows. (Only a row whose every value is 0 is refused as norm 0.)"""
    D0, Q0 = _base()
    D, Q = D0.astype(np.float64) * scale, Q0.astype(np.float64) * scale
    base = diagnose(D0, Q0, QRELS, DOCS, QIDS, k=2, metric="cosine")
    diag = diagnose(D, Q, QRELS, DOCS, QIDS, k=2, metric="cosine")
    Du = D0 / np.linalg.norm(D0.astype(np.float64), axis=1, keepdims=True)
    Qu = Q0 / np.linalg.norm(Q0.astype(np.float64), axis=1, keepdims=True)
    assert _col(diag, "encoder_recall@2") == _col(base, "encoder_recall@2") == _recall64(Du, Qu, GOLDS, 2, "ip")
    assert _col(diag, "verdict") == _col(base, "verdict") and all(_col(diag, "certified"))


def test_l2_documents_far_from_unit_queries_keep_their_order():
    """Documents on a sphere of radius 1e8 (float64) and queries of norm ~3: |d|^2/2 ~ 5e15 dwarfs
    q.d ~ 1e8, more than float32's 24 bits hold; the lift's last coordinate is shifted by the
    median |d|^2/2 (no ranking changes), so the encoder's recall is the float64 reference's. With
    equal document norms the L2 order is the inner-product order, which gives the same numbers."""
    D0, Q0 = _base()
    Du = D0.astype(np.float64) / np.linalg.norm(D0.astype(np.float64), axis=1, keepdims=True)
    D, Q = Du * 1e8, Q0.astype(np.float64)
    diag = diagnose(D, Q, QRELS, DOCS, QIDS, k=2, metric="l2")
    expect = _recall64(D, Q, GOLDS, 2, "l2")
    assert expect == _recall64(Du, Q, GOLDS, 2, "ip")
    assert _col(diag, "encoder_recall@2") == expect


@pytest.mark.parametrize(
    "side, factor, metrics",
    [
        ("documents", 1e160, ("ip", "l2")),
        ("documents", 1e44, ("ip",)),
        ("documents", 1e28, ("l2",)),
        ("queries", 1e30, ("l2",)),
    ],
)
def test_a_row_the_common_scale_would_zero_is_refused(side, factor, metrics):
    """One float64 row times ``factor`` among ordinary ones: at the scale it needs the other
    rows' inner products (ip) or squared distances (l2) underflow float32 and tie at 0 (every
    query's encoder recall read 0.000, exit 0): refused, naming the first such row. Under l2
    one scale serves both sides, so an outlying query leaves the documents too small."""
    D0, Q0 = _base()
    D, Q = D0.astype(np.float64), Q0.astype(np.float64)
    (D if side == "documents" else Q)[3] *= factor
    for metric in metrics:
        with pytest.raises(
            ValueError,
            match=r"documents: row 0 \(0-based\) has norm 2\^\d+: beside rows of norm up to "
            r"2\^\d+ its (inner products|squared distances) underflow float32",
        ):
            diagnose(D, Q, QRELS, DOCS, QIDS, k=2, metric=metric)


@pytest.mark.parametrize("n_docs", [40, 3000])
def test_one_outlying_row_does_not_fake_a_proof(n_docs):
    """One document 1e10 times the norm of the others (float32): the probe scales the index to
    the outlier, which left the ordinary rows at 1e-10 and their margins below thresholds set
    at the outlier's scale (a separable query was "proven" inseparable). Each query's
    separability is decided here independently: scipy's HiGHS on the hard-margin LP in float64
    with every constraint row divided by its largest |coefficient| (the same feasible set, well
    conditioned); the probe must agree, through the exact LP (40 documents) and through the
    cutting plane and hull proofs (3,000), and its certificates must hold in float64."""
    from scipy.optimize import linprog

    from capgap.probe import probe

    rng = np.random.default_rng(11)
    dim = 3 if n_docs == 40 else 12
    D = rng.standard_normal((n_docs, dim))
    out = 3
    golds = [
        rng.choice(np.setdiff1d(np.arange(n_docs), [out]), size=int(rng.integers(1, 6)), replace=False)
        for _ in range(8)
    ]
    D[out] *= 1e10
    D = D.astype(np.float32).astype(np.float64)  # the probe's input, exactly
    truth = []
    for g in golds:
        ng = np.setdiff1d(np.arange(n_docs), g)
        A = np.vstack([np.hstack([-D[g], np.ones((len(g), 1))]), np.hstack([D[ng], -np.ones((len(ng), 1))])])
        b = np.concatenate([-np.ones(len(g)), np.zeros(len(ng))])
        norm = np.abs(A).max(axis=1)
        res = linprog(
            np.zeros(dim + 1), A_ub=A / norm[:, None], b_ub=b / norm, bounds=[(None, None)] * (dim + 1), method="highs"
        )
        truth.append({0: True, 2: False}.get(res.status))
    res = probe(D.astype(np.float32), golds, threads=1)
    for g, t, r in zip(golds, truth, res):
        assert t is not None
        assert (r.outcome, r.certified) == (("certified", True) if t else ("geometry", False)), (g, r.outcome)
        if r.certified:
            s = D @ r.w
            assert s[g].min() > np.delete(s, g).max()
    assert 0 < sum(truth) < len(truth)  # both kinds among the 8 queries


@pytest.mark.parametrize("size", [1e300, 3e38])
def test_a_probe_vector_beyond_float32_is_an_error_naming_the_file(tmp_path, monkeypatch, size):
    """Under l2, a probe vector (w, c) with c < 0 is scored by w alone in float32. A w beyond
    float32 (1e300: the cast overflows; 3e38: finite, its scores overflow) is one error naming the
    documents' file and the query, never numpy's RuntimeWarning. Vectors whose largest norm lies
    in [0.5, 1) are scored as given; others times the power of two that brings it there."""
    import warnings

    from click.testing import CliRunner

    from capgap.cli import main
    from capgap.diagnosis import verdicts

    real = verdicts.probe

    def huge_w(*args, **kwargs):
        results = real(*args, **kwargs)
        results[1].w = np.r_[np.full(len(results[1].w) - 1, size), -1.0]  # q1's: no L2 query, w beyond float32
        return results

    monkeypatch.setattr(verdicts, "probe", huge_w)
    D0, Q0 = _base()
    m = max(np.linalg.norm(D0, axis=1).max(), np.linalg.norm(Q0, axis=1).max())
    e = int(np.floor(np.log2(m))) + 1  # 2^(e-1) <= m < 2^e
    D, Q = D0 / np.float32(2.0**e), Q0 / np.float32(2.0**e)  # largest norm in [0.5, 1): scored as given
    np.save(tmp_path / "docs.npy", D)
    np.save(tmp_path / "queries.npy", Q)
    (tmp_path / "doc_ids.txt").write_text("\n".join(DOCS) + "\n")
    (tmp_path / "query_ids.txt").write_text("\n".join(QIDS) + "\n")
    (tmp_path / "qrels.tsv").write_text("".join(f"{q}\t{d}\t1\n" for q, r in QRELS.items() for d in r))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's overflow warning would fail the command
        r = CliRunner().invoke(
            main,
            [
                "diagnose",
                "--doc-embeddings",
                str(tmp_path / "docs.npy"),
                "--query-embeddings",
                str(tmp_path / "queries.npy"),
                "--qrels",
                str(tmp_path / "qrels.tsv"),
                "--doc-ids",
                str(tmp_path / "doc_ids.txt"),
                "--query-ids",
                str(tmp_path / "query_ids.txt"),
                "--metric",
                "l2",
                "--k",
                "2",
                "--out",
                str(tmp_path / "out"),
            ],
        )
        assert r.exit_code == 1 and r.output == (
            f"Error: {tmp_path / 'docs.npy'}: scores overflow float32 under the probe's vector for query 'q1' (metric l2: "
            f"its w alone): rescale the vectors of {tmp_path / 'docs.npy'} and {tmp_path / 'queries.npy'}, or drop the "
            "rows whose norms lie far from the others'\n"
        )
        with pytest.raises(ValueError) as err:  # the base vectors: scored times 2^-e
            diagnose(D0, Q0, QRELS, DOCS, QIDS, k=2, metric="l2", paths={"documents": "d.npy", "queries": "q.npy"})
    assert str(err.value) == (
        f"d.npy: scores overflow float32 under the probe's vector for query 'q1' (metric l2: its w "
        f"alone), the vectors scored times 2^{-e}: rescale the vectors of d.npy and q.npy, or drop "
        "the rows whose norms lie far from the others'"
    )
