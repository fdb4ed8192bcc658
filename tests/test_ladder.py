"""The learnability ladder's shared rungs (issue 29, rungs 2-4; capgap.ladder), on hand-made
indexes whose answers follow from the construction, not from the code under test.

Every index here is the cross-polytope {±e_1, ..., ±e_4} (unit documents): a query vector equal
to document d scores 1 on d and at most 0 on every other one, so w = d ranks d alone first and
the oracle's recall@1 is 1 for any one-document gold set (by hand)."""

import time

import numpy as np
import pytest

from capgap.data import Corpus, Qrels, Queries, RetrievalSet, Split
from capgap.errors import DataFormatError
from capgap.evaluate import evaluate_queries
from capgap.io import save_npz
from capgap.ladder import (LadderConfig, apply_head, evaluate_ladder, fit_head, load_query_embeddings, load_witnesses, make_head, method_names,
                           nearest_train, transfer_vectors)

DOCS = np.concatenate([np.eye(4), -np.eye(4)]).astype(np.float32)  # rows: +e1..+e4, -e1..-e4
DOC_IDS = ("p1", "p2", "p3", "p4", "m1", "m2", "m3", "m4")
# an invertible, far from orthogonal map (det = 7, by cofactor expansion along the first row)
M = np.array([[2.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, 3.0]])
FAST = LadderConfig(steps=300, batch_size=8, lr=0.02)


def _set(gold: list[str], train: int) -> RetrievalSet:
    """Queries q0..q{n-1}, query i's only gold document ``gold[i]``; the first ``train`` train."""
    qids = tuple(f"q{i}" for i in range(len(gold)))
    corpus = Corpus(DOC_IDS, ("",) * 8, tuple(f"document {d}" for d in DOC_IDS))
    return RetrievalSet("toy", corpus, Queries(qids, tuple(f"query {q}" for q in qids)),
                        Qrels({q: {g: 1} for q, g in zip(qids, gold)}), Split(qids[:train], qids[train:]))


def _value(rows, method, split, metric, k):
    (v,) = [r["value"] for r in rows if (r["method"], r["split"], r["metric"], r["k"]) == (method, split, metric, k)]
    return v


def test_a_shared_linear_map_that_exists_is_found_on_the_fit_all_rung():
    """Query embeddings x_i = M w_i with w_i = the gold document (the oracle, recall@1 = 1 by
    hand) and M invertible: the linear map M^-1 sends every x_i to its oracle w, so a shared
    linear head can reach the oracle exactly, and so can the ReLU head (M^-1 x = M^-1 ReLU(x) -
    M^-1 ReLU(-x)). Fit on all queries, both reach recall@1 = 1 on train and held-out, while the
    embeddings themselves (the identity head, where both start) do not."""
    gold = ["p1", "p2", "p3", "p4", "m1", "m2", "m3", "m4"]
    rs = _set(gold, train=5)
    Wo = DOCS[[DOC_IDS.index(g) for g in gold]]
    X = (Wo.astype(np.float64) @ M.T).astype(np.float32)
    pre, _ = evaluate_queries(rs, X, DOCS, DOC_IDS, [1], 10, "enc", "pretrained")
    assert _value(pre, "pretrained", "all", "recall", 1) < 1  # not trivial: x_i alone misses some
    oracle, _ = evaluate_queries(rs, Wo, DOCS, DOC_IDS, [1], 10, "enc", "probe")
    assert _value(oracle, "probe", "all", "recall", 1) == 1.0  # the construction's oracle
    rows, seconds = evaluate_ladder(rs, X, DOCS, DOC_IDS, Wo, FAST, [1, 2], 10, "enc")
    for method in ("head-linear-all", "head-mlp-all"):
        for split in ("train", "heldout", "all"):
            assert _value(rows, method, split, "recall", 1) == 1.0, (method, split)
            assert _value(rows, method, split, "rprec", "") == 1.0, (method, split)
    assert {r["method"] for r in rows} == set(method_names(FAST)) and set(seconds) >= {"head-linear-all", "nn-transfer"}
    # every rung has the metrics of every method: recall@k, nDCG@10, R-precision, capped recall per split
    assert {(r["metric"], r["k"]) for r in rows if r["method"] == "head-mlp"} == {
        ("n_queries", ""), ("recall", 1), ("recall", 2), ("ndcg", 10), ("rprec", ""), ("recall_cap", 1), ("recall_cap", 2)}


