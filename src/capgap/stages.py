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

from .data import SPLITS, excluded_positions, load_canonical, write_canonical
from .errors import DatasetUnavailable
from .evaluate import Judged, eval_depth, rows_from_ranks, write_rows, write_run
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
        "text_normalization": "NFC",
        "duplicate_documents": _duplicates(rs.corpus.ids, rs.corpus.passages()),
        "duplicate_queries": _duplicates(rs.queries.ids, [text_key(t) for t in rs.queries.texts]),
    }
    write_json(out / "status.json", status)  # written last: marks the copy complete
    return status


def _duplicates(ids, texts, examples: int = 5) -> dict:
    """Groups of identical texts: ``{"groups", "items" (in groups), "examples": [[id, ...]]}``."""
    from .retrieval import duplicate_groups

    groups = duplicate_groups(list(texts))
    return {"groups": len(groups), "items": int(sum(len(g) for g in groups)),
            "examples": [[ids[i] for i in g[:4]] for g in groups[:examples]]}


def text_key(text: str) -> str:
    """What a query encoder sees of a query, for text ties: NFC, whitespace runs collapsed.
    Queries with equal keys get one vector from any encoder, so the probe gives them one w."""
    import unicodedata

    return " ".join(unicodedata.normalize("NFC", text).split())


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


def document_groups(rs, embeddings=None) -> list:
    """Documents that must score identically (``capgap.retrieval``'s tie rule): identical
    passage texts, merged with bit-identical rows of ``embeddings`` ``(n_docs, dim)`` (index
    order = corpus order, which the fingerprint check guarantees)."""
    from .retrieval import duplicate_groups, merge_groups

    groups = [duplicate_groups(rs.corpus.passages())]
    if embeddings is not None:
        groups.append(duplicate_groups(embeddings))
    return merge_groups(len(rs.corpus), *groups)


def _evaluate_encoder(rs, enc, index, dataset, encoder_name, method, ks, ndcg_k, out_csv, out_run, threads) -> list[dict]:
    """Encode every query, rank the whole frozen index (evaluation tie rule), evaluate; write
    rows and run."""
    from .retrieval import dense_scores, rank_queries

    qids = list(rs.queries.ids)
    q = enc.encode_queries(list(rs.queries.texts), progress=True)
    j = Judged.of(rs, qids, index.doc_ids)
    ranks, top, top_s = rank_queries(dense_scores(q, index.embeddings, threads), len(qids), j.gold, j.grades, j.excluded,
                                     eval_depth(ks, ndcg_k), len(index.doc_ids), document_groups(rs, index.embeddings))
    rows = rows_from_ranks(rs, j, ranks, ks, ndcg_k, dataset, encoder_name, method)
    write_run(out_run, qids, top, top_s, index.doc_ids, f"{encoder_name}-{method}")
    write_rows(out_csv, rows)
    return rows


