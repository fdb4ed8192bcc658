"""Late interaction (ColBERT via PyLate): the paper's multi-vector comparison point.

The paper (arXiv 2610.02749, Sec. 5, LIMIT) contrasts a fine-tuned single-vector encoder
(held-out recall 0.068) with a fine-tuned late-interaction model, GTE-ModernColBERT (0.998).
capgap runs the same comparison with PyLate:

- **Model**: ``pylate.models.ColBERT`` from the config (``lightonai/GTE-ModernColBERT-v1`` in
  the paper setting; offline, a ColBERT built on the bundled MiniLM backbone, to which PyLate
  adds the [Q]/[D] marker tokens and a randomly initialised linear projection to
  ``embedding_size`` dims, seeded here by ``torch.manual_seed(seed)`` before construction).
- **Fine-tuning** (both towers, as ColBERT is trained): ``pylate.losses.Contrastive`` over the
  batch's documents (in-batch negatives plus ``n_negatives`` random non-gold documents per
  query). Because LIMIT's gold sets overlap across queries, an in-batch document that is gold
  for the query is masked out of its softmax (a false negative), never pushed away.
- **Scoring**: MaxSim, s(q, d) = sum_i max_j <q_i, d_j> over L2-normalised token embeddings
  (Khattab & Zaharia 2020, Eq. 3). ``maxsim_topk`` is exact (blocked torch, float32). For
  corpora above ``exact_max_docs`` documents an index proposes candidate documents, which are
  re-scored exactly: ``faiss`` (default; ColBERT v1's end-to-end retrieval, Khattab & Zaharia
  2020, Sec. 3.6: a faiss IVF index over every document token, each query token's nearest
  tokens nominate their documents) or ``plaid`` (PyLate's PLAID, ``use_fast=False``: the
  Stanford backend, whose C++ extensions are compiled once into ``TORCH_EXTENSIONS_DIR``; its
  k-means over 32,768 centroids is estimated at most of an hour for LIMIT's 6M token
  embeddings on 2 CPU cores, so it suits a GPU or a smaller corpus). The index's own recall
  against exact MaxSim top-k (ANN recall) is measured on a query sample and reported apart
  from relevant-document recall (seed 003).

Documents are stored once per run as one ``(n_tokens, dim) float16`` token matrix plus
``(n_docs + 1,) int64`` offsets (document i owns rows ``offsets[i]:offsets[i+1]``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .config import section_defaults

log = logging.getLogger(__name__)

BACKENDS = ("auto", "exact", "faiss", "plaid")


_D = section_defaults("colbert")  # the schema holds every default (capgap.config)


@dataclass(frozen=True)
class ColbertConfig:
    """The ``colbert`` config section (documented in src/capgap/schemas/config.schema.yaml)."""

    model: str = _D["model"]
    sha256: str | None = _D["sha256"]
    embedding_size: int = _D["embedding_size"]
    query_length: int = _D["query_length"]
    document_length: int = _D["document_length"]
    steps: int = _D["steps"]
    batch_size: int = _D["batch_size"]
    lr: float = _D["lr"]
    weight_decay: float = _D["weight_decay"]
    temperature: float = _D["temperature"]
    n_negatives: int = _D["n_negatives"]
    checkpoint_every: int = _D["checkpoint_every"]
    eval_every: int = _D["eval_every"]
    eval_max_queries: int = _D["eval_max_queries"]
    curve_max_docs: int = _D["curve_max_docs"]
    encode_batch_size: int = _D["encode_batch_size"]
    backend: str = _D["backend"]
    exact_max_docs: int = _D["exact_max_docs"]
    candidates: int = _D["candidates"]
    ann_sample: int = _D["ann_sample"]
    faiss_nlist: int | None = _D["faiss_nlist"]
    faiss_nprobe: int = _D["faiss_nprobe"]
    faiss_k_tokens: int = _D["faiss_k_tokens"]
    plaid_nbits: int = _D["plaid_nbits"]
    plaid_ncells: int = _D["plaid_ncells"]
    plaid_ndocs: int = _D["plaid_ndocs"]
    plaid_centroid_score_threshold: float = _D["plaid_centroid_score_threshold"]
    seed: int = _D["seed"]

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"colbert.backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.steps < 0 or self.batch_size < 1 or self.n_negatives < 0 or self.candidates < 1:
            raise ValueError("colbert: steps >= 0, batch_size >= 1, n_negatives >= 0, candidates >= 1")

    @classmethod
    def from_config(cls, cfg: dict) -> "ColbertConfig":
        """Build from the config section; unknown keys raise ``ValueError`` naming them."""
        known = set(cls.__dataclass_fields__)
        extra = set(cfg) - known - {"enabled", "datasets"}
        if extra:
            raise ValueError(f"colbert: unknown keys {sorted(extra)}")
        return cls(**{k: v for k, v in cfg.items() if k in known})

    def training_digest(self) -> str:
        """sha256 of the fields that change the trained model (checkpoints must match it)."""
        keys = ("model", "sha256", "embedding_size", "query_length", "document_length", "steps", "batch_size", "lr",
                "weight_decay", "temperature", "n_negatives", "seed")
        d = {k: v for k, v in asdict(self).items() if k in keys}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def load_colbert(cfg: ColbertConfig, device: str | None = None, path: str | None = None):
    """A ``pylate.models.ColBERT`` for ``cfg.model`` (or a saved model folder ``path``).

    The backbone is resolved like every capgap encoder (``capgap.encoders.resolve_model``:
    local path, then a bundled package with its sha256 checked, then the HF hub cache/online).
    A backbone that is not a ColBERT yet gets PyLate's projection layer, initialised under
    ``torch.manual_seed(cfg.seed)`` so the same config gives the same model.
    """
    import torch
    from pylate import models

    from .encoders import EncoderSpec, resolve_model

    if path is None:
        resolved = resolve_model(EncoderSpec.from_config("colbert", {"model": cfg.model, "sha256": cfg.sha256}))
        path, local = resolved.path, resolved.origin != "hub"
    else:
        local = True
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(cfg.seed)
    model = models.ColBERT(model_name_or_path=path, device=device, embedding_size=cfg.embedding_size,
                           query_length=cfg.query_length, document_length=cfg.document_length, local_files_only=local)
    model.eval()
    return model


# ----------------------------------------------------------------------------- MaxSim scoring


def pack_documents(doc_embeddings: Sequence[np.ndarray], dtype=np.float16) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate per-document token embeddings ``[(n_tokens_i, dim)]`` into
    ``(tokens (sum n_tokens_i, dim) dtype, offsets (n_docs + 1,) int64)``.

    Raises ``ValueError`` if a document has no token or the dimensions differ.
    """
    if not len(doc_embeddings):
        raise ValueError("pack_documents: no documents")
    dims = {np.asarray(d).shape[1] for d in doc_embeddings}
    if len(dims) != 1:
        raise ValueError(f"pack_documents: documents have different dimensions {sorted(dims)}")
    lengths = np.array([len(d) for d in doc_embeddings], dtype=np.int64)
    if (lengths == 0).any():
        raise ValueError(f"pack_documents: document {int(np.argmin(lengths))} has no token embedding")
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return np.concatenate([np.asarray(d, dtype=dtype) for d in doc_embeddings]), offsets


