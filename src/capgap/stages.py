"""One function per pipeline stage; ``workflow/scripts/*.py`` only adapt Snakemake to these.

Each stage reads its inputs, calls the library, and writes its outputs atomically.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Mapping, Sequence

from .data import excluded_positions, load_canonical, write_canonical
from .errors import DatasetUnavailable
from .evaluate import evaluate_rankings, rankings_to_ids, write_rows, write_run
from .io import write_json

log = logging.getLogger(__name__)


def prepare_dataset(name: str, spec: Mapping, out_dir: str | Path, mirror: str | None = None) -> dict:
    """Obtain dataset ``name`` and write its canonical copy plus ``status.json`` to ``out_dir``.

    An unobtainable dataset is not an error here unless ``spec["required"]`` (set for every
    dataset by config ``require_datasets``): ``status.json`` then says ``available: false`` with
    the reason and a hint, and the report lists it. When required, ``DatasetUnavailable``
    propagates and the job fails.
    Bad data (``DataFormatError``) is an error: nothing downstream runs on it.
    """
    from .sources import obtain

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        rs = obtain(name, spec, mirror=mirror)
    except DatasetUnavailable as e:
        if spec.get("required"):
            raise
        log.warning("%s", e)
        status = {"dataset": name, "available": False, "reason": e.reason, "hint": e.hint}
        write_json(out / "status.json", status)
        return status
    write_canonical(rs, out)
    status = {
        "dataset": name,
        "available": True,
        "n_docs": len(rs.corpus),
        "n_queries": len(rs.queries),
        "n_train": len(rs.split.train),
        "n_heldout": len(rs.split.heldout),
        "dropped_queries_without_gold": rs.dropped_queries,
        "split_rule": rs.split.rule,
        "source": rs.source,
    }
    write_json(out / "status.json", status)  # written last: marks the copy complete
    return status


def build_frozen_index(data_dir: str | Path, encoder_name: str, encoder_cfg: Mapping, out_dir: str | Path, threads: int = 1) -> dict:
    """Embed the dataset's corpus once with the encoder; returns the index fingerprint."""
    from .encoders import EncoderSpec, load_encoder
    from .index import build_index

    rs = load_canonical(data_dir)
    enc = load_encoder(EncoderSpec.from_config(encoder_name, dict(encoder_cfg)), threads=threads)
    t = time.perf_counter()
    idx = build_index(rs.corpus, enc, out_dir)
    log.info("embedded %d documents in %.1f s", len(rs.corpus), time.perf_counter() - t)
    return idx.fingerprint


def evaluate_pretrained(
    data_dir: str | Path,
    index_dir: str | Path,
    dataset: str,
    encoder_name: str,
    encoder_cfg: Mapping,
    ks: Sequence[int],
    ndcg_k: int,
    out_csv: str | Path,
    out_run: str | Path,
    threads: int = 1,
) -> list[dict]:
    """Recall@k / nDCG of the pre-trained encoder's own query embeddings on the frozen index.

    The index fingerprint must match this encoder and corpus (else ``FingerprintMismatch``).
    """
    rs, enc, index = _load_with_index(data_dir, index_dir, encoder_name, encoder_cfg, threads)
    return _evaluate_encoder(rs, enc, index, dataset, encoder_name, "pretrained", ks, ndcg_k, out_csv, out_run, threads)


def _load_with_index(data_dir, index_dir, encoder_name, encoder_cfg, threads):
    """The canonical dataset, the loaded encoder, and its frozen index (fingerprint-checked)."""
    from .encoders import EncoderSpec, load_encoder
    from .index import index_fingerprint, load_index

    rs = load_canonical(data_dir)
    enc = load_encoder(EncoderSpec.from_config(encoder_name, dict(encoder_cfg)), threads=threads)
    return rs, enc, load_index(index_dir, index_fingerprint(enc.fingerprint(), rs.corpus))


def _evaluate_encoder(rs, enc, index, dataset, encoder_name, method, ks, ndcg_k, out_csv, out_run, threads) -> list[dict]:
    """Encode every query, exact top-k on the frozen index, evaluate; write rows and run."""
    from .retrieval import drop_excluded, exact_topk, n_extra

    q = enc.encode_queries(list(rs.queries.texts), progress=True)
    excl = excluded_positions(rs, rs.queries.ids, index.doc_ids)
    idx, sc = exact_topk(q, index.embeddings, max(ks) + n_extra(excl), threads=threads)
    idx, sc = drop_excluded(idx, sc, excl, max(ks))
    ranked = dict(zip(rs.queries.ids, rankings_to_ids(idx, index.doc_ids)))
    rows = evaluate_rankings(rs, ranked, ks, ndcg_k, dataset, encoder_name, method)
    write_run(out_run, rs.queries.ids, idx, sc, index.doc_ids, f"{encoder_name}-{method}")
    write_rows(out_csv, rows)
    return rows


