"""benchmarks/paper_cost.py's wall-time projection over N nodes (issue 30): the scheduler and
the projection against values worked out by hand."""

import importlib.util

import pytest

from ..conftest import ROOT


@pytest.fixture(scope="module")
def cost():
    spec = importlib.util.spec_from_file_location("paper_cost", ROOT / "benchmarks" / "paper_cost.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_makespan_longest_job_first_by_hand(cost):
    # 3 -> node 0, 3 -> node 1, 2 -> node 0 (5), 2 -> node 1 (5), 2 -> node 0 (7)
    assert cost._makespan([2, 3, 2, 3, 2], 2) == 7
    assert cost._makespan([5, 1, 1], 3) == 5  # one job cannot be split: it bounds the wall time
    assert cost._makespan([4, 4], 1) == 8


def test_projection_on_one_node_is_the_sum_and_shards_divide_it(cost, monkeypatch):
    """One dataset (1,000 documents, 10 queries), one encoder (1e6 parameters, 10-d), 1e12
    FLOP/s, 100 tokens per document and query, 2 steps of batch 1, no ColBERT CPU work (under
    20k documents). By hand: index 2 * 1e6 * 1000 * 100 / 1e12 = 0.2 s + 60 s overhead per
    shard; fine-tuning 3 * 2 * 1e6 * 2 * 1 * 100 / 1e12 + 3 * 2 * 1 * 10 * 1000 * 2 / 1e12 =
    1.2e-3 + 1.2e-7 s; ColBERT 2 * 110e6 * 1000 * 100 / 1e12 = 22 s; probe 1e-3 core-s per
    query x doc x dim * 1000 * 10 * 10 = 100 core-s over 4 cores = 25 s."""
    monkeypatch.setattr(cost, "DATASETS", {"d": (1000, 10)})
    monkeypatch.setattr(cost, "ENCODERS", {"e": (1e6, 10)})
    monkeypatch.setattr(cost, "STEPS", 2)
    monkeypatch.setattr(cost, "BATCH", 1)
    shard = {"probe": {"core_s_per_query_unit": 1e-3}}
    one = cost.project(shard, 1.0, 100, 100, 1, 4, 60.0)
    assert one["index_h"] * 3600 == pytest.approx(60.2)
    assert one["gpu_h"] * 3600 == pytest.approx(22 + 1.2e-3 + 1.2e-7)
    assert one["probe_h"] * 3600 == pytest.approx(25)
    assert one["wall_h"] * 3600 == pytest.approx(60.2 + 25)  # the probe (25 s) outlasts the GPU jobs (22 s)
    two = cost.project(shard, 1.0, 100, 100, 2, 4, 60.0)  # 2 shards of each on 2 nodes
    assert two["index_h"] * 3600 == pytest.approx(60.1)  # 0.1 s of embedding + the overhead, per node
    assert two["probe_h"] * 3600 == pytest.approx(12.5)
    assert two["gpu_h"] * 3600 == pytest.approx(22)  # ColBERT and fine-tuning are one job each, on one node each
    assert two["wall_h"] * 3600 == pytest.approx(60.1 + 22)  # now the GPU jobs outlast the probe


def test_the_probe_cost_model_by_hand(cost, monkeypatch):
    """probe_core_s: up to SCREEN_MIN_DOCS the whole-index cost per query x doc x dim; above, the
    set's cost per doc x dim, two passes of the floor per query and each query's solve,
    interpolated linearly in the dimension between the measured ones (and along the last
    segment beyond them); an inseparable dataset the whole-index fallback per query x doc x dim."""
    monkeypatch.setattr(cost, "FLOOR_CORE_S_PER_UNIT", 1e-10)
    monkeypatch.setattr(cost, "SET_CORE_S_PER_UNIT", 1e-9)
    monkeypatch.setattr(cost, "SOLVE_DIMS", (384, 768, 2560))
    monkeypatch.setattr(cost, "SOLVE_CORE_S", {"easy": (0.02, 0.05, 0.1), "multi-gold": (0.1, 0.2, 0.5)})
    monkeypatch.setattr(cost, "INSEPARABLE_CORE_S_PER_UNIT", 1e-8)
    assert cost.probe_core_s("nfcorpus", 50_000, 384, 10, 1e-7) == pytest.approx(1e-7 * 50_000 * 384 * 10)
    # set 1e-9 x 100k x 768 = 0.0768; passes 2 x 1e-10 x 100k x 768 x 10 = 0.1536; solve 10 x 0.2 = 2.0
    assert cost.probe_core_s("bright-biology", 100_000, 768, 10, 1e-7) == pytest.approx(0.0768 + 0.1536 + 2.0)
    # easy at 1,664 dims: halfway between 768 and 2,560: 0.075 per query
    assert cost.solve_core_s("easy", 1664) == pytest.approx(0.075)
    assert cost.probe_core_s("quora", 100_000, 1664, 10, 1e-7) == pytest.approx(
        1e-9 * 100_000 * 1664 + 2 * 1e-10 * 100_000 * 1664 * 10 + 0.75
    )
    # beyond 2,560 along the last segment (0.3 per 1,792 dims); below 384 in proportion
    assert cost.solve_core_s("multi-gold", 4352) == pytest.approx(0.8)
    assert cost.solve_core_s("multi-gold", 192) == pytest.approx(0.05)
    assert cost.probe_core_s("trec-covid", 100_000, 768, 10, 1e-7) == pytest.approx(1e-8 * 100_000 * 768 * 10)