def evaluate_bm25(data_dir: str | Path, dataset: str, bm25_cfg: Mapping, ks: Sequence[int], ndcg_k: int, out_csv: str | Path, out_run: str | Path) -> list[dict]:
    """Recall@k / nDCG of BM25 (``bm25_cfg``: backend, method, k1, b, epsilon, stopwords).

    Only documents sharing a term with the query are retrieved (``BM25.matches``); documents
    with identical text are tied; ranking follows the evaluation tie rule."""
    from .bm25 import BM25
    from .retrieval import rank_queries

    rs = load_canonical(data_dir)
    bm = BM25(rs.corpus.passages(), **dict(bm25_cfg))
    log.info("bm25: %s", bm.variant)
    qids, texts = list(rs.queries.ids), list(rs.queries.texts)
    j = Judged.of(rs, qids, rs.corpus.ids)
    ranks, top, top_s = rank_queries(lambda a, b: bm.scores_and_matches(texts[a:b]), len(qids), j.gold, j.grades, j.excluded,
                                     eval_depth(ks, ndcg_k), len(rs.corpus), document_groups(rs), block=256)
    rows = rows_from_ranks(rs, j, ranks, ks, ndcg_k, dataset, "", "bm25")
    write_run(out_run, qids, top, top_s, rs.corpus.ids, "bm25")
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
    out_run: str | Path | None = None,
) -> list[dict]:
    """The capacity probe on every query of the frozen index (``capgap.probe``).

    Queries with identical text (``text_key``) share one w. Writes one JSON line per query
    (recall@k, slack, iterations, gap, margin, certificate, cause, gold ranks; ``null`` for a
    margin means no non-gold document) and the summary rows (method ``probe``): recall@k and
    nDCG per split from the same ranks as every method, plus ``certified`` (fraction),
    ``uncertified_duplicate`` / ``uncertified_tied`` / ``uncertified_geometry`` (fractions by
    cause), ``tied_queries`` (queries sharing their text), ``certified_by_construction``
    (fraction whose certificate was guaranteed), ``slack_median``, ``iterations_median``,
    ``not_converged`` (fraction). ``out_run``: the TREC run of every query's w. The index must
    have been built from this corpus (else ``FingerprintMismatch``).
    """
    import numpy as np

    from .data import SPLITS, corpus_hash
    from .errors import FingerprintMismatch
    from .index import load_index
    from .io import write_jsonl
    from .probe import probe

    rs = load_canonical(data_dir)
    index = load_index(index_dir)
    want = {"corpus_sha256": corpus_hash(rs.corpus), "n_docs": len(rs.corpus)}
    got = {k: index.fingerprint.get(k) for k in want}
    if got != want or tuple(index.doc_ids) != tuple(rs.corpus.ids):
        raise FingerprintMismatch(index_dir, want, got)
    qids = list(rs.queries.ids)
    j = Judged.of(rs, qids, index.doc_ids)
    keys = [text_key(t) for t in rs.queries.texts]
    depth = eval_depth(ks, ndcg_k)
    t = time.perf_counter()
    results = probe(index.embeddings, j.gold, threads=threads, progress=True, excluded_sets=j.excluded, grades=j.grades,
                    tie_groups=keys, depth=depth, duplicates=document_groups(rs), **dict(probe_cfg))
    log.info("probe: %d queries in %.1f s", len(qids), time.perf_counter() - t)
    split_of = {q: s for s in SPLITS for q in rs.split.ids(s)}
    doc_ids = index.doc_ids
    lines = []
    for q, g, r in zip(qids, j.gold, results):
        lines.append({
            "query_id": q, "split": split_of.get(q, ""), "n_gold": len(g),
            **{f"recall@{k}": r.recall_at(k) for k in ks},
            "certified": r.certified, "cause": r.cause, "by_construction": r.by_construction, "tied": r.tied,
            "lp_feasible": r.lp_feasible, "duplicate_conflict": r.duplicate_conflict,
            "slack": r.slack, "margin": r.margin, "objective": r.objective, "gap": r.gap,
            "iterations": r.iterations, "converged": r.converged, "w_norm": float(np.linalg.norm(r.w)),
            "C_final": r.extra.get("C_final"), "escalations": r.extra.get("escalations"),
            "gold_ranks": {doc_ids[d]: int(x) for d, x in zip(g, r.gold_ranks)},
        })
    write_jsonl(out_jsonl, lines)
    if out_run is not None:
        write_run(out_run, qids, np.stack([r.top_rows for r in results]), np.stack([r.top_scores for r in results]), doc_ids,
                  f"{encoder_name}-probe")
    rows = rows_from_ranks(rs, j, [r.gold_ranks for r in results], ks, ndcg_k, dataset, encoder_name, "probe")
    by_q = dict(zip(qids, results))
    extra = []
    for split in ("train", "heldout", "all"):
        ids = qids if split == "all" else list(rs.split.ids(split))
        if not ids:
            continue
        base = {"dataset": dataset, "encoder": encoder_name, "method": "probe", "split": split}
        res = [by_q[q] for q in ids]
        extra.append({**base, "metric": "certified", "k": "", "value": float(np.mean([r.certified for r in res]))})
        for cause in ("duplicate", "tied", "geometry"):
            extra.append({**base, "metric": f"uncertified_{cause}", "k": "", "value": float(np.mean([r.cause == cause for r in res]))})
        extra.append({**base, "metric": "tied_queries", "k": "", "value": int(sum(r.tied > 1 for r in res))})
        extra.append({**base, "metric": "certified_by_construction", "k": "",
                      "value": float(np.mean([r.by_construction is not None for r in res]))})
        extra.append({**base, "metric": "slack_median", "k": "", "value": float(np.median([r.slack for r in res]))})
        extra.append({**base, "metric": "iterations_median", "k": "", "value": float(np.median([r.iterations for r in res]))})
        extra.append({**base, "metric": "not_converged", "k": "", "value": float(np.mean([not r.converged for r in res]))})
    rows = _interleave(rows, extra)
    write_rows(out_csv, rows)
    return rows


