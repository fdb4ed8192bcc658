"""Capacity under index compression: build every default compressed variant of one index
(capgap.compress) and run the capacity probe on each, in one process.

For each variant (the float32 reference, then ``default_variants(dim)``) prints bytes per
document, the seconds ``compress`` took, the seconds the probe took on the compressed
``documents``, the fraction of queries certified, and the probe's mean recall@10 (pessimistic
ties). The probe runs with the schema's defaults (C, C_max, eps, lp_check_max_docs; the exact LP
only runs on corpora of at most lp_check_max_docs documents).

Input: ``--embeddings`` a .npy ``(n, dim)`` float32 index and ``--gold`` a JSON list of lists of
row indices (one list per query); default a synthetic seeded 5183 x 384 unit-norm Gaussian
matrix (SciFact's corpus size, MiniLM's width) with 300 queries of 1-2 random gold rows.

Run: .venv/bin/python benchmarks/compress.py [--embeddings E.npy --gold gold.json] [--threads 1]
"""

import argparse
import json
import os
import platform
import time

import numpy as np


def load(args):
    if args.embeddings:
        D = np.load(args.embeddings, mmap_mode="r")
        if args.gold is None:
            raise SystemExit("--embeddings needs --gold (a JSON list of lists of row indices)")
        with open(args.gold, encoding="utf-8") as f:
            golds = [np.asarray(g, dtype=np.int64) for g in json.load(f)]
        return D, golds, f"{args.embeddings} ({len(golds)} queries from {args.gold})"
    rng = np.random.default_rng(args.seed)
    D = rng.standard_normal((args.n, args.dim)).astype(np.float32)
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    golds = [rng.choice(args.n, size=int(rng.integers(1, 3)), replace=False) for _ in range(args.queries)]
    return D, golds, f"synthetic unit-norm Gaussian, seed {args.seed}, {args.queries} queries x 1-2 gold rows"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--embeddings", help=".npy (n, dim) float32 index")
    ap.add_argument("--gold", help="JSON list of lists of row indices, one list per query")
    ap.add_argument("--n", type=int, default=5183)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0, help="synthetic data and PQ k-means seed")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="faiss OpenMP and BLAS threads")
    ap.add_argument("--variants", help="comma-separated variant names (default: float32 + default_variants(dim))")
    args = ap.parse_args()

    import faiss
    from threadpoolctl import threadpool_info

    from capgap.compress import compress, default_variants
    from capgap.config import section_defaults
    from capgap.probe import probe

    D, golds, what = load(args)
    n, dim = D.shape
    variants = args.variants.split(",") if args.variants else ["float32"] + default_variants(dim)
    pdef = section_defaults("probe")
    blas = ", ".join(f"{i['internal_api']} {i['version']}" for i in threadpool_info() if i["user_api"] == "blas")
    print(
        f"machine: {platform.platform()}, {platform.machine()}, os.cpu_count() = {os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.2f}; python {platform.python_version()}, numpy {np.__version__}, "
        f"faiss {faiss.__version__}, BLAS {blas}; threads = {args.threads}"
    )
    print(f"index: {n} x {dim}, {what}")
    print(
        f"probe: C={pdef['C']}, C_max={pdef['C_max']}, eps={pdef['eps']}, lp_check_max_docs={pdef['lp_check_max_docs']}\n"
    )
    print("| variant | family | bytes/doc | x smaller | compress s | probe s | certified | recall@10 |")
    print("|---|---|---|---|---|---|---|---|")
    for v in variants:
        t = time.perf_counter()
        c = compress(D, v, seed=args.seed, threads=args.threads)
        t_c = time.perf_counter() - t
        t = time.perf_counter()
        res = probe(c.documents, golds, threads=args.threads)
        t_p = time.perf_counter() - t
        cert = float(np.mean([r.certified for r in res]))
        rec = float(np.mean([r.recall_at(10) for r in res]))
        print(
            f"| {v} | {c.family} | {c.bytes_per_doc:g} | {4 * dim / c.bytes_per_doc:.1f} | {t_c:.2f} | {t_p:.2f} | {cert:.3f} | {rec:.3f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
