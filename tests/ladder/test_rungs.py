"""The learnability ladder's shared rungs (issue 29, rungs 2-4; capgap.ladder), on hand-made
indexes whose answers follow from the construction, not from the code under test.

Every index here is the cross-polytope {±e_1, ..., ±e_4} (unit documents): a query vector equal
to document d scores 1 on d and at most 0 on every other one, so w = d ranks d alone first and
the oracle's recall@1 is 1 for any one-document gold set (by hand)."""

import math
import time

import numpy as np
import pytest

from capgap.data import Corpus, Qrels, Queries, RetrievalSet, Split
from capgap.errors import DataFormatError
from capgap.evaluate import evaluate_queries
from capgap.finetune import infonce_loss
from capgap.io import save_npz
from capgap.ladder import (
    LadderConfig,
    apply_head,
    evaluate_ladder,
    fit_head,
    load_query_embeddings,
    load_witnesses,
    make_head,
    method_names,
    nearest_train,
    transfer_vectors,
)
from capgap.training import STATE_METRICS, relative_improvement, state_from_curve

DOCS = np.concatenate([np.eye(4), -np.eye(4)]).astype(np.float32)  # rows: +e1..+e4, -e1..-e4
DOC_IDS = ("p1", "p2", "p3", "p4", "m1", "m2", "m3", "m4")
# an invertible, far from orthogonal map (det = 7, by cofactor expansion along the first row)
M = np.array([[2.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, 3.0]])
FAST = LadderConfig(steps=300, batch_size=8, lr=0.02)


def _set(gold: list[str], train: int) -> RetrievalSet:
    """Queries q0..q{n-1}, query i's only gold document ``gold[i]``; the first ``train`` train."""
    qids = tuple(f"q{i}" for i in range(len(gold)))
    corpus = Corpus(DOC_IDS, ("",) * 8, tuple(f"document {d}" for d in DOC_IDS))
    return RetrievalSet(
        "toy",
        corpus,
        Queries(qids, tuple(f"query {q}" for q in qids)),
        Qrels({q: {g: 1} for q, g in zip(qids, gold)}),
        Split(qids[:train], qids[train:]),
    )


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
    # (a head's rows also carry its convergence state, split train: test_heads_converge_...)
    assert {(r["metric"], r["k"]) for r in rows if r["method"] == "head-mlp" and r["metric"] not in STATE_METRICS} == {
        ("n_queries", ""),
        ("recall", 1),
        ("recall", 2),
        ("ndcg", 10),
        ("rprec", ""),
        ("recall_cap", 1),
        ("recall_cap", 2),
    }


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


# The objective's minimum on these constructions, by hand (temperature 0.05, so a score s is the
# logit 20 s). A unit query vector q scores q_i on +e_i and -q_i on -e_i. For gold +e_1 the
# negatives' terms sum to e^{-20 q_1} (e^{-20 q_1} + sum_{i>1} 2 cosh(20 q_i)) >= e^{-20} (e^{-20} + 6)
# (cosh >= 1, q_1 <= 1), reached at q = e_1: a query's InfoNCE loss is at least
# log(1 + 6 e^-20 + e^-40) ~ 1.24e-8, and a query whose head output is its gold document has it.
SINGLE_MIN = math.log1p(6 * math.exp(-20) + math.exp(-40))
# Two queries sharing one vector q, gold p1 and p2: their losses sum to at least
# log(1 + e^a) + log(1 + e^-a) >= 2 log 2 (a = 20 (q_2 - q_1)); at q = (p1 + p2) / sqrt 2 each has
# log(2 + 4 e^{-10 sqrt 2} + 2 e^{-20 sqrt 2}) (p2: e^0; p3, p4, m3, m4: e^{-20 / sqrt 2}; m1, m2: e^{-40 / sqrt 2}).
PAIR_AT_MIDPOINT = math.log(2 + 4 * math.exp(-10 * math.sqrt(2)) + 2 * math.exp(-20 * math.sqrt(2)))


