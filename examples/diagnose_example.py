"""Make a small, synthetic example for `capgap diagnose` (no real data): a 2,000-document index,
200 queries with 3 gold documents each, query embeddings of varying quality, and an approximate
(faiss IVF, 2 of 32 lists probed) run -- so every verdict occurs.

    python examples/diagnose_example.py example/
    capgap diagnose --doc-embeddings example/docs.npy --query-embeddings example/queries.npy \\
        --qrels example/qrels.tsv --doc-ids example/doc_ids.txt --query-ids example/query_ids.txt \\
        --ann-run example/ann.trec --k 10 --out example/diagnosis

Construction (seeded): documents are unit vectors in 32-d. Each query's gold set is 3 random
documents; its embedding is the normalised mean of its gold vectors plus Gaussian noise whose
scale grows with the query number (good encoders first, poor ones last). For 5 queries, a gold
document has 10 exact non-gold copies in the index: no query vector can rank it above them, so
it cannot reach the top 10 (index-limited by construction).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def main(out: Path, n_docs: int = 2000, n_queries: int = 200, dim: int = 32, seed: int = 0) -> None:
    import faiss

    rng = np.random.default_rng(seed)
    D = rng.standard_normal((n_docs, dim)).astype(np.float32)
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    n_copies = 5 * 10
    gold = [rng.choice(n_docs - n_copies, size=3, replace=False) for _ in range(n_queries)]
    for i in range(5):  # 10 exact copies of one gold document of queries 0..4: it ranks 11th at best
        D[n_docs - n_copies + 10 * i : n_docs - n_copies + 10 * (i + 1)] = D[gold[i][0]]
    noise = np.linspace(0.0, 0.15, n_queries, dtype=np.float32)[:, None]
    Q = np.stack([D[g].mean(0) for g in gold]) + noise * rng.standard_normal((n_queries, dim)).astype(np.float32)
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "docs.npy", D)
    np.save(out / "queries.npy", Q.astype(np.float32))
    (out / "doc_ids.txt").write_text("".join(f"doc{j}\n" for j in range(n_docs)))
    (out / "query_ids.txt").write_text("".join(f"q{i}\n" for i in range(n_queries)))
    with open(out / "qrels.tsv", "w") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for i, g in enumerate(gold):
            fh.writelines(f"q{i}\tdoc{j}\t1\n" for j in g)
    quant = faiss.IndexFlatIP(dim)
    ivf = faiss.IndexIVFFlat(quant, dim, 32, faiss.METRIC_INNER_PRODUCT)
    ivf.cp.seed = seed
    ivf.train(D)
    ivf.add(D)
    ivf.nprobe = 2
    scores, idx = ivf.search(Q, 10)
    with open(out / "ann.trec", "w") as fh:
        for i in range(n_queries):
            fh.writelines(
                f"q{i} Q0 doc{j} {r + 1} {s:.6f} ivf\n" for r, (j, s) in enumerate(zip(idx[i], scores[i])) if j >= 0
            )
    print(f"wrote {out}/: docs.npy {D.shape}, queries.npy {Q.shape}, doc_ids.txt, query_ids.txt, qrels.tsv, ann.trec")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "example"))