def test_two_queries_with_one_embedding_and_disjoint_gold_stay_below_the_oracle_by_the_bound():
    """q0 and q1 share one embedding and want p1 and p2 (disjoint); q2..q4 want m1, p3, p4. The
    oracle has recall@1 = 1 (w = gold document). Any shared head gives q0 and q1 one vector, whose
    first document is at most one of p1, p2 (a tie ranks the gold document second), so their
    recall@1 sums to at most 1 and the mean over 5 queries is at most 4/5: at least 1/5 below the
    oracle, on both heads. The bound is the only obstruction: the embeddings are x = M u with
    u = p1 + p2 (q0, q1), m1, p3, p4, linearly independent, so M^-1 gives q0 and q1 the vector
    p1 + p2 (p1 and p2 the top two) and the others their gold: recall@2 = 1 is reachable, and
    both heads reach it."""
    gold = ["p1", "p2", "m1", "p3", "p4"]
    rs = _set(gold, train=3)
    U = np.stack([DOCS[0] + DOCS[1], DOCS[0] + DOCS[1], DOCS[4], DOCS[2], DOCS[3]]).astype(np.float64)
    X = (U @ M.T).astype(np.float32)
    Wo = DOCS[[DOC_IDS.index(g) for g in gold]]
    oracle, _ = evaluate_queries(rs, Wo, DOCS, DOC_IDS, [1, 2], 10, "enc", "probe")
    assert _value(oracle, "probe", "all", "recall", 1) == 1.0
    rows, _ = evaluate_ladder(rs, X, DOCS, DOC_IDS, None, FAST, [1, 2], 10, "enc")
    for method in ("head-linear-all", "head-mlp-all"):
        assert _value(rows, method, "all", "recall", 1) <= 1.0 - 1 / 5 + 1e-12, method
        assert _value(rows, method, "all", "recall", 2) == 1.0, method
    assert not any(r["method"].startswith("nn-transfer") for r in rows)  # no w given: no transfer rows


# queries t0, t1, t2 (train) and h0, h1 (held-out): embeddings for similarity, oracle w = gold doc
NN_X = np.array([[1, 0, 0, 0], [0.8, 0.6, 0, 0], [0, 0, 1, 0], [0.6, 0.8, 0, 0], [0.1, 0, 0.9, 0.1]], dtype=np.float32)
NN_GOLD = ["p1", "p1", "p3", "p2", "p3"]


def test_nearest_train_query_by_hand():
    """Cosines by hand: t0-t1 0.8, t0-t2 0, t1-t2 0; h0: t0 0.6, t1 0.96, t2 0; h1 (|x| = 0.911):
    t0 0.110, t1 0.088, t2 0.988. Train queries leave themselves out; t2's tie (0 and 0) goes to
    the lower row, t0."""
    assert nearest_train(NN_X, [0, 1, 2], 1)[:, 0].tolist() == [1, 0, 0, 1, 2]
    assert nearest_train(NN_X, [0, 1, 2], 2).tolist() == [[1, 2], [0, 2], [0, 1], [1, 0], [2, 0]]
    assert nearest_train(NN_X, [2, 0, 1], 5).shape == (5, 2)  # at most the other train queries
    with pytest.raises(ValueError, match="two train queries"):
        nearest_train(NN_X, [0], 1)