def _exists():
    gold = ["p1", "p2", "p3", "p4", "m1", "m2", "m3", "m4"]
    X = (DOCS[[DOC_IDS.index(g) for g in gold]].astype(np.float64) @ M.T).astype(np.float32)
    return X, [[DOC_IDS.index(g)] for g in gold]


def _cannot_exist():
    U = np.stack([DOCS[0] + DOCS[1], DOCS[0] + DOCS[1], DOCS[4], DOCS[2], DOCS[3]]).astype(np.float64)
    return (U @ M.T).astype(np.float32), [[DOC_IDS.index(g)] for g in ["p1", "p2", "m1", "p3", "p4"]]


@pytest.mark.parametrize("optimizer", ["default", "lbfgs"])
@pytest.mark.parametrize("kind", ["linear", "mlp"])
@pytest.mark.parametrize("case", ["exists", "cannot-exist"])
def test_heads_converge_before_their_cap_near_the_objectives_minimum_and_record_their_state(kind, case, optimizer):
    """At the schema's settings and with full-batch L-BFGS both heads converge (the rule stops
    them before the cap) on both constructions, near the objective's minimum worked out by hand
    above: where a shared map exists
    the mean loss's minimum is SINGLE_MIN (every query can reach its own); where two queries share
    one embedding it lies between (2 log 2 + 3 * SINGLE_MIN) / 5 = 0.2772589 (the bound) and
    (2 * PAIR_AT_MIDPOINT + 3 * SINGLE_MIN) / 5 = 0.2772595 (a map that reaches it: M^-1, the
    midpoint for the pair). At the schema's settings (AdamW) each head ends within tol of it (the
    rule judges an objective below 1 by its absolute change: it stops once a window gains less
    than tol, which bounds nothing about the distance to the minimum, so this margin is what
    these runs show, not a guarantee); full-batch L-BFGS (a point every 10 steps) ends within
    1e-4 of it. The state agrees with the curve: steps = the last point's step, train_loss = its
    objective; the rule holds on the curve's objectives at the last point and at no earlier one
    (the run stopped where it first converged). The same config twice gives the same head."""
    X, gold = _exists() if case == "exists" else _cannot_exist()
    cfg = LadderConfig() if optimizer == "default" else LadderConfig(optimizer="lbfgs", eval_every=10)
    head, res = fit_head(kind, X, DOCS, gold, None, cfg)
    st = res.convergence
    assert st.converged and res.converged_at < cfg.steps and st.max_steps == cfg.steps, st.describe()
    # the minimum lies in [low, high]; float32 arithmetic may round a hair below it
    low, high = (
        (SINGLE_MIN, SINGLE_MIN)
        if case == "exists"
        else ((2 * math.log(2) + 3 * SINGLE_MIN) / 5, (2 * PAIR_AT_MIDPOINT + 3 * SINGLE_MIN) / 5)
    )
    assert low * (1 - 1e-6) <= st.objective <= high + (1e-4 if optimizer == "lbfgs" else cfg.tol), (
        low,
        st.objective,
        high,
    )
    # the state is the curve's: the last point, the criterion over the last n_iter_no_change points
    # (stable-decay, the default: the rule's points, then the decay phase's, ceil(0.2 x the steps
    # run before it) more steps; L-BFGS: the rule's points only)
    at = res.converged_at
    decay = math.ceil(cfg.decay_fraction * at) if optimizer == "default" else 0
    steps = [p["step"] for p in res.curve]
    assert steps == list(range(cfg.eval_every, at + 1, cfg.eval_every)) + [
        at + s for s in range(cfg.eval_every, decay, cfg.eval_every)
    ] + ([at + decay] if decay else [])
    assert st.steps == at and st.decay_steps == decay and steps[-1] == at + decay
    assert all(p.get("decay", False) == (p["step"] > at) for p in res.curve)
    objectives = [p["objective"] for p in res.curve if p["step"] <= at]
    rule = cfg.convergence()  # the one rule (capgap.training): it holds at the rule's last point and at no earlier one
    assert rule.converged(objectives) and not any(rule.converged(objectives[:i]) for i in range(1, len(objectives)))
    rows = {r["metric"]: r["value"] for r in st.rows("toy", "enc", f"head-{kind}-all")}
    assert rows["converged"] == 1.0 and rows["steps"] == at and rows["max_steps"] == cfg.steps
    assert rows.get("decay_steps", 0) == decay
    assert state_from_curve(res.curve, rule) == st  # the state is the curve's, decay points marked
    assert rows["train_loss"] == res.curve[-1]["objective"]
    assert rows["loss_improvement"] == relative_improvement(objectives, cfg.n_iter_no_change)
    # the same config again: the same head, the same curve
    again, res2 = fit_head(kind, X, DOCS, gold, None, cfg)
    assert all(torch_equal(a, b) for a, b in zip(head.state_dict().values(), again.state_dict().values()))
    assert res2.curve == res.curve


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a, b)


