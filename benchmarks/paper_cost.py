"""What config/paper.yaml costs: GPU hours, CPU hours and disk, estimated from throughput measured
on this machine and stated assumptions (README "Reproduce the paper").

    .venv/bin/python benchmarks/paper_cost.py [--gpu-tflops 300] [--doc-tokens 200] [--query-tokens 128]
        [--nfcorpus results/nfcorpus] [--nodes 1 2 4 8 16 32] [--node-cores 16]

Method
------
1. Measure this CPU: MiniLM-L6 (bundled) encodes real LIMIT-small documents; the measured
   tokens/s times the forward cost 2 x (non-embedding parameters) FLOPs per token gives this
   machine's effective FLOP/s -- a check on the FLOP model, printed beside the estimates.
2. Transformer cost model (Kaplan et al. 2020): forward = 2 N T FLOPs for N non-embedding
   parameters and T tokens; a training step = 3x its forward (backward ~2x; LoRA still
   back-propagates through every activation). Attention's T^2 term is ignored (T <= 512).
3. GPU time = FLOPs / (assumed sustained bf16 FLOP/s, default 300 TFLOP/s: ~30% of an H100's
   dense bf16 peak). Every number scales inversely with that assumption.
4. The probe runs on CPU. Up to 50k documents, the whole-index probe at NFCorpus's measured cost
   per query x document x dimension (item 7). Above, screening (``capgap.probe.screen``): per
   query set, the index's checks and statistics; per query, two passes of the bare float32 score
   product and the query's solve on its candidates, by query class (easy: 1-2 gold; multi-gold;
   inseparable: hundreds of gold spread over the index, which the whole-index probe takes),
   fitted on benchmarks/scale.py's runs on structured 100k-1M x 384-2,560 indexes
   (``probe_core_s``). Which class a dataset's queries fall in is an assumption
   (``QUERY_CLASS``); the inseparable class was measured at 768 dimensions only and is scaled
   by documents x dimension.
5. ColBERT's token index and exact MaxSim re-scoring run on CPU (faiss), scaled from limit-50k
   (measured: 6.3 min index build over 6.05M tokens, 2.4 min for 1,000 queries, 2 cores).
6. Disk: float32 frozen indexes (n_docs x dim x 4 B), ColBERT token embeddings at the bytes per
   token measured on limit-50k (1.5 GB for 6.05M tokens), model weights.

7. Shards (issue 30; ``index.shards``, ``probe.shards``): measured here, one shard job's
   throughput: MiniLM documents/s on NFCorpus documents (one 2,048-document chunk's ``encode``
   call, what an ``index_shard`` job repeats), and the probe's queries/s on one ``probe_shard``
   of NFCorpus x MiniLM (the frozen index of ``--nfcorpus``: 3,633 x 384, multi-gold: its gold
   sizes are the ones measured). The probe's core-seconds per query scale with n_docs x dim to
   every dataset x encoder (one score and one constraint product per iteration; the iteration
   count of NFCorpus's real queries, not the synthetic benchmark's ~10). The projected wall time
   on N nodes (one GPU and ``--node-cores`` cores each, profiles/gpu's probe_shard threads) is
   a stage-by-stage bound: the index shards (GPU, ``--shard-overhead-s`` each for loading the
   model), then fine-tuning and ColBERT (GPU, one job each) beside the probe shards (CPU),
   each stage scheduled longest-job-first over the N nodes, with N shards per index and probe.

Dataset sizes: BRIGHT (Su et al. 2024, Table 1 / the HF dataset), BEIR (Thakur et al. 2021,
Table 1), LIMIT (Weller et al. 2025).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

# name: (documents, queries run by capgap's split)
DATASETS = {
    "limit": (50_000, 1_000),
    "bright-biology": (57_359, 103),
    "bright-earth_science": (121_249, 116),
    "bright-economics": (50_220, 103),
    "bright-psychology": (52_835, 101),
    "bright-robotics": (61_961, 101),
    "bright-stackoverflow": (107_081, 117),
    "bright-sustainable_living": (60_792, 108),
    "bright-leetcode": (413_932, 142),
    "bright-pony": (7_894, 112),
    "bright-aops": (188_002, 111),
    "bright-theoremqa_theorems": (23_839, 76),
    "bright-theoremqa_questions": (188_002, 194),
    "trec-covid": (171_332, 50),
    "nfcorpus": (3_633, 2_913),
    "fiqa": (57_638, 6_148),
    "arguana": (8_674, 1_406),
    "scidocs": (25_657, 1_000),
    "scifact": (5_183, 1_109),
    "quora": (522_931, 15_000),
}
# non-embedding parameters, output dim
ENCODERS = {"distilbert": (42.6e6, 768), "qwen3-4b": (3.63e9, 2560)}
COLBERT_PARAMS = 110e6  # GTE-ModernColBERT-v1 (ModernBERT-base), non-embedding
MINILM_PARAMS = 10.6e6  # all-MiniLM-L6-v2: 22.7M minus the 30522 x 384 token embeddings
# The probe above 50k documents (screening, capgap.probe.screen), fitted on benchmarks/scale.py's runs (structured
# 100k-1M x 384-2,560 indexes, 2 cores, 2026-12-07; benchmarks/README.md, "scale.py"): per query set, the index's checks
# and statistics and the per-query whole-index checks, SET_CORE_S_PER_UNIT core-seconds per document x dimension;
# per query, SCREEN_PASSES passes of the bare float32 score product (FLOOR_CORE_S_PER_UNIT per query x document x
# dimension) and the query's solve on its candidates, by query class, at the dimensions measured (SOLVE_CORE_S,
# interpolated linearly between them); an inseparable gold set spread over the index takes the whole-index probe
# (INSEPARABLE_CORE_S_PER_UNIT per query x document x dimension, measured at 171k x 768).
SCREEN_MIN_DOCS = 50_000  # capgap.probe.constants.SCREEN_MIN_DOCS; below it, the whole-index probe (NFCorpus's cost)
WHOLE_CORE_S_PER_UNIT = (
    6.8e-8  # the whole-index probe on NFCorpus x MiniLM's real queries (measure_shards, docs/reproduce-paper.md)
)
SCREEN_PASSES = 2
FLOOR_CORE_S_PER_UNIT = 4.6e-11  # the floor of the BRIGHT-like rows: e.g. 0.91 s x 2 cores / (100 x 500k x 768)
SET_CORE_S_PER_UNIT = 2.98e-8  # least squares over the 8 BRIGHT-like rows (within 15% of each)
SOLVE_DIMS = (384, 768, 2560)
SOLVE_CORE_S = {
    "multi-gold": (0.067, 0.097, 0.321),  # BRIGHT-like (2-8 gold), the same fit
    # Quora-like (1-2 gold): 10,000 queries at 523k x 768 in 1,011 CPU s, less the set and the passes: 0.063 at 768;
    # at 384 and 2,560 dimensions in the multi-gold class's proportions (projected: measured at 768 only)
    "easy": (0.044, 0.063, 0.208),
}
INSEPARABLE_CORE_S_PER_UNIT = 680 / 50 / (171_000 * 768)  # TREC-COVID-like: 50 queries at 171k x 768, 680 CPU s
# query class per dataset: easy (1-2 gold, separable), multi-gold (separable), inseparable (hundreds of
# gold spread over the index); the rest multi-gold
QUERY_CLASS = {"quora": "easy", "arguana": "easy", "scifact": "easy", "trec-covid": "inseparable"}


def solve_core_s(cls: str, dim: int) -> float:
    """Core-seconds of one query's solve on its candidates, class ``cls``, at ``dim`` dimensions:
    ``SOLVE_CORE_S`` interpolated linearly between ``SOLVE_DIMS`` (and along the last segment
    beyond them)."""
    y = SOLVE_CORE_S[cls]
    if dim >= SOLVE_DIMS[-1]:
        (d0, d1), (y0, y1) = SOLVE_DIMS[-2:], y[-2:]
        return y0 + (y1 - y0) * (dim - d0) / (d1 - d0)
    if dim <= SOLVE_DIMS[0]:
        return y[0] * dim / SOLVE_DIMS[0]
    for d0, d1, y0, y1 in zip(SOLVE_DIMS, SOLVE_DIMS[1:], y, y[1:]):
        if d0 <= dim <= d1:
            return y0 + (y1 - y0) * (dim - d0) / (d1 - d0)
    raise AssertionError(dim)


def probe_core_s(name: str, n: int, dim: int, q: int, whole_unit: float) -> float:
    """Core-seconds of the probe of ``q`` queries of dataset ``name`` on an ``n`` x ``dim`` index:
    ``whole_unit`` (core-seconds per query x document x dimension, NFCorpus's measured whole-index
    cost) up to ``SCREEN_MIN_DOCS`` documents; above, the screened cost (module constants)."""
    if n <= SCREEN_MIN_DOCS:
        return whole_unit * n * dim * q
    cls = QUERY_CLASS.get(name, "multi-gold")
    if cls == "inseparable":
        return INSEPARABLE_CORE_S_PER_UNIT * n * dim * q
    passes = SCREEN_PASSES * FLOOR_CORE_S_PER_UNIT * n * dim * q
    return SET_CORE_S_PER_UNIT * n * dim + passes + solve_core_s(cls, dim) * q


COLBERT_BYTES_PER_TOKEN = 1.5e9 / 6.05e6  # measured on limit-50k's encoded parts
# measured on limit-50k (2 cores): faiss IVF token index 6.3 min over 6.05M tokens; candidate
# retrieval + exact MaxSim re-scoring 2.4 min for 1,000 queries
COLBERT_BUILD_CORE_S_PER_TOKEN = 6.3 * 60 * 2 / 6.05e6
COLBERT_SEARCH_CORE_S_PER_QUERY = 2.4 * 60 * 2 / 1000
STEPS, BATCH = 3000, 32  # config/paper.yaml finetune
MODEL_GB = {"distilbert": 0.27, "qwen3-4b": 8.1, "GTE-ModernColBERT-v1": 0.6}


def measure_cpu(mirror: Path, n_docs: int = 200) -> dict:
    """MiniLM-L6 encoding of LIMIT-small's 46 documents, repeated to ``n_docs``: tokens/s and
    effective GFLOP/s."""
    from capgap.data import load_beir_dir
    from capgap.encoders import EncoderSpec, load_encoder

    rs = load_beir_dir(mirror / "limit-small")
    enc = load_encoder(EncoderSpec("minilm", "sentence-transformers/all-MiniLM-L6-v2"))
    texts = (rs.corpus.passages() * (n_docs // len(rs.corpus) + 1))[:n_docs]
    tokens = sum(len(x) for x in enc.model.tokenize(texts)["input_ids"].tolist())  # padded: upper bound
    real = sum(min(len(enc.model.tokenizer(t)["input_ids"]), enc.max_length) for t in texts)
    enc.encode(texts[:16])  # warm-up
    t = time.perf_counter()
    enc.encode(texts)
    s = time.perf_counter() - t
    return {
        "docs": n_docs,
        "tokens": real,
        "padded_tokens": tokens,
        "seconds": s,
        "tokens_per_s": real / s,
        "gflops": 2 * MINILM_PARAMS * real / s / 1e9,
    }


def measure_shards(mirror: Path, nfcorpus: Path, n_docs: int = 512, probe_shards: int = 8, threads: int = 2) -> dict:
    """One shard job's throughput on this machine: MiniLM embedding ``n_docs`` NFCorpus documents
    in one ``encode`` call (documents/s), and shard 1 of ``probe_shards`` of the probe on the
    NFCorpus x MiniLM index under ``nfcorpus`` (``data/`` and ``minilm/index/``; queries/s, the
    mean gold size of its queries), with ``threads`` threads, and the load average around each."""
    import numpy as np

    from capgap.data import load_beir_dir, load_canonical
    from capgap.encoders import EncoderSpec, load_encoder
    from capgap.index import load_index
    from capgap.probe import ProbeConfig, probe_arguments
    from capgap.probe.shards import probe_shard

    out = {"threads": threads}
    enc = load_encoder(EncoderSpec("minilm", "sentence-transformers/all-MiniLM-L6-v2"), threads=threads)
    texts = load_beir_dir(mirror / "nfcorpus").corpus.passages()[:n_docs]
    enc.encode_documents(texts[:32])  # warm-up
    load0, t = os.getloadavg()[0], time.perf_counter()
    enc.encode_documents(texts)
    s = time.perf_counter() - t
    out["embed"] = {
        "docs": len(texts),
        "seconds": s,
        "docs_per_s": len(texts) / s,
        "load_before": load0,
        "load_after": os.getloadavg()[0],
    }
    rs = load_canonical(nfcorpus / "data")
    idx = load_index(nfcorpus / "minilm" / "index", corpus=rs.corpus)
    kw = probe_arguments(rs, idx, ProbeConfig(), [2, 10, 20, 100], 10)
    load0, t = os.getloadavg()[0], time.perf_counter()
    part = probe_shard(idx.embeddings, n_shards=probe_shards, shard=0, threads=threads, **kw)
    s = time.perf_counter() - t
    gold = [len(kw["gold_sets"][q]) for q in part.results]
    n, dim = idx.embeddings.shape
    out["probe"] = {
        "n_docs": n,
        "dim": dim,
        "shard": f"1-of-{probe_shards}",
        "queries": len(part.results),
        "seconds": s,
        "queries_per_s": len(part.results) / s,
        "mean_gold": float(np.mean(gold)),
        "max_gold": int(max(gold)),
        "core_s_per_query_unit": s * threads / len(part.results) / (n * dim),
        "load_before": load0,
        "load_after": os.getloadavg()[0],
    }
    return out


def _makespan(jobs: list[float], nodes: int) -> float:
    """Longest-processing-time-first list scheduling of ``jobs`` (seconds) on ``nodes`` machines."""
    loads = [0.0] * nodes
    for j in sorted(jobs, reverse=True):
        loads[loads.index(min(loads))] += j
    return max(loads)


def project(
    shard: dict, gpu_tflops: float, doc_tokens: int, query_tokens: int, nodes: int, node_cores: int, overhead_s: float
) -> dict:
    """The projected wall time (hours) of config/paper.yaml on ``nodes`` nodes with ``nodes``
    shards per index and per probe (module docstring, item 7): ``{"index_h", "gpu_h", "probe_h",
    "wall_h"}``."""
    rate = gpu_tflops * 1e12
    idx_jobs, gpu_jobs, cpu_jobs = [], [], []
    for name, (n, q) in DATASETS.items():
        for enc, (params, dim) in ENCODERS.items():
            idx_s = 2 * params * n * min(doc_tokens, 512) / rate
            idx_jobs += [idx_s / nodes + overhead_s] * nodes
            ft_s = 3 * 2 * params * STEPS * BATCH * query_tokens / rate + 3 * 2 * BATCH * dim * n * STEPS / rate
            gpu_jobs.append(ft_s)
            core_s = probe_core_s(name, n, dim, q, shard["probe"]["core_s_per_query_unit"])
            cpu_jobs += [core_s / nodes / node_cores] * nodes
        cb = 2 * COLBERT_PARAMS * n * min(doc_tokens, 300) / rate
        if name == "limit":
            cb += 3 * 2 * COLBERT_PARAMS * STEPS * BATCH * (32 + 2 * 300) / rate
        gpu_jobs.append(cb)
        if n > 20_000:
            cpu_jobs.append(
                (COLBERT_BUILD_CORE_S_PER_TOKEN * n * min(doc_tokens, 300) + COLBERT_SEARCH_CORE_S_PER_QUERY * q)
                / node_cores
            )
    a, g, c = _makespan(idx_jobs, nodes), _makespan(gpu_jobs, nodes), _makespan(cpu_jobs, nodes)
    return {
        "nodes": nodes,
        "index_h": a / 3600,
        "gpu_h": g / 3600,
        "probe_h": c / 3600,
        "wall_h": (a + max(g, c)) / 3600,
    }


def estimate(gpu_tflops: float, doc_tokens: int, query_tokens: int, whole_unit: float) -> tuple[list[dict], dict]:
    rows, tot = (
        [],
        {
            "index_gpu_h": 0.0,
            "finetune_gpu_h": 0.0,
            "colbert_gpu_h": 0.0,
            "probe_cpu_core_h": 0.0,
            "colbert_cpu_core_h": 0.0,
            "index_gb": 0.0,
            "colbert_gb": 0.0,
        },
    )
    rate = gpu_tflops * 1e12
    for name, (n, q) in DATASETS.items():
        row = {"dataset": name, "documents": n, "queries": q}
        for enc, (params, dim) in ENCODERS.items():
            idx = 2 * params * n * min(doc_tokens, 512) / rate / 3600
            ft = 3 * 2 * params * STEPS * BATCH * query_tokens / rate / 3600
            # InfoNCE against the full index: forward + backward of (batch x dim) . (dim x n) each step
            ft += 3 * 2 * BATCH * dim * n * STEPS / rate / 3600
            probe = probe_core_s(name, n, dim, q, whole_unit) / 3600
            row[f"{enc}_index_gpu_h"], row[f"{enc}_finetune_gpu_h"], row[f"{enc}_probe_cpu_core_h"] = idx, ft, probe
            tot["index_gpu_h"] += idx
            tot["finetune_gpu_h"] += ft
            tot["probe_cpu_core_h"] += probe
            tot["index_gb"] += n * dim * 4 / 1e9
        cb = 2 * COLBERT_PARAMS * n * min(doc_tokens, 300) / rate / 3600
        if name == "limit":
            cb += 3 * 2 * COLBERT_PARAMS * STEPS * BATCH * (32 + 2 * 300) / rate / 3600
        row["colbert_gpu_h"] = cb
        tot["colbert_gpu_h"] += cb
        tokens = n * min(doc_tokens, 300)
        cpu = (
            (COLBERT_BUILD_CORE_S_PER_TOKEN * tokens + COLBERT_SEARCH_CORE_S_PER_QUERY * q) / 3600
            if n > 20_000
            else 0.0
        )
        row["colbert_cpu_core_h"] = cpu
        tot["colbert_cpu_core_h"] += cpu
        tot["colbert_gb"] += n * min(doc_tokens, 300) * COLBERT_BYTES_PER_TOKEN / 1e9
        rows.append(row)
    tot["models_gb"] = sum(MODEL_GB.values())
    return rows, tot


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu-tflops", type=float, default=300.0, help="assumed sustained bf16 TFLOP/s of one GPU")
    ap.add_argument(
        "--doc-tokens", type=int, default=200, help="assumed mean document length in tokens (capped at 512)"
    )
    ap.add_argument("--query-tokens", type=int, default=128, help="assumed mean training-query length in tokens")
    ap.add_argument(
        "--mirror",
        type=Path,
        default=os.environ.get("CAPGAP_DATA_MIRROR"),
        required="CAPGAP_DATA_MIRROR" not in os.environ,
    )
    ap.add_argument(
        "--nfcorpus",
        type=Path,
        default=Path("results/nfcorpus"),
        help="a run's NFCorpus folder (data/ and minilm/index/, e.g. of config/nfcorpus.yaml) for the shard measurement",
    )
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32], help="node counts of the projection")
    ap.add_argument("--node-cores", type=int, default=16, help="CPU cores per node (profiles/gpu: probe_shard threads)")
    ap.add_argument(
        "--shard-overhead-s", type=float, default=60.0, help="assumed seconds per index shard job to load its model"
    )
    ap.add_argument("--threads", type=int, default=2, help="threads of the shard measurement")
    a = ap.parse_args()
    cpu = measure_cpu(a.mirror) if (a.mirror / "limit-small").is_dir() else None
    if cpu is None:
        print(f"no LIMIT-small under {a.mirror} (--mirror): CPU throughput not measured; estimates only")
    rows, tot = estimate(a.gpu_tflops, a.doc_tokens, a.query_tokens, WHOLE_CORE_S_PER_UNIT)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores; assumptions: {a.gpu_tflops:.0f} TFLOP/s per GPU, "
        f"{a.doc_tokens} tokens/document, {a.query_tokens} tokens/query, {STEPS} steps x batch {BATCH}"
    )
    if cpu:
        print(
            f"measured here: MiniLM-L6 encodes {cpu['tokens_per_s']:.0f} tokens/s = {cpu['gflops']:.0f} GFLOP/s effective "
            f"({cpu['docs']} LIMIT-small documents, {cpu['tokens']} tokens, {cpu['seconds']:.1f} s)"
        )
        cpu_h = (
            2
            * ENCODERS["qwen3-4b"][0]
            * sum(n for n, _ in DATASETS.values())
            * a.doc_tokens
            / (cpu["gflops"] * 1e9)
            / 3600
        )
        print(f"at that rate, the Qwen3-4B indexes alone would take {cpu_h:,.0f} h on this CPU")
    print()
    print(
        "| dataset | documents | queries | DistilBERT index + fine-tune (GPU h) | Qwen3-4B index + fine-tune (GPU h) | ColBERT (GPU h) | probe, both encoders (CPU core-h) | ColBERT index + re-scoring (CPU core-h) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['dataset']} | {r['documents']:,} | {r['queries']:,} | {r['distilbert_index_gpu_h'] + r['distilbert_finetune_gpu_h']:.2f} | "
            f"{r['qwen3-4b_index_gpu_h'] + r['qwen3-4b_finetune_gpu_h']:.2f} | {r['colbert_gpu_h']:.2f} | "
            f"{r['distilbert_probe_cpu_core_h'] + r['qwen3-4b_probe_cpu_core_h']:.1f} | {r['colbert_cpu_core_h']:.1f} |"
        )
    gpu = tot["index_gpu_h"] + tot["finetune_gpu_h"] + tot["colbert_gpu_h"]
    print()
    print(
        f"total GPU: {gpu:.1f} h (indexes {tot['index_gpu_h']:.1f}, fine-tuning {tot['finetune_gpu_h']:.1f}, ColBERT {tot['colbert_gpu_h']:.1f}); "
        f"CPU: probe {tot['probe_cpu_core_h']:.0f} core-hours, ColBERT index + re-scoring {tot['colbert_cpu_core_h']:.0f} core-hours"
    )
    print(
        f"disk: frozen indexes {tot['index_gb']:.0f} GB, ColBERT token embeddings {tot['colbert_gb']:.0f} GB, models {tot['models_gb']:.1f} GB"
    )
    shard = None
    if (a.nfcorpus / "minilm" / "index" / "fingerprint.json").is_file() and (a.mirror / "nfcorpus").is_dir():
        shard = measure_shards(a.mirror, a.nfcorpus, threads=a.threads)
        e, p = shard["embed"], shard["probe"]
        print()
        print(
            f"one shard job here ({a.threads} threads): MiniLM embeds {e['docs_per_s']:.1f} NFCorpus documents/s "
            f"({e['docs']} in {e['seconds']:.1f} s, load {e['load_before']:.1f} -> {e['load_after']:.1f}); the probe solves "
            f"{p['queries_per_s']:.1f} queries/s on NFCorpus x MiniLM ({p['n_docs']} x {p['dim']}, shard {p['shard']}: "
            f"{p['queries']} queries, mean gold {p['mean_gold']:.1f}, max {p['max_gold']}, {p['seconds']:.1f} s, "
            f"load {p['load_before']:.1f} -> {p['load_after']:.1f}) = {p['core_s_per_query_unit']:.3g} core-s per query x doc x dim"
        )
        print()
        print(
            f"| nodes (1 GPU + {a.node_cores} cores each; shards per index and probe = nodes) | index shards (h) | "
            "fine-tuning + ColBERT, GPU (h) | probe shards + ColBERT, CPU (h) | projected wall time (h) |"
        )
        print("|---|---|---|---|---|")
        shard["projection"] = []
        for n in a.nodes:
            r = project(shard, a.gpu_tflops, a.doc_tokens, a.query_tokens, n, a.node_cores, a.shard_overhead_s)
            shard["projection"].append(r)
            print(f"| {n} | {r['index_h']:.2f} | {r['gpu_h']:.2f} | {r['probe_h']:.2f} | {r['wall_h']:.2f} |")
    else:
        print(f"no NFCorpus index under {a.nfcorpus} (--nfcorpus) or no nfcorpus in the mirror: shards not measured")
    print(json.dumps({"cpu": cpu, "totals": tot, "shards": shard}, default=float))


if __name__ == "__main__":
    main()