def evaluate_bm25(data_dir: str | Path, dataset: str, bm25_cfg: Mapping, ks: Sequence[int], ndcg_k: int, out_csv: str | Path, out_run: str | Path) -> list[dict]:
    """Recall@k / nDCG of BM25 (``bm25_cfg``: backend, method, k1, b, stopwords)."""
    from .bm25 import BM25

    from .retrieval import drop_excluded, n_extra

    rs = load_canonical(data_dir)
    bm = BM25(rs.corpus.passages(), **dict(bm25_cfg))
    excl = excluded_positions(rs, rs.queries.ids, rs.corpus.ids)
    idx, sc = bm.search(list(rs.queries.texts), max(ks) + n_extra(excl))
    idx, sc = drop_excluded(idx, sc, excl, max(ks))
    ranked = dict(zip(rs.queries.ids, rankings_to_ids(idx, rs.corpus.ids)))
    rows = evaluate_rankings(rs, ranked, ks, ndcg_k, dataset, "", "bm25")
    write_run(out_run, rs.queries.ids, idx, sc, rs.corpus.ids, "bm25")
    write_rows(out_csv, rows)
    return rows


def run_probe(
    data_dir: str | Path,
    index_dir: str | Path,
    dataset: str,
    encoder_name: str,
    probe_cfg: Mapping,
    ks: Sequence[int],
    ndcg_k: int,
    out_csv: str | Path,
    out_jsonl: str | Path,
    threads: int = 1,
) -> list[dict]:
    """The capacity probe on every query of the frozen index (``capgap.probe``).

    Writes one JSON line per query (recall@k, slack, iterations, gap, margin, certificate,
    gold ranks) and the summary rows (method ``probe``): recall@k and nDCG per split, plus
    ``certified`` (fraction), ``slack_median``, ``iterations_median``, ``not_converged``
    (fraction). The index must have been built from this corpus (else ``FingerprintMismatch``).
    """
    import numpy as np

    from .data import SPLITS, corpus_hash
    from .errors import FingerprintMismatch
    from .index import load_index
    from .io import write_jsonl
    from .metrics import ndcg_from_ranks, recall_from_ranks
    from .probe import probe

    rs = load_canonical(data_dir)
    index = load_index(index_dir)
    want = {"corpus_sha256": corpus_hash(rs.corpus), "n_docs": len(rs.corpus)}
    got = {k: index.fingerprint.get(k) for k in want}
    if got != want or tuple(index.doc_ids) != tuple(rs.corpus.ids):
        raise FingerprintMismatch(index_dir, want, got)
    pos = {d: i for i, d in enumerate(index.doc_ids)}
    qids = list(rs.queries.ids)
    gold_ids = [sorted(rs.qrels.relevant(q), key=pos.__getitem__) for q in qids]
    t = time.perf_counter()
    results = probe(index.embeddings, [[pos[d] for d in g] for g in gold_ids], threads=threads, progress=True,
                    excluded_sets=excluded_positions(rs, qids, index.doc_ids), **dict(probe_cfg))
    log.info("probe: %d queries in %.1f s", len(qids), time.perf_counter() - t)
    split_of = {q: s for s in SPLITS for q in rs.split.ids(s)}
    lines = []
    for q, g, r in zip(qids, gold_ids, results):
        lines.append({
            "query_id": q, "split": split_of.get(q, ""), "n_gold": len(g),
            **{f"recall@{k}": r.recall_at(k) for k in ks},
            "certified": r.certified, "lp_feasible": r.lp_feasible, "duplicate_conflict": r.duplicate_conflict,
            "slack": r.slack, "margin": r.margin, "objective": r.objective, "gap": r.gap,
            "iterations": r.iterations, "converged": r.converged, "w_norm": float(np.linalg.norm(r.w)),
            "C_final": r.extra.get("C_final"), "escalations": r.extra.get("escalations"),
            "gold_ranks": {d: int(x) for d, x in zip(g, r.gold_ranks)},
        })
    write_jsonl(out_jsonl, lines)
    by_q = dict(zip(qids, zip(gold_ids, results)))
    rows = []
    for split in ("train", "heldout", "all"):
        ids = qids if split == "all" else list(rs.split.ids(split))
        base = {"dataset": dataset, "encoder": encoder_name, "method": "probe", "split": split}
        rows.append({**base, "metric": "n_queries", "k": "", "value": len(ids)})
        if not ids:
            continue
        ranks = [by_q[q][1].gold_ranks for q in ids]
        grades = [[rs.qrels.judgements[q][d] for d in by_q[q][0]] for q in ids]
        for k in ks:
            rows.append({**base, "metric": "recall", "k": int(k), "value": float(recall_from_ranks(ranks, k).mean())})
        rows.append({**base, "metric": "ndcg", "k": int(ndcg_k), "value": float(ndcg_from_ranks(ranks, grades, ndcg_k).mean())})
        res = [by_q[q][1] for q in ids]
        rows.append({**base, "metric": "certified", "k": "", "value": float(np.mean([r.certified for r in res]))})
        rows.append({**base, "metric": "slack_median", "k": "", "value": float(np.median([r.slack for r in res]))})
        rows.append({**base, "metric": "iterations_median", "k": "", "value": float(np.median([r.iterations for r in res]))})
        rows.append({**base, "metric": "not_converged", "k": "", "value": float(np.mean([not r.converged for r in res]))})
    write_rows(out_csv, rows)
    return rows


