"""Late interaction: MaxSim against hand-computed values and PyLate, exact vs PLAID agreement,
the false-negative mask, and ColBERT fine-tuning (determinism, resume)."""

import numpy as np
import pytest
import torch

from capgap import colbert as cb

from ..conftest import ROOT


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _clustered_corpus():
    """400 documents of 12 tokens (32-d) drawn around 20 shared centres: near-ties for ANN."""
    rng = np.random.default_rng(0)
    centers = _unit(rng.standard_normal((20, 32)))
    return rng, [
        _unit(centers[rng.integers(20, size=12)] + 0.3 * rng.standard_normal((12, 32))).astype(np.float32)
        for _ in range(400)
    ]


def test_maxsim_hand_example():
    # query tokens (1,0) and (0,1); doc A tokens (1,0),(0.6,0.8); doc B token (0,1)
    q = np.array([[[1.0, 0.0], [0.0, 1.0]]], dtype=np.float32)
    docs = [np.array([[1.0, 0.0], [0.6, 0.8]]), np.array([[0.0, 1.0]])]
    tokens, offsets = cb.pack_documents(docs, dtype=np.float32)
    assert offsets.tolist() == [0, 2, 3]
    s = cb.maxsim_scores(q, tokens, offsets)
    # A: max(1, .6) + max(0, .8) = 1.8;  B: max(0) + max(1) = 1.0
    np.testing.assert_allclose(s, [[1.8, 1.0]], rtol=0, atol=1e-6)
    idx, sc = cb.maxsim_topk(q, tokens, offsets, k=5)
    assert idx.tolist() == [[0, 1]] and np.allclose(sc, [[1.8, 1.0]])


def test_maxsim_matches_pylate_colbert_scores():
    from pylate.scores import colbert_scores

    rng = np.random.default_rng(0)
    q = _unit(rng.standard_normal((5, 7, 16))).astype(np.float32)
    lens = rng.integers(1, 12, size=23)
    docs = [_unit(rng.standard_normal((n, 16))).astype(np.float32) for n in lens]
    tokens, offsets = cb.pack_documents(docs, dtype=np.float32)
    # PyLate zeroes masked tokens (a padded document scores max(best real token, 0)); MaxSim is
    # the max over the document's own tokens, so pad with copies of a real token, which leaves
    # every max unchanged, and pass no mask
    padded = np.stack([np.concatenate([d, np.repeat(d[:1], lens.max() - len(d), axis=0)]) for d in docs])
    ref = colbert_scores(torch.from_numpy(q), torch.from_numpy(padded)).numpy()
    brute = np.array([[sum(max(float(t @ x) for x in d) for t in qi) for d in docs] for qi in q])
    np.testing.assert_allclose(ref, brute, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cb.maxsim_scores(q, tokens, offsets, block_docs=4), ref, rtol=1e-5, atol=1e-5)
    # blocked top-k (tiny blocks) equals a full sort with the lower-index tie rule
    idx, _ = cb.maxsim_topk(q, tokens, offsets, k=6, block_docs=2, block_queries=2)
    want = np.array([np.lexsort((np.arange(len(docs)), -row))[:6] for row in ref])
    assert (idx == want).all()


def test_rescore_all_candidates_is_exact_and_ann_recall():
    rng = np.random.default_rng(1)
    q = _unit(rng.standard_normal((4, 3, 8))).astype(np.float32)
    docs = [_unit(rng.standard_normal((rng.integers(1, 6), 8))) for _ in range(30)]
    tokens, offsets = cb.pack_documents(docs, dtype=np.float32)
    exact, _ = cb.maxsim_topk(q, tokens, offsets, k=10)
    full, _ = cb.rescore(q, tokens, offsets, [np.arange(30)[::-1]] * 4, k=10)
    assert (full == exact).all()
    # a query with fewer candidates than k is padded with -1
    few, few_s = cb.rescore(q[:1], tokens, offsets, [np.array([3, 7])], k=4)
    assert few[0, 2:].tolist() == [-1, -1] and np.isneginf(few_s[0, 2:]).all()
    # ANN recall by hand: 2 of 3 and 3 of 3 -> 5/6
    assert cb.ann_recall(np.array([[1, 2, 9], [4, 5, 6]]), np.array([[2, 1, 3], [6, 5, 4]]), 3) == pytest.approx(5 / 6)


def test_pack_documents_errors():
    with pytest.raises(ValueError, match="no token"):
        cb.pack_documents([np.ones((2, 4)), np.ones((0, 4))])
    with pytest.raises(ValueError, match="different dimensions"):
        cb.pack_documents([np.ones((2, 4)), np.ones((2, 3))])


def test_false_negative_mask():
    # query 0 gold {10, 11}, query 1 gold {11}; slots: group 0 = [10, 12], group 1 = [11, 10]
    m = cb.false_negative_mask([{10, 11}, {11}], [[10, 12], [11, 10]])
    # columns: (g0,s0)=10 (g0,s1)=12 (g1,s0)=11 (g1,s1)=10
    assert m.tolist() == [[False, False, True, True], [False, False, False, False]]


