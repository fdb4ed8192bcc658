"""The frozen document index: every document embedded once, stored beside its fingerprint.

Layout of an index folder (``results/{dataset}/{encoder}/index/``):
- ``embeddings.npy``: ``(n_docs, dim) float32``, row i = document ``doc_ids[i]``;
- ``doc_ids.json``: the document ids in row order;
- ``fingerprint.json``: model id, weights sha256, pooling, normalisation, max length,
  dimension, corpus hash, n_docs. Written last: an index without it is incomplete.

Encoding runs in chunks saved under ``parts/`` (each atomically, with the fingerprint they
belong to), so a killed build resumes where it stopped. Loading an index whose fingerprint
differs from the expected one raises ``FingerprintMismatch``.

Sharded (``index.shards`` > 1: rule ``index_shard`` per shard, then rule ``index``): shard k of
n embeds a contiguous run of whole chunks (``shard_chunks``, ``build_index_shard``) and
``gather_index`` concatenates them into the same three files. A chunk is one ``encode`` call in
both builds, so every forward batch holds the same documents and the gathered
``embeddings.npy`` is byte-identical to the unsharded one (tests/probe/test_shards.py, on the bundled
MiniLM on CPU). On a GPU the same holds as long as every shard runs on the same GPU model,
library versions and dtype (the kernels are chosen by shape; the shapes are the same).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from .arrays import read_npy
from .data import Corpus, corpus_hash, load_canonical
from .errors import DataFormatError, FingerprintMismatch
from .evaluate import evaluate_queries, write_outputs
from .io import load_query_embeddings, save_npy, save_npz, write_json
from .paths import shard_of
from .retrieval import ZERO_NORM, describe_rows, zero_norm_rows

log = logging.getLogger(__name__)
INDEX_VERSION = 1


@dataclass(frozen=True)
class FrozenIndex:
    """A loaded index folder.

    Attributes
    ----------
    embeddings : numpy.ndarray
        ``(n_docs, dim) float32``, memory-mapped, read-only; row i is document ``doc_ids[i]``.
    doc_ids : tuple of str
        The document ids in row order.
    fingerprint : dict
        ``fingerprint.json`` (``index_fingerprint``).
    """

    embeddings: np.ndarray
    doc_ids: tuple[str, ...]
    fingerprint: dict


def index_fingerprint(encoder_fp: dict, corpus: Corpus) -> dict:
    """The full fingerprint of an index: encoder fields + corpus hash + n_docs + version."""
    return {**encoder_fp, "corpus_sha256": corpus_hash(corpus), "n_docs": len(corpus), "index_version": INDEX_VERSION}


CHUNK_SIZE = 2048  # documents per encode call: the unit a build resumes by and a shard is made of


def build_index(
    corpus: Corpus, encoder, out_dir: str | Path, chunk_size: int | None = None, progress: bool = True
) -> FrozenIndex:
    """Embed ``corpus`` with ``encoder`` into the index folder ``out_dir``.

    Resumes from ``out_dir/parts/`` when a previous build with the same fingerprint was killed.

    Parameters
    ----------
    corpus : capgap.data.Corpus
        The documents, embedded in corpus order.
    encoder : capgap.encoders.Encoder
        The document encoder.
    out_dir : str or pathlib.Path
        The index folder (layout: module docstring).
    chunk_size : int, optional
        Documents per ``encode`` call; None: ``CHUNK_SIZE``, read at call time.
    progress : bool
        Show a progress bar.

    Returns
    -------
    FrozenIndex
        The index as written, loaded back (``load_index``).

    Raises
    ------
    ValueError
        NaN/inf embeddings; for an encoder that normalises, a document embedded to norm 0
        (``Encoder.encode``: the rows and document ids are named).
    """
    out = Path(out_dir)
    chunk_size = chunk_size or CHUNK_SIZE
    fp = index_fingerprint(encoder.fingerprint(), corpus)
    n_chunks = -(-len(corpus) // chunk_size)
    emb = _embed_chunks(corpus, encoder, fp, out / "parts", range(n_chunks), chunk_size, progress)
    return _write_index(corpus, fp, emb, out, out / "parts")


def shard_chunks(n_docs: int, n_shards: int, shard: int, chunk_size: int | None = None) -> range:
    """The chunks that index shard ``shard`` of ``n_shards`` embeds.

    A contiguous run, ``floor(shard * n_chunks / n_shards)`` up to ``floor((shard + 1) *
    n_chunks / n_shards)``, so the shards cover every chunk once, in order (a shard is empty
    when there are more shards than chunks). A shard is made of whole chunks and a chunk is one
    ``encode`` call whatever the shard count, so every forward batch (sentence-transformers sorts
    a call's texts by length, then batches them) holds the same documents as in the unsharded
    build.

    Parameters
    ----------
    n_docs : int
        Documents in the corpus.
    n_shards : int
        Shards, at least 1.
    shard : int
        This shard, 0-based.
    chunk_size : int, optional
        Documents per chunk; None: ``CHUNK_SIZE``.

    Returns
    -------
    range
        Chunk numbers (from 0, in corpus order).

    Raises
    ------
    ValueError
        ``n_shards < 1`` or ``shard`` outside ``[0, n_shards)``.
    """
    chunk_size = chunk_size or CHUNK_SIZE
    if n_shards < 1 or not 0 <= shard < n_shards:
        raise ValueError(f"index shard {shard} of {n_shards}: need n_shards >= 1 and 0 <= shard < n_shards")
    n_chunks = -(-n_docs // chunk_size)
    return range(shard * n_chunks // n_shards, (shard + 1) * n_chunks // n_shards)


def build_index_shard(
    corpus: Corpus,
    encoder,
    out_file: str | Path,
    n_shards: int,
    shard: int,
    chunk_size: int | None = None,
    progress: bool = True,
) -> np.ndarray:
    """Embed shard ``shard`` of ``n_shards`` of ``corpus`` (``shard_chunks``) into ``out_file``.

    Writes ``out_file`` (``.npy``: ``(n_shard_docs, dim) float32``, the rows of the shard's
    chunks in corpus order), then, last, its fingerprint beside it (``<out_file minus
    .npy>.json``: ``{"fingerprint": ..., "shard": k, "n_shards": n, "start": first row, "stop":
    row past the last}``). Chunks are saved under ``<out_file minus .npy>.parts/`` as in
    ``build_index``, so a killed shard resumes. Parameters as ``build_index`` and
    ``shard_chunks``.

    Returns
    -------
    numpy.ndarray
        The shard's embeddings, ``(n_shard_docs, dim) float32``.

    Raises
    ------
    ValueError
        As ``build_index`` and ``shard_chunks``.
    """
    out_file = Path(out_file)
    chunk_size = chunk_size or CHUNK_SIZE
    chunks = shard_chunks(len(corpus), n_shards, shard, chunk_size)
    fp = index_fingerprint(encoder.fingerprint(), corpus)
    parts = out_file.with_suffix(".parts")
    emb = _embed_chunks(corpus, encoder, fp, parts, chunks, chunk_size, progress)
    start, stop = min(chunks.start * chunk_size, len(corpus)), min(chunks.stop * chunk_size, len(corpus))
    if emb.shape != (stop - start, fp["dim"]):
        raise ValueError(
            f"index shard {shard} of {n_shards}: embeddings have shape {emb.shape}, expected "
            f"{(stop - start, fp['dim'])}"
        )
    save_npy(out_file, emb)
    write_json(
        out_file.with_suffix(".json"),
        {"fingerprint": fp, "shard": shard, "n_shards": n_shards, "start": start, "stop": stop},
    )
    shutil.rmtree(parts)
    return emb


def gather_index(corpus: Corpus, shard_files, out_dir: str | Path) -> FrozenIndex:
    """The index of ``corpus`` from its shards, written to ``out_dir`` as ``build_index`` writes it.

    The same ``embeddings.npy`` bytes (the rows are the same computations), ``doc_ids.json`` and
    ``fingerprint.json``.

    Parameters
    ----------
    corpus : capgap.data.Corpus
        The corpus the shards were built from.
    shard_files : sequence of path
        ``build_index_shard``'s ``.npy`` files, in shard order.
    out_dir : str or pathlib.Path
        The index folder.

    Returns
    -------
    FrozenIndex
        The index as written, loaded back.

    Raises
    ------
    DataFormatError
        Naming the shard file: a shard's fingerprint differs from the first one's, or the
        shards do not cover the corpus rows ``0..n_docs`` in order, each once.
    ValueError
        No shard files; otherwise as ``build_index``.
    """
    chunks, fp, row = [], None, 0
    for i, f in enumerate(map(Path, shard_files)):
        meta_file = f.with_suffix(".json")
        meta = json.loads(meta_file.read_text())
        fp = meta["fingerprint"] if fp is None else fp
        if meta["fingerprint"] != fp:
            raise DataFormatError(
                meta_file, None, "fingerprint", "differs from the first shard's: the shards are of different builds"
            )
        if (meta["shard"], meta["n_shards"], meta["start"]) != (i, len(shard_files), row):
            raise DataFormatError(
                meta_file,
                None,
                "start",
                f"shard {meta['shard']} of {meta['n_shards']} starts at row {meta['start']}; "
                f"expected shard {i} of {len(shard_files)} starting at row {row}",
            )
        emb = read_npy(f, mmap=False)
        if emb.shape[0] != meta["stop"] - meta["start"]:
            raise DataFormatError(f, None, None, f"{emb.shape[0]} rows, its .json says {meta['stop'] - meta['start']}")
        chunks.append(emb)
        row = meta["stop"]
    if fp is None:
        raise ValueError("gather_index: no shard files")
    if any(fp.get(k) != v for k, v in index_fingerprint({}, corpus).items()) or row != len(corpus):
        raise DataFormatError(
            Path(shard_files[-1]).with_suffix(".json"),
            None,
            "corpus_sha256",
            f"the shards cover {row} rows of a corpus with hash {fp.get('corpus_sha256')}; this "
            f"corpus has {len(corpus)} documents, hash {corpus_hash(corpus)}",
        )
    return _write_index(
        corpus, fp, np.concatenate(chunks) if chunks else np.zeros((0, fp["dim"]), np.float32), Path(out_dir)
    )


def _embed_chunks(
    corpus: Corpus, encoder, fp: dict, parts: Path, chunks: range, chunk_size: int, progress: bool
) -> np.ndarray:
    """Chunks ``chunks`` of ``corpus`` embedded, one ``encode_documents`` call per chunk of
    ``chunk_size`` documents, each saved as ``parts/part_<chunk>.npy`` (reused when ``parts``
    holds a build of fingerprint ``fp``: a killed build resumes), concatenated:
    ``(rows, dim) float32``."""
    if parts.is_dir() and (
        not (parts / "fingerprint.json").is_file() or json.loads((parts / "fingerprint.json").read_text()) != fp
    ):
        shutil.rmtree(parts)  # parts of another build: never trust them
    parts.mkdir(parents=True, exist_ok=True)
    write_json(parts / "fingerprint.json", fp)
    texts = corpus.passages()
    out = []
    total = sum(len(texts[i * chunk_size : (i + 1) * chunk_size]) for i in chunks)
    bar = tqdm(
        total=total, desc=f"index {fp.get('model', '')}".strip(), unit="doc", unit_scale=True, disable=not progress
    )
    for i in chunks:
        start = i * chunk_size
        f = parts / f"part_{i:06d}.npy"
        if f.is_file():
            emb = read_npy(f, mmap=False)
            log.info("resuming: reused %s (%d docs)", f.name, len(emb))
        else:
            emb = encoder.encode_documents(texts[start : start + chunk_size], progress=False)
            _check_zero_norm(emb, fp, corpus.ids, start)
            save_npy(f, emb)
        out.append(emb)
        bar.update(len(emb))  # documents/s over the chunks embedded (reused parts count too)
    bar.close()
    return np.concatenate(out).astype(np.float32, copy=False) if out else np.zeros((0, fp["dim"]), np.float32)


def _write_index(corpus: Corpus, fp: dict, emb: np.ndarray, out: Path, parts: Path | None = None) -> FrozenIndex:
    """Check ``emb`` ``(n_docs, dim) float32`` and write the index folder ``out`` (embeddings,
    doc ids, then the fingerprint, last); remove ``parts``. Returns the loaded index."""
    if emb.shape != (len(corpus), fp["dim"]):
        raise ValueError(f"index: embeddings have shape {emb.shape}, expected {(len(corpus), fp['dim'])}")
    if not np.isfinite(emb).all():
        raise ValueError("index: NaN/inf in document embeddings")
    out.mkdir(parents=True, exist_ok=True)
    save_npy(out / "embeddings.npy", emb)
    write_json(out / "doc_ids.json", list(corpus.ids))
    write_json(out / "fingerprint.json", fp)
    if parts is not None:
        shutil.rmtree(parts)
    return load_index(out, fp)


def load_index(folder: str | Path, expected: dict | None = None, corpus: Corpus | None = None) -> FrozenIndex:
    """Load an index folder; check shape, finiteness and (if given) the expected fingerprint.

    ``embeddings.npy`` is read by ``capgap.arrays.read_npy`` (memory-mapped; a big-endian copy
    is byte-swapped to native).

    Parameters
    ----------
    folder : str or pathlib.Path
        The index folder (layout: module docstring).
    expected : dict, optional
        The whole fingerprint (``index_fingerprint``: encoder and corpus) the index must have.
    corpus : capgap.data.Corpus, optional
        The corpus it must have been built from, checked on its own (hash, size and document
        order) when the encoder does not matter (the probe only needs the geometry).

    Returns
    -------
    FrozenIndex
        Embeddings ``(n_docs, dim) float32`` (memory-mapped), document ids, fingerprint.

    Raises
    ------
    FingerprintMismatch
        Either check fails.
    DataFormatError
        A file is missing or inconsistent; ``embeddings.npy`` is no readable ``.npy`` (a git-LFS
        pointer, raw bytes, pickled objects, truncated: named); an index of normalised
        embeddings (fingerprint ``normalize``) holds a row of norm 0 (naming the rows and
        document ids).
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
    emb = read_npy(folder / "embeddings.npy")  # memory-mapped; a big-endian copy is byte-swapped
    if emb.dtype != np.float32 or emb.ndim != 2:
        raise DataFormatError(
            folder / "embeddings.npy", None, None, f"expected 2-d float32, got {emb.dtype} {emb.shape}"
        )
    if emb.shape != (fp["n_docs"], fp["dim"]) or len(ids) != fp["n_docs"]:
        raise DataFormatError(
            folder / "embeddings.npy",
            None,
            "dim",
            f"shape {emb.shape} / {len(ids)} ids do not match fingerprint ({fp['n_docs']}, {fp['dim']})",
        )
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
        raise ValueError(
            f"index ({fp.get('model')}, normalised embeddings): document {describe_rows(rows, ids)} "
            f"{'has' if len(rows) == 1 else 'have'} norm 0 (<= {ZERO_NORM:g}), so cosine is undefined; an "
            "empty or untokenisable document text is the usual cause"
        )


# --------------------------------------------------------------------------- the rules' stages
# Rules index, index_shard and pretrained (workflow/scripts/<rule>.py): the signature of every
# stage is ``stage(inputs, outputs, params, threads=1)`` (see ``capgap.stages``).


def index_stage(inputs, outputs, params, threads: int = 1) -> dict:
    """Rule ``index``: embed the corpus of ``inputs.data`` once with encoder
    ``params.encoder_name`` (config ``params.encoder``) into the folder of
    ``outputs.fingerprint`` (``build_index``); or, when ``inputs.shards`` lists the
    ``index_shard`` jobs' files (``index.shards`` > 1), gather them into the same files
    (``gather_index``). Returns the index fingerprint."""
    # the probe's env reads indexes without torch / sentence-transformers
    from .encoders import encoder_from_params  # lazy: torch, sentence-transformers

    rs = load_canonical(inputs.data)
    shards = list(getattr(inputs, "shards", None) or [])
    if shards:
        idx = gather_index(rs.corpus, shards, Path(outputs.fingerprint).parent)
        log.info("gathered %d documents from %d index shards", len(rs.corpus), len(shards))
        return idx.fingerprint
    enc = encoder_from_params(params, threads)
    t = time.perf_counter()
    idx = build_index(rs.corpus, enc, Path(outputs.fingerprint).parent)
    log.info("embedded %d documents in %.1f s", len(rs.corpus), time.perf_counter() - t)
    return idx.fingerprint


def index_shard_stage(inputs, outputs, params, threads: int = 1) -> dict:
    """Rule ``index_shard``: shard ``params.shard`` (``"<i>-of-<n>"``, ``capgap.paths.shard_of``)
    of the corpus of ``inputs.data`` embedded with encoder ``params.encoder_name`` (config
    ``params.encoder``) into ``outputs.embeddings`` and its ``outputs.meta``
    (``build_index_shard``). Returns the shard's metadata."""
    # the probe's env reads indexes without torch / sentence-transformers
    from .encoders import encoder_from_params  # lazy: torch, sentence-transformers

    k, n = shard_of(params.shard)
    rs = load_canonical(inputs.data)
    enc = encoder_from_params(params, threads)
    t = time.perf_counter()
    emb = build_index_shard(rs.corpus, enc, outputs.embeddings, n, k)
    log.info("index shard %s: embedded %d documents in %.1f s", params.shard, len(emb), time.perf_counter() - t)
    return json.loads(Path(outputs.meta).read_text())


def pretrained_stage(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``pretrained``: recall@k / nDCG of the pre-trained encoder's own query embeddings
    on its frozen index (``evaluate.evaluate_queries``, as ``evaluate_encoder`` does); writes
    ``outputs.run``, ``outputs.metrics`` and, when the rule names it, ``outputs.queries``: the
    query embeddings (``q`` ``(n_queries, dim) float32`` and ``query_ids``, one ``.npz``, written
    atomically; the ladder reads them instead of loading the encoder again). The index must
    match this encoder and corpus (else ``FingerprintMismatch``)."""
    rs, enc, idx = load_with_encoder(inputs, params, threads)
    q = enc.encode_queries(list(rs.queries.texts), progress=True, ids=rs.queries.ids, what=f"{rs.name} queries")
    rows, run = evaluate_queries(
        rs, q, idx.embeddings, idx.doc_ids, params.ks, params.ndcg_k, params.encoder_name, "pretrained", threads
    )
    if getattr(outputs, "queries", None):
        save_npz(
            outputs.queries, q=np.asarray(q, dtype=np.float32), query_ids=np.array(list(rs.queries.ids), dtype=str)
        )
    return write_outputs(outputs, rows, run)


def load_with_encoder(inputs, params, threads):
    """A rule's canonical dataset (``inputs.data``), its encoder (``params.encoder_name``, config
    ``params.encoder``) and that encoder's frozen index (``inputs.fingerprint``'s folder,
    fingerprint-checked: else ``FingerprintMismatch``)."""
    # the probe's env reads indexes without torch / sentence-transformers
    from .encoders import encoder_from_params  # lazy: torch, sentence-transformers

    rs = load_canonical(inputs.data)
    enc = encoder_from_params(params, threads)
    return rs, enc, load_index(Path(inputs.fingerprint).parent, index_fingerprint(enc.fingerprint(), rs.corpus))


def load_with_queries(inputs):
    """A rule's canonical dataset (``inputs.data``), its frozen index (built from this corpus,
    else ``FingerprintMismatch``) and rule pretrained's query embeddings (``inputs.queries``, one
    row per query in the dataset's order; ``DataFormatError`` for a missing query or another
    dimension)."""
    rs = load_canonical(inputs.data)
    idx = load_index(Path(inputs.fingerprint).parent, corpus=rs.corpus)
    q = load_query_embeddings(inputs.queries, list(rs.queries.ids))
    if q.shape[1] != idx.embeddings.shape[1]:
        raise DataFormatError(
            inputs.queries, None, "q", f"dimension {q.shape[1]}, the index's is {idx.embeddings.shape[1]}"
        )
    return rs, idx, q