def _interleave(rows: list[dict], extra: list[dict]) -> list[dict]:
    """``rows`` with each split's ``extra`` rows placed right after that split's own rows."""
    out = []
    for split in ("train", "heldout", "all"):
        out += [r for r in rows if r["split"] == split] + [r for r in extra if r["split"] == split]
    return out


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
    pre-trained encoder (same code: encode queries, rank the index, ``rows_from_ranks``).
    Writes the metrics rows (method ``finetuned``), the training curve (CSV), the TREC run and
    the adapter (peft ``save_pretrained``). Resumes from ``ckpt_path`` after a kill.
    """
    from .finetune import FinetuneConfig, save_adapter, train_query_encoder
    from .metrics import recall_from_ranks
    from .retrieval import dense_scores, rank_queries

    rs, enc, index = _load_with_index(data_dir, index_dir, encoder_name, encoder_cfg, threads)
    cfg = FinetuneConfig.from_config(dict(finetune_cfg))
    pos = {d: i for i, d in enumerate(index.doc_ids)}
    text = dict(zip(rs.queries.ids, rs.queries.texts))
    train_ids = list(rs.split.train)
    curve_ks = [k for k in ks if k <= 10] or [min(ks)]
    sample = {s: list(rs.split.ids(s))[: cfg.eval_max_queries] for s in ("train", "heldout")}
    judged = {s: Judged.of(rs, ids, index.doc_ids) for s, ids in sample.items() if ids}
    groups = document_groups(rs, index.embeddings)

    def evaluate(step):
        out = {}
        for split, j in judged.items():
            q = enc.encode_queries([text[x] for x in j.query_ids])
            ranks = rank_queries(dense_scores(q, index.embeddings, threads), len(j.query_ids), j.gold, j.grades, j.excluded, 0,
                                 len(index.doc_ids), groups)[0]
            for k in curve_ks:
                out[f"{split}_recall@{k}"] = float(recall_from_ranks(ranks, k).mean())
        return out

    res = train_query_encoder(
        enc, index.embeddings, [text[q] for q in train_ids], [[pos[d] for d in rs.qrels.relevant(q)] for q in train_ids],
        cfg, ckpt_path=ckpt_path, evaluate=evaluate, threads=threads, progress=True, context=run_data(rs),
        train_excluded=excluded_positions(rs, train_ids, index.doc_ids) if rs.excluded else None,
    )
    log.info("finetune: %d steps at %.2f steps/s (resumed from %d), %d trainable parameters in %d modules",
             cfg.steps, res.steps_per_s, res.resumed_from, res.trainable, len(res.adapted_modules))
    write_curve(out_curve, res.curve)
    save_adapter(enc.model[0].auto_model, out_adapter)
    rows = _evaluate_encoder(rs, enc, index, dataset, encoder_name, "finetuned", ks, ndcg_k, out_csv, out_run, threads)
    Path(ckpt_path).unlink(missing_ok=True)  # the adapter is saved: the checkpoint has served
    return rows



def log_to(path: str | Path) -> None:
    """Send stderr and ``logging`` (INFO) to a rule's log file; first line of every script. Logs
    which capgap code runs, loudly when it is not the workflow's checkout (``provenance``)."""
    import sys

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    sys.stderr = open(path, "w", buffering=1)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    from .logs import quiet_known_noise
    from .provenance import code_summary, code_version

    quiet_known_noise()

    v = code_version()
    log.info("capgap code: %s", code_summary(v))
    if v["matches"] is False:
        log.warning("the imported capgap (%s) is not the workflow's checkout %s: this job runs other code than the "
                    "Snakefile's; reinstall (pip install -e .) or put the checkout's src/ first on PYTHONPATH", v["path"], v["expected"])


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
    from .metrics import recall_from_ranks
    from .retrieval import rank_queries

    if threads:
        torch.set_num_threads(int(threads))
    rs = load_canonical(data_dir)
    cfg = cb.ColbertConfig.from_config(dict(colbert_cfg))
    train_ids = list(rs.split.train)
    key = hashlib.sha256(_json_dumps([cfg.training_digest(), corpus_hash(rs.corpus), run_data(rs)]).encode()).hexdigest()[:16]
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
    groups = document_groups(rs)  # identical texts: one document representation, tied
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
    rows = rows_from_ranks(rs, j, ranks, ks, ndcg_k, dataset, "", "colbert") + extra_rows
    write_run(out_run, qids, top, top_s, rs.corpus.ids, "colbert")
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


def run_data(rs) -> list:
    """What a fine-tuning job learns from and evaluates its curve on, for checkpoint digests:
    every query's split, id, text, gold documents with grades and excluded documents, in split
    order (train, then held-out). A checkpoint or work folder made from other data is never
    resumed (a held-out edit changes the training curve)."""
    text = dict(zip(rs.queries.ids, rs.queries.texts))
    return [[split, q, text[q], sorted(rs.qrels.relevant(q).items()), list(rs.excluded.get(q, ()))]
            for split in SPLITS for q in rs.split.ids(split)]


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