def test_nn_transfer_recall_by_hand():
    """nn-transfer: t0 <- t1's w = p1 (hit), t1 <- t0's p1 (hit), t2 <- t0's p1 (wants p3: miss):
    train recall@1 = 2/3; h0 <- t1's p1 (wants p2: miss), h1 <- t2's p3 (hit): held-out 1/2.
    Top-2 on h1: the mean of p3 and p1 ties p1 with p3, which then ranks second: recall@1 0,
    recall@2 1; h0 gets p1 again, and p2 scores 0 with five other documents, so it ranks 7th:
    held-out recall@1 = 0, recall@2 = 1/2."""
    rs = _set(NN_GOLD, train=3)
    Wo = DOCS[[DOC_IDS.index(g) for g in NN_GOLD]] * np.array([[1.0], [3.0], [0.5], [1.0], [1.0]], dtype=np.float32)  # |w| varies
    rows, _ = evaluate_ladder(rs, NN_X, DOCS, DOC_IDS, Wo, LadderConfig(steps=1, top_m=2), [1, 2], 10, "enc")
    assert _value(rows, "nn-transfer", "train", "recall", 1) == pytest.approx(2 / 3)
    assert _value(rows, "nn-transfer", "heldout", "recall", 1) == 0.5
    assert _value(rows, "nn-transfer-top2", "heldout", "recall", 1) == 0.0
    assert _value(rows, "nn-transfer-top2", "heldout", "recall", 2) == 0.5
    # top-m averages unit w's: t1's w (norm 3) does not outweigh t0's
    v = transfer_vectors(Wo, np.array([[0, 1]]))
    assert np.allclose(v, DOCS[0])


def test_heads_start_as_the_identity_and_are_deterministic():
    """Before any step both heads are the identity (up to the normalisation of their output);
    the same seed gives the same head twice on CPU, another seed another mlp."""
    import torch

    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, 4)).astype(np.float32)
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    for kind in ("linear", "mlp"):
        torch.manual_seed(0)
        assert np.allclose(apply_head(make_head(kind, 4, 3), X), unit, atol=1e-6), kind
    gold = [[0], [1], [2], [3], [4], [5]]
    cfg = LadderConfig(steps=20, batch_size=4, lr=0.01, width_factor=3)
    a = apply_head(fit_head("mlp", X, DOCS, gold, None, cfg)[0], X)
    b = apply_head(fit_head("mlp", X, DOCS, gold, None, cfg)[0], X)
    c = apply_head(fit_head("mlp", X, DOCS, gold, None, LadderConfig(steps=20, batch_size=4, lr=0.01, width_factor=3, seed=1))[0], X)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    with pytest.raises(ValueError, match="without a gold row"):
        fit_head("linear", X[:2], DOCS, [[0], []], None, cfg)
    with pytest.raises(ValueError, match="width_factor"):
        LadderConfig(width_factor=1)
    with pytest.raises(ValueError, match="unknown keys"):
        LadderConfig.from_config({"enabled": True, "stepz": 3})


def test_witness_file_round_trip_and_errors(tmp_path):
    """The probe rule's w.npz read back in any query order; a missing id, a repeated id or a
    non-finite w is an error naming the file and field."""
    W = np.arange(12, dtype=np.float32).reshape(3, 4)
    save_npz(tmp_path / "w.npz", w=W, query_ids=np.array(["a", "b", "c"]))
    assert np.array_equal(load_witnesses(tmp_path / "w.npz", ["c", "a"]), W[[2, 0]])
    with pytest.raises(DataFormatError, match="query_ids.*no w") as e:
        load_witnesses(tmp_path / "w.npz", ["a", "zz"])
    assert e.value.path.endswith("w.npz") and e.value.field == "query_ids"
    save_npz(tmp_path / "dup.npz", w=W, query_ids=np.array(["a", "a", "c"]))
    with pytest.raises(DataFormatError, match="twice"):
        load_witnesses(tmp_path / "dup.npz", ["a"])
    save_npz(tmp_path / "nan.npz", w=np.full((1, 4), np.nan, dtype=np.float32), query_ids=np.array(["a"]))
    with pytest.raises(DataFormatError, match="non-finite"):
        load_witnesses(tmp_path / "nan.npz", ["a"])
    save_npz(tmp_path / "q.npz", q=np.eye(2, dtype=np.float32), query_ids=np.array(["b", "a"]))
    assert load_query_embeddings(tmp_path / "q.npz", ["a", "b"]).tolist() == [[0.0, 1.0], [1.0, 0.0]]
    with pytest.raises(DataFormatError, match="'q'"):
        load_query_embeddings(tmp_path / "w.npz", ["a"])  # a w file is not a query-embedding file