def test_config_rejects_unknown_keys_and_backend():
    with pytest.raises(ValueError, match="unknown keys"):
        cb.ColbertConfig.from_config({"stepz": 3})
    with pytest.raises(ValueError, match="backend"):
        cb.ColbertConfig(backend="annoy")


@pytest.mark.slow
def test_plaid_candidates_rescored_agree_with_exact(tmp_path):
    """PLAID (Stanford backend; compiles its C++ extensions once) + exact re-scoring recovers the
    exact MaxSim top-10 on a small clustered corpus when it probes generously (32 cells, no
    centroid pruning: measured 0.996; PLAID's defaults give 0.85 here, which is why capgap reports
    the ANN recall of every PLAID run)."""
    rng, docs = _clustered_corpus()
    tokens, offsets = cb.pack_documents(docs, dtype=np.float32)
    q = np.stack([_unit(d[:6] + 0.1 * rng.standard_normal((6, 32))) for d in docs[:25]]).astype(np.float32)
    exact, _ = cb.maxsim_topk(q, tokens, offsets, k=10)
    index = cb.PlaidIndex(
        tmp_path / "plaid",
        ROOT / ".cache" / "torch_extensions",
        candidates=100,
        ncells=32,
        centroid_score_threshold=0.0,
    )
    index.build(tokens, offsets)
    cand = index.search(q, 100)
    assert all(len(c) > 10 for c in cand)
    got, _ = cb.rescore(q, tokens, offsets, cand, k=10)
    # each query's source document is its exact top-1 and must survive PLAID's candidate stage
    assert (exact[:, 0] == np.arange(25)).all() and (got[:, 0] == np.arange(25)).all()
    assert cb.ann_recall(got, exact, 10) >= 0.95


def _tiny_model(tmp_path):
    cfg = cb.ColbertConfig(
        steps=2,
        batch_size=2,
        lr=1e-4,
        n_negatives=1,
        query_length=8,
        document_length=24,
        checkpoint_every=1,
        eval_every=1,
        seed=3,
    )
    return cfg, cb.load_colbert(cfg)


