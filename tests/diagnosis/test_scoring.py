"""capgap diagnose giving right numbers and verdicts: scores beyond float32's range, ANN runs
written with distances, verdicts under L2 (hand-built 1-D and 2-D geometries, derived by hand),
and the default pairing of embedding rows with ids."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from capgap.cli import main
from capgap.diagnosis import diagnose, load_run_file
from capgap.diagnosis.geometry import _l2_witness, copies_cost, index_limit_proof
from capgap.errors import DataFormatError
from capgap.probe import probe
from capgap.retrieval import dense_scores, duplicate_groups


def _cli(out, docs, queries, qrels, *extra):
    args = [
        "diagnose",
        "--doc-embeddings",
        str(docs),
        "--query-embeddings",
        str(queries),
        "--qrels",
        str(qrels),
        "--out",
        str(out),
        *map(str, extra),
    ]
    return CliRunner().invoke(main, args)


def _capped_recall64(D, Q, golds, k):
    """Capped recall@k per query in float64, pessimistic ties (a non-gold document tied with a
    gold one ranks first), written out loop by loop: the reference."""
    out = []
    for q, gold in zip(Q.astype(np.float64), golds):
        s = D.astype(np.float64) @ q
        found = sum(np.sum(s > s[g]) + np.sum((s == s[g]) & ~np.isin(np.arange(len(s)), gold)) < k for g in gold)
        out.append(found / min(k, len(gold)))
    return out


def _case(tmp_path, scale):
    """6 documents and 4 queries in 8 dimensions (seeded), times ``scale``, written as .npy with
    ids and BEIR qrels; returns the paths and the float32 arrays as written."""
    rng = np.random.default_rng(7)
    D = (rng.standard_normal((6, 8)) * scale).astype(np.float32)
    Q = (rng.standard_normal((4, 8)) * scale).astype(np.float32)
    assert np.isfinite(D).all() and np.isfinite(Q).all()
    np.save(tmp_path / "docs.npy", D)
    np.save(tmp_path / "queries.npy", Q)
    (tmp_path / "doc_ids.txt").write_text("".join(f"d{i}\n" for i in range(6)))
    (tmp_path / "query_ids.txt").write_text("".join(f"q{i}\n" for i in range(4)))
    golds = [[0, 3], [1], [2, 5], [4]]
    (tmp_path / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{g}\t1\n" for i, gs in enumerate(golds) for g in gs)
    )
    return D, Q, golds


@pytest.mark.parametrize("scale", [1e20, 1e-25])
def test_scores_beyond_float32_rank_as_in_float64(tmp_path, scale):
    """Finite float32 vectors whose inner products overflow float32 (x 1e20: |q.d| ~ 1e40) or
    underflow it (x 1e-25: ~1e-50): the encoder's recall is the float64 reference's, and the
    probe certifies every query (6 affinely independent documents in 8 dimensions: every gold
    set is separable)."""
    D, Q, golds = _case(tmp_path, scale)
    with np.errstate(over="ignore", under="ignore"):
        s32 = Q @ D.T
    assert (not np.isfinite(s32).all()) if scale > 1 else (np.abs(s32) < 1e-38).all()  # float32 alone loses the ranking
    r = _cli(
        tmp_path / "out",
        tmp_path / "docs.npy",
        tmp_path / "queries.npy",
        tmp_path / "qrels.tsv",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--query-ids",
        tmp_path / "query_ids.txt",
        "--k",
        2,
    )
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    expect = _capped_recall64(D, Q, golds, 2)
    rows = (tmp_path / "out" / "per_query.tsv").read_text().splitlines()
    col = rows[0].split("\t").index("encoder_recall@2")
    assert [float(x.split("\t")[col]) for x in rows[1:]] == expect
    assert s["encoder_recall@2"] == pytest.approx(np.mean(expect))
    assert s["probe_recall@2"] == 1.0 and s["certified"] == 1.0
    assert s["verdicts"]["index-limited"] == s["verdicts"]["undetermined"] == 0
    sd, sq = s["score_scale"]["documents"], s["score_scale"]["queries"]
    assert np.log2(sd).is_integer() and np.log2(sq).is_integer() and sd != 1.0  # exact powers of two
    assert any("changes no ranking" in n for n in s["notes"])


def test_dense_scores_refuse_overflowing_scores():
    big = np.full((1, 4), 1e20, dtype=np.float32)
    with pytest.raises(ValueError, match=r"scores overflow float32 \(max \|score\| inf\): rescale the vectors"):
        dense_scores(big, big)(0, 1)


@pytest.mark.parametrize("scale", [1e16, 1e-12])
def test_probe_is_not_fooled_by_the_scale_of_the_index(scale):
    """A positive scale changes no ranking: on 6 affinely independent documents in 8 dimensions
    every gold set is separable, at any scale, and the returned w ranks the caller's own index
    (float64 scores) with every gold document first."""
    D = (np.random.default_rng(3).standard_normal((6, 8)) * scale).astype(np.float32)
    golds = [[0, 3], [1], [2, 5], [4]]
    for res, gold in zip(probe(D, golds), golds):
        assert res.certified and res.outcome == "certified" and res.extra["scale"] != 1.0
        s = D.astype(np.float64) @ res.w
        assert s[gold].min() > np.delete(s, gold).max()


def _l2_run(tmp_path, D, Q, ids, qids, depth=5):
    """The exact L2 top-``depth`` of each query (numpy, float64), as a faiss L2 search writes it:
    rank 1..depth, score = squared distance (ascending)."""
    lines = []
    for qid, q in zip(qids, Q.astype(np.float64)):
        dist = ((D.astype(np.float64) - q) ** 2).sum(1)
        for r, j in enumerate(np.argsort(dist, kind="stable")[:depth]):
            lines.append(f"{qid} Q0 {ids[j]} {r + 1} {dist[j]:.6f} faiss-l2\n")
    return lines


def test_ann_run_written_with_l2_distances_is_taken_in_rank_order(tmp_path):
    """A run that IS exact L2 search, written with distances: its ANN recall is the encoder's
    exact recall and it returns all of the exact top 2 (ann_vs_exact 1.0)."""
    D, Q, golds = _case(tmp_path, 1.0)
    ids, qids = [f"d{i}" for i in range(6)], [f"q{i}" for i in range(4)]
    run = tmp_path / "ann.trec"
    run.write_text("".join(_l2_run(tmp_path, D, Q, ids, qids)))
    r = _cli(
        tmp_path / "out",
        tmp_path / "docs.npy",
        tmp_path / "queries.npy",
        tmp_path / "qrels.tsv",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--query-ids",
        tmp_path / "query_ids.txt",
        "--k",
        2,
        "--metric",
        "l2",
        "--ann-run",
        run,
    )
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["ann_vs_exact@2"] == 1.0 and s["ann_recall@2"] == s["encoder_recall@2"]
    assert s["verdicts"]["ann-limited"] == 0
    assert any("the scores ascend as the ranks ascend" in n and "taken in rank order" in n for n in s["notes"])
    # the loader: rank order, and the note
    got = load_run_file(run)
    assert got["q0"][:2] == [ln.split()[2] for ln in _l2_run(tmp_path, D, Q, ids, qids)[:2]] and len(got.notes) == 1
    # ranks all 0 (no order) and scores negated: ordered by score, no note
    neg = tmp_path / "neg.trec"
    neg.write_text(
        "".join(f"{a} {b} {c} 0 {-float(e)} {f}\n" for a, b, c, _, e, f in map(str.split, run.read_text().splitlines()))
    )
    assert dict(load_run_file(neg)) == dict(got) and load_run_file(neg).notes == []


def _capped_recall_l2(D, Q, golds, k):
    """Capped recall@k per query under L2 (nearest first), float64, pessimistic ties: the reference."""
    out = []
    for q, gold in zip(Q.astype(np.float64), golds):
        dist = ((D.astype(np.float64) - q) ** 2).sum(1)
        found = sum(
            np.sum(dist < dist[g]) + np.sum((dist == dist[g]) & ~np.isin(np.arange(len(dist)), gold)) < k for g in gold
        )
        out.append(found / min(k, len(gold)))
    return out


@pytest.mark.parametrize("form", ["3col-tab", "3col-space", "rank0"])
def test_ann_run_of_l2_distances_without_ranks_is_read_by_the_vectors(tmp_path, form):
    """The exact L2 top 5 written with squared distances and no usable rank column: the vectors
    show the scores rise with distance, so the run is read lowest first: it returns the whole
    exact top 2 and its recall is the exact L2 recall, with a note."""
    D, Q, golds = _case(tmp_path, 1.0)
    ids, qids = [f"d{i}" for i in range(6)], [f"q{i}" for i in range(4)]
    cols = [ln.split() for ln in _l2_run(tmp_path, D, Q, ids, qids)]
    fmt = {"3col-tab": "{0}\t{2}\t{4}\n", "3col-space": "{0} {2} {4}\n", "rank0": "{0} Q0 {2} 0 {4} faiss\n"}[form]
    run = tmp_path / "ann.run"
    run.write_text("".join(fmt.format(*c) for c in reversed(cols)))  # file order farthest first: only the scores tell
    r = _cli(
        tmp_path / "out",
        tmp_path / "docs.npy",
        tmp_path / "queries.npy",
        tmp_path / "qrels.tsv",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--query-ids",
        tmp_path / "query_ids.txt",
        "--k",
        2,
        "--metric",
        "l2",
        "--ann-run",
        run,
    )
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["ann_vs_exact@2"] == 1.0 and s["verdicts"]["ann-limited"] == 0
    assert s["ann_recall@2"] == pytest.approx(np.mean(_capped_recall_l2(D, Q, golds, 2)))
    assert any(
        n.startswith(
            f"{run}: no rank column gives the order, and on 4 of the 4 queries whose scores differ the scores "
            "rise with the distance between the query and document vectors"
        )
        and n.endswith("distances, not similarities; the documents are taken lowest score first")
        for n in s["notes"]
    )


def test_orient_run_tells_distances_from_similarities(tmp_path):
    """Three documents in 2-d with different norms and one query (1, 0): squared distances 0, 4,
    5 and inner products 1, 3, 0 (by hand). Under --metric l2 the similarity is minus the squared
    distance: scores rank-correlated with it are similarities (the inner products too: Spearman
    0.5), against it distances."""
    from capgap.diagnosis.runs import orient_run

    D, Q = np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]]), np.array([[1.0, 0.0]])
    ids = ["a", "b", "c"]

    def run_of(scores):
        p = tmp_path / "r.tsv"
        p.write_text("".join(f"q\t{d}\t{v}\n" for d, v in zip(ids, scores)))
        return p, load_run_file(p)

    p, got = run_of([0, 4, 5])  # squared distances: nearest first
    out = orient_run(got, p, D, Q, ids, ["q"], "l2")
    assert out["q"] == ["a", "b", "c"] and got["q"] == ["c", "b", "a"] and len(out.notes) == 1
    p, got = run_of([1, 3, 0])  # inner products: highest first, as loaded, no note
    assert orient_run(got, p, D, Q, ids, ["q"], "l2") is got and got["q"] == ["b", "a", "c"]
    p, got = run_of([-0.0, -4, -5])  # negated distances: highest first
    assert orient_run(got, p, D, Q, ids, ["q"], "l2") is got
    # approximate distances (one pair inverted: a compressed index's) still read as distances
    p, got = run_of([0, 5, 4.9])
    assert orient_run(got, p, D, Q, ids, ["q"], "l2")["q"] == ["a", "c", "b"]
    # an ip run with approximate scores (a and c inverted) is still read highest first, as loaded
    p, got = run_of([0.9, 3, 1.0])
    assert orient_run(got, p, D, Q, ids, ["q"], "ip") is got
    # one query's scores are distances, another's similarities (half each): refused
    p = tmp_path / "mixed.tsv"
    p.write_text("q\ta\t0\nq\tb\t4\nq\tc\t5\nr\ta\t0\nr\tb\t-4\nr\tc\t-5\n")
    with pytest.raises(DataFormatError) as e:
        orient_run(load_run_file(p), p, D, np.vstack([Q, Q]), ids, ["q", "r"], "l2")
    assert str(e.value) == (
        f"{p}:4: field 'score': the scores fall as the query and document vectors' similarity "
        "(--metric l2) rises on 1 queries (e.g. 'q': distances) and rise with it on 1 (e.g. 'r': "
        "similarities), and no rank column gives the order: capgap cannot tell similarities (highest "
        "first) from distances (lowest first); write a rank column 1..n (TREC: qid Q0 docid rank "
        "score tag)"
    )
    # a rank column 1..n that agrees with the scores gives the order: the scores are not checked
    p.write_text("".join(f"q Q0 {d} {r} {v} x\n" for r, (d, v) in enumerate(zip(["a", "c", "b"], [5, 4, 0]), 1)))
    got = load_run_file(p)
    assert got.scored is None and orient_run(got, p, D, Q, ids, ["q"], "l2")["q"] == ["a", "c", "b"]


def test_rank_note_example_shows_two_ranks(tmp_path):
    """Ranks 1, 1, 3 with ascending scores: the note's example pairs two different ranks."""
    run = tmp_path / "ties.trec"
    run.write_text("q Q0 a 1 7.5 x\nq Q0 b 1 9.25 x\nq Q0 c 3 11.5 x\n")
    got = load_run_file(run)
    assert got["q"] == ["a", "b", "c"]
    assert "(e.g. 'q': rank 1 score 9.25 (line 2), rank 3 score 11.5 (line 3))" in got.notes[0]


