"""The probe at the paper's scale: structured indexes of 100k-1M documents x 384-2,560
dimensions (``capgap.synthetic``), with query sets shaped like BRIGHT (100 queries, 2-8 gold,
excluded documents), TREC-COVID (50 queries, ~500 gold) and Quora (10,000 queries, 1-2 gold).

Per index x query set, in one process run: the probe with its defaults (``capgap.probe.probe``,
2 worker processes; screening above ``SCREEN_MIN_DOCS`` documents) on the memory-mapped index:
wall and CPU seconds (this process and its workers), peak resident memory (this process, and
the largest worker; a memory-mapped index counts where its pages are resident; each index x
set runs in a fresh process), certified and
decided fractions, iterations, screening rounds and the queries left to the whole-index probe;
beside it the floor, the bare float32 score product of the same number of query vectors with
the same index, read the same way (row blocks of the memory map); and, where ``--whole``
queries are asked for, the whole-index probe (screening off) on the first of them, the
unscreened reference, with their verdicts compared.

``--dlib`` adds dlib's ``svm_rank_trainer`` (the reference solver, benchmarks/probe.py) on a
sample where it finishes: the first queries' gold documents and 20,000 random documents of the
index, against capgap's probe on the same sample, seconds per query.

Run: .venv/bin/python benchmarks/scale.py --docs 500000 --dims 768 --sets bright
     [--dir /tmp/capgap-scale] [--queries quora=2000] [--whole 10] [--dlib 3]
Index files are kept in --dir (generated once per seed, size and dimension; 1M x 2,560 is 10 GB).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from capgap.probe import constants as const
from capgap.probe import probe
from capgap.synthetic import query_set, structured_index


def index_file(folder: Path, n: int, dim: int, seed: int):
    path = folder / f"structured-{n}x{dim}-seed{seed}.npy"
    labels = path.with_suffix(".labels.npy")
    if path.exists() and labels.exists():
        return np.load(path, mmap_mode="r"), np.load(labels), 0.0
    t = time.perf_counter()
    D, lab = structured_index(n, dim, seed=seed, path=path)
    np.save(labels, lab)
    return D, lab, time.perf_counter() - t


def floor_seconds(D, n_queries: int, repeats: int = 3) -> float:
    """Median seconds of the bare product D @ W, W (dim, n_queries) float32, in row blocks."""
    W = np.random.default_rng(0).standard_normal((D.shape[1], n_queries)).astype(np.float32)
    step = max(1, const.SCREEN_SCORE_BYTES // (4 * const.SCREEN_BLOCK))  # query columns per product: <= 512 MB out
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        for b0 in range(0, D.shape[0], const.SCREEN_BLOCK):
            block = np.asarray(D[b0 : b0 + const.SCREEN_BLOCK])
            for c0 in range(0, n_queries, step):
                block @ W[:, c0 : c0 + step]
        out.append(time.perf_counter() - t)
    return float(np.median(out))


def timed_probe(D, golds, excl, threads=2):
    r0, c0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    res = probe(D, golds, excluded_sets=excl, threads=threads)
    wall = time.perf_counter() - t
    r1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) + (
        c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime
    )
    return res, wall, cpu


def describe(res) -> dict:
    out = Counter(r.outcome for r in res)
    screen = [r.extra.get("screen") for r in res]
    return {
        "certified": np.mean([r.certified for r in res]),
        "decided": np.mean([r.outcome != "undecided" for r in res]),
        "outcomes": ", ".join(f"{k} {v}" for k, v in sorted(out.items())),
        "iterations": f"{np.median([r.iterations for r in res]):.0f} / {max(r.iterations for r in res)}",
        "rounds": f"{np.median([s['rounds'] for s in screen if s]):.0f} / {max(s['rounds'] for s in screen if s)}"
        if any(screen)
        else "-",
        "whole": sum(1 for s in screen if s and s["whole"]),
        "rprec": np.mean([r.recall_at(len(r.gold_ranks)) for r in res]),
    }


def dlib_sample(D, golds, excl, n_queries: int, n_sample: int = 20_000, seed: int = 0):
    """dlib and capgap's probe (whole-index path) on the same sample index: the first
    ``n_queries`` queries' gold documents and ``n_sample`` random documents. Seconds per query."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from probe import dlib_seconds  # benchmarks/probe.py

    rng = np.random.default_rng(seed)
    gold_rows = np.unique(np.concatenate(golds[:n_queries]))
    rows = np.union1d(gold_rows, rng.choice(D.shape[0], size=n_sample, replace=False))
    excluded = np.unique(np.concatenate([e for e in excl[:n_queries] if len(e)] or [np.zeros(0, np.int64)]))
    rows = np.setdiff1d(rows, excluded)
    S = np.asarray(D[rows], dtype=np.float32)
    g = [np.searchsorted(rows, x) for x in golds[:n_queries]]
    dl, dl_rprec = dlib_seconds(S, g, 1000.0, n_queries)
    t = time.perf_counter()
    res = probe(S, g, threads=1, C_max=None, lp_check_max_docs=0)  # the soft-margin problem dlib solves, at its C
    ours = (time.perf_counter() - t) / n_queries
    return dl, dl_rprec, ours, float(np.mean([r.recall_at(len(r.gold_ranks)) for r in res]))


