"""InfoNCE against the frozen index and one batch's candidates (package docstring: the forms)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .config import _D


def infonce_loss(scores, gold_mask, temperature: float, form: str = _D["loss"], exclude_mask=None):
    """Mean InfoNCE loss of a batch over its candidate documents.

    Multiclass cross-entropy at temperature tau (van den Oord et al. 2018, "Representation
    Learning with Contrastive Predictive Coding"), as dual-encoder retrieval uses it (Karpukhin
    et al. 2020, "Dense Passage Retrieval"), in two multi-positive forms. Computed with
    log-sum-exp, stable for large scores.

    Parameters
    ----------
    scores : torch.Tensor
        ``(batch, n_candidates)`` float inner products.
    gold_mask : torch.Tensor
        ``(batch, n_candidates) bool``, at least one True per row.
    temperature : float
        tau: the logits are ``l_j = s_j / tau``.
    form : {"avg", "set"}
        With P the query's gold set and N its candidates that are not gold (other gold
        documents of the query are never negatives):

        - ``avg``: L = -(1/|P|) sum_{p in P} log(e^{l_p} / (e^{l_p} + sum_{j in N} e^{l_j})):
          every gold document must win against all non-gold candidates (what recall@k asks);
        - ``set``: L = -log(sum_{p in P} e^{l_p} / (sum_{p in P} e^{l_p} + sum_{j in N} e^{l_j})):
          finding one gold document suffices.
    exclude_mask : torch.Tensor, optional
        Same shape, disjoint from ``gold_mask``: candidates that are neither gold nor negative
        (BRIGHT's excluded documents), left out of the softmax.

    Returns
    -------
    torch.Tensor
        0-d: the mean loss over the batch.

    Raises
    ------
    ValueError
        ``form`` is neither ``avg`` nor ``set``.
    """
    import torch

    logits = scores / temperature
    neg_inf = torch.finfo(logits.dtype).min
    if exclude_mask is not None:
        logits = logits.masked_fill(exclude_mask, neg_inf)
    lse_neg = torch.logsumexp(logits.masked_fill(gold_mask, neg_inf), dim=1)  # (batch,)
    # -log(e^a / (e^a + e^b)) = softplus(b - a): computed from the difference, so large scores
    # cannot cancel (subtract the maximum and compute the loss directly: log-sum-exp)
    softplus = torch.nn.functional.softplus
    if form == "avg":
        per = softplus(lse_neg[:, None] - logits)
        per_q = (per * gold_mask).sum(1) / gold_mask.sum(1)
    elif form == "set":
        lse_pos = torch.logsumexp(logits.masked_fill(~gold_mask, neg_inf), dim=1)
        per_q = softplus(lse_neg - lse_pos)
    else:
        raise ValueError(f"unknown loss form {form!r}")
    return per_q.mean()


def candidate_masks(
    batch: np.ndarray,
    gold: Sequence[Sequence[int]],
    excluded: Sequence[Sequence[int]] | None,
    n_docs: int,
    candidates: str = _D["candidates"],
    n_negatives: int = _D["n_negatives"],
    sampler: np.random.Generator | None = None,
):
    """One batch's InfoNCE candidates and masks (module docstring, "Candidates").

    ``batch``: ``(b,) int64`` item indices; ``gold[i]`` / ``excluded[i]``: item i's gold and
    excluded row indices into the frozen index of ``n_docs`` rows (``excluded`` None: none).
    ``candidates``: ``full`` (every row; ``cand`` is None) or ``sampled`` (the batch's gold rows
    plus ``n_negatives`` rows drawn without replacement from ``sampler``, ascending and unique:
    ``cand`` ``(c,) int64``). Returns ``(cand, gold_mask, exclude_mask)``: ``gold_mask`` ``(b,
    n_docs or c) bool`` torch tensor, ``exclude_mask`` the same shape or None when no item of
    the batch has exclusions. Raises ``ValueError`` for ``sampled`` without a ``sampler``."""
    import torch

    excl = None
    if candidates == "full":
        cand = None
        mask = torch.zeros((len(batch), n_docs), dtype=torch.bool)
        for r, qi in enumerate(batch):
            mask[r, list(gold[qi])] = True
        if excluded is not None and any(len(excluded[qi]) for qi in batch):
            excl = torch.zeros((len(batch), n_docs), dtype=torch.bool)
            for r, qi in enumerate(batch):
                excl[r, list(excluded[qi])] = True
        return cand, mask, excl
    if sampler is None:
        raise ValueError("candidate_masks: candidates 'sampled' needs a sampler")
    gold_rows = np.unique(np.concatenate([np.asarray(gold[qi], dtype=np.int64) for qi in batch]))
    extra = sampler.choice(n_docs, size=min(n_negatives, n_docs), replace=False)
    cand = np.unique(np.concatenate([gold_rows, extra]))
    where = {d: i for i, d in enumerate(cand)}
    mask = torch.zeros((len(batch), len(cand)), dtype=torch.bool)
    for r, qi in enumerate(batch):
        mask[r, [where[d] for d in gold[qi]]] = True
    if excluded is not None and any(len(excluded[qi]) for qi in batch):
        excl = torch.zeros((len(batch), len(cand)), dtype=torch.bool)
        for r, qi in enumerate(batch):
            excl[r, [where[d] for d in excluded[qi] if d in where]] = True
    return cand, mask, excl
