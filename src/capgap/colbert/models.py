"""ColBERT models: the ``colbert`` config section, loading a PyLate ColBERT, and encoding.

Documents are encoded once per run into one ``(n_tokens, dim) float16`` token matrix plus
``(n_docs + 1,) int64`` offsets (``capgap.colbert.scores.pack_documents``); queries into a
``(n_queries, query_tokens, dim) float32`` array ([MASK]-expanded to ``query_length``).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..arrays import read_npz
from ..config import section_defaults
from ..encoders import EncoderSpec, resolve_model
from ..errors import DataFormatError, ModelNotFound
from ..io import atomic_open
from ..training import Convergence, json_digest
from .scores import pack_documents

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
    patience: int | None = _D["patience"]
    tol: float = _D["tol"]
    n_iter_no_change: int = _D["n_iter_no_change"]
    stop_at_convergence: bool = _D["stop_at_convergence"]
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
        if self.tol < 0 or self.n_iter_no_change < 1 or self.eval_every < 1:
            raise ValueError("colbert: tol >= 0, n_iter_no_change >= 1 and eval_every >= 1 (the convergence rule)")

    def convergence(self):
        """The convergence rule (``capgap.training.Convergence``: ``tol``, ``n_iter_no_change``,
        cap ``steps``, ``stop_at_convergence``); None when ``steps`` is 0 (nothing trains)."""
        return (
            Convergence(self.tol, self.n_iter_no_change, self.steps, self.stop_at_convergence) if self.steps else None
        )

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
        keys = (
            "model",
            "sha256",
            "embedding_size",
            "query_length",
            "document_length",
            "steps",
            "batch_size",
            "lr",
            "weight_decay",
            "temperature",
            "n_negatives",
            "seed",
            "patience",
            "tol",
            "n_iter_no_change",
            "stop_at_convergence",
            "eval_every",
            "eval_max_queries",
        )  # the last three decide where training stops
        d = {
            k: v for k, v in asdict(self).items() if k in keys and not (k == "patience" and v is None)
        }  # old keys stay valid
        return json_digest(d)[:16]


def load_colbert(cfg: ColbertConfig, device: str | None = None, path: str | None = None):
    """A ``pylate.models.ColBERT`` for ``cfg.model`` (or a saved model folder ``path``), in eval mode.

    Parameters
    ----------
    cfg : ColbertConfig
        ``model``/``sha256`` (the backbone), ``embedding_size``, ``query_length``,
        ``document_length`` and ``seed``.
    device : str, optional
        torch device; default ``cuda`` when available, else ``cpu``.
    path : str, optional
        A folder written by ``model.save`` (e.g. the pipeline's fine-tuned model), loaded
        offline instead of resolving ``cfg.model``.

    The backbone is resolved like every capgap encoder (``capgap.encoders.resolve_model``:
    local path, then a bundled package with its sha256 checked, then the HF hub cache/online).
    A backbone that is not a ColBERT yet gets PyLate's projection layer, initialised under
    ``torch.manual_seed(cfg.seed)`` so the same config gives the same model (this reseeds
    torch's global RNG).

    Raises
    ------
    capgap.errors.ModelNotFound
        ``path`` is not a folder, or ``cfg.model`` is neither local, bundled nor (online)
        on the hub.
    capgap.errors.ModelIntegrityError
        The resolved weights do not have the pinned sha256.
    OSError, ValueError
        From PyLate / sentence-transformers when the folder holds no loadable model.
    """
    import torch
    from pylate import models

    if path is None:
        resolved = resolve_model(EncoderSpec.from_config("colbert", {"model": cfg.model, "sha256": cfg.sha256}))
        path, local = resolved.path, resolved.origin != "hub"
    else:
        if not Path(path).is_dir():
            raise ModelNotFound(f"colbert: model folder {path} does not exist")
        local = True
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(cfg.seed)
    model = models.ColBERT(
        model_name_or_path=path,
        device=device,
        embedding_size=cfg.embedding_size,
        query_length=cfg.query_length,
        document_length=cfg.document_length,
        local_files_only=local,
    )
    model.eval()
    return model


def encode_documents(
    model,
    texts: Sequence[str],
    parts_dir: str | Path,
    batch_size: int = _D["encode_batch_size"],
    chunk: int = 2048,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Token embeddings of every document, packed (``pack_documents``, float16).

    Encoded in chunks of ``chunk`` documents, each saved atomically under ``parts_dir`` as
    ``part-{first document:09d}.npz`` so a killed run resumes at the first missing chunk. The
    caller must empty ``parts_dir`` when the model changes (``capgap.colbert.run`` keys its work
    folder by the model and data digest).

    Returns ``(tokens (n_tokens, dim) float16, offsets (n_docs + 1,) int64)``. Raises
    ``ValueError`` (``pack_documents``) when a document has no token embedding.
    """
    parts = Path(parts_dir)
    parts.mkdir(parents=True, exist_ok=True)
    all_tokens, lengths = [], []
    n = len(texts)
    for a in range(0, n, chunk):
        f = parts / f"part-{a:09d}.npz"
        if not f.is_file():
            emb = model.encode(
                list(texts[a : a + chunk]), is_query=False, batch_size=batch_size, show_progress_bar=progress
            )
            tok, off = pack_documents(emb)
            with atomic_open(f, "wb") as fh:
                np.savez(fh, tokens=tok, lengths=np.diff(off))
        z = read_npz(f, ["tokens", "lengths"])  # never unpickles; a damaged part is named
        if set(z) != {"tokens", "lengths"}:
            raise DataFormatError(
                f, None, None, f"holds arrays {sorted(z)}, expected tokens and lengths: delete the part to re-encode it"
            )
        all_tokens.append(z["tokens"])
        lengths.append(z["lengths"])
        log.info("colbert: encoded %d/%d documents", min(n, a + chunk), n)
    lens = np.concatenate(lengths)
    return np.concatenate(all_tokens), np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)


def encode_queries(model, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Query token embeddings ``(n_queries, query_tokens, dim) float32`` (PyLate pads queries
    with [MASK] tokens to ``query_length``: query expansion, every token scored). Queries of
    different lengths (a model without query expansion) are zero-padded, which changes no
    MaxSim score. No texts give a ``(0, 0, 0)`` array."""
    emb = [
        np.asarray(e, dtype=np.float32)
        for e in model.encode(list(texts), is_query=True, batch_size=batch_size, show_progress_bar=False)
    ]
    if not emb:
        return np.zeros((0, 0, 0), dtype=np.float32)
    # a model without query expansion gives queries of different lengths: zero tokens add
    # max_j <0, d_j> = 0 to every MaxSim score, so zero-padding changes nothing
    L = max(len(e) for e in emb)
    out = np.zeros((len(emb), L, emb[0].shape[1]), dtype=np.float32)
    for i, e in enumerate(emb):
        out[i, : len(e)] = e
    return out