def _padded_block(tokens: np.ndarray, offsets: np.ndarray, docs: np.ndarray):
    """Documents ``docs`` as a zero-padded ``(len(docs), max_len, dim) float32`` tensor and a
    ``(len(docs), max_len) bool`` mask of real tokens."""
    import torch

    lens = offsets[docs + 1] - offsets[docs]
    L = int(lens.max())
    out = np.zeros((len(docs), L, tokens.shape[1]), dtype=np.float32)
    mask = np.zeros((len(docs), L), dtype=bool)
    for r, (d, n) in enumerate(zip(docs, lens)):
        out[r, :n] = tokens[offsets[d] : offsets[d] + n]
        mask[r, :n] = True
    return torch.from_numpy(out), torch.from_numpy(mask)


def maxsim_scores(queries: np.ndarray, tokens: np.ndarray, offsets: np.ndarray, docs: np.ndarray | None = None,
                  block_docs: int = 1024) -> np.ndarray:
    """Exact MaxSim scores ``(n_queries, len(docs)) float32``.

    ``queries``: ``(n_queries, query_tokens, dim)`` (every query token counts, as with PyLate's
    query expansion); ``tokens``/``offsets``: packed documents (``pack_documents``); ``docs``:
    document indices to score (default all). s(q, d) = sum_i max_j <q_i, d_j> (ColBERT, Eq. 3),
    the max over the document's own tokens (as Stanford ColBERT/PLAID; PyLate's masked
    ``colbert_scores`` zeroes padding instead, i.e. max(best token, 0), which differs only when
    every token of a document has a negative similarity), computed in float32 in blocks of
    ``block_docs`` documents.
    """
    import torch

    q = torch.as_tensor(np.asarray(queries, dtype=np.float32))
    nq, lq, dim = q.shape
    docs = np.arange(len(offsets) - 1) if docs is None else np.asarray(docs, dtype=np.int64)
    qf = q.reshape(nq * lq, dim)
    out = np.empty((nq, len(docs)), dtype=np.float32)
    if not len(docs):
        return out
    # bound the (query tokens x block tokens) score matrix to ~2**26 floats (256 MB)
    max_len = int((offsets[docs + 1] - offsets[docs]).max())
    block_docs = max(1, min(block_docs, (1 << 26) // max(1, nq * lq * max_len)))
    for a in range(0, len(docs), block_docs):
        blk = docs[a : a + block_docs]
        D, mask = _padded_block(tokens, offsets, blk)
        s = (qf @ D.reshape(-1, dim).T).reshape(nq * lq, len(blk), -1)
        s = s.masked_fill_(~mask.unsqueeze(0), float("-inf")).amax(dim=2)
        out[:, a : a + len(blk)] = s.reshape(nq, lq, len(blk)).sum(dim=1).numpy()
    return out


def maxsim_topk(queries: np.ndarray, tokens: np.ndarray, offsets: np.ndarray, k: int,
                block_docs: int = 1024, block_queries: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Exact MaxSim top-k over the whole packed corpus.

    Returns ``(indices (n_queries, k') int64, scores (n_queries, k') float32)``, ``k' =
    min(k, n_docs)``, scores descending, ties broken by lower document index
    (``capgap.retrieval.topk_from_scores``).
    """
    from .retrieval import topk_from_scores

    n_docs = len(offsets) - 1
    k = min(int(k), n_docs)
    idx_out, sc_out = [], []
    for a in range(0, len(queries), block_queries):
        q = queries[a : a + block_queries]
        best_i = np.zeros((len(q), 0), dtype=np.int64)
        best_s = np.zeros((len(q), 0), dtype=np.float32)
        for b in range(0, n_docs, block_docs * 8):
            docs = np.arange(b, min(n_docs, b + block_docs * 8))
            s = maxsim_scores(q, tokens, offsets, docs, block_docs)
            cand_i = np.concatenate([best_i, np.broadcast_to(docs, s.shape)], axis=1)
            cand_s = np.concatenate([best_s, s], axis=1)
            top, top_s = topk_from_scores(cand_s, k)
            # ties: topk_from_scores prefers the lower *column*; columns are in document order
            best_i, best_s = np.take_along_axis(cand_i, top, axis=1), top_s
        idx_out.append(best_i)
        sc_out.append(best_s)
    return np.concatenate(idx_out), np.concatenate(sc_out)


def rescore(queries: np.ndarray, tokens: np.ndarray, offsets: np.ndarray, candidates: list[np.ndarray], k: int):
    """Exact MaxSim re-scoring of per-query candidate documents; returns top-k like
    ``maxsim_topk`` (rows padded with -1 / -inf when a query has fewer than k candidates)."""
    idx = np.full((len(queries), k), -1, dtype=np.int64)
    sc = np.full((len(queries), k), -np.inf, dtype=np.float32)
    for i, cand in enumerate(candidates):
        cand = np.unique(np.asarray(cand, dtype=np.int64))
        if not len(cand):
            continue
        s = maxsim_scores(queries[i : i + 1], tokens, offsets, cand)[0]
        order = np.lexsort((cand, -s))[:k]
        idx[i, : len(order)] = cand[order]
        sc[i, : len(order)] = s[order]
    return idx, sc


def ann_recall(approx: np.ndarray, exact: np.ndarray, k: int) -> float:
    """Mean over queries of |approx top-k ∩ exact top-k| / k (ANN recall against exact search,
    not relevant-document recall). ``approx``/``exact``: ``(n_queries, >=k) int64``."""
    k = min(k, exact.shape[1])
    return float(np.mean([len(set(a[:k]) & set(e[:k])) / k for a, e in zip(approx, exact)]))


class FaissTokenIndex:
    """Candidate generation as in ColBERT v1 (Khattab & Zaharia 2020, Sec. 3.6), with faiss.

    A ``faiss.IndexIVFFlat`` (inner product) over every document token embedding; each query
    token retrieves its ``k_tokens`` nearest document tokens probing ``nprobe`` of ``nlist``
    cells, and the documents owning them are the query's candidates (their union, typically
    hundreds), which the caller re-scores exactly. IVF-Flat stores the vectors uncompressed, so
    within the probed cells the token scores are exact. ``nlist`` defaults to the power of two
    nearest 4·sqrt(n_tokens); k-means is seeded and trained on ``64 * nlist`` sampled tokens.
    """

    def __init__(self, nlist: int | None = None, nprobe: int = 32, k_tokens: int = 64, seed: int = 0):
        self.nlist, self.nprobe, self.k_tokens, self.seed = nlist, nprobe, k_tokens, seed
        self._index = None
        self._doc_of_token = None

    def build(self, tokens: np.ndarray, offsets: np.ndarray) -> None:
        """Index the packed documents (``pack_documents`` layout)."""
        import faiss

        n, dim = tokens.shape
        nlist = self.nlist or int(2 ** round(np.log2(max(1.0, 4 * np.sqrt(n)))))
        nlist = max(1, min(nlist, n // 39 or 1))  # faiss wants >= 39 training points per cell
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = int(self.seed)
        index.cp.niter = 10
        rng = np.random.default_rng(self.seed)
        sample = np.sort(rng.choice(n, size=min(n, 64 * nlist), replace=False))
        index.train(np.ascontiguousarray(tokens[sample], dtype=np.float32))
        for a in range(0, n, 1 << 19):
            index.add(np.ascontiguousarray(tokens[a : a + (1 << 19)], dtype=np.float32))
        self._index = index
        self._doc_of_token = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets)).astype(np.int64)
        self.nlist = nlist

    def search(self, queries: np.ndarray, k: int | None = None) -> list[np.ndarray]:
        """Candidate document indices per query ``(n_queries, query_tokens, dim)``: the union of
        the documents owning each query token's ``k_tokens`` nearest document tokens (``k`` is
        unused: the union is what ColBERT v1 re-ranks)."""
        q = np.ascontiguousarray(np.asarray(queries, dtype=np.float32))
        nq, lq, dim = q.shape
        self._index.nprobe = self.nprobe
        _, ids = self._index.search(q.reshape(nq * lq, dim), self.k_tokens)
        ids = ids.reshape(nq, lq * self.k_tokens)
        return [np.unique(self._doc_of_token[row[row >= 0]]) for row in ids]


class PlaidIndex:
    """PyLate's PLAID index (Stanford backend, CPU) over packed documents, used for candidates.

    ``nbits`` (residual compression), ``ncells`` (IVF cells probed per query token), ``ndocs``
    (documents scored in PLAID's last stage) and ``centroid_score_threshold`` (centroid pruning)
    are PLAID's own parameters (Santhanam et al. 2022), PyLate's defaults.

    ``folder``: where the index lives; ``extensions_dir``: ``TORCH_EXTENSIONS_DIR`` for its C++
    extensions (compiled once, ~2.5 min on 2 cores, then loaded in seconds).
    """

    def __init__(self, folder: str | Path, extensions_dir: str | Path, nbits: int = 4, candidates: int = 200,
                 ncells: int = 8, ndocs: int = 8192, centroid_score_threshold: float = 0.35):
        os.environ["TORCH_EXTENSIONS_DIR"] = str(Path(extensions_dir).resolve())
        Path(extensions_dir).mkdir(parents=True, exist_ok=True)
        self.folder = Path(folder)
        self.nbits, self.candidates = nbits, candidates
        self.search_args = {"ncells": ncells, "ndocs": ndocs, "centroid_score_threshold": centroid_score_threshold}
        self._index = None

    def build(self, tokens: np.ndarray, offsets: np.ndarray) -> None:
        """Index every document (document i gets the PLAID id ``str(i)``); replaces any old index."""
        from pylate import indexes

        if self.folder.exists():
            shutil.rmtree(self.folder)
        self.folder.mkdir(parents=True)
        self._index = indexes.PLAID(index_folder=str(self.folder), index_name="plaid", override=True, use_fast=False,
                                    nbits=self.nbits, embedding_size=int(tokens.shape[1]),
                                    **self.search_args)
        docs = [np.asarray(tokens[offsets[i] : offsets[i + 1]], dtype=np.float32) for i in range(len(offsets) - 1)]
        self._index.add_documents(documents_ids=[str(i) for i in range(len(docs))], documents_embeddings=docs)

    def search(self, queries: np.ndarray, k: int) -> list[np.ndarray]:
        """Candidate document indices per query (PLAID's own top-k, approximate)."""
        res = self._index([np.asarray(q, dtype=np.float32) for q in queries], k=k)
        return [np.array([int(r["id"]) for r in row], dtype=np.int64) for row in res]


# ----------------------------------------------------------------------------- fine-tuning


class _MaskedScores:
    """``pylate.scores.ColBERTScores`` with the batch's false negatives set to -inf: an in-batch
    document that is gold for a query (other than its own positive) leaves that query's softmax."""

    def __init__(self):
        from pylate.scores import ColBERTScores

        self.inner = ColBERTScores()
        self.mask = None  # (B, B*N) bool, set before each loss call

    def __call__(self, queries_embeddings, documents_embeddings, queries_mask=None, documents_mask=None):
        s = self.inner(queries_embeddings, documents_embeddings, queries_mask=queries_mask, documents_mask=documents_mask)
        return s if self.mask is None else s.masked_fill(self.mask.to(s.device), float("-inf"))


def false_negative_mask(batch_gold: list[set[int]], slots: list[list[int]]) -> np.ndarray:
    """``(B, B*N) bool``: True where slot ``t`` of doc group ``j`` is gold for query ``i`` but is
    not query ``i``'s own positive (group ``i``, slot 0). ``slots[j][t]``: a document index."""
    B, N = len(slots), len(slots[0])
    m = np.zeros((B, B * N), dtype=bool)
    for i, gold in enumerate(batch_gold):
        for j in range(B):
            for t in range(N):
                if (i, t) != (j, 0) and slots[j][t] in gold:
                    m[i, j * N + t] = True
    return m


def train_colbert(model, cfg: ColbertConfig, doc_texts: Sequence[str], train_queries: Sequence[str],
                  train_gold: Sequence[Sequence[int]], ckpt_path: str | Path | None = None,
                  evaluate: Callable[[int], dict] | None = None, stop_after: int | None = None,
                  progress: bool = False, train_excluded: Sequence[Sequence[int]] | None = None) -> dict:
    """Fine-tune ``model`` (``pylate.models.ColBERT``) in place with PyLate's contrastive loss.

    Each step: ``cfg.batch_size`` train queries from a seeded per-epoch permutation; per query
    one gold document drawn uniformly as the positive and ``cfg.n_negatives`` documents drawn
    uniformly from its non-gold documents; the loss is ``pylate.losses.Contrastive``
    (temperature ``cfg.temperature``) over all the batch's documents with false negatives
    masked (``false_negative_mask``). AdamW. Checkpoints (weights, optimiser, RNG states, sampler
    position, curve) are written atomically every ``cfg.checkpoint_every`` steps and resumed
    when the training digest matches. ``train_excluded[i]``: documents that are neither gold
    nor negative for query i (never drawn as its negatives, masked like false negatives).
    Returns ``{"curve", "steps_per_s", "resumed_from"}``. Raises ``ValueError`` without train
    queries.
    """
    import torch
    from pylate import losses

    from .finetune import _rng_state, _save_checkpoint, _set_rng_state

    n_train, n_docs = len(train_queries), len(doc_texts)
    if n_train == 0:
        raise ValueError("colbert: no train queries")
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    sampler = np.random.default_rng(cfg.seed)
    scorer = _MaskedScores()
    loss_fn = losses.Contrastive(model=model, score_metric=scorer, temperature=cfg.temperature)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    perm, pos, step, curve, losses_seen, resumed = sampler.permutation(n_train), 0, 0, [], [], 0
    ckpt = Path(ckpt_path) if ckpt_path else None
    if ckpt and ckpt.is_file():
        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        if state.get("digest") == cfg.training_digest() and state.get("n_train") == n_train:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optim"])
            _set_rng_state(state["rng"], sampler)
            perm, pos, step, curve, losses_seen = state["perm"], state["pos"], state["step"], state["curve"], state["losses"]
            resumed = step
            log.info("colbert: resumed from %s at step %d", ckpt, step)
        else:
            log.warning("colbert: ignoring checkpoint %s: it belongs to another configuration", ckpt)

    def run_eval(at):
        point = {"step": at, "loss": float(np.mean(losses_seen)) if losses_seen else float("nan")}
        if evaluate is not None:
            model.eval()
            with torch.no_grad():
                point.update(evaluate(at))
        model.train()
        curve.append(point)
        losses_seen.clear()

    gold_sets = [set(int(g) for g in gs) for gs in train_gold]
    avoid = [g | set(int(e) for e in train_excluded[i]) for i, g in enumerate(gold_sets)] if train_excluded else gold_sets
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=cfg.steps, initial=step, desc="colbert", unit="step")
    model.train()
    t0, done_here = time.perf_counter(), 0
    while step < cfg.steps:
        if pos + cfg.batch_size > n_train and pos > 0:
            perm, pos = sampler.permutation(n_train), 0
        batch = perm[pos : pos + cfg.batch_size]
        pos += len(batch)
        slots = []
        for qi in batch:
            gold = sorted(gold_sets[qi])
            row = [gold[int(sampler.integers(len(gold)))]]
            while len(row) < 1 + cfg.n_negatives and len(avoid[qi]) < n_docs:
                d = int(sampler.integers(n_docs))
                if d not in avoid[qi]:
                    row.append(d)
            slots.append(row)
        scorer.mask = torch.from_numpy(false_negative_mask([avoid[qi] for qi in batch], slots))
        feats = [model.tokenize([train_queries[qi] for qi in batch], is_query=True)]
        feats += [model.tokenize([doc_texts[row[t]] for row in slots], is_query=False, pad=True) for t in range(len(slots[0]))]
        feats = [{k: v.to(model.device) for k, v in f.items()} for f in feats]
        loss = loss_fn(feats)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        done_here += 1
        losses_seen.append(float(loss.detach()))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{losses_seen[-1]:.4f}")
        if cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.steps:
            run_eval(step)
        if ckpt and (step % cfg.checkpoint_every == 0 or step == cfg.steps):
            _save_checkpoint(ckpt, {"digest": cfg.training_digest(), "n_train": n_train, "step": step,
                                    "model": model.state_dict(), "optim": opt.state_dict(), "rng": _rng_state(sampler),
                                    "perm": perm, "pos": pos, "curve": curve, "losses": losses_seen})
        if stop_after is not None and done_here >= stop_after and step < cfg.steps:
            raise KeyboardInterrupt(f"stopped after {done_here} steps (test hook)")
    elapsed = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    run_eval(step)
    model.eval()
    return {"curve": curve, "steps_per_s": done_here / elapsed if elapsed > 0 else float("nan"), "resumed_from": resumed}


# ----------------------------------------------------------------------------- encoding


def encode_documents(model, texts: Sequence[str], parts_dir: str | Path, batch_size: int = 32, chunk: int = 2048,
                     progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Token embeddings of every document, packed (``pack_documents``, float16).

    Encoded in chunks of ``chunk`` documents, each saved atomically under ``parts_dir`` so a
    killed run resumes at the first missing chunk. The caller must empty ``parts_dir`` when the
    model changes (``stages.run_colbert`` keys it by the model digest).
    """
    from .io import atomic_open

    parts = Path(parts_dir)
    parts.mkdir(parents=True, exist_ok=True)
    all_tokens, lengths = [], []
    n = len(texts)
    for a in range(0, n, chunk):
        f = parts / f"part-{a:09d}.npz"
        if not f.is_file():
            emb = model.encode(list(texts[a : a + chunk]), is_query=False, batch_size=batch_size,
                               show_progress_bar=progress)
            tok, off = pack_documents(emb)
            with atomic_open(f, "wb") as fh:
                np.savez(fh, tokens=tok, lengths=np.diff(off))
        with np.load(f) as z:
            all_tokens.append(z["tokens"])
            lengths.append(z["lengths"])
        log.info("colbert: encoded %d/%d documents", min(n, a + chunk), n)
    lens = np.concatenate(lengths)
    return np.concatenate(all_tokens), np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)


def encode_queries(model, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Query token embeddings ``(n_queries, query_tokens, dim) float32`` (PyLate pads queries
    with [MASK] tokens to ``query_length``: query expansion, every token scored)."""
    emb = [np.asarray(e, dtype=np.float32) for e in model.encode(list(texts), is_query=True, batch_size=batch_size,
                                                                 show_progress_bar=False)]
    if not emb:
        return np.zeros((0, 0, 0), dtype=np.float32)
    # a model without query expansion gives queries of different lengths: zero tokens add
    # max_j <0, d_j> = 0 to every MaxSim score, so zero-padding changes nothing
    L = max(len(e) for e in emb)
    out = np.zeros((len(emb), L, emb[0].shape[1]), dtype=np.float32)
    for i, e in enumerate(emb):
        out[i, : len(e)] = e
    return out