def test_ann_run_half_distances_half_similarities_is_an_error(tmp_path):
    run = tmp_path / "mixed.trec"
    run.write_text("qa Q0 d0 1 0.5 x\nqa Q0 d1 2 0.9 x\nqb Q0 d0 1 0.9 x\nqb Q0 d1 2 0.5 x\n")
    with pytest.raises(DataFormatError) as e:
        load_run_file(run)
    msg = str(e.value)
    assert "mixed.trec" in msg and "line 1" in msg and "rank" in msg
    assert (
        "the scores ascend as the ranks ascend on 1 queries (e.g. 'qa': rank 1 score 0.5 (line 1), rank 2 score 0.9"
        in msg
    )
    assert "not on 1 (1 descend" in msg and "negate distances" in msg


# 2-D: four corners of a diamond and its centre, the centre gold. Under inner product the
# centre scores 0 for every w, and w.(1, 0) = -w.(-1, 0), w.(0, 1) = -w.(0, -1), so at least
# two corners score >= 0: the centre's pessimistic rank is >= 3 for every w (not top 1, not top
# 2). Under L2 the query point (0, 0) puts it first (distance 0 against 1).
DIAMOND = np.array([[1, 0], [-1, 0], [0, 1], [0, -1], [0, 0]], dtype=np.float32)
DIAMOND_IDS = ["e", "w", "n", "s", "c"]


