"""The capacity probe against dlib's svm_rank_trainer, in one process, on the cases users run.

Cases (``--cases``, default all but ``real``, which needs a finished pipeline run):

- ``sep2`` / ``sep10``: 50k x 384 synthetic unit vectors, 1,000 queries with 2 / 10 random gold
  documents (separable: every query certified after one or two cutting planes);
- ``insep32`` / ``insep64``: 50k x 32 / 64, 20 gold documents (the hard-margin LP is
  infeasible); ``insep384``: 50k x 384, 50 gold documents, 192 queries;
- ``big``: 1M x 384, 1,000 queries with 2 gold documents (capgap only: dlib's Python input for
  a 1M-document ranking pair does not fit the time; the reference is capgap's
  ``solve="optimum"``, solving every query to the optimum without certificate-first probing, on one batch);
- ``real``: the frozen indexes of a pipeline run (``--results``, default ``results``): NFCorpus,
  SciFact x MiniLM and LIMIT-small x MiniLM / MPNet with their real gold sets, grades,
  exclusions, text ties and duplicate documents, as the DAG passes them.

capgap runs with the shipped defaults (``probe.solve: certificate``, C = 1000 escalated up to
C_max = 1e8 behind the inseparability gate) and, where it differs, at the soft-margin problem
only (``C_max=None``: the problem dlib solves). dlib runs ``--dlib-queries`` of the
same problems (a seeded sample) one by one at the same C (pair-averaged, both solvers). Only the solvers are
inside the timed regions (dlib's input is built before its clock starts; no tracemalloc).
capgap runs its batches of queries in one worker process per core (one BLAS thread each, as
the DAG's probe rule does); "on dlib's queries" is capgap on dlib's sample alone (one call),
also in one process (its CPU time against dlib's one thread). capgap and dlib on the sample
alternate ``--repeats`` times (default 3; medians, and the ratio's range over the repeats),
so that a machine whose speed drifts during the run moves both alike. The load average is
printed before and after each case.

Run: .venv/bin/python benchmarks/probe.py [--cases sep2,sep10,insep32,insep64,insep384,big,real]
"""

import argparse
import os
import platform
import time
from collections import Counter

import numpy as np

SYNTHETIC = {  # name: (n_docs, dim, gold per query, queries)
    "sep2": (50_000, 384, 2, 1000),
    "sep10": (50_000, 384, 10, 1000),
    "insep32": (50_000, 32, 20, 32),
    "insep64": (50_000, 64, 20, 32),
    "insep384": (50_000, 384, 50, 192),
    "big": (1_000_000, 384, 2, 1000),
}


