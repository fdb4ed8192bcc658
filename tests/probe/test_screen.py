"""The probe at scale: the seeded structured index of ``capgap.synthetic`` and screening
(``capgap.probe.screen``), which solves each query on its candidate documents and checks the
answer against the whole index. The reference is the whole-index probe itself, on the same
index (screening forced on a 20k-document index by lowering ``SCREEN_MIN_DOCS``)."""

import numpy as np
import pytest

from capgap import synthetic
from capgap.probe import constants as const
from capgap.probe import probe
from capgap.synthetic import query_set, structured_index


def test_the_generator_is_seeded_and_blockwise(tmp_path, monkeypatch):
    """Same arguments, same bytes: in memory and as a .npy memory map, over several blocks."""
    monkeypatch.setattr(synthetic, "BLOCK", 700)
    a, la = structured_index(3000, 32, seed=5)
    b, lb = structured_index(3000, 32, seed=5, path=tmp_path / "d.npy")
    assert isinstance(b, np.memmap) and not (tmp_path / "d.npy.tmp").exists()
    assert a.dtype == np.float32 and a.shape == (3000, 32)
    assert a.tobytes() == np.asarray(b).tobytes() and np.array_equal(la, lb)
    assert np.allclose(np.linalg.norm(a.astype(np.float64), axis=1), 1.0, atol=1e-6)
    c, _ = structured_index(3000, 32, seed=6)
    assert a.tobytes() != c.tobytes()
    # exact duplicates at about dup_rate / 10: bit-identical rows exist, and rows differ otherwise
    rows = {r.tobytes() for r in a}
    assert 3000 - len(rows) >= 1
    # anisotropy: the mean pairwise cosine is that of a cone (about 0.1), not of random directions (about 0)
    cos = (a @ a.T)[np.triu_indices(3000, 1)]
    assert 0.03 < float(cos.mean()) < 0.3


@pytest.mark.parametrize(
    "kind, sizes, n_queries", [("bright", (2, 8), 100), ("trec-covid", (300, 500), 50), ("quora", (1, 2), 10_000)]
)
def test_query_sets_have_their_shapes(kind, sizes, n_queries):
    _, labels = structured_index(100_000 if kind == "trec-covid" else 20_000, 8, seed=1, rank=0)
    golds, excl = query_set(kind, labels, seed=2)
    assert len(golds) == n_queries
    assert all(sizes[0] <= len(g) <= sizes[1] for g in golds), (min(map(len, golds)), max(map(len, golds)))
    assert all(len(np.intersect1d(g, e)) == 0 and np.all(np.diff(g) > 0) for g, e in zip(golds, excl))
    if kind == "bright":
        assert {len(e) for e in excl} <= set(range(6)) and any(len(e) for e in excl)
        assert all(len(set(labels[g])) in (1, 2, 3) for g in golds)
    again, _ = query_set(kind, labels, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(golds, again))
    with pytest.raises(ValueError, match="kind must be one of"):
        query_set("msmarco", labels)


@pytest.fixture(scope="module")
def index():
    """20k x 64 structured documents (two topics' worth of near-duplicates, exact copies), with
    a bit-identical copy of document 6 at row 5."""
    D, labels = structured_index(20_000, 64, seed=3, cluster_size=100)
    D = np.array(D)
    D[5] = D[6]
    golds, excl = query_set("bright", labels, seed=4, n_queries=24)
    spread, _ = query_set("trec-covid", labels, seed=4, n_queries=2)  # ~500 gold over the index: inseparable
    golds += [g[:120] for g in spread] + [np.array([6]), np.array([6, 7])]
    excl += [np.zeros(0, dtype=np.int64)] * 4
    return D, golds, excl


def _screened(monkeypatch, candidates):
    monkeypatch.setattr(const, "SCREEN_MIN_DOCS", 1000)
    monkeypatch.setattr(const, "SCREEN_CANDIDATES", candidates)


@pytest.mark.parametrize("candidates", [256, 2048])
def test_screening_decides_every_query_as_the_whole_index_probe_does(index, monkeypatch, candidates, tmp_path):
    """Certificate mode (the default): each query's outcome and certificate are the whole-index
    probe's, and so is its recall at every k (R-precision where a gold document has an identical
    copy: which of the two ranks first depends on the separating w); with 256 candidates the
    hard queries need several rounds, and the inseparable ones go to the whole-index probe.
    The index as a memory map gives the same results as in memory."""
    D, golds, excl = index
    whole = probe(D, golds, excluded_sets=excl, threads=2, depth=10)
    _screened(monkeypatch, candidates)
    scr = probe(D, golds, excluded_sets=excl, threads=2, depth=10)
    assert {r.outcome for r in whole} >= {"certified", "duplicate", "geometry"}
    for q, (a, b) in enumerate(zip(whole, scr)):
        assert "screen" in b.extra and "screen" not in a.extra
        assert (a.outcome, a.certified, a.cause) == (b.outcome, b.certified, b.cause), q
        if a.outcome == "duplicate":  # separated up to identical copies: the same R-precision (the order among copies
            assert a.recall_at(len(golds[q])) == b.recall_at(len(golds[q])), q  # may differ: another separating w)
        else:
            assert np.array_equal(np.sort(a.gold_ranks), np.sort(b.gold_ranks)), q  # the same recall at every k
        if a.certified:  # the gold documents first; below them the same ranking is not required (another w)
            assert set(b.top_rows[: len(golds[q])]) == set(golds[q].tolist())
    if candidates == 256:
        assert max(r.extra["screen"]["rounds"] for r in scr) > 1
    np.save(tmp_path / "D.npy", D)
    mm = probe(np.load(tmp_path / "D.npy", mmap_mode="r"), golds, excluded_sets=excl, threads=1, depth=10)
    for a, b in zip(scr, mm):
        assert (a.outcome, a.iterations) == (b.outcome, b.iterations)
        assert np.array_equal(a.gold_ranks, b.gold_ranks) and np.array_equal(a.top_rows, b.top_rows)
        assert np.array_equal(a.w, b.w)


def test_screening_in_optimum_mode_reports_the_whole_problem(index, monkeypatch):
    """solve="optimum": every query's certificate and outcome are the whole-index probe's, and
    where a result is marked exact and w is the SVM point (certified: no witness replaced it),
    its slack is the pair-averaged hinge over the whole index's pairs at w, computed here
    directly, and its objective 1/2 |w|^2 + C_final slack (the candidates' problem in the whole
    problem's units)."""
    D, golds, excl = index
    whole = probe(D, golds[:12], excluded_sets=excl[:12], threads=2, solve="optimum")
    _screened(monkeypatch, 512)
    scr = probe(D, golds[:12], excluded_sets=excl[:12], threads=2, solve="optimum")
    checked = 0
    for q, (a, b) in enumerate(zip(whole, scr)):
        assert a.certified == b.certified and a.outcome == b.outcome, q
        if b.extra["screen"]["exact"] and b.certified and b.decided_by == "certificate":
            s = D.astype(np.float64) @ b.w
            gold = golds[q]
            ng = np.ones(len(D), dtype=bool)
            ng[gold] = False
            ng[excl[q]] = False
            hinge = np.maximum(0.0, 1.0 - s[gold][:, None] + s[ng][None, :]).sum() / (len(gold) * ng.sum())
            assert b.slack == pytest.approx(hinge, rel=1e-6, abs=1e-12), q
            assert b.objective == pytest.approx(0.5 * float(b.w @ b.w) + b.extra["C_final"] * hinge, rel=1e-6), q
            checked += 1
    assert checked >= 3  # (the others: a proof's witness replaced the SVM point, or not exact)
