"""The frozen document index: every document embedded once, stored beside its fingerprint.

Layout of an index folder (``results/{dataset}/{encoder}/index/``):
- ``embeddings.npy``: ``(n_docs, dim) float32``, row i = document ``doc_ids[i]``;
- ``doc_ids.json``: the document ids in row order;
- ``fingerprint.json``: model id, weights sha256, pooling, normalisation, max length,
  dimension, corpus hash, n_docs. Written last: an index without it is incomplete.

Encoding runs in chunks saved under ``parts/`` (each atomically, with the fingerprint they
belong to), so a killed build resumes where it stopped. Loading an index whose fingerprint
differs from the expected one raises ``FingerprintMismatch``.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .data import Corpus, corpus_hash
from .errors import DataFormatError, FingerprintMismatch
from .io import save_npy, write_json
from .retrieval import ZERO_NORM, describe_rows, zero_norm_rows

log = logging.getLogger(__name__)
INDEX_VERSION = 1


@dataclass(frozen=True)
class FrozenIndex:
    """``embeddings``: ``(n_docs, dim) float32`` (memory-mapped, read-only); ``doc_ids``: tuple."""

    embeddings: np.ndarray
    doc_ids: tuple[str, ...]
    fingerprint: dict


def index_fingerprint(encoder_fp: dict, corpus: Corpus) -> dict:
    """The full fingerprint of an index: encoder fields + corpus hash + n_docs + version."""
    return {**encoder_fp, "corpus_sha256": corpus_hash(corpus), "n_docs": len(corpus), "index_version": INDEX_VERSION}


def build_index(corpus: Corpus, encoder, out_dir: str | Path, chunk_size: int = 2048, progress: bool = True) -> FrozenIndex:
    """Embed ``corpus`` with ``encoder`` (a ``capgap.encoders.Encoder``) into ``out_dir``.

    Resumes from ``out_dir/parts/`` when a previous build with the same fingerprint was
    killed. Returns the loaded index. Raises ``ValueError`` on NaN/inf embeddings and, for an
    encoder that normalises, on a document embedded to norm 0 (``Encoder.encode``: the rows and
    document ids are named).
    """
    out = Path(out_dir)
    fp = index_fingerprint(encoder.fingerprint(), corpus)
    parts = out / "parts"
    marker = parts / "fingerprint.json"
    if parts.is_dir() and (not marker.is_file() or json.loads(marker.read_text()) != fp):
        shutil.rmtree(parts)  # parts of another build: never trust them
    parts.mkdir(parents=True, exist_ok=True)
    write_json(marker, fp)
    texts = corpus.passages()
    chunks = []
    for i, start in enumerate(range(0, len(texts), chunk_size)):
        f = parts / f"part_{i:06d}.npy"
        if f.is_file():
            emb = np.load(f)
            log.info("resuming: reused %s (%d docs)", f.name, len(emb))
        else:
            emb = encoder.encode_documents(texts[start : start + chunk_size], progress=progress)
            _check_zero_norm(emb, fp, corpus.ids, start)
            save_npy(f, emb)
        chunks.append(emb)
    emb = np.concatenate(chunks).astype(np.float32, copy=False)
    if emb.shape != (len(corpus), fp["dim"]):
        raise ValueError(f"index: embeddings have shape {emb.shape}, expected {(len(corpus), fp['dim'])}")
    if not np.isfinite(emb).all():
        raise ValueError("index: NaN/inf in document embeddings")
    save_npy(out / "embeddings.npy", emb)
    write_json(out / "doc_ids.json", list(corpus.ids))
    write_json(out / "fingerprint.json", fp)
    shutil.rmtree(parts)
    return load_index(out, fp)


def load_index(folder: str | Path, expected: dict | None = None, corpus: Corpus | None = None) -> FrozenIndex:
    """Load an index folder; check shape, finiteness and (if given) the expected fingerprint.

    ``expected``: the whole fingerprint (``index_fingerprint``: encoder and corpus) the index
    must have. ``corpus``: the corpus it must have been built from, checked on its own (hash,
    size and document order) when the encoder does not matter (the probe only needs the
    geometry). Raises ``FingerprintMismatch`` when either check fails, ``DataFormatError``
    when a file is missing or inconsistent, or when an index of normalised embeddings
    (fingerprint ``normalize``) holds a row of norm 0 (naming the rows and document ids).
    """
    folder = Path(folder)
    fpf = folder / "fingerprint.json"
    if not fpf.is_file():
        raise DataFormatError(fpf, None, None, "missing: the index is incomplete (rebuild it)")
    fp = json.loads(fpf.read_text())
    if expected is not None and expected != fp:
        raise FingerprintMismatch(folder, expected, fp)
    ids = tuple(json.loads((folder / "doc_ids.json").read_text()))
    if corpus is not None:
        want = {"corpus_sha256": corpus_hash(corpus), "n_docs": len(corpus)}
        got = {k: fp.get(k) for k in want}
        if got != want or ids != tuple(corpus.ids):
            raise FingerprintMismatch(folder, want, got)
    emb = np.load(folder / "embeddings.npy", mmap_mode="r")
    if emb.dtype != np.float32 or emb.ndim != 2:
        raise DataFormatError(folder / "embeddings.npy", None, None, f"expected 2-d float32, got {emb.dtype} {emb.shape}")
    if emb.shape != (fp["n_docs"], fp["dim"]) or len(ids) != fp["n_docs"]:
        raise DataFormatError(folder / "embeddings.npy", None, "dim", f"shape {emb.shape} / {len(ids)} ids do not match fingerprint ({fp['n_docs']}, {fp['dim']})")
    if not np.isfinite(emb).all():
        raise DataFormatError(folder / "embeddings.npy", None, None, "NaN or inf in embeddings")
    try:
        _check_zero_norm(emb, fp, ids)
    except ValueError as e:
        raise DataFormatError(folder / "embeddings.npy", None, None, f"{e}; rebuild the index") from None
    return FrozenIndex(emb, ids, fp)


def _check_zero_norm(emb: np.ndarray, fp: dict, ids, start: int = 0) -> None:
    """For an encoder that normalises (fingerprint ``normalize``: scores are cosines), a row of
    ``emb`` ``(n, dim)`` (rows ``start..`` of the corpus ``ids``) with norm 0 (``<=
    capgap.retrieval.ZERO_NORM``) has no cosine: ``ValueError`` naming the model, the corpus
    rows and the document ids (an empty text embedded to zero is the usual cause)."""
    if not fp.get("normalize"):
        return  # inner product: a zero row scores 0, which is defined

    zero = zero_norm_rows(emb)
    if len(zero):
        rows = zero + start
        raise ValueError(f"index ({fp.get('model')}, normalised embeddings): document {describe_rows(rows, ids)} "
                         f"{'has' if len(rows) == 1 else 'have'} norm 0 (<= {ZERO_NORM:g}), so cosine is undefined; an "
                         "empty or untokenisable document text is the usual cause")