def test_centre_of_the_hull_under_ip_and_l2():
    def one(q, k, metric):
        return diagnose(
            DIAMOND, np.array([q], dtype=np.float32), {"q": {"c": 1}}, DIAMOND_IDS, ["q"], k=k, metric=metric
        ).rows[0]

    row = one([0.1, 0.1], 1, "ip")
    assert row["verdict"] == "index-limited" and row["proof"] == "inseparable" and not row["certified"]
    # k = 2: truly unservable (rank >= 3), but inseparability proves nothing when k > |gold|
    row = one([0.1, 0.1], 2, "ip")
    assert row["verdict"] == "undetermined" and row["proof"] is None
    for k in (1, 2):
        row = one([1, 1], k, "l2")  # the encoder's query: e and n at distance 1, c at sqrt(2)
        assert row["certified"] and row["probe_l2_query"] and row[f"probe_recall@{k}"] == 1.0
        assert row["verdict"] == "encoder-limited" and row[f"encoder_recall@{k}"] == 0.0
    assert one([0.05, 0], 1, "l2")["verdict"] == "ok"


def test_l2_neighbours_on_a_line():
    """1-D documents at -1, 0, 3. Under L2 a query point's top 2 are neighbours on the line:
    {0, 3} is served by q = 2 (distances 3, 2, 1), {-1, 3} by no point (0 lies between them,
    nearer than the farther of the two to every q), so it is index-limited at k = 2."""
    L = np.array([[-1.0], [0.0], [3.0]], dtype=np.float32)
    ids = ["a", "b", "c"]
    row = diagnose(L, np.array([[-1.0]], dtype=np.float32), {"q": {"b": 1, "c": 1}}, ids, ["q"], k=2, metric="l2").rows[
        0
    ]
    # certified by an L2 query point, or by w alone (c = 0: the points t w, t large, rank the same)
    assert row["certified"] and row["probe_recall@2"] == 1.0 and row["verdict"] == "encoder-limited"
    row = diagnose(L, np.array([[1.0]], dtype=np.float32), {"q": {"a": 1, "c": 1}}, ids, ["q"], k=2, metric="l2").rows[
        0
    ]
    assert (
        row["verdict"] == "index-limited" and row["proof"] in ("inseparable", "l2-inseparable") and not row["certified"]
    )