def test_head_cost_on_a_small_case():
    """Not a timing benchmark, a guard: two heads (linear, mlp) x 200 steps at the schema's batch
    size on 1,000 queries x 2,000 documents x 64 dims stay well under a minute on CPU."""
    rng = np.random.default_rng(1)
    D = rng.normal(size=(2000, 64)).astype(np.float32)
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    X = rng.normal(size=(1000, 64)).astype(np.float32)
    gold = [rng.choice(2000, size=2, replace=False).tolist() for _ in range(1000)]
    t = time.perf_counter()
    for kind in ("linear", "mlp"):
        fit_head(kind, X, D, gold, None, LadderConfig(steps=200))
    per_200 = time.perf_counter() - t
    print(f"two heads x 200 steps: {per_200:.2f} s")
    assert per_200 < 60


def test_the_probe_returns_each_querys_w_for_the_transfer_rung():
    """probe.evaluate(return_w=True): one float32 w per query in query order, the w whose
    ranking the probe's own rows report (a one-document gold set on the cross-polytope is
    separable: every w ranks its gold document first, recall@1 = 1 by hand)."""
    from capgap.index import FrozenIndex
    from capgap.probe import ProbeConfig, evaluate

    rs = _set(["p1", "m2", "p3", "m4"], train=2)
    rows, records, run, W = evaluate(rs, FrozenIndex(DOCS, DOC_IDS, {}), ProbeConfig(), "enc", [1], 10, return_w=True)
    assert W.shape == (4, 4) and W.dtype == np.float32
    assert [DOC_IDS[int(np.argmax(DOCS @ w))] for w in W] == ["p1", "m2", "p3", "m4"]
    assert _value(rows, "probe", "all", "recall", 1) == 1.0
    assert len(evaluate(rs, FrozenIndex(DOCS, DOC_IDS, {}), ProbeConfig(), "enc", [1], 10)) == 3  # unchanged without it


