"""Cost of the ladder's heads (capgap.ladder.fit_head) on the default run's dataset shapes.

Synthetic unit vectors of the real shapes (the cost of a step depends on the shapes only):
queries x dim against n_docs documents, gold sets of the dataset's typical size. Times
``steps`` optimiser steps of each head (linear, mlp) with full and sampled candidates at 1 and 2
torch threads, and prints ms per step and the load average before and after.

Run: PYTHONPATH=src .venv/bin/python benchmarks/ladder.py [--steps 50] [--threads 1,2]
"""

import argparse
import os
import time

import numpy as np

# (name, n_queries fitted on all, n_docs, dim, gold per query)
SHAPES = [
    ("limit-small/minilm", 1000, 46, 384, 2),
    ("limit-small/mpnet", 1000, 46, 768, 2),
    ("nfcorpus/minilm", 2913, 3633, 384, 38),
    ("scifact/minilm", 1109, 5183, 384, 1),
]


def main():
    from capgap.ladder import LadderConfig, fit_head

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--candidates", default="full,sampled")
    ap.add_argument("--n-negatives", type=int, default=1024)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    for name, n, n_docs, dim, g in SHAPES:
        D = rng.standard_normal((n_docs, dim)).astype(np.float32)
        D /= np.linalg.norm(D, axis=1, keepdims=True)
        X = rng.standard_normal((n, dim)).astype(np.float32)
        gold = [rng.choice(n_docs, size=g, replace=False).tolist() for _ in range(n)]
        for cand in a.candidates.split(","):
            for th in (int(t) for t in a.threads.split(",")):
                cfg = LadderConfig(steps=a.steps, candidates=cand, n_negatives=a.n_negatives)
                out = []
                for kind in ("linear", "mlp"):
                    l0 = os.getloadavg()[0]
                    t = time.perf_counter()
                    fit_head(kind, X, D, gold, None, cfg, threads=th)
                    out.append(f"{kind} {1000 * (time.perf_counter() - t) / a.steps:.1f} ms (load {l0:.2f})")
                print(f"{name:20s} {cand:8s} threads {th}: " + ", ".join(out), flush=True)


if __name__ == "__main__":
    main()
