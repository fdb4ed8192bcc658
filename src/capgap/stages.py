"""One function per pipeline rule, named after it; ``workflow/scripts/<rule>.py`` only calls it.

Every stage has the same signature, ``stage(inputs, outputs, params, threads=1)``: the rule's
named inputs, outputs and params (Snakemake's ``snakemake.input`` / ``.output`` / ``.params``,
or any object with those attributes, e.g. ``types.SimpleNamespace`` in tests). A stage reads
its inputs, calls the method module that owns the work, and writes its outputs atomically;
the logic lives in the method modules (``probe``, ``finetune``, ``colbert``, ``bm25``, ...).
A dataset's name travels in its canonical folder (``status.json``), not as a parameter.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from .data import load_canonical
from .evaluate import Judged, eval_depth, interleave_rows, rows_from_ranks, write_curve, write_rows, write_run
from .io import write_json
from .logs import log_to  # noqa: F401  (every script's first call)
from .retrieval import document_groups

log = logging.getLogger(__name__)


def data(inputs, outputs, params, threads: int = 1) -> dict:
    """Rule ``data``: obtain dataset ``params.dataset`` as ``params.spec`` (its config section)
    says (``sources.prepare``); write its canonical copy, then ``status.json`` (last: it marks
    the copy complete) to ``outputs[0]``. Returns the status."""
    from .data import write_canonical
    from .sources import prepare

    out = Path(outputs[0])
    out.mkdir(parents=True, exist_ok=True)
    rs, status = prepare(params.dataset, params.spec)
    if rs is not None:
        write_canonical(rs, out)
    write_json(out / "status.json", status)
    return status


def index(inputs, outputs, params, threads: int = 1) -> dict:
    """Rule ``index``: embed the corpus of ``inputs.data`` once with encoder
    ``params.encoder_name`` (config ``params.encoder``) into the folder of
    ``outputs.fingerprint`` (``capgap.index.build_index``). Returns the index fingerprint."""
    from .index import build_index

    rs = load_canonical(inputs.data)
    enc = _encoder(params, threads)
    t = time.perf_counter()
    idx = build_index(rs.corpus, enc, Path(outputs.fingerprint).parent)
    log.info("embedded %d documents in %.1f s", len(rs.corpus), time.perf_counter() - t)
    return idx.fingerprint


def pretrained(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``pretrained``: recall@k / nDCG of the pre-trained encoder's own query embeddings
    on its frozen index (``evaluate.evaluate_encoder``); writes ``outputs.run`` and
    ``outputs.metrics``. The index must match this encoder and corpus (else
    ``FingerprintMismatch``)."""
    from .evaluate import evaluate_encoder

    rs, enc, idx = _load_with_index(inputs, params, threads)
    return _write(outputs, *evaluate_encoder(rs, enc, idx, params.ks, params.ndcg_k, params.encoder_name, "pretrained", threads))


