"""The pipeline's ColBERT step (rule ``colbert``): train or reuse, encode, retrieve, evaluate.

``run_colbert(rs, cfg, work_dir, extensions_dir, ks, ndcg_k)`` fine-tunes a ColBERT on the
train queries (or reuses the one a previous run finished), encodes the corpus, retrieves by
MaxSim (exact, or index candidates re-scored exactly) and evaluates every split with the same
metrics code as every method (method ``colbert``).

The work folder ``work_dir/<key>`` (``work_key``: the training settings, the corpus and
``capgap.data.query_records``) holds ``checkpoint.pt`` (while training), ``model/`` (the
fine-tuned model; ``model/capgap_done`` marks it complete), ``curve.json``, ``parts/`` (the
encoded documents) and ``plaid/`` (a PLAID index). Folders with another key are deleted.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..data import corpus_hash, excluded_positions, query_records
from ..evaluate import eval_depth, evaluate_scores
from ..io import write_json
from ..retrieval import document_groups
from ..training import curve_evaluator, json_digest, state_from_curve
from ..trec import Run
from .indexes import FaissTokenIndex, PlaidIndex
from .models import ColbertConfig, encode_documents, encode_queries, load_colbert
from .scores import ann_recall, candidate_score_block, maxsim_scores, maxsim_topk, pack_documents
from .train import train_colbert

log = logging.getLogger(__name__)


def work_key(cfg: ColbertConfig, rs) -> str:
    """The work folder's name: 16 hex digits of sha256 over ``cfg.training_digest()``, the
    corpus hash (``capgap.data.corpus_hash``) and ``capgap.data.query_records(rs)`` (train and
    held-out texts, gold sets, exclusions): other settings or data never reuse a folder."""
    return json_digest([cfg.training_digest(), corpus_hash(rs.corpus), query_records(rs)])[:16]


def prepare_work_dir(root: str | Path, key: str) -> Path:
    """``root/key``, created; every other entry of ``root`` (a stale checkpoint, model, encoded
    documents or index from other settings or data) is deleted, with a warning."""
    root = Path(root)
    work = root / key
    if root.is_dir():
        for old in root.iterdir():
            if old.name != key:
                log.warning(
                    "colbert: discarding work folder %s (checkpoint, model, encoded documents): it was made "
                    "from another config, corpus or query data; starting over in %s",
                    old,
                    work,
                )
                shutil.rmtree(old, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    return work


def resolve_backend(cfg: ColbertConfig, n_docs: int) -> str:
    """``cfg.backend``, with ``auto`` resolved: ``exact`` up to ``cfg.exact_max_docs``
    documents, else ``faiss``."""
    if cfg.backend != "auto":
        return cfg.backend
    return "exact" if n_docs <= cfg.exact_max_docs else "faiss"


def fine_tuned_model(
    rs,
    cfg: ColbertConfig,
    work: str | Path,
    ks: Sequence[int],
    groups: Sequence[np.ndarray] = (),
    progress: bool = True,
):
    """The ColBERT fine-tuned on ``rs``'s train split, and its learning curve.

    A finished model in ``work/model`` (with its ``capgap_done`` marker) is loaded with
    ``work/curve.json``. Otherwise ``load_colbert(cfg)`` is trained (``train_colbert``,
    resuming ``work/checkpoint.pt``), its curve evaluated on up to ``cfg.eval_max_queries``
    queries per split at recall@k, k <= 10 of ``ks`` (none when the corpus has more than
    ``cfg.curve_max_docs`` documents: then the curve holds the loss only); the model is saved to
    ``work/model.tmp``, marked done, the curve written, the folder renamed to ``work/model``
    and the checkpoint deleted. ``groups``: duplicate document groups tied in the curve's
    rankings. Returns ``(model, curve)``, the model in eval mode.
    """
    work = Path(work)
    model_dir, curve_file, ckpt = work / "model", work / "curve.json", work / "checkpoint.pt"
    if (model_dir / "capgap_done").is_file():
        model = load_colbert(cfg, path=str(model_dir))
        log.info("colbert: using the fine-tuned model in %s", model_dir)
        return model, json.loads(curve_file.read_text())
    model = load_colbert(cfg)
    doc_texts = rs.corpus.passages()
    text = dict(zip(rs.queries.ids, rs.queries.texts))
    pos = {d: i for i, d in enumerate(rs.corpus.ids)}
    train_ids = list(rs.split.train)

    def scorer():  # documents encoded once per curve point, by the model as it is then
        toks, offs = pack_documents(
            model.encode(doc_texts, is_query=False, batch_size=cfg.encode_batch_size, show_progress_bar=False)
        )

        def score(texts):
            Q = encode_queries(model, texts)
            return lambda a, b: maxsim_scores(Q[a:b], toks, offs)

        return score

    evaluate = None
    if len(doc_texts) <= cfg.curve_max_docs:
        evaluate = curve_evaluator(rs, rs.corpus.ids, scorer, ks, groups, cfg.eval_max_queries)
    elif cfg.patience:
        raise ValueError(
            "colbert.patience needs the learning curve's held-out recall, which is computed for corpora "
            f"of at most colbert.curve_max_docs = {cfg.curve_max_docs} documents ({rs.name} has "
            f"{len(doc_texts)})"
        )
    res = train_colbert(
        model,
        cfg,
        doc_texts,
        [text[q] for q in train_ids],
        [[pos[d] for d in rs.qrels.gold(q)] for q in train_ids],
        ckpt_path=ckpt,
        evaluate=evaluate,
        progress=progress,
        train_excluded=excluded_positions(rs, train_ids, rs.corpus.ids) if rs.excluded else None,
        name=f"{rs.name} colbert",
    )
    log.info(
        "colbert: %d steps at %.2f steps/s (resumed from %d)",
        res["stopped_at"] or cfg.steps,
        res["steps_per_s"],
        res["resumed_from"],
    )
    tmp = work / "model.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save(str(tmp))
    write_json(tmp / "capgap_done", {"digest": work.name})
    write_json(curve_file, res["curve"])  # before the model is in place: a done model always has its curve
    shutil.rmtree(model_dir, ignore_errors=True)
    os.replace(tmp, model_dir)
    ckpt.unlink(missing_ok=True)
    return model, res["curve"]


def ann_recall_rows(
    dataset: str,
    queries: np.ndarray,
    tokens: np.ndarray,
    offsets: np.ndarray,
    top: np.ndarray,
    ks: Sequence[int],
    sample_size: int,
    seed: int,
) -> list[dict]:
    """results.csv rows of an index's recall against exact MaxSim top-k (not gold-document
    recall), on ``sample_size`` queries drawn with ``np.random.default_rng(seed)``.

    ``queries``: ``(n_queries, query_tokens, dim)``; ``tokens``/``offsets``: packed documents;
    ``top``: ``(n_queries, >= max(ks)) int64`` the retrieved ranking. Rows (method ``colbert``,
    split ``all``): ``ann_sample`` (the sample size), then ``ann_recall`` at each k of ``ks``.
    """
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(len(queries), size=min(sample_size, len(queries)), replace=False))
    exact_idx, _ = maxsim_topk(queries[sample], tokens, offsets, max(ks))
    base = {"dataset": dataset, "encoder": "", "method": "colbert", "split": "all"}
    rows = [{**base, "metric": "ann_sample", "k": "", "value": len(sample)}]
    for k in ks:
        rows.append({**base, "metric": "ann_recall", "k": int(k), "value": ann_recall(top[sample], exact_idx, k)})
    return rows


@dataclass
class ColbertRun:
    """What ``run_colbert`` produced: ``rows`` (results.csv rows: recall@k, nDCG, n_queries per
    split, then ``ann_sample``/``ann_recall`` rows with an index), ``curve`` (one dict per
    curve point), ``run`` (a ``capgap.trec.Run`` tagged ``colbert``: every query's ranking,
    ``(n_queries, depth)`` document rows and MaxSim scores, -1 / -inf padded) and ``backend``
    (``exact``, ``faiss`` or ``plaid``)."""

    rows: list
    curve: list
    run: Run
    backend: str


def run_colbert(
    rs,
    cfg: ColbertConfig,
    work_dir: str | Path,
    extensions_dir: str | Path,
    ks: Sequence[int],
    ndcg_k: int,
    threads: int | None = None,
) -> ColbertRun:
    """Late interaction on retrieval set ``rs``: fine-tune (or reuse), encode, retrieve, evaluate.

    Parameters
    ----------
    rs : capgap.data.RetrievalSet
    cfg : ColbertConfig
    work_dir : path
        The work root; this run uses ``work_dir/work_key(cfg, rs)`` (``prepare_work_dir``).
    extensions_dir : path
        ``TORCH_EXTENSIONS_DIR`` for PLAID's C++ extensions (``backend: plaid`` only).
    ks, ndcg_k : sequence of int, int
        Evaluation cut-offs; rankings are ``capgap.evaluate.eval_depth(ks, ndcg_k)`` deep.
    threads : int, optional
        torch threads.

    Retrieval (``resolve_backend``): ``exact`` scores every document by MaxSim; ``faiss`` /
    ``plaid`` take ``max(cfg.candidates, depth)`` candidates per query from the index, score
    them exactly and leave the rest unretrieved, and add the ANN-recall rows
    (``ann_recall_rows``). Rankings use the evaluation tie rule with identical document texts
    tied. Returns a ``ColbertRun``. Raises ``ValueError`` without train queries; errors of
    ``load_colbert`` propagate.
    """
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    work = prepare_work_dir(work_dir, work_key(cfg, rs))
    groups = document_groups(rs.corpus)  # identical texts: one document representation, tied
    model, curve = fine_tuned_model(rs, cfg, work, ks, groups)
    doc_texts = rs.corpus.passages()
    t = time.perf_counter()
    tokens, offsets = encode_documents(
        model, doc_texts, work / "parts", batch_size=cfg.encode_batch_size, progress=True
    )
    log.info(
        "colbert: %d documents -> %d token embeddings in %.1f s", len(doc_texts), len(tokens), time.perf_counter() - t
    )
    Q = encode_queries(model, list(rs.queries.texts))
    depth = eval_depth(ks, ndcg_k)
    n_docs = len(doc_texts)
    backend = resolve_backend(cfg, n_docs)
    t = time.perf_counter()
    if backend == "exact":
        score_block = lambda a, b: maxsim_scores(Q[a:b], tokens, offsets)  # noqa: E731
    else:
        if backend == "plaid":
            ann = PlaidIndex(
                work / "plaid",
                extensions_dir,
                nbits=cfg.plaid_nbits,
                candidates=cfg.candidates,
                ncells=cfg.plaid_ncells,
                ndocs=cfg.plaid_ndocs,
                centroid_score_threshold=cfg.plaid_centroid_score_threshold,
            )
        else:
            ann = FaissTokenIndex(cfg.faiss_nlist, cfg.faiss_nprobe, cfg.faiss_k_tokens, cfg.seed)
        ann.build(tokens, offsets)
        log.info(
            "colbert: %s index over %d token embeddings built in %.1f s", backend, len(tokens), time.perf_counter() - t
        )
        cand = ann.search(Q, max(cfg.candidates, depth))
        log.info(
            "colbert: %.0f candidates per query on average (min %d)",
            np.mean([len(c) for c in cand]),
            min(len(c) for c in cand),
        )
        score_block = candidate_score_block(Q, tokens, offsets, cand)  # the rest is not retrieved
    rows, run = evaluate_scores(rs, score_block, rs.corpus.ids, groups, ks, ndcg_k, "", "colbert", "colbert")
    if cfg.convergence() is not None and curve:  # the learner's state (capgap.training.Convergence)
        rows += state_from_curve(curve, cfg.convergence()).rows(rs.name, "", "colbert")
    elif not cfg.steps:  # evaluated as loaded: 0 steps of a 0-step cap (the report's "not trained")
        rows += [
            {
                "dataset": rs.name,
                "encoder": "",
                "method": "colbert",
                "split": "train",
                "metric": m,
                "k": "",
                "value": 0.0,
            }
            for m in ("steps", "max_steps")
        ]
    extra = (
        []
        if backend == "exact"
        else ann_recall_rows(rs.name, Q, tokens, offsets, run.rows, ks, cfg.ann_sample, cfg.seed)
    )
    log.info("colbert: %s retrieval for %d queries in %.1f s", backend, len(rs.queries), time.perf_counter() - t)
    return ColbertRun(rows + extra, curve, run, backend)