def test_every_gold_set_of_affinely_independent_documents_is_l2_servable():
    """n <= dim + 1 affinely independent documents: for any targets v_i there are q, t with
    q.d_i - t = (v_i + |d_i|^2) / 2, so a query point gives the L2 scores 2 q.d - |d|^2 any
    order: every gold set is certified under L2, whatever sign the probe's own c takes."""
    sets = [[0], [5], [0, 3], [2, 5], [1, 2, 4], [0, 1, 3, 5]]
    qrels = {f"q{i}": {f"d{j}": 1 for j in g} for i, g in enumerate(sets)}
    for seed in (0, 11):
        rng = np.random.default_rng(seed)
        D = rng.standard_normal((6, 8)).astype(np.float32)
        Q = rng.standard_normal((len(sets), 8)).astype(np.float32)
        diag = diagnose(D, Q, qrels, [f"d{i}" for i in range(6)], list(qrels), k=4, metric="l2")
        for r in diag.rows:
            assert (
                r["certified"] and r["probe_recall@4"] == 1.0 and r["verdict"] not in ("index-limited", "undetermined")
            )
        if seed == 0:  # here the probe's (w, c) for one gold set has c <= 0 and w alone does not serve it: the LP does
            assert diag.summary["probe_l2_lp"] == 1


