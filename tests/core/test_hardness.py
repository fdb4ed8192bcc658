"""The parity task's construction: the perfect ReLU encoder is exact, inner-product top-k is
the Hamming ball, GF(2) rank and chance agreement against exhaustive enumeration."""

import itertools

import numpy as np
import pytest

from capgap import hardness as h


def _all_queries(P):
    return np.array(list(itertools.product([0, 1], repeat=P)), dtype=np.uint8)


def test_hypercube_and_ball_size():
    X = h.hypercube(3)
    assert X.shape == (8, 3) and X[0].tolist() == [-1, -1, -1] and X[5].tolist() == [1, -1, 1]
    assert h.ball_size(5, 2) == 1 + 5 + 10 and h.ball_size(4, 9) == 16
    assert h.dimension(64) == 7 and h.dimension(8, a=2, b=0) == 6


@pytest.mark.parametrize("P,d,rho,seed", [(6, 3, 0, 0), (8, 4, 1, 1), (10, 5, 2, 2), (7, 4, 2, 3)])
def test_perfect_encoder_is_exact_and_topk_is_the_ball(P, d, rho, seed):
    task = h.make_task(P, d, rho, seed)
    enc = h.perfect_encoder(task)
    q = _all_queries(P)
    codes = enc(q)
    np.testing.assert_array_equal(codes, 2.0 * task.centers(q) - 1)  # exact, every query
    assert enc.hidden == sum(max(1, int(r.sum())) for r in task.A) <= d * P
    assert enc.parameters == enc.hidden * P + enc.hidden + d * enc.hidden + d
    X = h.hypercube(d).astype(np.float64)
    scores = codes @ X.T
    gold = task.gold(q)
    k = task.k
    for s, g in zip(scores, gold):
        assert len(g) == k
        top = np.argsort(-s, kind="stable")[:k]
        assert set(top) == set(g)  # recall@k = 1
        # strict separation: the ball scores >= d - 2 rho, everything else <= d - 2 (rho + 1)
        inside = np.zeros(len(s), bool)
        inside[g] = True
        assert s[inside].min() >= d - 2 * rho and s[~inside].max() <= d - 2 * (rho + 1)


def test_gf2_rank_against_span_enumeration():
    rng = np.random.default_rng(0)
    for _ in range(30):
        r, c = rng.integers(1, 6), rng.integers(1, 7)
        M = rng.integers(0, 2, size=(r, c), dtype=np.uint8)
        span = {tuple((np.array(x) @ M) % 2) for x in itertools.product([0, 1], repeat=r)}
        assert 2 ** h.gf2_rank(M) == len(span)
    assert h.gf2_rank(np.eye(4, dtype=np.uint8)) == 4 and h.gf2_rank(np.ones((3, 5), np.uint8)) == 1


def test_chance_agreement_is_exact_over_the_whole_cube():
    P = 9
    q = _all_queries(P)
    for seed in range(6):
        A = h.make_task(P, 4, 1, seed).A
        B = h.make_task(P, 4, 1, seed + 100).A
        measured, theory = h.chance_agreement(A, B, q)
        assert measured == theory  # uniform over all 2^P queries: an exact count
    assert h.chance_agreement(A, A, q) == (1.0, 1.0)


def test_bad_sizes():
    with pytest.raises(ValueError):
        h.make_task(8, 3, 4)
    with pytest.raises(ValueError):
        h.hypercube(30)


def test_recall_at_k_by_hand():
    # d = 2, documents (-1,-1), (-1,1), (1,-1), (1,1); code (1, 0.5) ranks 3, 2, 1, 0
    gold = [np.array([3, 1]), np.array([0, 2])]
    r = h.ball_recall_at_k(np.array([[1.0, 0.5], [1.0, 0.5]]), gold, 2)
    assert r.tolist() == [0.5, 0.5]  # top-2 = {3, 2}
    # the zero code ties every vertex: pessimistic ties, so no gold vertex counts
    assert h.ball_recall_at_k(np.zeros((1, 2)), [np.array([3, 1])], 2).tolist() == [0.0]


def test_train_encoder_from_the_perfect_weights_keeps_recall_one_and_is_seeded():
    task = h.make_task(8, 4, 1, seed=5)
    q = _all_queries(8)
    tr, ho = q[::2], q[1::2]
    perfect = h.perfect_encoder(task)
    # regression loss is exactly 0 at the perfect weights: zero gradient, recall stays 1
    out = h.train_encoder(task, tr, ho, arch="perfect", loss="regression", steps=5, init=perfect)
    assert out["final_loss"] == 0.0 and out["train_recall"] == 1.0 and out["heldout_recall"] == 1.0
    assert out["random_baseline"] == 5 / 16 and out["hidden"] == perfect.hidden
    a = h.train_encoder(task, tr, ho, arch="mlp", loss="infonce", steps=30, seed=1)
    b = h.train_encoder(task, tr, ho, arch="mlp", loss="infonce", steps=30, seed=1)
    assert a == b and a["hidden"] == 2 * perfect.hidden
    assert 0.0 <= a["heldout_recall"] <= 1.0
    with pytest.raises(ValueError, match="arch"):
        h.train_encoder(task, tr, ho, arch="cnn")