def run_finetune(
    data_dir: str | Path,
    index_dir: str | Path,
    dataset: str,
    encoder_name: str,
    encoder_cfg: Mapping,
    finetune_cfg: Mapping,
    ks: Sequence[int],
    ndcg_k: int,
    out_csv: str | Path,
    out_curve: str | Path,
    out_run: str | Path,
    out_adapter: str | Path,
    ckpt_path: str | Path,
    threads: int = 1,
) -> list[dict]:
    """LoRA fine-tuning of the query side against the frozen index (``capgap.finetune``).

    Trains on train-split queries only, then evaluates train and held-out exactly as the
    pre-trained encoder (same code: encode queries, exact top-k, ``evaluate_rankings``).
    Writes the metrics rows (method ``finetuned``), the training curve (CSV), the TREC run and
    the adapter (peft ``save_pretrained``). Resumes from ``ckpt_path`` after a kill.
    """
    from .finetune import FinetuneConfig, train_query_encoder
    from .metrics import recall_at_k
    from .retrieval import drop_excluded, exact_topk, n_extra

    rs, enc, index = _load_with_index(data_dir, index_dir, encoder_name, encoder_cfg, threads)
    cfg = FinetuneConfig.from_config(dict(finetune_cfg))
    pos = {d: i for i, d in enumerate(index.doc_ids)}
    text = dict(zip(rs.queries.ids, rs.queries.texts))
    train_ids = list(rs.split.train)
    curve_ks = [k for k in ks if k <= 10] or [min(ks)]
    sample = {s: list(rs.split.ids(s))[: cfg.eval_max_queries] for s in ("train", "heldout")}

    def evaluate(step):
        out = {}
        for split, ids in sample.items():
            if not ids:
                continue
            excl = excluded_positions(rs, ids, index.doc_ids)
            idx, sc = exact_topk(enc.encode_queries([text[q] for q in ids]), index.embeddings, max(curve_ks) + n_extra(excl), threads=threads)
            idx, _ = drop_excluded(idx, sc, excl, max(curve_ks))
            ranked = rankings_to_ids(idx, index.doc_ids)
            gold = [rs.qrels.judgements[q] for q in ids]
            for k in curve_ks:
                out[f"{split}_recall@{k}"] = float(recall_at_k(ranked, gold, k).mean())
        return out

    res = train_query_encoder(
        enc, index.embeddings, [text[q] for q in train_ids], [[pos[d] for d in rs.qrels.relevant(q)] for q in train_ids],
        cfg, ckpt_path=ckpt_path, evaluate=evaluate, threads=threads, progress=True,
        train_excluded=excluded_positions(rs, train_ids, index.doc_ids) if rs.excluded else None,
    )
    log.info("finetune: %d steps at %.2f steps/s (resumed from %d), %d trainable parameters in %d modules",
             cfg.steps, res.steps_per_s, res.resumed_from, res.trainable, len(res.adapted_modules))
    write_curve(out_curve, res.curve)
    tmp = Path(str(out_adapter) + ".tmp")
    enc.model[0].auto_model.save_pretrained(tmp)
    if Path(out_adapter).exists():
        import shutil

        shutil.rmtree(out_adapter)
    os.replace(tmp, out_adapter)
    rows = _evaluate_encoder(rs, enc, index, dataset, encoder_name, "finetuned", ks, ndcg_k, out_csv, out_run, threads)
    Path(ckpt_path).unlink(missing_ok=True)  # the adapter is saved: the checkpoint has served
    return rows