def one(args, n, dim, kind):
    """One index x query set, in this (fresh) process: one table row and the comments."""
    folder = Path(args.dir)
    nq = dict(kv.split("=") for kv in args.queries.split(",") if kv)
    D, labels, _ = index_file(folder, n, dim, args.seed)  # generated by main(), in its own process
    golds, excl = query_set(kind, labels, seed=args.seed, n_queries=int(nq[kind]) if kind in nq else None)
    floor = floor_seconds(D, len(golds))
    res, wall, cpu = timed_probe(D, golds, excl)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    d = describe(res)
    print(
        f"| {n:,} x {dim} | {kind} | {len(golds):,} | {wall:.1f} ({cpu:.0f}) | {floor:.2f} | {wall / floor:.1f} | "
        f"{rss:.2f} / {kids:.2f} ({D.nbytes / 2**30:.2f}) | {d['certified']:.3f} | {d['decided']:.3f} | "
        f"{d['outcomes']} | {d['iterations']} | {d['rounds']} | {d['whole']} | {d['rprec']:.3f} |",
        flush=True,
    )
    if args.whole:
        k = min(args.whole, len(golds))
        const.SCREEN_MIN_DOCS = 1 << 62
        ref, w_wall, w_cpu = timed_probe(D, golds[:k], excl[:k])
        same = sum(
            a.outcome == b.outcome
            and a.certified == b.certified
            and a.recall_at(len(a.gold_ranks)) == b.recall_at(len(b.gold_ranks))
            for a, b in zip(ref, res[:k])
        )
        print(
            f"<!-- {n}x{dim} {kind}: whole-index probe (screening off), first {k} queries: {w_wall:.1f} s ({w_cpu:.0f} CPU s), "
            f"{w_wall / k:.2f} s/query against screened {wall / len(golds):.3f} s/query; "
            f"same outcome, certificate and R-precision: {same}/{k} -->",
            flush=True,
        )
    if args.dlib:
        dl, dl_r, ours, ours_r = dlib_sample(D, golds, excl, args.dlib)
        print(
            f"<!-- {n}x{dim} {kind}: dlib svm_rank_trainer on a 20k sample, {args.dlib} queries: {dl:.2f} s/query (R-prec "
            f"{dl_r:.3f}); capgap soft-margin on the same: {ours:.3f} s/query (R-prec {ours_r:.3f}) -->",
            flush=True,
        )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", default="500000")
    ap.add_argument("--dims", default="768")
    ap.add_argument("--sets", default="bright")
    ap.add_argument("--queries", default="", help="per set, e.g. quora=2000 (default: the shape's)")
    ap.add_argument("--dir", default="/tmp/capgap-scale")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--whole", type=int, default=0, help="also the whole-index probe on the first N queries")
    ap.add_argument("--dlib", type=int, default=0, help="dlib on a 20k sample, N queries")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # "n,dim,kind": one row, in this process
    args = ap.parse_args()
    if args.one:
        n, dim, kind = args.one.split(",")
        one(args, int(n), int(dim), kind)
        return
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    print(
        f"<!-- {platform.node()} {platform.machine()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}, "
        f"load {os.getloadavg()[0]:.1f} -->",
        flush=True,
    )
    print(
        "| index | set | queries | probe s (CPU s) | floor s | ratio | peak RSS GB: process / workers (index) | certified | "
        "decided | outcomes | iterations med / max | rounds med / max | to whole | R-prec |",
        flush=True,
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    for n in map(int, args.docs.split(",")):
        for dim in map(int, args.dims.split(",")):
            # generated here, so that a row's peak memory is the probe's and not the generator's
            gen = index_file(Path(args.dir), n, dim, args.seed)[2]
            if gen:
                print(f"<!-- generated {n}x{dim} in {gen:.0f} s -->", flush=True)
            for kind in args.sets.split(","):  # each in a fresh process: its own peak memory
                subprocess.run([sys.executable, __file__, *sys.argv[1:], "--one", f"{n},{dim},{kind}"], check=True)


if __name__ == "__main__":
    main()