def test_l2_witness_at_the_limit_becomes_a_query_point():
    """(w, c) = (1, 0) on 1-D documents 0, 1, 2 ranks 2 first (the limit of q -> +inf); the
    witness is moved to c > 0, and its point w / c has document 2 nearest (numpy distances)."""
    L = np.array([[0.0], [1.0], [2.0]])
    X = np.hstack([L, -0.5 * L**2]).astype(np.float32)
    w = _l2_witness(X, np.array([2]), np.array([1.0, 0.0]), duplicate_groups(X))
    assert w is not None and w[-1] > 0
    assert np.argmin(np.abs(L[:, 0] - w[0] / w[1])) == 2


def test_copies_and_proofs_by_hand():
    """Rows 0 and 1 identical (0 gold, 1 not), 2 and 3 identical (both gold), 4 alone (gold)."""
    groups = [np.array([0, 1]), np.array([2, 3])]
    # the cheapest 2 gold documents: 2 and 3 (no non-gold copy), cost 2; 3 gold: + row 4, cost 3;
    # all 4: + row 0 and its copy, cost 5
    assert [copies_cost(np.array([0, 2, 3, 4]), groups, 5, n) for n in (2, 3, 4)] == [2, 3, 5]
    # gold {0} at k = 1: its copy ranks above it under every query
    assert index_limit_proof(1, np.array([0]), 1, groups, 5, False, False) == "copies"
    assert index_limit_proof(1, np.array([0]), 2, groups, 5, False, False) is None
    # a gold document set apart (no row) cannot be found
    assert index_limit_proof(2, np.array([4]), 2, groups, 5, False, False) == "missing"
    # inseparability proves the verdict only when the whole gold set must fill the top k
    assert index_limit_proof(2, np.array([2, 3]), 2, groups, 5, True, False) == "inseparable"
    assert index_limit_proof(2, np.array([2, 3]), 3, groups, 5, True, False) is None
    assert index_limit_proof(2, np.array([2, 3]), 2, groups, 5, False, True) == "l2-inseparable"
    # gold {2, 4}: row 3, 2's copy, is non-gold here: 2 gold cost 3 places
    assert index_limit_proof(2, np.array([2, 4]), 2, groups, 5, True, False) == "copies"