def log_to(path: str | Path) -> None:
    """Send stderr and ``logging`` (INFO) to a rule's log file; first line of every script."""
    import sys

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    sys.stderr = open(path, "w", buffering=1)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)


def run_colbert(
    data_dir: str | Path,
    dataset: str,
    colbert_cfg: Mapping,
    ks: Sequence[int],
    ndcg_k: int,
    out_csv: str | Path,
    out_curve: str | Path,
    out_run: str | Path,
    work_dir: str | Path,
    extensions_dir: str | Path,
    threads: int = 1,
) -> list[dict]:
    """Late interaction (``capgap.colbert``): fine-tune a PyLate ColBERT on the train queries,
    encode the corpus, retrieve by MaxSim (exact, or index candidates re-scored exactly), and
    evaluate train/held-out with the same metrics code as every method (method ``colbert``).
    Index backends (``faiss`` or ``plaid``, see ``capgap.colbert``) only propose candidates;
    every reported score is exact MaxSim.

    ``work_dir`` (not a Snakemake output, so a killed job keeps it) holds, per training digest,
    the checkpoint, the fine-tuned model, the encoded document parts and the PLAID index; a
    rerun resumes from whatever is there. With an index, rows ``ann_recall@k`` (split ``all``)
    give the index's recall against exact MaxSim top-k on ``ann_sample`` queries.
    """
    import hashlib
    import shutil

    import numpy as np
    import torch

    from . import colbert as cb
    from .data import corpus_hash
    from .io import write_json
    from .metrics import recall_at_k
    from .retrieval import drop_excluded, n_extra

    if threads:
        torch.set_num_threads(int(threads))
    rs = load_canonical(data_dir)
    cfg = cb.ColbertConfig.from_config(dict(colbert_cfg))
    train_ids = list(rs.split.train)
    key = hashlib.sha256(_json_dumps([cfg.training_digest(), corpus_hash(rs.corpus), train_ids]).encode()).hexdigest()[:16]
    root = Path(work_dir)
    work = root / key
    if root.is_dir():
        for old in root.iterdir():
            if old.name != key:
                shutil.rmtree(old, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    pos = {d: i for i, d in enumerate(rs.corpus.ids)}
    doc_texts = rs.corpus.passages()
    text = dict(zip(rs.queries.ids, rs.queries.texts))
    model_dir = work / "model"
    curve_file = work / "curve.json"
    if (model_dir / "capgap_done").is_file():
        model = cb.load_colbert(cfg, path=str(model_dir))
        curve = json.loads(curve_file.read_text())
        log.info("colbert: using the fine-tuned model in %s", model_dir)
    else:
        model = cb.load_colbert(cfg)
        sample = {s: list(rs.split.ids(s))[: cfg.eval_max_queries] for s in ("train", "heldout")}
        curve_ks = [k for k in ks if k <= 10] or [min(ks)]

        def evaluate(step):
            if len(doc_texts) > cfg.curve_max_docs:
                return {}
            toks, offs = cb.pack_documents(model.encode(doc_texts, is_query=False, batch_size=cfg.encode_batch_size,
                                                        show_progress_bar=False))
            out = {}
            for split, ids in sample.items():
                if ids:
                    excl = excluded_positions(rs, ids, rs.corpus.ids)
                    idx, sc = cb.maxsim_topk(cb.encode_queries(model, [text[q] for q in ids]), toks, offs, max(curve_ks) + n_extra(excl))
                    idx, _ = drop_excluded(idx, sc, excl, max(curve_ks))
                    ranked = rankings_to_ids(idx, rs.corpus.ids)
                    for k in curve_ks:
                        out[f"{split}_recall@{k}"] = float(recall_at_k(ranked, [rs.qrels.judgements[q] for q in ids], k).mean())
            return out

        res = cb.train_colbert(model, cfg, doc_texts, [text[q] for q in train_ids],
                               [[pos[d] for d in rs.qrels.relevant(q)] for q in train_ids],
                               ckpt_path=work / "checkpoint.pt", evaluate=evaluate, progress=True,
                               train_excluded=excluded_positions(rs, train_ids, rs.corpus.ids) if rs.excluded else None)
        curve = res["curve"]
        log.info("colbert: %d steps at %.2f steps/s (resumed from %d)", cfg.steps, res["steps_per_s"], res["resumed_from"])
        tmp = work / "model.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        model.save(str(tmp))
        write_json(tmp / "capgap_done", {"digest": key})
        shutil.rmtree(model_dir, ignore_errors=True)
        os.replace(tmp, model_dir)
        write_json(curve_file, curve)
        (work / "checkpoint.pt").unlink(missing_ok=True)
    t = time.perf_counter()
    tokens, offsets = cb.encode_documents(model, doc_texts, work / "parts", batch_size=cfg.encode_batch_size, progress=True)
    log.info("colbert: %d documents -> %d token embeddings in %.1f s", len(doc_texts), len(tokens), time.perf_counter() - t)
    qids = list(rs.queries.ids)
    Q = cb.encode_queries(model, [text[q] for q in qids])
    excl = excluded_positions(rs, qids, rs.corpus.ids)
    k_max = max(ks) + n_extra(excl)  # fetched; cut to max(ks) after removing exclusions
    backend = cfg.backend if cfg.backend != "auto" else ("exact" if len(doc_texts) <= cfg.exact_max_docs else "faiss")
    extra_rows = []
    t = time.perf_counter()
    if backend == "exact":
        idx, sc = cb.maxsim_topk(Q, tokens, offsets, k_max)
    else:
        if backend == "plaid":
            ann = cb.PlaidIndex(work / "plaid", extensions_dir, nbits=cfg.plaid_nbits, candidates=cfg.candidates,
                                ncells=cfg.plaid_ncells, ndocs=cfg.plaid_ndocs,
                                centroid_score_threshold=cfg.plaid_centroid_score_threshold)
        else:
            ann = cb.FaissTokenIndex(cfg.faiss_nlist, cfg.faiss_nprobe, cfg.faiss_k_tokens, cfg.seed)
        ann.build(tokens, offsets)
        log.info("colbert: %s index over %d token embeddings built in %.1f s", backend, len(tokens), time.perf_counter() - t)
        cand = ann.search(Q, max(cfg.candidates, k_max))
        log.info("colbert: %.0f candidates per query on average (min %d)", np.mean([len(c) for c in cand]), min(len(c) for c in cand))
        idx, sc = cb.rescore(Q, tokens, offsets, cand, k_max)
        rng = np.random.default_rng(cfg.seed)
        sample = np.sort(rng.choice(len(qids), size=min(cfg.ann_sample, len(qids)), replace=False))
        exact_idx, _ = cb.maxsim_topk(Q[sample], tokens, offsets, k_max)
        base = {"dataset": dataset, "encoder": "", "method": "colbert", "split": "all"}
        extra_rows.append({**base, "metric": "ann_sample", "k": "", "value": len(sample)})
        for k in ks:
            extra_rows.append({**base, "metric": "ann_recall", "k": int(k), "value": cb.ann_recall(idx[sample], exact_idx, k)})
    log.info("colbert: %s retrieval for %d queries in %.1f s", backend, len(qids), time.perf_counter() - t)
    idx, sc = drop_excluded(idx, sc, excl, max(ks))
    ranked = dict(zip(qids, rankings_to_ids(idx, rs.corpus.ids)))
    rows = evaluate_rankings(rs, ranked, ks, ndcg_k, dataset, "", "colbert") + extra_rows
    write_run(out_run, qids, idx, sc, rs.corpus.ids, "colbert")
    write_curve(out_curve, curve)
    write_rows(out_csv, rows)
    return rows


def run_hardness(hardness_cfg: Mapping, probe_cfg: Mapping, out_csv: str | Path, out_summary: str | Path) -> list[dict]:
    """The parity-task experiments (``capgap.hardness.run_grid``): rows to ``out_csv`` (the
    results.csv columns), sizes and chance agreement to ``out_summary`` (JSON)."""
    from .hardness import run_grid

    probe_args = {k: v for k, v in dict(probe_cfg).items() if k in ("C", "C_max", "eps", "max_iter", "batch_size")}
    t = time.perf_counter()
    rows, summary = run_grid({k: v for k, v in dict(hardness_cfg).items() if k != "enabled"}, probe_args)
    log.info("hardness: %d rows in %.1f s", len(rows), time.perf_counter() - t)
    write_rows(out_csv, rows)
    write_json(out_summary, summary)
    return rows


def write_curve(path: str | Path, curve: list[dict]) -> None:
    """Atomically write a training curve as CSV: columns step, loss, then the rest sorted."""
    import csv

    from .io import atomic_open

    cols = sorted({k for row in curve for k in row}, key=lambda c: (c != "step", c != "loss", c)) or ["step", "loss"]
    with atomic_open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        w.writerows(curve)


def _json_dumps(obj) -> str:
    """Canonical JSON (sorted keys): the input of work-directory digests."""
    return json.dumps(obj, sort_keys=True)