def test_evaluate_ladder_appends_each_heads_state_rows_and_keeps_its_time():
    """Every head's rows are followed by its convergence state (split train, k empty), the state
    fit_head records for the same inputs and config (seeded: the same numbers); the seconds hold
    each head's wall time."""
    X, gold = _exists()
    rs = _set([DOC_IDS[g[0]] for g in gold], train=5)
    cfg = LadderConfig()
    rows, seconds = evaluate_ladder(rs, X, DOCS, DOC_IDS, None, cfg, [1, 2], 10, "enc")
    for kind in ("linear", "mlp"):
        method = f"head-{kind}-all"
        state = [r for r in rows if r["method"] == method and r["metric"] in STATE_METRICS]
        assert {(r["split"], r["k"], r["dataset"], r["encoder"]) for r in state} == {("train", "", "toy", "enc")}
        _, res = fit_head(kind, X, DOCS, gold, None, cfg)
        assert state == res.convergence.rows("toy", "enc", method)
        assert [r["metric"] for r in state][:5] == ["converged", "early_stopped", "steps", "max_steps", "train_loss"]
    assert {m for m in seconds if m.startswith("head-")} == {
        "head-linear-all",
        "head-mlp-all",
        "head-linear",
        "head-mlp",
    }
    assert all(v > 0 for v in seconds.values())
    for method in ("head-linear", "head-mlp"):  # the train-only heads record their state too
        assert {r["metric"] for r in rows if r["method"] == method and r["split"] == "train"} >= {
            "converged",
            "steps",
            "train_loss",
        }


def test_lbfgs_reuses_its_line_searchs_last_evaluation_without_changing_the_result(monkeypatch):
    """Each L-BFGS step starts from the objective and gradient at the point its previous line
    search ended on; handing those over (a linear surrogate of the cached evaluation) instead of
    evaluating again gives bit-identical weights and curve with fewer objective evaluations
    (counted by wrapping FitObjective.__call__)."""
    from capgap.ladder import heads

    X, gold = _cannot_exist()
    cfg = LadderConfig(optimizer="lbfgs", eval_every=10, tol=0.0, steps=40)
    calls = []
    real = heads.FitObjective.__call__
    monkeypatch.setattr(heads.FitObjective, "__call__", lambda self, head: calls.append(1) or real(self, head))
    head, res = fit_head("mlp", X, DOCS, gold, None, cfg)
    cached = len(calls)
    calls.clear()
    monkeypatch.setattr(heads._LBFGS, "ready", lambda self: None)
    again, res2 = fit_head("mlp", X, DOCS, gold, None, cfg)
    assert all(torch_equal(a, b) for a, b in zip(head.state_dict().values(), again.state_dict().values()))
    assert res.curve == res2.curve and cached < len(calls) and len(calls) - cached >= cfg.steps // 2, (
        cached,
        len(calls),
    )


