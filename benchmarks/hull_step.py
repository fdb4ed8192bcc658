"""The inseparability proof's candidates per round, replayed on recorded proof inputs, in one process.

The probe's one in-loop proof (``capgap.probe.proofs._prove_inseparable``) solves scipy's NNLS
on the gold documents against the non-gold documents w ranks highest, ``max(dim + 2,
HULL_STEP)`` of them per round, for up to ``HULL_ROUNDS`` rounds of column generation. This
script runs the shipped probe on every ``--every``-th NFCorpus x MiniLM query (one process, the
DAG's inputs: ``benchmarks/probe.py``'s ``real_cases``), records every proof's inputs (scores at
w, gold rows, rows set aside), then replays each with the shipped function under each
``--configs`` setting (``step:rounds``; step sets ``HULL_STEP``, so the round's size is
``max(dim + 2, step)``) and reports the seconds in all, the verdicts (witness / proven /
failed) and how many agree with the recording's.

Run, with CAPGAP_DATA_MIRROR set: .venv/bin/python benchmarks/hull_step.py [--every 8]
       [--configs 772:3,256:6,256:3]
"""

import argparse
import collections
import os
import platform
import sys
import time
from pathlib import Path

from capgap.probe import batch, constants, probe


def verdict(proof) -> str:
    return "witness" if proof.witness is not None else "proven" if proof.bound is not None else "failed"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--every", type=int, default=8)
    ap.add_argument("--configs", default="772:3,256:6,256:3")
    ap.add_argument("--results", default="results")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from probe import real_cases

    case = next((c for c in real_cases(args.results) if c[0].startswith("nfcorpus")), None)
    if case is None:
        raise SystemExit(f"no NFCorpus x MiniLM index under {args.results}: build it first (config/nfcorpus.yaml)")
    _, D, golds, kw = case
    sel = list(range(0, len(golds), args.every))
    sub = {k: ([v[i] for i in sel] if k != "duplicates" and v is not None else v) for k, v in kw.items()}
    recorded = []
    shipped = batch._prove_inseparable

    def record(s, members, seek_witness, golds_, opt_excl, Df, rep, dmax):
        out = shipped(s, members, seek_witness, golds_, opt_excl, Df, rep, dmax)
        if len(members) == 1:
            recorded.append(
                (s.copy(), golds_[members[0]], opt_excl[members[0]], seek_witness, Df, rep, dmax, verdict(out))
            )
        return out

    batch._prove_inseparable = record
    t = time.perf_counter()
    probe(D, [golds[i] for i in sel], threads=1, **sub)
    batch._prove_inseparable = shipped
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}; "
        f"probe on {len(sel)} queries: {time.perf_counter() - t:.1f} s, {len(recorded)} single-query proofs recorded "
        f"(shipped: HULL_STEP {constants.HULL_STEP}, HULL_ROUNDS {constants.HULL_ROUNDS})\n"
    )
    print("| candidates per round | rounds | NNLS-proof s in all | verdicts | agree with the recording |")
    print("|---|---|---|---|---|")
    dim = D.shape[1]
    for cfg in args.configs.split(","):
        step, rounds = map(int, cfg.split(":"))
        constants.HULL_STEP, constants.HULL_ROUNDS = step, rounds
        total, verdicts, agree = 0.0, collections.Counter(), 0
        for s, gold, excl, seek, Df, rep, dmax, ref in recorded:
            t = time.perf_counter()
            v = verdict(shipped(s, [0], seek, [gold], [excl], Df, rep, dmax))
            total += time.perf_counter() - t
            verdicts[v] += 1
            agree += v == ref
        print(
            f"| {max(dim + 2, step)} | {rounds} | {total:.2f} | {dict(verdicts)} | {agree} of {len(recorded)} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