def bm25(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``bm25``: BM25 with settings ``params.bm25`` (``capgap.bm25.evaluate``); writes
    ``outputs.run`` and ``outputs.metrics``."""
    from .bm25 import evaluate

    return _write(outputs, *evaluate(load_canonical(inputs.data), params.bm25, params.ks, params.ndcg_k))


def probe(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``probe``: the capacity probe with settings ``params.probe`` on every query of the
    frozen index (``capgap.probe.evaluate``); writes ``outputs.per_query`` (one JSON line per
    query), ``outputs.run`` (every query's w) and ``outputs.metrics``. The index must have been
    built from this corpus (else ``FingerprintMismatch``)."""
    from .index import load_index
    from .io import write_jsonl
    from .probe import ProbeConfig, evaluate

    rs = load_canonical(inputs.data)
    idx = load_index(Path(inputs.fingerprint).parent, corpus=rs.corpus)
    rows, records, run = evaluate(rs, idx, ProbeConfig.from_config(params.probe), params.encoder_name, params.ks, params.ndcg_k, threads)
    write_jsonl(outputs.per_query, records)
    return _write(outputs, rows, run)


def finetune(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``finetune``: LoRA fine-tuning of the query side against the frozen index
    (``capgap.finetune``, settings ``params.finetune``) on train-split queries only, resuming
    from ``params.checkpoint`` after a kill; then train and held-out evaluated exactly as the
    pre-trained encoder. Writes ``outputs.metrics`` (method ``finetuned``), ``outputs.curve``,
    ``outputs.run`` and ``outputs.adapter`` (peft ``save_pretrained``)."""
    from .data import excluded_positions, query_records
    from .finetune import FinetuneConfig, save_adapter, train_query_encoder
    from .metrics import recall_from_ranks
    from .retrieval import dense_scores, rank_queries

    rs, enc, idx = _load_with_index(inputs, params, threads)
    cfg = FinetuneConfig.from_config(dict(params.finetune))
    ks = params.ks
    pos = {d: i for i, d in enumerate(idx.doc_ids)}
    text = dict(zip(rs.queries.ids, rs.queries.texts))
    train_ids = list(rs.split.train)
    curve_ks = [k for k in ks if k <= 10] or [min(ks)]
    sample = {s: list(rs.split.ids(s))[: cfg.eval_max_queries] for s in ("train", "heldout")}
    judged = {s: Judged.of(rs, ids, idx.doc_ids) for s, ids in sample.items() if ids}
    groups = document_groups(rs.corpus, idx.embeddings)

    def evaluate(step):
        out = {}
        for split, j in judged.items():
            q = enc.encode_queries([text[x] for x in j.query_ids])
            ranks = rank_queries(dense_scores(q, idx.embeddings, threads), len(j.query_ids), j.gold, j.grades, j.excluded, 0,
                                 len(idx.doc_ids), groups)[0]
            for k in curve_ks:
                out[f"{split}_recall@{k}"] = float(recall_from_ranks(ranks, k).mean())
        return out

    res = train_query_encoder(
        enc, idx.embeddings, [text[q] for q in train_ids], [[pos[d] for d in rs.qrels.relevant(q)] for q in train_ids],
        cfg, ckpt_path=params.checkpoint, evaluate=evaluate, threads=threads, progress=True, context=query_records(rs),
        train_excluded=excluded_positions(rs, train_ids, idx.doc_ids) if rs.excluded else None,
    )
    log.info("finetune: %d steps at %.2f steps/s (resumed from %d), %d trainable parameters in %d modules",
             cfg.steps, res.steps_per_s, res.resumed_from, res.trainable, len(res.adapted_modules))
    write_curve(outputs.curve, res.curve)
    save_adapter(enc.model[0].auto_model, outputs.adapter)
    from .evaluate import evaluate_encoder

    rows = _write(outputs, *evaluate_encoder(rs, enc, idx, params.ks, params.ndcg_k, params.encoder_name, "finetuned", threads))
    Path(params.checkpoint).unlink(missing_ok=True)  # the adapter is saved: the checkpoint has served
    return rows


def colbert(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``colbert``: late interaction (``capgap.colbert``, settings ``params.colbert``):
    fine-tune a PyLate ColBERT on the train queries, encode the corpus, retrieve by MaxSim
    (exact, or index candidates re-scored exactly) and evaluate train/held-out with the same
    metrics code as every method (method ``colbert``). ``params.work`` (not an output, so a
    killed job keeps it) holds, per training digest, the checkpoint, the fine-tuned model, the
    encoded documents and the PLAID index; ``params.extensions``: where PLAID compiles its C++
    extensions. With an ANN backend, rows ``ann_recall@k`` (split ``all``) give the index's
    recall against exact MaxSim top-k on ``ann_sample`` queries. Writes ``outputs.metrics``,
    ``outputs.curve`` and ``outputs.run``."""
    import hashlib
    import json
    import os
    import shutil

    import numpy as np
    import torch

    from . import colbert as cb
    from .data import corpus_hash, excluded_positions, query_records
    from .metrics import recall_from_ranks
    from .retrieval import rank_queries

    ks, ndcg_k = params.ks, params.ndcg_k
    dataset = None
    work_dir, extensions_dir = params.work, params.extensions
    if threads:
        torch.set_num_threads(int(threads))
    rs = load_canonical(inputs.data)
    dataset = rs.name
    cfg = cb.ColbertConfig.from_config(dict(params.colbert))
    train_ids = list(rs.split.train)
    key = hashlib.sha256(json.dumps([cfg.training_digest(), corpus_hash(rs.corpus), query_records(rs)], sort_keys=True).encode()).hexdigest()[:16]
    root = Path(work_dir)
    work = root / key
    if root.is_dir():
        for old in root.iterdir():
            if old.name != key:
                log.warning("colbert: discarding work folder %s (checkpoint, model, encoded documents): it was made from another "
                            "config, corpus or query data; starting over in %s", old, work)
                shutil.rmtree(old, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    pos = {d: i for i, d in enumerate(rs.corpus.ids)}
    doc_texts = rs.corpus.passages()
    groups = document_groups(rs.corpus)  # identical texts: one document representation, tied
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
                    j = Judged.of(rs, ids, rs.corpus.ids)
                    Qs = cb.encode_queries(model, [text[q] for q in ids])
                    ranks = rank_queries(lambda a, b: cb.maxsim_scores(Qs[a:b], toks, offs), len(ids), j.gold, j.grades, j.excluded,
                                         0, len(doc_texts), groups)[0]
                    for k in curve_ks:
                        out[f"{split}_recall@{k}"] = float(recall_from_ranks(ranks, k).mean())
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
    j = Judged.of(rs, qids, rs.corpus.ids)
    depth = eval_depth(ks, ndcg_k)
    n_docs = len(doc_texts)
    backend = cfg.backend if cfg.backend != "auto" else ("exact" if n_docs <= cfg.exact_max_docs else "faiss")
    extra_rows = []
    t = time.perf_counter()
    if backend == "exact":
        score_block = lambda a, b: cb.maxsim_scores(Q[a:b], tokens, offsets)  # noqa: E731
    else:
        if backend == "plaid":
            ann = cb.PlaidIndex(work / "plaid", extensions_dir, nbits=cfg.plaid_nbits, candidates=cfg.candidates,
                                ncells=cfg.plaid_ncells, ndocs=cfg.plaid_ndocs,
                                centroid_score_threshold=cfg.plaid_centroid_score_threshold)
        else:
            ann = cb.FaissTokenIndex(cfg.faiss_nlist, cfg.faiss_nprobe, cfg.faiss_k_tokens, cfg.seed)
        ann.build(tokens, offsets)
        log.info("colbert: %s index over %d token embeddings built in %.1f s", backend, len(tokens), time.perf_counter() - t)
        cand = ann.search(Q, max(cfg.candidates, depth))
        log.info("colbert: %.0f candidates per query on average (min %d)", np.mean([len(c) for c in cand]), min(len(c) for c in cand))

        def score_block(a, b):  # exact MaxSim on each query's candidates; the rest is not retrieved
            S = np.full((b - a, n_docs), -np.inf, dtype=np.float32)
            R = np.zeros((b - a, n_docs), dtype=bool)
            for r, c in enumerate(cand[a:b]):
                c = np.unique(np.asarray(c, dtype=np.int64))
                if len(c):
                    S[r, c] = cb.maxsim_scores(Q[a + r : a + r + 1], tokens, offsets, c)[0]
                    R[r, c] = True
            return S, R

    ranks, top, top_s = rank_queries(score_block, len(qids), j.gold, j.grades, j.excluded, depth, n_docs, groups)
    if backend != "exact":  # the index's recall against exact MaxSim top-k, on a query sample
        rng = np.random.default_rng(cfg.seed)
        sample = np.sort(rng.choice(len(qids), size=min(cfg.ann_sample, len(qids)), replace=False))
        exact_idx, _ = cb.maxsim_topk(Q[sample], tokens, offsets, max(ks))
        base = {"dataset": dataset, "encoder": "", "method": "colbert", "split": "all"}
        extra_rows.append({**base, "metric": "ann_sample", "k": "", "value": len(sample)})
        for k in ks:
            extra_rows.append({**base, "metric": "ann_recall", "k": int(k), "value": cb.ann_recall(top[sample], exact_idx, k)})
    log.info("colbert: %s retrieval for %d queries in %.1f s", backend, len(qids), time.perf_counter() - t)
    rows = rows_from_ranks(rs, j, ranks, ks, ndcg_k, method="colbert") + extra_rows
    write_run(outputs.run, qids, top, top_s, rs.corpus.ids, "colbert")
    write_curve(outputs.curve, curve)
    return _write_rows(outputs.metrics, rows)


def hardness(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``hardness``: the parity-task experiments (``capgap.hardness.run_grid``, settings
    ``params.hardness``, probe settings ``params.probe``): rows to ``outputs.metrics`` (the
    results.csv columns), sizes and chance agreement to ``outputs.summary`` (JSON)."""
    from .config import without
    from .hardness import run_grid
    from .probe import ProbeConfig

    t = time.perf_counter()
    rows, summary = run_grid(without(params.hardness, "enabled"), ProbeConfig.from_config(params.probe))
    log.info("hardness: %d rows in %.1f s", len(rows), time.perf_counter() - t)
    write_json(outputs.summary, summary)
    return _write_rows(outputs.metrics, rows)


def _encoder(params, threads):
    """The encoder ``params.encoder_name`` with config ``params.encoder``."""
    from .encoders import EncoderSpec, load_encoder

    return load_encoder(EncoderSpec.from_config(params.encoder_name, dict(params.encoder)), threads=threads)


def _load_with_index(inputs, params, threads):
    """The canonical dataset, the loaded encoder, and its frozen index (fingerprint-checked)."""
    from .index import index_fingerprint, load_index

    rs = load_canonical(inputs.data)
    enc = _encoder(params, threads)
    return rs, enc, load_index(Path(inputs.fingerprint).parent, index_fingerprint(enc.fingerprint(), rs.corpus))


def _write_rows(path, rows: list[dict]) -> list[dict]:
    write_rows(path, rows)
    return rows


def _write(outputs, rows: list[dict], run) -> list[dict]:
    """Write a method's run to ``outputs.run`` and its rows to ``outputs.metrics``."""
    run.write(outputs.run)
    return _write_rows(outputs.metrics, rows)
