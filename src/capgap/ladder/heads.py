"""Shared query heads on frozen query embeddings, trained with InfoNCE against the frozen index.

A head maps every query's pre-trained embedding ``x`` (``(dim,) float32``) to a query vector
scored against the frozen index by inner product; one head serves every query (shared), unlike
the probe's one w per query. Two families (issue 29, rungs 2 and 3):

- ``linear``: e(x) = W x, ``W (dim, dim)``, initialised to the identity (the pre-trained
  encoder itself), no bias.
- ``mlp``: one hidden ReLU layer, e(x) = W2 ReLU(W1 x + b1) + b2 (the paper's perfect-encoder
  family, ``capgap.hardness``) with ``width_factor * dim`` hidden units, also initialised to the
  identity: W1 = [I; -I; seeded random rows], W2 = [I, -I, 0], biases 0, since
  x = ReLU(x) - ReLU(-x).

Training (``fit_head``): AdamW, batches from ``capgap.training.run_loop`` (seeded permutation per
epoch), candidates and masks from ``capgap.finetune.candidate_masks``, the loss
``capgap.finetune.infonce_loss`` on the L2-normalised head output against the frozen document
rows (never changed). Seeded: the same inputs and config give the same head on CPU.
"""

from __future__ import annotations

import logging
import time
from typing import Sequence

import numpy as np

from ..finetune import candidate_masks, infonce_loss
from ..training import LoopResult, run_loop, seed_everything
from .config import LadderConfig

log = logging.getLogger(__name__)

HEADS = ("linear", "mlp")


def make_head(kind: str, dim: int, width_factor: int = LadderConfig.width_factor):
    """A ``torch.nn.Module`` mapping ``(n, dim)`` to ``(n, dim)`` that starts as the identity
    (module docstring). The mlp's hidden rows beyond ``2 * dim`` keep torch's default (seeded)
    initialisation, their output columns 0. Raises ``ValueError`` for an unknown ``kind`` or
    ``width_factor < 2``."""
    import torch

    if kind == "linear":
        head = torch.nn.Linear(dim, dim, bias=False)
        with torch.no_grad():
            head.weight.copy_(torch.eye(dim))
        return head
    if kind != "mlp":
        raise ValueError(f"make_head: kind must be one of {HEADS}, got {kind!r}")
    if width_factor < 2:
        raise ValueError(f"make_head: width_factor must be >= 2 to start as the identity, got {width_factor}")
    hidden = width_factor * dim
    head = torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, dim))
    eye = torch.eye(dim)
    with torch.no_grad():
        head[0].weight[: 2 * dim] = torch.cat([eye, -eye])
        head[0].bias[: 2 * dim] = 0.0
        head[2].weight.zero_()
        head[2].weight[:, : 2 * dim] = torch.cat([eye, -eye], dim=1)
        head[2].bias.zero_()
    return head


def fit_head(kind: str, X: np.ndarray, documents: np.ndarray, gold: Sequence[Sequence[int]],
             excluded: Sequence[Sequence[int]] | None, cfg: LadderConfig, threads: int | None = None,
             progress: bool = False) -> tuple[object, LoopResult]:
    """Train one head of ``kind`` on the queries ``X`` ``(n, dim) float32`` (their pre-trained
    embeddings), ``gold[i]`` / ``excluded[i]``: row indices of query i's gold and excluded
    documents in ``documents`` ``(n_docs, dim) float32`` (the frozen index; read only).

    Seeds everything with ``cfg.seed`` first (the mlp's random rows come from it), then
    ``cfg.steps`` AdamW steps of ``cfg.batch_size`` queries (``run_loop``). Runs on CUDA when
    available, else on CPU (``threads``: torch threads). Returns ``(head, LoopResult)``; the head
    is in eval mode on the CPU. Raises ``ValueError`` without queries or when a query has no gold
    row (InfoNCE needs one)."""
    import torch

    X = np.asarray(X, dtype=np.float32)
    if len(X) == 0:
        raise ValueError("fit_head: no queries to fit")
    empty = [i for i, g in enumerate(gold) if len(g) == 0]
    if empty:
        raise ValueError(f"fit_head: {len(empty)} queries without a gold row (first: item {empty[0]})")
    if threads:
        torch.set_num_threads(int(threads))
    sampler = seed_everything(cfg.seed)
    head = make_head(kind, X.shape[1], cfg.width_factor)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    head.to(device)
    Xt = torch.from_numpy(X).to(device)
    D = torch.from_numpy(np.array(documents, dtype=np.float32, copy=True)).to(device)  # a private copy (may be a memory map)
    opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def batch_loss(batch):
        cand, mask, excl = candidate_masks(batch, gold, excluded, D.shape[0], cfg.candidates, cfg.n_negatives, sampler)
        q = torch.nn.functional.normalize(head(Xt[torch.from_numpy(np.asarray(batch, dtype=np.int64)).to(device)]), dim=-1)
        docs = D if cand is None else D[torch.from_numpy(cand).to(device)]
        return infonce_loss(q @ docs.T, mask.to(device), cfg.temperature, cfg.loss, None if excl is None else excl.to(device))

    t = time.perf_counter()
    res = run_loop(batch_loss, head, opt, cfg.steps, len(X), cfg.batch_size, sampler, progress=progress, desc=f"head-{kind}")
    log.info("ladder: head %s on %d queries, %d steps in %.1f s (final loss %.4f)", kind, len(X), cfg.steps,
             time.perf_counter() - t, res.curve[-1]["loss"])
    return head.cpu().eval(), res


def apply_head(head, X: np.ndarray, block: int = 8192) -> np.ndarray:
    """The head's L2-normalised query vectors for ``X`` ``(n, dim) float32``: ``(n, dim)
    float32`` (normalising leaves every ranking as it is; it is the vector the loss scored)."""
    import torch

    X = np.asarray(X, dtype=np.float32)
    out = []
    with torch.no_grad():
        for a in range(0, len(X), block):
            out.append(torch.nn.functional.normalize(head(torch.from_numpy(X[a : a + block])), dim=-1).numpy())
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, X.shape[1]), dtype=np.float32)
