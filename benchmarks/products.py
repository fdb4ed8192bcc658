"""The cutting plane's two index products, row-major against column-major, in one process.

Per iteration the probe scores its queries against the index (``W @ D.T``) and forms the new
cutting planes (``D.T @ Cm.T``); below ``constants.GEMV_ROWS`` queries these are one
matrix-vector product per query. They run on a column-major copy of the index
(``capgap.probe.setup.transposed``); this script times both layouts with the probe's own
functions (``planes._scores32`` / ``_planes32``), one BLAS thread, at the widths a batch goes
through (its long tail iterates 1-9 queries at a time), on a pipeline run's real index
(``--results``: NFCorpus x MiniLM when built) and on synthetic unit vectors of the same shape.
Reported: milliseconds per query row (median of ``--repeats`` timed calls, each after one warm
call) and the largest difference between the layouts' results (float32 rounding).

Run: .venv/bin/python benchmarks/products.py [--results results] [--repeats 30]
"""

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from capgap.probe.planes import _planes32, _scores32
from capgap.probe.setup import transposed

WIDTHS = (1, 2, 4, 8, 16, 64, 365)


def ms_per_row(f, rows: int, repeats: int) -> float:
    f()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times)) / rows


def indexes(results: str):
    path = Path(results) / "nfcorpus" / "minilm" / "index" / "embeddings.npy"
    if path.exists():
        D = np.ascontiguousarray(np.load(path), dtype=np.float32)
        yield "nfcorpus x minilm (real)", D
        shape = D.shape
    else:
        print(f"(no index at {path}: synthetic only)")
        shape = (3633, 384)
    rng = np.random.default_rng(0)
    D = rng.standard_normal(shape).astype(np.float32)
    yield "synthetic unit vectors", D / np.linalg.norm(D, axis=1, keepdims=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default="results")
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    blas = ", ".join(
        f"{i['internal_api']} {i['version']} ({i.get('architecture')})"
        for i in threadpool_info()
        if i["user_api"] == "blas"
    )
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; numpy {np.__version__}; BLAS: {blas}\n"
    )
    print(
        "| index | docs x dim | rows | scores ms/row, row-major | column-major | speed-up | planes ms/row, row-major | column-major "
        "| speed-up | max abs difference |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(1)
    with threadpool_limits(1):  # as in the probe's batches
        for label, D in indexes(args.results):
            DT = transposed(D)
            for m in WIDTHS:
                W = (rng.standard_normal((m, D.shape[1])) * 10).astype(np.float32)
                Cm = (rng.standard_normal((m, D.shape[0])) * 1e-3).astype(np.float32)
                s_row = ms_per_row(lambda: _scores32(D, W), m, args.repeats)
                s_col = ms_per_row(lambda: _scores32(D, W, DT), m, args.repeats)
                p_row = ms_per_row(lambda: _planes32(D, Cm), m, args.repeats)
                p_col = ms_per_row(lambda: _planes32(D, Cm, DT), m, args.repeats)
                diff = max(
                    float(np.abs(_scores32(D, W) - _scores32(D, W, DT)).max()),
                    float(np.abs(_planes32(D, Cm) - _planes32(D, Cm, DT)).max()),
                )
                print(
                    f"| {label} | {D.shape[0]} x {D.shape[1]} | {m} | {s_row:.3f} | {s_col:.3f} | {s_row / s_col:.1f}x | {p_row:.3f} | "
                    f"{p_col:.3f} | {p_row / p_col:.1f}x | {diff:.1e} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