def test_the_stages_write_the_w_file_and_the_ladder_rows(tmp_path):
    """The DAG's stage functions on a small real set (MiniLM, tests/data): rule probe's w.npz
    holds one w per query in query order, and rule ladder's metrics.csv every rung's rows for
    every split, with n_queries as the data's split has them."""
    import csv
    from types import SimpleNamespace as NS

    from capgap import stages
    from capgap.data import load_canonical

    from .test_ties import MINILM, pipeline

    from capgap.encoders import EncoderSpec, load_encoder

    pipeline(tmp_path, "tie-handling-inconsistent", [1, 2], 10, methods=("probe",))
    rs = load_canonical(tmp_path / "data")
    with np.load(tmp_path / "probe_w.npz") as z:
        assert z["query_ids"].tolist() == list(rs.queries.ids) and z["w"].shape[0] == len(rs.queries.ids)
    index = NS(data=tmp_path / "data", fingerprint=tmp_path / "index" / "fingerprint.json")
    stages.pretrained(index, NS(metrics=tmp_path / "pre.csv", run=tmp_path / "pre.trec", queries=tmp_path / "queries.npz"),
                      NS(encoder_name="minilm", encoder=MINILM, ks=[1, 2], ndcg_k=10))
    # rule pretrained's queries.npz: the encoder's own query embeddings, in query order (encoded again here)
    enc = load_encoder(EncoderSpec.from_config("minilm", dict(MINILM)), threads=1)
    again = enc.encode_queries(list(rs.queries.texts))
    with np.load(tmp_path / "queries.npz") as z:
        assert z["query_ids"].tolist() == list(rs.queries.ids)
        np.testing.assert_allclose(z["q"], again, atol=1e-5)
    cfg = LadderConfig(steps=30)
    out = tmp_path / "ladder.csv"
    stages.ladder(NS(**vars(index), w=tmp_path / "probe_w.npz", queries=tmp_path / "queries.npz"),
                  NS(metrics=out), NS(encoder_name="minilm", ks=[1, 2], ndcg_k=10, ladder={"enabled": True, "steps": cfg.steps}))
    with open(out, encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert list(dict.fromkeys(r["method"] for r in rows)) == method_names(cfg)
    n = {(r["method"], r["split"]): r["value"] for r in rows if r["metric"] == "n_queries"}
    assert {v for (m, s), v in n.items() if s == "all"} == {str(len(rs.queries.ids))}
    assert {n[(m, "train")] for m in method_names(cfg)} == {str(len(rs.split.train))}


def test_the_early_stopping_validation_split_is_seeded_recorded_and_disjoint_from_held_out():
    """validation_split carves round(0.2 * 10) = 2 validation queries out of 10 train queries:
    disjoint from the fit part, together the train queries, never a held-out query (it only
    sees train ids); the same seed gives the same split whatever the ids' order, another seed
    another split (over 10 choose 2 = 45 possible, seeds 0..4 give more than one)."""
    from capgap.data import Split
    from capgap.finetune import FinetuneConfig, validation_split

    split = Split(tuple(f"t{i}" for i in range(10)), tuple(f"h{i}" for i in range(5)))
    fit, val = validation_split(split.train, 0.2, seed=3)
    assert len(val) == 2 and len(fit) == 8 and not set(fit) & set(val) and set(fit) | set(val) == set(split.train)
    assert not set(val) & set(split.heldout)
    assert fit == [q for q in split.train if q in set(fit)]  # the data's order kept
    assert set(validation_split(list(reversed(split.train)), 0.2, seed=3)[1]) == set(val)
    assert len({tuple(validation_split(split.train, 0.2, seed=s)[1]) for s in range(5)}) > 1
    assert validation_split(["a", "b"], 0.01)[1] and len(validation_split(["a", "b"], 0.99)[0]) == 1  # at least one each
    with pytest.raises(ValueError, match="two train queries"):
        validation_split(["a"], 0.5)
    with pytest.raises(ValueError, match="validation_fraction"):
        FinetuneConfig(validation_fraction=1.0)
    with pytest.raises(ValueError, match="mode"):
        FinetuneConfig(mode="half")


def test_early_stopping_keeps_the_best_points_weights_and_records_them(tmp_path):
    """EarlyStop on a torch module whose weight we set by hand at each curve point, validation
    values 0.2, 0.6, 0.4 at steps 10, 20, 30: the kept weights are those of step 20 (value 0.6),
    restored on the module at the end; the side file beside the checkpoint holds them meanwhile
    (a resumed run reads it back) and is removed at the end."""
    import torch

    from capgap.finetune import EarlyStop
    from capgap.training import PartialState

    lin = torch.nn.Linear(1, 1, bias=False)
    es = EarlyStop(lin, ["t3", "t7"], "validation_recall@2")
    es.attach(PartialState(lin, lambda k: True), tmp_path / "ck.pt")
    vals = {10: 0.2, 20: 0.6, 30: 0.4}

    def curve(step):
        with torch.no_grad():
            lin.weight.fill_(float(step))  # the weights "at" this point
        return {"train_recall@2": 0.5}

    ev = es.wrap(curve, lambda step: {"train_recall@2": vals[step]})
    pts = [ev(s) for s in (10, 20, 30)]
    assert [p["validation_recall@2"] for p in pts] == [0.2, 0.6, 0.4] and pts[0]["train_recall@2"] == 0.5
    assert (tmp_path / "ck.pt.best").is_file()
    again = EarlyStop(lin, ["t3", "t7"], "validation_recall@2")
    again.attach(PartialState(lin, lambda k: True), tmp_path / "ck.pt")  # a resumed run
    assert (again.best_step, again.best) == (20, 0.6)
    es.restore(pts)
    assert float(lin.weight.detach()) == 20.0 and not (tmp_path / "ck.pt.best").exists()
    from types import SimpleNamespace as NS

    assert es.record(NS(stopped_at=None)) == {"validation_ids": ["t3", "t7"], "best_step": 20, "best_value": 0.6,
                                              "monitor": "validation_recall@2", "stopped_at": None}
