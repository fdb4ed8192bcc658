"""Speed of capgap's exact top-k and BM25 against the reference libraries, in one process.

- exact top-k: a blocked numpy matmul + argpartition (capgap.retrieval.topk_from_scores over
  query blocks, capgap's first implementation) vs faiss (IndexFlatIP and faiss.knn, capgap's
  second); the top-100 sets must agree.
- the evaluation ranking (capgap.retrieval.rank_queries over dense_scores: full scores, duplicate
  rows tied, pessimistic gold ranks and the top-100 for the run file) vs faiss.knn top-100: the
  cost of ranking every document exactly instead of a top-k heap.
- BM25 over SciFact: bm25s backend vs rank-bm25 backend (same tokens, same top-k rule).

Run: .venv/bin/python benchmarks/topk_and_bm25.py [--mirror $CAPGAP_DATA_MIRROR]
Prints a Markdown table to paste into README.md.
"""

import argparse
import os
import platform
import time

import numpy as np


def timed(fn, repeat=3):
    best = float("inf")
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--mirror", default=os.environ.get("CAPGAP_DATA_MIRROR"), required="CAPGAP_DATA_MIRROR" not in os.environ
    )
    args = ap.parse_args()
    import faiss

    from capgap.bm25 import BM25
    from capgap.data import load_beir_dir
    from capgap.retrieval import dense_scores, duplicate_groups, rank_queries, topk_from_scores

    def numpy_topk(q, d, k, block=1024):
        parts = [topk_from_scores(q[s : s + block] @ d.T, k)[0] for s in range(0, len(q), block)]
        return np.concatenate(parts), None

    rows = []
    rng = np.random.default_rng(0)
    for n_docs, dim, n_q in [(50_000, 384, 1000), (5_183, 768, 1109)]:
        d = rng.standard_normal((n_docs, dim)).astype(np.float32)
        q = rng.standard_normal((n_q, dim)).astype(np.float32)
        t_np, (i_np, _) = timed(lambda: numpy_topk(q, d, 100))
        index = faiss.IndexFlatIP(dim)
        index.add(d)
        t_flat, (_, i_flat) = timed(lambda: index.search(q, 100))
        t_knn, (_, i_knn) = timed(lambda: faiss.knn(q, d, 100, metric=faiss.METRIC_INNER_PRODUCT))
        task = f"exact top-100, {n_q} queries x {n_docs} docs x {dim}-d"
        same = np.mean([set(a) == set(b) for a, b in zip(i_np, i_flat)])
        rows.append(
            (
                task,
                "numpy blocked matmul+argpartition",
                t_np,
                "faiss IndexFlatIP",
                t_flat,
                f"same top-100 sets: {same:.3f}",
            )
        )
        same = np.mean([set(a) == set(b) for a, b in zip(i_knn, i_flat)])
        rows.append(
            (
                task,
                "faiss.knn (capgap before the tie rule)",
                t_knn,
                "faiss IndexFlatIP",
                t_flat,
                f"same top-100 sets: {same:.3f}",
            )
        )
        gold = [rng.choice(n_docs, 2, replace=False) for _ in range(n_q)]
        grades = [np.ones(2) for _ in range(n_q)]
        t_rank, (_, i_rank, _) = timed(
            lambda: rank_queries(dense_scores(q, d), n_q, gold, grades, None, 100, n_docs, duplicate_groups(d))
        )
        same = np.mean([set(a) == set(b) for a, b in zip(i_rank, i_knn)])
        rows.append(
            (
                task,
                "rank_queries (capgap evaluation: gold ranks + top-100)",
                t_rank,
                "faiss.knn",
                t_knn,
                f"same top-100 sets: {same:.3f}",
            )
        )
    rs = load_beir_dir(os.path.join(args.mirror, "scifact"))
    docs, queries = rs.corpus.passages(), list(rs.queries.texts)
    t_a, a = timed(lambda: BM25(docs, "bm25s", "robertson").search(queries, 100), repeat=1)
    t_b, b = timed(lambda: BM25(docs, "rank-bm25", "robertson").search(queries, 100), repeat=1)
    same = np.mean([set(x[:10]) == set(y[:10]) for x, y in zip(a[0], b[0])])
    rows.append(
        (
            f"BM25 index+search, SciFact {len(docs)} docs, {len(queries)} queries",
            "bm25s",
            t_a,
            "rank-bm25",
            t_b,
            f"same top-10 sets: {same:.3f}",
        )
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, numpy {np.__version__}, faiss {faiss.__version__}\n"
    )
    print("| task | ours | s | reference | s | agreement |")
    print("|---|---|---|---|---|---|")
    for task, a_name, ta, b_name, tb, agree in rows:
        print(f"| {task} | {a_name} | {ta:.3f} | {b_name} | {tb:.3f} | {agree} |")


if __name__ == "__main__":
    main()