@pytest.mark.slow
def test_train_colbert_deterministic_and_resumes(tmp_path):
    torch.set_num_threads(2)
    docs = ["Ann likes tea and cats.", "Bob likes coffee and dogs.", "Cyd likes tea and dogs.", "Dee likes jazz."]
    queries = ["Who likes tea?", "Who likes dogs?", "Who likes jazz?"]
    gold = [[0, 2], [1, 2], [3]]
    cfg, m1 = _tiny_model(tmp_path)
    r1 = cb.train_colbert(m1, cfg, docs, queries, gold, ckpt_path=tmp_path / "a.pt")
    assert [p["step"] for p in r1["curve"]] == [1, 2] and all(np.isfinite(p["loss"]) for p in r1["curve"])
    cfg, m2 = _tiny_model(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        cb.train_colbert(m2, cfg, docs, queries, gold, ckpt_path=tmp_path / "b.pt", stop_after=1)
    cfg, m3 = _tiny_model(tmp_path)  # a fresh process would start from the same initial model
    r3 = cb.train_colbert(m3, cfg, docs, queries, gold, ckpt_path=tmp_path / "b.pt")
    assert r3["resumed_from"] == 1
    s1, s3 = m1.state_dict(), m3.state_dict()
    assert all(torch.equal(s1[k], s3[k]) for k in s1)
    # the checkpoint (now at the last step) belongs to these documents: other texts start over
    cfg, m4 = _tiny_model(tmp_path)
    r4 = cb.train_colbert(m4, cfg, [d + " Eve likes tea." for d in docs], queries, gold, ckpt_path=tmp_path / "b.pt")
    assert r4["resumed_from"] == 0 and [p["step"] for p in r4["curve"]] == [1, 2]
    # training changed the model: the projection differs from a freshly seeded one
    _, m0 = _tiny_model(tmp_path)
    assert not torch.equal(m0.state_dict()["1.linear.weight"], s1["1.linear.weight"])
    # documents of the trained model pack into the float16 layout
    toks, offs = cb.encode_documents(m1, docs, tmp_path / "parts", chunk=3)
    assert (
        toks.dtype == np.float16
        and len(offs) == 5
        and sorted((tmp_path / "parts").iterdir())[0].name == "part-000000000.npz"
    )


def test_faiss_token_index_candidates_rescored_agree_with_exact():
    """ColBERT v1 candidate generation (faiss IVF over document tokens) + exact re-scoring
    recovers the exact MaxSim top-10; probing every cell makes the token search exact, so each
    query's exact top-1 (its source document) must then be found."""
    rng, docs = _clustered_corpus()
    tokens, offsets = cb.pack_documents(docs, dtype=np.float16)
    q = np.stack([_unit(d[:6] + 0.1 * rng.standard_normal((6, 32))) for d in docs[:25]]).astype(np.float32)
    exact, _ = cb.maxsim_topk(q, tokens, offsets, k=10)
    index = cb.FaissTokenIndex(nlist=16, nprobe=16, k_tokens=64, seed=0)
    index.build(tokens, offsets)
    cand = index.search(q)
    got, _ = cb.rescore(q, tokens, offsets, cand, k=10)
    assert (got[:, 0] == np.arange(25)).all() and cb.ann_recall(got, exact, 10) >= 0.95
    # the nominated documents are exactly the owners of the k nearest tokens (brute force)
    flat = q.reshape(-1, 32) @ tokens.astype(np.float32).T
    owner = np.repeat(np.arange(400), 12)
    nearest = np.argsort(-flat, axis=1, kind="stable")[:, :64].reshape(25, 6 * 64)
    want = [np.unique(owner[row]) for row in nearest]
    assert sum(len(set(a) ^ set(b)) for a, b in zip(cand, want)) <= 2  # float ties at the 64th token


def test_work_folder_key_covers_the_training_data():
    """ColBERT's work folder (checkpoint, fine-tuned model, curve) is keyed by data.query_records:
    other train or held-out texts, gold sets or exclusions give another folder, so a stale one is
    never resumed."""
    from dataclasses import replace

    from capgap.data import Corpus, Qrels, Queries, RetrievalSet, Split
    from capgap.data import query_records as run_data

    rs = RetrievalSet(
        "t",
        Corpus(("a", "b"), ("", ""), ("x", "y")),
        Queries(("q1", "q2"), ("find x", "find y")),
        Qrels({"q1": {"a": 1}, "q2": {"b": 1}}),
        Split(("q1",), ("q2",)),
    )
    base = run_data(rs)
    assert base == [["train", "q1", "find x", [("a", 1)], []], ["heldout", "q2", "find y", [("b", 1)], []]]
    assert run_data(replace(rs, queries=Queries(("q1", "q2"), ("find x please", "find y")))) != base
    assert (
        run_data(replace(rs, queries=Queries(("q1", "q2"), ("find x", "find y please")))) != base
    )  # held-out: the curve
    assert run_data(replace(rs, qrels=Qrels({"q1": {"b": 1}, "q2": {"b": 1}}))) != base
    assert run_data(replace(rs, excluded={"q1": ("b",)})) != base


def test_indexes_refuse_search_before_build(tmp_path):
    q = np.zeros((1, 2, 4), dtype=np.float32)
    with pytest.raises(RuntimeError, match="before build"):
        cb.FaissTokenIndex().search(q)
    with pytest.raises(RuntimeError, match="before build"):
        cb.PlaidIndex(tmp_path / "plaid", tmp_path / "ext").search(q, 5)


def test_load_colbert_missing_folder(tmp_path):
    from capgap.errors import ModelNotFound

    with pytest.raises(ModelNotFound, match="does not exist"):
        cb.load_colbert(cb.ColbertConfig(), path=str(tmp_path / "nowhere"))


def test_backend_choice_and_work_folders(tmp_path):
    cfg = cb.ColbertConfig(exact_max_docs=10)
    assert cb.resolve_backend(cfg, 10) == "exact" and cb.resolve_backend(cfg, 11) == "faiss"
    assert cb.resolve_backend(cb.ColbertConfig(backend="plaid"), 1) == "plaid"
    (tmp_path / "old" / "parts").mkdir(parents=True)
    work = cb.prepare_work_dir(tmp_path, "new")
    assert work == tmp_path / "new" and sorted(p.name for p in tmp_path.iterdir()) == ["new"]


def test_a_killed_builds_extension_lock_is_cleared(tmp_path):
    """torch's cpp_extension waits forever on the lock a killed build leaves: PlaidIndex clears
    locks older than STALE_LOCK_S and keeps a younger one (a build that may be running)."""
    import os
    import time

    from capgap.colbert.indexes import STALE_LOCK_S, clear_stale_build_locks

    old, young = tmp_path / "segmented_maxsim_cpp" / "lock", tmp_path / "decompress_residuals_cpp" / "lock"
    for lock in (old, young):
        lock.parent.mkdir()
        lock.write_text("")
    t = time.time() - STALE_LOCK_S - 60
    os.utime(old, (t, t))
    assert clear_stale_build_locks(tmp_path) == [old]
    assert not old.exists() and young.exists()


def test_settings_that_decide_where_training_stops_are_in_the_training_digest():
    """A trained model (and its checkpoint) is reused only under the same stopping settings: a
    rule-stopped run is not the fixed-length protocol's, nor one judged at other curve points."""
    from capgap.colbert import ColbertConfig

    base = ColbertConfig().training_digest()
    for change in (
        {"stop_at_convergence": False},
        {"eval_every": 25},
        {"eval_max_queries": 100},
        {"tol": 0.001},
        {"n_iter_no_change": 3},
        {"steps": 7},
    ):
        assert ColbertConfig(**change).training_digest() != base, change
    assert ColbertConfig(curve_max_docs=10).training_digest() == base  # evaluation only