@pytest.mark.parametrize("form", ["avg", "set"])
def test_the_heads_loss_is_infonce_loss(form):
    """GoldRows builds a batch's masks at once and computes the avg form from the gold entries
    only: the value and the gradient are capgap.finetune.infonce_loss's on the masks
    candidate_masks builds (random scores, gold sets of 1 to 5 rows, exclusions on some items)."""
    import torch

    from capgap.finetune import candidate_masks, infonce_loss
    from capgap.ladder.heads import GoldRows

    rng = np.random.default_rng(3)
    n_docs, items = 40, 12
    gold = [sorted(rng.choice(n_docs, size=int(rng.integers(1, 6)), replace=False).tolist()) for _ in range(items)]
    excluded = [
        sorted(set(rng.choice(n_docs, size=3, replace=False).tolist()) - set(g)) if i % 3 == 0 else []
        for i, g in enumerate(gold)
    ]
    batch = np.array([5, 0, 7, 3, 11, 9])
    _, mask, excl = candidate_masks(batch, gold, excluded, n_docs, "full")
    mine = GoldRows(gold, excluded, n_docs).masks(batch)
    assert torch.equal(mine[0], mask) and torch.equal(mine[1], excl)
    S = torch.tensor(rng.normal(size=(len(batch), n_docs)), dtype=torch.float32, requires_grad=True)
    want = infonce_loss(S, mask, 0.05, form, excl)
    (g_want,) = torch.autograd.grad(want, S)
    got = GoldRows.loss(S, mine, 0.05, form)
    (g_got,) = torch.autograd.grad(got, S)
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-6) and torch.allclose(
        g_got, g_want, rtol=1e-5, atol=1e-7
    )