def unit_vectors(n, dim, seed):
    rng = np.random.default_rng(seed)
    D = np.empty((n, dim), dtype=np.float32)
    for b0 in range(0, n, 100_000):  # blockwise: no float64 copy of a 1M-row index
        block = rng.standard_normal((min(100_000, n - b0), dim)).astype(np.float32)
        D[b0 : b0 + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return D, rng


def dlib_seconds(D, golds, C, limit):
    """Seconds per query of dlib's svm_rank_trainer (only ``train`` timed) on the first
    ``limit`` problems, and their recall@|G| for comparison."""
    import dlib

    vecs = dlib.vectors()
    vecs.extend([dlib.vector(row.astype(float).tolist()) for row in D])
    total, recalls = 0.0, []
    for g in golds[:limit]:
        gs = set(int(i) for i in g)
        rp = dlib.ranking_pair()
        for i in g:
            rp.relevant.append(vecs[int(i)])
        for j in range(len(D)):
            if j not in gs:
                rp.nonrelevant.append(vecs[j])
        tr = dlib.svm_rank_trainer()
        tr.c = C
        t = time.perf_counter()
        df = tr.train(rp)
        total += time.perf_counter() - t
        w = np.array(list(df.weights), dtype=np.float64)
        s = D.astype(np.float64) @ w
        top = np.argsort(-s, kind="stable")[: len(g)]
        recalls.append(len(gs & set(top.tolist())) / len(g))
    return total / max(1, min(limit, len(golds))), float(np.mean(recalls)) if recalls else float("nan")


def summary(res):
    its = np.array([r.iterations for r in res])
    return {
        "certified": float(np.mean([r.certified for r in res])),
        "outcomes": " / ".join(f"{k} {v}" for k, v in sorted(Counter(r.outcome for r in res).items())),
        "max_iter": int(sum(r.stopped == "max_iter" for r in res)),
        "it": f"{np.median(its):.0f} / {np.percentile(its, 90):.0f} / {its.max()}",
        "recall@G": float(np.mean([r.recall_at(len(r.gold_ranks)) for r in res])),
    }


def run_case(name, D, golds, args, threads, kw=None):
    """One case: every query with the shipped defaults (``kw``: the DAG's per-query extras:
    grades, exclusions, text ties, duplicate documents), then the reference and capgap on the
    same ``--dlib-queries`` problems (a seeded sample), one by one for dlib and as one call for
    capgap (its worker processes, and once more in one process), alternating ``--repeats``
    times (medians; the ratio's range over the repeats)."""
    from capgap.probe import probe

    kw = kw or {}
    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    res = probe(D, golds, threads=threads, **kw)
    t_ours = time.perf_counter() - t
    s = summary(res)
    pick = np.sort(np.random.default_rng(0).choice(len(golds), min(args.dlib_queries, len(golds)), replace=False))
    sub = [golds[i] for i in pick]
    subkw = {k: ([v[i] for i in pick] if k != "duplicates" and v is not None else v) for k, v in kw.items()}
    ref = "dlib" if name != "big" else "capgap optimum"
    same_t, one_t, ref_t, rec_ref = [], [], [], float("nan")
    for rep in range(args.repeats):  # capgap and the reference alternate: a machine whose speed drifts moves both alike
        t = time.perf_counter()
        probe(D, sub, threads=threads, **subkw)
        same_t.append((time.perf_counter() - t) / len(sub))
        t = time.perf_counter()
        probe(D, sub, threads=1, **subkw)  # one process: capgap's CPU time against dlib's (one thread)
        one_t.append((time.perf_counter() - t) / len(sub))
        # the reference is capgap's solve="optimum" (no certificate-first probing), on one batch (once: ~4 min)
        if name == "big":
            if rep == 0:
                t = time.perf_counter()
                probe(D, sub, threads=threads, solve="optimum")
                ref_t.append((time.perf_counter() - t) / len(sub))
        else:
            per_ref, rec_ref = dlib_seconds(D, sub, args.C, len(sub))
            ref_t.append(per_ref)
    same, one, per_ref = float(np.median(same_t)), float(np.median(one_t)), float(np.median(ref_t))
    ratios = [r / c for r, c in zip(ref_t, same_t)] if len(ref_t) == len(same_t) else [per_ref / c for c in same_t]
    soft = ""
    if s["certified"] < 1.0:  # the soft-margin problem alone (dlib's), on dlib's queries
        t = time.perf_counter()
        probe(D, sub, threads=threads, lp_check_max_docs=0, C_max=None, grades=subkw.get("grades"))  # dlib's problem
        soft = f"{(time.perf_counter() - t) / len(sub):.3f}"
    per = t_ours / len(golds)
    load1 = os.getloadavg()[0]
    print(
        f"| {name} | {D.shape[0]} x {D.shape[1]} | {len(golds)} x {np.median([len(g) for g in golds]):.0f} | {t_ours:.2f} | {per:.4f} | "
        f"{same:.4f} | {one:.4f} | {soft or '-'} | {ref} {per_ref:.3f} | {per_ref / same:.1f} ({min(ratios):.1f}-{max(ratios):.1f}) | "
        f"{per_ref / one:.1f} | {s['certified']:.3f} | {s['outcomes']} | {s['it']} | "
        f"{s['max_iter']} | {s['recall@G']:.3f} / {rec_ref:.3f} | {load0:.2f} / {load1:.2f} |",
        flush=True,
    )


def real_cases(results):
    """The frozen indexes of a pipeline run, with the probe's inputs exactly as the DAG builds
    them (``capgap.probe.evaluate``): gold rows, grades, exclusions, text ties, duplicates."""
    from pathlib import Path

    from capgap.data import load_canonical
    from capgap.evaluate import Judged
    from capgap.index import load_index
    from capgap.retrieval import document_groups, text_key

    for ds, enc in (("nfcorpus", "minilm"), ("scifact", "minilm"), ("limit-small", "minilm"), ("limit-small", "mpnet")):
        folder = Path(results) / ds
        if not (folder / enc / "index" / "embeddings.npy").exists():
            print(f"| {ds} x {enc} | (no index under {folder}: run the pipeline first) |")
            continue
        rs = load_canonical(folder / "data")
        idx = load_index(folder / enc / "index", corpus=rs.corpus)
        j = Judged.of(rs, list(rs.queries.ids), idx.doc_ids)
        kw = {
            "grades": j.grades,
            "excluded_sets": j.excluded,
            "tie_groups": [text_key(x) for x in rs.queries.texts],
            "duplicates": document_groups(rs.corpus),
        }
        yield f"{ds} x {enc}", np.asarray(idx.embeddings), j.gold, kw


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="sep2,sep10,insep32,insep64,insep384,big")
    ap.add_argument("--dlib-queries", type=int, default=8)
    ap.add_argument("--C", type=float, default=1000.0)
    ap.add_argument("--results", default="results")
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="capgap and the reference on the same queries, alternating, this many times each (medians reported)",
    )
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    from threadpoolctl import threadpool_info

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores; numpy {np.__version__}; BLAS: "
        + ", ".join(f"{i['internal_api']} {i['version']}" for i in threadpool_info() if i["user_api"] == "blas")
    )
    print(
        f"C = {args.C} (pair-averaged, both solvers); capgap: shipped probe defaults; dlib: {args.dlib_queries} seeded queries\n"
    )
    print(
        "| case | docs x dim | queries x gold | capgap total s | capgap s/query | capgap s/query on dlib's queries | "
        "the same, one process | soft-margin only s/query | reference s/query | reference / capgap (same queries; "
        "min-max over the repeats) | reference / capgap, one process | certified | outcomes | "
        "iterations median / p90 / max | max_iter hits | recall@G capgap / reference | load before / after |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    threads = os.cpu_count()  # worker processes, one BLAS thread each (capgap.probe)
    for name in args.cases.split(","):
        if name == "real":
            for label, D, golds, kw in real_cases(args.results):
                run_case(label, D, golds, args, threads, kw)
            continue
        n, dim, G, Q = SYNTHETIC[name]
        D, rng = unit_vectors(n, dim, n + dim + G)
        golds = [rng.choice(n, G, replace=False) for _ in range(Q)]
        run_case(name, D, golds, args, threads)
        del D


if __name__ == "__main__":
    main()