def test_default_query_ids_are_printed_recorded_and_refused_on_a_contradiction(tmp_path, caplog):
    _case(tmp_path, 1.0)
    r = _cli(
        tmp_path / "out",
        tmp_path / "docs.npy",
        tmp_path / "queries.npy",
        tmp_path / "qrels.tsv",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--k",
        2,
    )
    assert r.exit_code == 0, r.output
    said = [m for m in caplog.messages if m.startswith("no query ids given: query row i is the i-th query id of")]
    assert len(said) == 1 and said[0].endswith("in order of first appearance (row 0 = 'q0', row 1 = 'q1')")
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["id_defaults"]["queries"]["first"] == ["q0", "q1", "q2"] and "documents" not in s["id_defaults"]
    # qrels judging 3 queries for 4 query rows: the order cannot pair them
    lines = (tmp_path / "qrels.tsv").read_text().splitlines()
    (tmp_path / "qrels3.tsv").write_text("\n".join(ln for ln in lines if not ln.startswith("q3")) + "\n")
    r = _cli(
        tmp_path / "out2",
        tmp_path / "docs.npy",
        tmp_path / "queries.npy",
        tmp_path / "qrels3.tsv",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--k",
        2,
    )
    assert r.exit_code != 0 and not (tmp_path / "out2").exists()
    assert "queries.npy has 4 rows and" in r.output and "qrels3.tsv judges 3 queries" in r.output
    assert "give --query-ids" in r.output
    # documents named by row number by default: recorded; qrels naming other ids are refused, saying so
    (tmp_path / "qrels_rows.tsv").write_text("".join(f"q{i}\t{g}\t1\n" for i, g in enumerate([0, 1, 2, 4])))
    r = _cli(
        tmp_path / "out3",
        tmp_path / "docs.npy",
        tmp_path / "queries.npy",
        tmp_path / "qrels_rows.tsv",
        "--query-ids",
        tmp_path / "query_ids.txt",
        "--k",
        2,
    )
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "out3" / "summary.json").read_text())
    assert (
        s["id_defaults"]["documents"]["first"] == ["0", "1", "2"]
        and "row number" in s["id_defaults"]["documents"]["rule"]
    )
    r = _cli(
        tmp_path / "out4",
        tmp_path / "docs.npy",
        tmp_path / "queries.npy",
        tmp_path / "qrels.tsv",
        "--query-ids",
        tmp_path / "query_ids.txt",
        "--k",
        2,
    )
    assert r.exit_code != 0 and "no document ids given: document row i is document id 'i'" in r.output


def test_default_query_ids_that_look_like_row_numbers_in_another_order_are_refused(tmp_path):
    """Qrels judging the queries '2', '0', '3', '1' (first appearance) for 4 query rows and no
    --query-ids: the qrels-order default would pair row 0 with query '2', so it is refused,
    naming the qrels file; the same ids in row order ('0' .. '3') keep the default, row i = 'i'."""
    _case(tmp_path, 1.0)
    order = [2, 0, 3, 1]
    golds = [[0, 3], [1], [2, 5], [4]]  # _case's, per query row
    (tmp_path / "qrels_rows.tsv").write_text("".join(f"{i}\td{g}\t1\n" for i in order for g in golds[i]))
    r = _cli(
        tmp_path / "out",
        tmp_path / "docs.npy",
        tmp_path / "queries.npy",
        tmp_path / "qrels_rows.tsv",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--k",
        2,
    )
    q = tmp_path / "qrels_rows.tsv"
    assert r.exit_code == 1 and r.output == (
        f"Error: --query-ids not given, so query row i would be the i-th query id of {q} (in order of first appearance), "
        "but its query ids are the row numbers 0..3 in another order (first ['2', '0', '3']): they look like row numbers, "
        "and row 0 would be query '2'; give --query-ids (one id per query row)\n"
    )
    assert not (tmp_path / "out").exists()
    (tmp_path / "qrels_in_order.tsv").write_text("".join(f"{i}\td{g}\t1\n" for i in range(4) for g in golds[i]))
    r = _cli(
        tmp_path / "ok",
        tmp_path / "docs.npy",
        tmp_path / "queries.npy",
        tmp_path / "qrels_in_order.tsv",
        "--doc-ids",
        tmp_path / "doc_ids.txt",
        "--k",
        2,
    )
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "ok" / "summary.json").read_text())
    assert s["id_defaults"]["queries"]["first"] == ["0", "1", "2"]