def test_a_validation_split_keeps_the_best_points_weights_and_stops_after_patience():
    """validate() returns 0.1 on the initial head, then 0.2, 0.6, 0.4, 0.5, 0.3 at the curve
    points (every 5 steps; tol 0 and a cap of 300, so only the validation can stop it): the best
    is the second point (step 10); patience 3 stops training at the fifth (step 25, three points
    without a new best). The head ends with the weights it had when validate saw step 10 (a copy
    taken inside validate), and its state says early stopping on its validation split ended it. When the initial
    head validates best (0.9, then 0.2, 0.3, 0.1), patience counts from it: training stops three
    points after the start (step 15), and the head ends as it started: the identity, the
    pre-trained embeddings themselves, its state's objective the identity's."""
    import torch

    X, gold = _cannot_exist()

    def fit(values):
        it, seen = iter(values), []

        def validate(head):
            seen.append({k: v.detach().clone() for k, v in head.state_dict().items()})
            return next(it)

        cfg = LadderConfig(steps=300, eval_every=5, tol=0.0, patience=3)
        return fit_head("linear", X, DOCS, gold, None, cfg, validate=validate) + (seen,)

    head, res, seen = fit([0.1, 0.2, 0.6, 0.4, 0.5, 0.3, 0.9, 0.9])
    assert [p["step"] for p in res.curve] == [5, 10, 15, 20, 25]
    assert [p["validation"] for p in res.curve] == [0.2, 0.6, 0.4, 0.5, 0.3]
    assert (
        len(seen) == 6
        and torch_equal(head.weight, seen[2]["weight"])
        and not torch_equal(seen[2]["weight"], seen[5]["weight"])
    )
    st = res.convergence
    assert (st.converged, st.early_stopped, st.steps) == (False, True, 25)
    assert st.describe() == "stopped early by its validation split at 25 steps"
    head, res, seen = fit([0.9, 0.2, 0.3, 0.1, 0.2, 0.1, 0.9])
    assert [p["step"] for p in res.curve] == [5, 10, 15]  # three curve points after the best: the start
    assert torch_equal(head.weight, torch.eye(4)) and not torch_equal(seen[-1]["weight"], torch.eye(4))
    # the state describes the kept weights: its objective is the identity's InfoNCE on the fit set
    # (capgap.finetune.infonce_loss over every query's normalised embedding against the index)
    q = torch.nn.functional.normalize(torch.from_numpy(X), dim=-1)
    mask = torch.zeros((len(X), len(DOCS)), dtype=torch.bool)
    for i, g in enumerate(gold):
        mask[i, g] = True
    want = float(infonce_loss(q @ torch.from_numpy(DOCS).T, mask, LadderConfig().temperature))
    assert res.convergence.objective == pytest.approx(want, rel=1e-5) and res.curve[-1]["objective"] != pytest.approx(
        want, rel=1e-3
    )


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
    Wo = DOCS[[DOC_IDS.index(g) for g in NN_GOLD]] * np.array(
        [[1.0], [3.0], [0.5], [1.0], [1.0]], dtype=np.float32
    )  # |w| varies
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
    c = apply_head(
        fit_head("mlp", X, DOCS, gold, None, LadderConfig(steps=20, batch_size=4, lr=0.01, width_factor=3, seed=1))[0],
        X,
    )
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
    from capgap.encoders import EncoderSpec, load_encoder

    from ..core.test_ties import MINILM, pipeline

    pipeline(tmp_path, "tie-handling-inconsistent", [1, 2], 10, methods=("probe",))
    rs = load_canonical(tmp_path / "data")
    with np.load(tmp_path / "probe_w.npz") as z:
        assert z["query_ids"].tolist() == list(rs.queries.ids) and z["w"].shape[0] == len(rs.queries.ids)
    index = NS(data=tmp_path / "data", fingerprint=tmp_path / "index" / "fingerprint.json")
    stages.pretrained(
        index,
        NS(metrics=tmp_path / "pre.csv", run=tmp_path / "pre.trec", queries=tmp_path / "queries.npz"),
        NS(encoder_name="minilm", encoder=MINILM, ks=[1, 2], ndcg_k=10),
    )
    # rule pretrained's queries.npz: the encoder's own query embeddings, in query order (encoded again here)
    enc = load_encoder(EncoderSpec.from_config("minilm", dict(MINILM)), threads=1)
    again = enc.encode_queries(list(rs.queries.texts))
    with np.load(tmp_path / "queries.npz") as z:
        assert z["query_ids"].tolist() == list(rs.queries.ids)
        np.testing.assert_allclose(z["q"], again, atol=1e-5)
    cfg = LadderConfig(steps=30)
    out = tmp_path / "ladder.csv"
    stages.ladder(
        NS(**vars(index), w=tmp_path / "probe_w.npz", queries=tmp_path / "queries.npz"),
        NS(metrics=out),
        NS(encoder_name="minilm", ks=[1, 2], ndcg_k=10, ladder={"enabled": True, "steps": cfg.steps}),
    )
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
    assert (
        validation_split(["a", "b"], 0.01)[1] and len(validation_split(["a", "b"], 0.99)[0]) == 1
    )  # at least one each
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
    es.attach(PartialState(lin, lambda k: True), tmp_path / "ck.pt", {"settings": "a"})
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
    again.attach(PartialState(lin, lambda k: True), tmp_path / "ck.pt", {"settings": "a"})  # a resumed run
    assert (again.best_step, again.best) == (20, 0.6)
    for digest in ({"settings": "b"}, None):  # other settings, or none to match: not taken up
        other = EarlyStop(lin, ["t3", "t7"], "validation_recall@2")
        other.attach(PartialState(lin, lambda k: True), tmp_path / "ck.pt", digest)
        assert other.best_step is None
    es.restore(pts)
    assert float(lin.weight.detach()) == 20.0 and not (tmp_path / "ck.pt.best").exists()
    from types import SimpleNamespace as NS

    assert es.record(NS(stopped_at=None)) == {
        "validation_ids": ["t3", "t7"],
        "best_step": 20,
        "best_value": 0.6,
        "monitor": "validation_recall@2",
        "stopped_at": None,
    }
