"""Exact ranking against a full sort, and the documented tie rule."""

import numpy as np
import pytest

from capgap.retrieval import dense_scores, rank_queries, topk_from_scores


def test_matches_full_sort():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((37, 16)).astype(np.float32)
    d = rng.standard_normal((500, 16)).astype(np.float32)
    gold = [np.array([int(np.argsort(-(q[i] @ d.T))[5])]) for i in range(37)]  # each query's 6th best
    ranks, idx, sc = rank_queries(dense_scores(q, d), 37, gold, [np.ones(1)] * 37, None, 20, 500, block=8)
    assert [r.tolist() for r in ranks] == [[6.0]] * 37
    full = q.astype(np.float64) @ d.T.astype(np.float64)
    ref = np.sort(full, axis=1)[:, ::-1][:, :20]
    assert idx.shape == (37, 20) and idx.dtype == np.int64
    assert np.allclose(sc, ref, atol=1e-4)  # the k best scores, in order
    assert np.allclose(np.take_along_axis(full, idx, 1), sc, atol=1e-4)  # indices match scores
    # against numpy's full sort: identical except where two scores are within float error
    assert (idx == np.argsort(-full, axis=1)[:, :20]).mean() > 0.99


def test_ties_lower_index_first_and_k_clamped():
    s = np.array([[1.0, 3.0, 3.0, 0.5, 3.0]])
    idx, sc = topk_from_scores(s, 2)
    assert idx.tolist() == [[1, 2]]
    idx, _ = topk_from_scores(s, 99)
    assert idx.tolist() == [[1, 2, 4, 0, 3]]


def test_dimension_mismatch():
    with pytest.raises(ValueError, match="dimension"):
        dense_scores(np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32))
