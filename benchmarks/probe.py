"""Speed and memory of the capacity probe against dlib's svm_rank_trainer, in one process.

Synthetic unit vectors (seeded), N documents x dim, Q queries with 2 random gold documents each.
capgap's probe runs all Q queries batched; dlib (the O(n log n) OCA solver of the same
pair-averaged ranking-SVM objective, same C) runs the first Q_dlib of the same problems one by
one (only ``train`` is timed, not building its input). Prints per-query times and the ratio.

Cost model of the probe: per cutting-plane iteration and batch of B queries, one
(N x dim).(dim x B) product for the scores and one (B x N).(N x dim) product for the new
constraints, plus O(N log |G|) counting per query. The table gives that model's prediction
(number of products actually run x the measured time of one product) beside the measured time.

Memory: tracemalloc's peak during the probe (numpy allocations are traced), against the
index's own size.

Run: .venv/bin/python benchmarks/probe.py [--sizes 10000,50000,200000] [--dims 384,768]
"""

import argparse
import os
import platform
import time
import tracemalloc

import numpy as np


def dlib_problem(dlib, vecs, gold):
    rp = dlib.ranking_pair()
    gold_set = set(int(g) for g in gold)
    for i in gold:
        rp.relevant.append(vecs[i])
    for j, v in enumerate(vecs):
        if j not in gold_set:
            rp.nonrelevant.append(v)
    return rp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,50000,200000")
    ap.add_argument("--dims", default="384,768")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--dlib-queries", type=int, default=10)
    ap.add_argument("--C", type=float, default=1000.0)
    args = ap.parse_args()
    import dlib
    from threadpoolctl import threadpool_info

    from capgap.probe import probe

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; numpy {np.__version__}; BLAS: "
          + ", ".join(f"{i['internal_api']} {i['version']} ({i['num_threads']} threads)" for i in threadpool_info() if i["user_api"] == "blas"))
    print(f"C={args.C} (pair-averaged, both solvers), eps=1e-3 (ours) / 1e-3 (dlib default), {args.queries} queries x 2 gold\n")
    print("| N | dim | index MB | ours total s | ours s/query | model s (products x one) | products | dlib s/query | dlib / ours | peak extra MB (x index) | certified | median it |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in map(int, args.sizes.split(",")):
        for dim in map(int, args.dims.split(",")):
            rng = np.random.default_rng(n + dim)
            D = rng.standard_normal((n, dim)).astype(np.float32)
            D /= np.linalg.norm(D, axis=1, keepdims=True)
            golds = [rng.choice(n, 2, replace=False) for _ in range(args.queries)]
            B = max(16, dim // 4)
            W = rng.standard_normal((B, dim)).astype(np.float32)
            W @ D.T
            t = time.perf_counter()
            for _ in range(3):
                W @ D.T
            t_prod = (time.perf_counter() - t) / 3
            tracemalloc.start()
            t = time.perf_counter()
            res = probe(D, golds, C=args.C, eps=1e-3, C_max=None, lp_check_max_docs=0)
            t_ours = time.perf_counter() - t
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            its = np.array([r.iterations for r in res])
            products = sum(2 * int(its[s : s + B].max()) + 1 for s in range(0, len(its), B))
            vecs = dlib.vectors()
            vecs.extend([dlib.vector(row.astype(float).tolist()) for row in D])
            t_dlib = 0.0
            for g in golds[: args.dlib_queries]:
                rp = dlib_problem(dlib, vecs, g)
                tr = dlib.svm_rank_trainer()
                tr.c = args.C
                t = time.perf_counter()
                tr.train(rp)
                t_dlib += time.perf_counter() - t
            per_dlib = t_dlib / args.dlib_queries
            per_ours = t_ours / args.queries
            mb = D.nbytes / 2**20
            print(f"| {n} | {dim} | {mb:.0f} | {t_ours:.1f} | {per_ours:.4f} | {products * t_prod:.1f} | {products} | {per_dlib:.3f} | {per_dlib / per_ours:.1f} | {peak / 2**20:.0f} ({peak / D.nbytes:.2f}) | {np.mean([r.certified for r in res]):.3f} | {np.median(its):.0f} |", flush=True)
            del vecs


if __name__ == "__main__":
    main()
