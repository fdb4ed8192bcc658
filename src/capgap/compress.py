"""Compressed variants of a frozen index: what capacity survives index compression.

The capacity probe (``capgap.probe``) asks whether *some* query vector ranks a query's gold
documents above all others. Compressing the index changes the geometry the probe (and any
encoder) has to work with: a gold document separable in float32 may become inseparable after
truncation, PCA, scalar or product quantisation, or binarisation. This module builds, from one
frozen index ``D`` ``(n_docs, dim)``, the matrix search actually scores against under each
compression, so the probe and ``capgap.retrieval`` run on it unchanged.

Variants are named by a string (``parse_variant`` checks it):

============== ============ ===================================================== ==================
variant        family       documents (what search scores against)                bytes per document
============== ============ ===================================================== ==================
``float32``    float32      ``D`` itself                                          ``4 * dim``
``trunc-<d>``  truncation   first d coordinates (re-normalised if unit-norm)     ``4 * d``
``pca-<d>``    pca          projection on the top-d principal axes of the corpus  ``4 * d``
``sq8``        sq           faiss ``QT_8bit`` reconstruction                      ``dim``
``sq4``        sq           faiss ``QT_4bit`` reconstruction                      ``ceil(dim / 2)``
``binary``     binary       ``sign(D)`` as +-1 (sign(0) = +1)                     ``ceil(dim / 8)``
``pq-<m>x<b>`` pq           faiss ``IndexPQ(dim, m, b)`` reconstruction           ``ceil(m * b / 8)``
============== ============ ===================================================== ==================

Scoring is asymmetric wherever the compression allows it: the query stays float32 and is
scored against the decoded document, ``q . x_hat`` (for PQ the asymmetric distance computation
of Jégou, Douze & Schmid, IEEE TPAMI 33(1), 2011, Sec. III-A). Truncation and PCA transform the
query too (``Compressed.queries``). Bytes per document count the per-document code only.

The faiss settings of each family, the SQ and PCA derivations, what is random and the sources
are in docs/compression.md, "Variants in detail".
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from .config import section_defaults
from .retrieval import ZERO_NORM, describe_rows, zero_norm_rows

log = logging.getLogger(__name__)
_SEED = section_defaults("compress")["seed"]  # the schema holds every default (capgap.config)

FAMILIES = ("float32", "truncation", "pca", "sq", "binary", "pq")
VARIANT_FORMS = ("float32", "trunc-<d>", "pca-<d>", "sq8", "sq4", "binary", "pq-<m>x<nbits>")
UNIT_NORM_TOL = 1e-3  # max |norm - 1| for the input rows to count as unit-norm (truncation re-normalises)
PQ_MIN_POINTS_PER_CENTROID = 39  # faiss's ClusteringParameters default: fewer points per centroid warns
_SQ_BITS = {"sq8": 8, "sq4": 4}
_BLOCK = 4096  # rows per temporary copy when checking finiteness / norms

_RE = {
    "truncation": re.compile(r"trunc-(\d+)"),
    "pca": re.compile(r"pca-(\d+)"),
    "pq": re.compile(r"pq-(\d+)x(\d+)"),
}


@dataclass(frozen=True)
class VariantSpec:
    """A parsed variant name.

    ``variant``: the name; ``family``: one of ``FAMILIES``; ``d``: output dimension for
    truncation/PCA (else None); ``m``, ``nbits``: PQ sub-quantizers and bits per sub-code (else
    None); ``bits``: SQ bits per coordinate (8 or 4; else None).
    """

    variant: str
    family: str
    d: int | None = None
    m: int | None = None
    nbits: int | None = None
    bits: int | None = None


def _forms() -> str:
    return ", ".join(VARIANT_FORMS)


def _int(variant: str, text: str, what: str) -> int:
    if text != str(int(text)):
        raise ValueError(f"compression variant {variant!r}: {what} {text!r} has leading zeros; write it as {int(text)}")
    return int(text)


def parse_variant(variant: str, dim: int | None = None, n_docs: int | None = None) -> VariantSpec:
    """Parse and check a compression variant name.

    Parameters
    ----------
    variant : str
        One of ``float32``, ``trunc-<d>``, ``pca-<d>``, ``sq8``, ``sq4``, ``binary``,
        ``pq-<m>x<nbits>`` (decimal integers without leading zeros).
    dim : int, optional
        The index's dimension; when given, ``d <= dim`` and ``dim % m == 0`` are checked.
    n_docs : int, optional
        The number of documents (training points); when given, PQ needs
        ``n_docs >= 2^nbits`` (faiss's k-means needs at least one point per centroid) and PCA
        to d dimensions needs ``n_docs >= d + 1`` (the centred corpus has rank at most
        ``n_docs - 1``; faiss's ``PCAMatrix`` fails below ``n_docs = d`` and returns
        non-orthonormal axes beyond the rank).

    Returns
    -------
    VariantSpec

    Raises
    ------
    ValueError
        The string is not one of the forms (the message names it and lists the valid forms), or
        a number is out of range: ``d < 1``, ``d > dim``, ``m < 1``, ``dim % m != 0``,
        ``nbits`` outside 1..16, or too few documents for PCA/PQ training.
    TypeError
        ``variant`` is not a string.
    """
    if not isinstance(variant, str):
        raise TypeError(f"compression variant must be a string, got {variant!r}; valid forms: {_forms()}")
    if variant == "float32":
        return VariantSpec(variant, "float32")
    if variant in _SQ_BITS:
        if n_docs is not None and n_docs < 1:
            raise ValueError(f"compression variant {variant!r}: scalar quantizer training needs at least 1 document")
        return VariantSpec(variant, "sq", bits=_SQ_BITS[variant])
    if variant == "binary":
        return VariantSpec(variant, "binary")
    for family in ("truncation", "pca"):
        mt = _RE[family].fullmatch(variant)
        if mt:
            d = _int(variant, mt.group(1), "dimension")
            if d < 1:
                raise ValueError(f"compression variant {variant!r}: the output dimension must be >= 1")
            if dim is not None and d > dim:
                raise ValueError(
                    f"compression variant {variant!r}: output dimension {d} exceeds the index's dimension {dim}"
                )
            if family == "pca" and n_docs is not None and n_docs < d + 1:
                raise ValueError(
                    f"compression variant {variant!r}: PCA to {d} dimensions needs at least {d + 1} "
                    f"documents (the centred corpus has rank <= n_docs - 1), got {n_docs}"
                )
            return VariantSpec(variant, family, d=d)
    mt = _RE["pq"].fullmatch(variant)
    if mt:
        m = _int(variant, mt.group(1), "m")
        nbits = _int(variant, mt.group(2), "nbits")
        if m < 1:
            raise ValueError(f"compression variant {variant!r}: the number of sub-quantizers m must be >= 1")
        if not 1 <= nbits <= 16:
            raise ValueError(f"compression variant {variant!r}: nbits must be in 1..16, got {nbits}")
        if dim is not None and dim % m:
            raise ValueError(f"compression variant {variant!r}: m = {m} does not divide the index's dimension {dim}")
        if n_docs is not None and n_docs < 2**nbits:
            raise ValueError(
                f"compression variant {variant!r}: PQ training needs at least 2^{nbits} = {2**nbits} "
                f"documents (one per centroid of each sub-quantizer's k-means), got {n_docs}"
            )
        return VariantSpec(variant, "pq", m=m, nbits=nbits)
    raise ValueError(f"unknown compression variant {variant!r}; valid forms: {_forms()}")


def default_variants(dim: int, n_docs: int | None = None) -> list[str]:
    """The default sweep of compressed variants for a ``dim``-dimensional index.

    Truncation and PCA to d' in {dim // 2, dim // 4, dim // 8, 32} (deduplicated, only
    ``1 <= d' < dim``, largest first), then ``sq8``, ``sq4``, ``binary``, then PQ with
    ``m`` in {dim / 4, dim / 8, dim / 16} (only where that is an integer, so m divides dim) at
    8 bits. The uncompressed ``float32`` reference is not included. With ``n_docs``, variants
    that cannot be fitted on that many documents are left out (``parse_variant``'s rules: PCA
    to d' needs d' + 1 documents, 8-bit PQ needs 256).

    Parameters
    ----------
    dim : int
        The index's dimension (>= 1).
    n_docs : int, optional
        The corpus size.

    Returns
    -------
    list of str
        E.g. for 384: trunc-192, trunc-96, trunc-48, trunc-32, pca-192, ..., pca-32, sq8,
        sq4, binary, pq-96x8, pq-48x8, pq-24x8.

    Raises
    ------
    ValueError
        ``dim < 1``.
    """
    dim = int(dim)
    if dim < 1:
        raise ValueError(f"dimension must be >= 1, got {dim}")
    ds = sorted({d for d in (dim // 2, dim // 4, dim // 8, 32) if 1 <= d < dim}, reverse=True)
    ms = [dim // k for k in (4, 8, 16) if dim % k == 0]
    out = [f"trunc-{d}" for d in ds] + [f"pca-{d}" for d in ds] + ["sq8", "sq4", "binary"] + [f"pq-{m}x8" for m in ms]
    if n_docs is None:
        return out
    return [v for v in out if _fits(v, dim, n_docs)]


def _fits(variant: str, dim: int, n_docs: int) -> bool:
    """Whether ``variant`` can be fitted on ``n_docs`` documents of dimension ``dim``."""
    try:
        parse_variant(variant, dim, n_docs)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, eq=False)
class Compressed:
    """A compressed variant of a frozen index.

    Attributes
    ----------
    variant : str
        The variant name (``parse_variant``).
    family : str
        ``"float32"``, ``"truncation"``, ``"pca"``, ``"sq"``, ``"binary"`` or ``"pq"``.
    bytes_per_doc : float
        Per-document storage in bytes (module docstring table; for sq/pq faiss's
        ``sa_code_size()``). Shared tables (PCA matrix, SQ ranges, PQ codebooks) excluded.
    documents : numpy.ndarray
        Shape ``(n_docs, d')`` float32: the matrix search scores against (decoded for
        sq/pq, +-1 for binary, projected for truncation/PCA; for float32 the input itself,
        not copied when it is already C-contiguous float32). Score queries with
        ``queries(Q) @ documents.T``.
    codes : numpy.ndarray or None
        Shape ``(n_docs, bytes_per_doc)`` uint8: the stored codes (faiss's codes for sq/pq,
        ``numpy.packbits(D >= 0, axis=1)`` for binary); None for the float families.
    dim : int
        The input (uncompressed) dimension.
    projection : numpy.ndarray or None
        Shape ``(dim, d')`` float32: the query/document map for PCA (``A^T``), None otherwise.
    renormalized : bool
        Truncation only: the truncated rows were re-normalised to unit L2 norm (input rows
        were unit-norm); ``queries`` then re-normalises the truncated queries too.
    """

    variant: str
    family: str
    bytes_per_doc: float
    documents: np.ndarray
    codes: np.ndarray | None = None
    dim: int = 0
    projection: np.ndarray | None = None
    renormalized: bool = False

    @property
    def out_dim(self) -> int:
        """d': the dimension of ``documents`` (and of ``queries``' output)."""
        return int(self.documents.shape[1])

    def queries(self, Q: np.ndarray) -> np.ndarray:
        """Apply the query side of the compression.

        Truncation keeps the first d' coordinates (re-normalised to unit L2 norm when
        ``renormalized``; a row of norm 0 is a ``ValueError``: its cosine is undefined); PCA
        multiplies by ``projection`` (no mean subtraction: docs/compression.md, "Variants in
        detail"); float32, sq, pq and binary leave the query unchanged (asymmetric scoring: float
        query against the decoded document).

        Parameters
        ----------
        Q : numpy.ndarray
            Shape ``(n, dim)``, finite floats.

        Returns
        -------
        numpy.ndarray
            Shape ``(n, d')`` float32 (a new array).

        Raises
        ------
        ValueError
            ``Q`` is not 2-d with ``dim`` columns.
        """
        Q = np.asarray(Q)
        if Q.ndim != 2 or Q.shape[1] != self.dim:
            raise ValueError(f"{self.variant}: queries must have shape (n, {self.dim}), got {Q.shape}")
        Q = Q.astype(np.float32, copy=True)
        if self.family == "truncation":
            Q = np.ascontiguousarray(Q[:, : self.out_dim])
            if self.renormalized:
                _normalize_rows(Q, f"{self.variant}: queries")
            return Q
        if self.family == "pca":
            return np.ascontiguousarray(Q @ self.projection, dtype=np.float32)
        return Q


def _normalize_rows(X: np.ndarray, what: str = "rows") -> None:
    """Scale the rows of float32 ``X`` to unit L2 norm in place (norms in float64).

    A row of norm 0 (``<= capgap.retrieval.ZERO_NORM``: e.g. a unit vector whose first d
    coordinates are all zero) has no direction, so its cosine is undefined: ``ValueError``
    naming ``what`` and the rows (0-based), never a silent zero row scored 0."""
    zero = zero_norm_rows(X, _BLOCK)
    if len(zero):
        raise ValueError(
            f"{what}: {describe_rows(zero)} {'has' if len(zero) == 1 else 'have'} norm 0 (<= "
            f"{ZERO_NORM:g}) after truncation, so re-normalising cannot give a cosine: the variant is "
            "undefined for them"
        )
    for b0 in range(0, len(X), _BLOCK):
        blk = X[b0 : b0 + _BLOCK]
        n = np.sqrt(np.einsum("ij,ij->i", blk, blk, dtype=np.float64))
        blk /= n[:, None].astype(np.float32)


def _is_unit_norm(matrix: np.ndarray) -> bool:
    dev = 0.0
    for b0 in range(0, len(matrix), _BLOCK):
        blk = matrix[b0 : b0 + _BLOCK]
        n = np.sqrt(np.einsum("ij,ij->i", blk, blk, dtype=np.float64))
        dev = max(dev, float(np.max(np.abs(n - 1.0))))
    return dev < UNIT_NORM_TOL


@contextlib.contextmanager
def _threads(threads: int | None) -> Iterator[None]:
    """Limit faiss's OpenMP threads (``faiss.omp_set_num_threads``) and BLAS threads; restore after."""
    if not threads:
        yield
        return
    import faiss
    from threadpoolctl import threadpool_limits

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(int(threads))
    try:
        with threadpool_limits(int(threads)):
            yield
    finally:
        faiss.omp_set_num_threads(before)


def _code_size_check(variant: str, faiss_size: int, formula: int) -> None:
    if faiss_size != formula:  # a faiss change in code layout: the byte count would be wrong
        raise RuntimeError(f"{variant}: faiss sa_code_size() = {faiss_size} bytes, expected {formula}")


def compress(D: np.ndarray, variant: str, seed: int = _SEED, threads: int | None = None) -> Compressed:
    """Build one compressed variant of a frozen index.

    Parameters
    ----------
    D : numpy.ndarray
        Shape ``(n_docs, dim)``, finite floats (float32 used as is; others cast); rows are
        documents. May be a memory map (read only; float32 passes through for ``float32``).
    variant : str
        A variant name (``parse_variant``; ``default_variants`` lists the default sweep).
    seed : int
        Seed of PQ's k-means (``pq.cp.seed``: initial centroids and subsampling); the other
        families are deterministic.
    threads : int, optional
        faiss OpenMP threads (``faiss.omp_set_num_threads``) and BLAS threads while building;
        restored afterwards. None: leave both as they are.

    Returns
    -------
    Compressed
        ``documents`` ``(n_docs, d')`` float32, ``bytes_per_doc`` (bytes), ``codes``, and
        ``queries(Q)`` for the query side.

    Raises
    ------
    ValueError
        ``D`` is not 2-d, is empty, or holds NaN/Inf; the variant is malformed or does not fit
        ``D`` (see ``parse_variant``: d > dim, m not dividing dim, nbits outside 1..16, fewer
        than ``2^nbits`` documents for PQ or fewer than ``d + 1`` for PCA), or the corpus
        spans fewer than d dimensions after centring (PCA).
    TypeError
        ``variant`` is not a string.
    RuntimeError
        faiss's code size disagrees with the byte formula.
    """
    D = np.asarray(D)
    if D.ndim != 2 or D.shape[0] < 1 or D.shape[1] < 1:
        raise ValueError(f"index must be 2-d with at least one row and one column, got shape {D.shape}")
    if not np.issubdtype(D.dtype, np.floating):
        raise ValueError(f"index must hold real floating-point values, got dtype {D.dtype}")
    n, dim = D.shape
    spec = parse_variant(variant, dim=dim, n_docs=n)
    X = np.ascontiguousarray(D, dtype=np.float32)  # no copy for C-contiguous float32
    for b0 in range(0, n, _BLOCK):  # after the cast: a float64 value beyond float32's range is inf here
        if not np.isfinite(X[b0 : b0 + _BLOCK]).all():
            raise ValueError("index contains NaN or Inf (as float32)")
    with _threads(threads):
        if spec.family == "float32":
            return Compressed(variant, "float32", 4.0 * dim, X, None, dim)
        if spec.family == "truncation":
            docs = np.array(X[:, : spec.d], dtype=np.float32, order="C")  # a copy
            renorm = _is_unit_norm(X)
            if renorm:
                _normalize_rows(docs, f"{variant}: documents")
            return Compressed(variant, "truncation", 4.0 * spec.d, docs, None, dim, renormalized=renorm)
        if spec.family == "binary":
            pos = X >= 0  # sign(0) = +1 (and -0.0 >= 0)
            docs = np.where(pos, np.float32(1.0), np.float32(-1.0))
            codes = np.packbits(pos, axis=1)
            return Compressed(variant, "binary", float(codes.shape[1]), docs, codes, dim)
        import faiss

        if spec.family == "pca":
            pca = faiss.PCAMatrix(dim, spec.d, 0.0, False)
            pca.train(X)
            A = faiss.vector_to_array(pca.A).reshape(spec.d, dim)
            if not np.allclose(A @ A.T, np.eye(spec.d), atol=1e-3):
                raise ValueError(
                    f"compression variant {variant!r}: the centred corpus spans fewer than {spec.d} "
                    "dimensions (faiss's PCA axes are not orthonormal)"
                )
            P = np.ascontiguousarray(A.T, dtype=np.float32)
            docs = np.ascontiguousarray(X @ P, dtype=np.float32)
            return Compressed(variant, "pca", 4.0 * spec.d, docs, None, dim, projection=P)
        if spec.family == "sq":
            qt = faiss.ScalarQuantizer.QT_8bit if spec.bits == 8 else faiss.ScalarQuantizer.QT_4bit
            index = faiss.IndexScalarQuantizer(dim, qt, faiss.METRIC_INNER_PRODUCT)
            cs = index.sa_code_size()
            _code_size_check(variant, cs, math.ceil(dim * spec.bits / 8))
        else:  # pq
            index = faiss.IndexPQ(dim, spec.m, spec.nbits, faiss.METRIC_INNER_PRODUCT)
            index.pq.cp.seed = int(seed)
            # faiss prints "WARNING clustering ..." to stderr once per sub-quantizer below 39 points per
            # centroid (the threshold only gates that message); warn once through logging instead.
            index.pq.cp.min_points_per_centroid = 1
            if n < PQ_MIN_POINTS_PER_CENTROID * 2**spec.nbits:
                log.warning(
                    "%s: %d training points for %d centroids per sub-quantizer (faiss recommends >= %d)",
                    variant,
                    n,
                    2**spec.nbits,
                    PQ_MIN_POINTS_PER_CENTROID * 2**spec.nbits,
                )
            cs = index.sa_code_size()
            _code_size_check(variant, cs, math.ceil(spec.m * spec.nbits / 8))
        index.train(X)
        index.add(X)
        docs = index.reconstruct_n(0, n)
        codes = faiss.vector_to_array(index.codes).reshape(n, cs)
        return Compressed(variant, spec.family, float(cs), np.ascontiguousarray(docs, dtype=np.float32), codes, dim)


def evaluate_variants(
    rs,
    index,
    queries: np.ndarray,
    variants: Sequence[str] | None,
    probe_cfg,
    encoder_name: str,
    ks: Sequence[int],
    ndcg_k: int,
    seed: int = _SEED,
    threads: int | None = 1,
) -> list[dict]:
    """Capacity and pre-trained recall on every compressed variant of a frozen index: the
    results.csv rows of rule ``compress``.

    For the uncompressed index (variant ``float32``, first) and each of ``variants`` (None:
    ``default_variants(dim, n_docs)``, which leaves out what cannot be fitted on this corpus,
    with a warning): the capacity probe on the variant's ``documents``
    (``capgap.probe.evaluate``, settings ``probe_cfg``: a ``ProbeConfig``) and the pre-trained
    query vectors ``queries`` transformed by ``Compressed.queries`` and ranked against the
    same ``documents`` (``capgap.evaluate.evaluate_queries``: the evaluation tie rule, so
    documents that compression makes identical tie). Every row carries ``compression`` = the
    variant; methods ``probe`` and ``pretrained`` each get a row ``bytes_per_doc`` (split
    ``all``).

    Parameters
    ----------
    rs : the ``capgap.data.RetrievalSet`` the index was built from.
    index : its ``capgap.index.FrozenIndex`` (``embeddings`` ``(n_docs, dim) float32``).
    queries : ``(n_queries, dim) float32`` the pre-trained encoder's query vectors, in
        ``rs.queries`` order.

    Raises
    ------
    ValueError
        A variant that does not parse or does not fit this index (``parse_variant``).
    """
    import time
    from types import SimpleNamespace

    from .evaluate import evaluate_queries  # lazy: parse_variant serves the report rule, whose env has no torch
    from .probe import evaluate as probe_evaluate  # lazy: ... nor the probe's quadprog / scipy

    D = np.asarray(index.embeddings)
    n, dim = D.shape
    if variants is None:
        variants = default_variants(dim, n)
        unfit = [v for v in default_variants(dim) if v not in variants]
        if unfit:
            log.warning(
                "compress: %d documents are too few to fit %s (PCA to d' needs d' + 1 documents, 8-bit PQ "
                "256): left out of the default variants",
                n,
                ", ".join(unfit),
            )
    names = list(dict.fromkeys(["float32", *variants]))  # each variant once, in order
    for v in names:
        parse_variant(v, dim, n)  # every variant checked before any work
    rows = []
    for v in names:
        t = time.perf_counter()
        c = compress(D, v, seed=seed, threads=threads)
        t_c = time.perf_counter() - t
        docs = SimpleNamespace(embeddings=c.documents, doc_ids=index.doc_ids)
        probe_rows, _, _ = probe_evaluate(rs, docs, probe_cfg, encoder_name, ks, ndcg_k, threads)
        t_p = time.perf_counter() - t - t_c
        enc_rows, _ = evaluate_queries(
            rs, c.queries(queries), c.documents, index.doc_ids, ks, ndcg_k, encoder_name, "pretrained", threads
        )
        log.info("compress %s: %s bytes/doc, compressed in %.1f s, probe %.1f s", v, c.bytes_per_doc, t_c, t_p)
        for method, rs_rows in (("probe", probe_rows), ("pretrained", enc_rows)):
            rows += [{**r, "compression": v} for r in rs_rows]
            rows.append(
                {
                    "dataset": rs.name,
                    "encoder": encoder_name,
                    "method": method,
                    "split": "all",
                    "metric": "bytes_per_doc",
                    "k": "",
                    "value": float(c.bytes_per_doc),
                    "compression": v,
                }
            )
    return rows


def compress_stage(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``compress`` (``stage(inputs, outputs, params, threads)``, see ``capgap.stages``):
    the capacity probe (settings ``params.probe``) and the pre-trained encoder on the frozen
    index and on each compressed variant of it (``params.compress``: ``variants``, ``seed``;
    ``evaluate_variants``); writes ``outputs.metrics`` (column ``compression`` names the
    variant). The pre-trained query embeddings are rule pretrained's (``inputs.queries``: no
    encoder is loaded here, the queries are not encoded twice). The index must have been built
    from this corpus (else ``FingerprintMismatch``); query embeddings of another dimension raise
    ``DataFormatError``."""
    from .evaluate import write_rows  # lazy: as evaluate_variants (the report rule's env)
    from .index import load_with_queries  # lazy: the index's faiss / encoders stay out of the report rule's env
    from .probe import ProbeConfig  # lazy: quadprog, scipy (the report rule's env has neither)

    rs, idx, q = load_with_queries(inputs)
    cfg = params.compress
    rows = evaluate_variants(
        rs,
        idx,
        q,
        cfg["variants"],
        ProbeConfig.from_config(params.probe),
        params.encoder_name,
        params.ks,
        params.ndcg_k,
        seed=cfg["seed"],
        threads=threads,
    )
    write_rows(outputs.metrics, rows)
    return rows
