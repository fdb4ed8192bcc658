"""Compressed index variants (capgap.compress): every expected value is derived by hand or in
closed form, never by re-running the code under test."""

import logging

import faiss
import numpy as np
import pytest

from capgap.compress import Compressed, compress, default_variants, parse_variant
from capgap.probe import lp_feasible, probe

PROBE = {"C": 1000.0, "C_max": 1e8, "lp_check_max_docs": 2000}


@pytest.fixture(autouse=True, scope="module")
def _one_faiss_thread():
    """One faiss OpenMP thread: on a shared 2-core machine faiss's spinning threads make PQ
    training several times slower; the tests stay fast whatever the load."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def anisotropic(rng, n, dim):
    """Gaussian rows with per-coordinate scales 3 ... 0.1: well-separated principal axes (the coordinate axes)."""
    return (rng.standard_normal((n, dim)) * np.linspace(3.0, 0.1, dim)).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# 1. truncation loses a split that lives in the last coordinates; PCA keeps it


def split_in_tail(rng):
    """dim 8: a "head" (coords 0-3, scale <= 0.1) and a "tail" (coords 4-7, scale ~ 5).

    Row 0 (gold): head = 0, tail = (30, 0, 0, 0). Rows 1-8: head = +-0.1 e_i. Every non-gold
    row has tail[0] in [-10, 10]. By hand: on D, w = e_4 scores the gold 30 and every other
    row <= 10, so the gold is separable. On the first 4 coordinates the gold is the origin and
    for any w some +-0.1 e_i scores 0.1 max|w_i| >= 0 = w . gold: never strictly separable.
    """
    n = 40
    D = np.zeros((n, 8))
    D[0, 4] = 30.0
    for i in range(4):
        D[1 + 2 * i, i], D[2 + 2 * i, i] = 0.1, -0.1
    D[9:, :4] = rng.uniform(-0.1, 0.1, (n - 9, 4))
    D[1:, 4] = rng.uniform(-10, 10, n - 1)
    D[1:, 5:] = rng.normal(0, 5, (n - 1, 3))
    return D.astype(np.float32)


def test_truncation_loses_tail_split_pca_keeps_it():
    D = split_in_tail(np.random.default_rng(0))
    assert probe(D, [[0]], **PROBE)[0].certified  # w = e_4 separates (docstring)

    tr = compress(D, "trunc-4")
    assert not tr.renormalized  # rows have norm ~ 5-30: kept unnormalised
    np.testing.assert_array_equal(tr.documents, D[:, :4])
    r = probe(tr.documents, [[0]], **PROBE)[0]
    assert not r.certified and r.cause == "geometry"

    pca = compress(D, "pca-4")
    # the top-4 principal axes are (to 1e-2) the tail coordinates: the head's variance is <= 0.01
    # against >= 25 in the tail, so the projection keeps the tail and with it the separation.
    P = pca.projection
    assert P.shape == (8, 4)
    np.testing.assert_allclose(P[4:] @ P[4:].T, np.eye(4), atol=1e-2)  # projector onto coords 4-7
    np.testing.assert_allclose(P[:4], 0.0, atol=1e-2)
    assert probe(pca.documents, [[0]], **PROBE)[0].certified


def test_truncation_renormalises_unit_rows():
    rng = np.random.default_rng(1)
    D = rng.standard_normal((30, 12))
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    D = D.astype(np.float32)
    Z = D.copy()
    Z[3] = 0.0
    Z[3, 11] = 1.0  # first 5 coordinates all zero: no direction left, cosine undefined
    with pytest.raises(ValueError, match=r"trunc-5: documents: row 3 \(0-based\) has norm 0"):
        compress(Z, "trunc-5")
    c = compress(D, "trunc-5")
    assert c.renormalized and c.family == "truncation" and c.bytes_per_doc == 20.0 and c.codes is None
    want = D[:, :5].astype(np.float64)
    nrm = np.linalg.norm(want, axis=1, keepdims=True)
    np.testing.assert_allclose(c.documents, want / nrm, atol=1e-6)
    Q = rng.standard_normal((4, 12)).astype(np.float32) * 3
    q = Q[:, :5] / np.linalg.norm(Q[:, :5], axis=1, keepdims=True)
    np.testing.assert_allclose(c.queries(Q), q, atol=1e-6)
    Q[2, :5] = 0.0
    with pytest.raises(ValueError, match=r"trunc-5: queries: row 2 \(0-based\) has norm 0"):
        c.queries(Q)
    # just off unit norm (|norm - 1| = 2e-3 > 1e-3): not re-normalised
    c2 = compress(D * np.float32(1.002), "trunc-5")
    assert not c2.renormalized
    np.testing.assert_array_equal(c2.documents, (D * np.float32(1.002))[:, :5])
    np.testing.assert_array_equal(c2.queries(Q), Q[:, :5])


def test_pca_matches_numpy_and_ranks_like_reconstruction():
    rng = np.random.default_rng(2)
    D = anisotropic(rng, 400, 10)
    c = compress(D, "pca-4")
    assert c.family == "pca" and c.bytes_per_doc == 16.0 and c.documents.shape == (400, 4)
    X = D.astype(np.float64)
    mu = X.mean(0)
    _, evecs = np.linalg.eigh(np.cov(X.T))
    V = evecs[:, ::-1][:, :4]  # top-4 principal axes (numpy, independent of faiss)
    P = c.projection.astype(np.float64)
    np.testing.assert_allclose(P @ P.T, V @ V.T, atol=1e-4)  # same subspace
    np.testing.assert_allclose(P.T @ P, np.eye(4), atol=1e-5)  # orthonormal, no whitening
    np.testing.assert_allclose(c.documents, X @ P, rtol=1e-5, atol=1e-4)
    # (P^T q).(P^T x) and q . x_hat, x_hat = mu + V V^T (x - mu), differ by a per-query constant
    Q = rng.standard_normal((5, 10))
    Xhat = mu + (X - mu) @ V @ V.T
    diff = Q @ Xhat.T - c.queries(Q).astype(np.float64) @ c.documents.T.astype(np.float64)
    np.testing.assert_allclose(diff - diff[:, :1], 0.0, atol=1e-3)


# ---------------------------------------------------------------------------------------------
# 2. scalar quantisation of vectors on its own grid


@pytest.mark.parametrize("variant,L", [("sq8", 255), ("sq4", 15)])
def test_sq_exact_on_grid(variant, L):
    """faiss QT_8bit/QT_4bit, RS_minmax: per dimension vmin = min, vdiff = max - min, code
    c = floor(L (x - vmin) / vdiff), decode vmin + vdiff (c + 0.5) / L (ScalarQuantizer.cpp,
    Codec8bit/Codec4bit). Rows 0/1 fix the range (all-min, all-max); the other rows sit on the
    cell centres vmin + vdiff (j + 0.5) / L, j in 0..L-1, so they decode exactly; the range
    ends decode half a cell up."""
    rng = np.random.default_rng(3)
    lo = np.array([-1.0, -0.5, 0.0, 0.25, -2.0, 1.0])
    span = np.array([2.0, 1.0, 0.5, 4.0, 2.0, 1.0])
    J = rng.integers(0, L, size=(200, 6))
    X = np.vstack([lo, lo + span, lo + span * (J + 0.5) / L]).astype(np.float32)
    c = compress(X, variant)
    assert c.family == "sq" and c.documents.shape == (202, 6)
    assert c.bytes_per_doc == (6.0 if L == 255 else 3.0)
    np.testing.assert_allclose(c.documents[2:], X[2:], rtol=0, atol=1e-6)
    np.testing.assert_allclose(c.documents[0], lo + span * 0.5 / L, atol=1e-6)
    np.testing.assert_allclose(c.documents[1], lo + span * (L + 0.5) / L, atol=1e-6)
    codes = c.codes.astype(np.int64)
    if L == 255:
        np.testing.assert_array_equal(codes[2:], J)
    else:  # 4 bits: coordinate i in byte i // 2, low nibble for even i
        np.testing.assert_array_equal(np.stack([codes & 15, codes >> 4], axis=2).reshape(len(X), 6)[2:], J)
    np.testing.assert_array_equal(c.queries(X[:3]), X[:3])

    # the probe sees the same geometry on the grid rows: same certificate (= the exact LP on the
    # input, computed without compress) and the same recall
    golds = [rng.choice(200, size=int(rng.integers(1, 3)), replace=False) for _ in range(30)]
    on_d = probe(X[2:], golds, **PROBE)
    on_c = probe(c.documents[2:], golds, **PROBE)
    lp = [lp_feasible(X[2:], g) for g in golds]
    assert [r.certified for r in on_d] == lp == [r.certified for r in on_c]
    assert any(lp) and not all(lp)  # not a vacuous comparison
    assert [r.recall_at(10) for r in on_d] == [r.recall_at(10) for r in on_c]


# ---------------------------------------------------------------------------------------------
# 3. product quantisation that can represent every value


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pq_one_subquantizer_per_dimension_is_exact(seed):
    """m = dim, nbits = 1: each 1-d sub-quantizer sees two distinct positive values {a, 3a}.
    faiss's k-means (2 centroids) either starts on both values, or starts on one twice; then the
    second cluster is empty and faiss splits the other one at its mean * (1 +- 1/1024), which
    lies strictly between a and 3a: either way the centroids end on the two values and every
    document is reconstructed exactly (to float rounding of the centroid means)."""
    rng = np.random.default_rng(seed)
    a = np.array([0.5, 1.0, 2.0, 0.25, 1.5, 3.0, 0.75, 1.25])
    X = (a * np.where(rng.random((100, 8)) < 0.5, 1.0, 3.0)).astype(np.float32)
    c = compress(X, "pq-8x1", seed=seed)
    assert c.family == "pq" and c.bytes_per_doc == 1.0 and c.codes.shape == (100, 1)
    np.testing.assert_allclose(c.documents, X, rtol=1e-6, atol=0)
    Q = rng.standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_array_equal(c.queries(Q), Q)  # ADC: the query stays float


def test_pq_with_as_many_documents_as_centroids_copies_them():
    """faiss's k-means with n == k takes the n training points as the centroids (no iterations):
    with 2^2 = 4 documents every sub-quantizer's codebook is the documents' own sub-vectors."""
    X = np.random.default_rng(4).standard_normal((4, 6)).astype(np.float32)
    c = compress(X, "pq-3x2")
    np.testing.assert_array_equal(c.documents, X)
    assert c.bytes_per_doc == 1.0  # 3 * 2 bits, padded to one byte (faiss sa_code_size)


def test_pq_documents_are_faiss_adc_scores():
    """Scoring queries against ``documents`` is faiss IndexPQ's own inner-product search (ADC)."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((300, 16)).astype(np.float32)
    c = compress(X, "pq-4x4", seed=7)
    ref = faiss.IndexPQ(16, 4, 4, faiss.METRIC_INNER_PRODUCT)
    ref.pq.cp.seed = 7
    ref.train(X)
    ref.add(X)
    Q = rng.standard_normal((5, 16)).astype(np.float32)
    S, idx = ref.search(Q, 300)
    ours = Q @ c.documents.T
    np.testing.assert_allclose(np.take_along_axis(ours, idx, axis=1), S, rtol=1e-4, atol=1e-4)


def test_pq_needs_enough_training_points():
    X = np.random.default_rng(6).standard_normal((7, 8)).astype(np.float32)
    with pytest.raises(ValueError, match=r"'pq-4x3'.*2\^3 = 8 documents.*got 7"):
        compress(X, "pq-4x3")


def test_pq_warns_once_below_faiss_recommendation(caplog):
    X = np.random.default_rng(6).standard_normal((20, 8)).astype(np.float32)
    with caplog.at_level(logging.WARNING, logger="capgap.compress"):
        compress(X, "pq-4x2")
    assert [r.getMessage() for r in caplog.records] == [
        "pq-4x2: 20 training points for 4 centroids per sub-quantizer (faiss recommends >= 156)"
    ]


# ---------------------------------------------------------------------------------------------
# 4. binary


def test_binary_on_sign_vectors_is_identity():
    rng = np.random.default_rng(7)
    X = np.where(rng.random((50, 16)) < 0.5, -1.0, 1.0).astype(np.float32)
    c = compress(X, "binary")
    assert c.family == "binary" and c.bytes_per_doc == 2.0  # 16 / 8
    np.testing.assert_array_equal(c.documents, X)
    np.testing.assert_array_equal(c.codes, np.packbits(X > 0, axis=1))
    Q = rng.standard_normal((3, 16)).astype(np.float32)
    np.testing.assert_array_equal(c.queries(Q), Q)  # asymmetric: float query . +-1 document


def test_binary_sign_of_zero_is_plus_one():
    X = np.array([[0.0, -0.0, -2.0, 3.0, 1e-30, -1e-30, 0.5, -0.5, 7.0]], dtype=np.float32)
    c = compress(X, "binary")
    np.testing.assert_array_equal(c.documents, [[1, 1, -1, 1, 1, -1, 1, -1, 1]])
    assert c.bytes_per_doc == 2.0  # 9 bits -> 2 bytes
    np.testing.assert_array_equal(c.codes, [[0b11011010, 0b10000000]])


# ---------------------------------------------------------------------------------------------
# 5. bytes, shapes, errors, determinism, defaults


BYTES_64 = {  # dim 64, by hand
    "float32": ("float32", 256.0, 64),
    "trunc-16": ("truncation", 64.0, 16),
    "pca-16": ("pca", 64.0, 16),
    "sq8": ("sq", 64.0, 64),
    "sq4": ("sq", 32.0, 64),
    "binary": ("binary", 8.0, 64),
    "pq-16x8": ("pq", 16.0, 64),
    "pq-8x4": ("pq", 4.0, 64),
    "pq-4x3": ("pq", 2.0, 64),  # 12 bits -> 2 bytes
}


@pytest.fixture(scope="module")
def D64():
    return anisotropic(np.random.default_rng(8), 300, 64)


@pytest.mark.parametrize("variant", list(BYTES_64))
def test_bytes_shapes_and_faiss_code_size(D64, variant):
    family, nbytes, out_dim = BYTES_64[variant]
    c = compress(D64, variant)
    assert isinstance(c, Compressed) and c.variant == variant and c.family == family and c.dim == 64
    assert c.bytes_per_doc == nbytes and isinstance(c.bytes_per_doc, float)
    assert c.documents.shape == (300, out_dim) and c.documents.dtype == np.float32 and c.out_dim == out_dim
    if c.codes is not None:
        assert c.codes.shape == (300, nbytes) and c.codes.dtype == np.uint8
    if family == "sq":
        qt = faiss.ScalarQuantizer.QT_8bit if variant == "sq8" else faiss.ScalarQuantizer.QT_4bit
        assert faiss.IndexScalarQuantizer(64, qt, faiss.METRIC_INNER_PRODUCT).sa_code_size() == nbytes
    if family == "pq":
        spec = parse_variant(variant, 64)
        assert faiss.IndexPQ(64, spec.m, spec.nbits, faiss.METRIC_INNER_PRODUCT).sa_code_size() == nbytes
    Q = np.ones((5, 64), dtype=np.float32)
    assert c.queries(Q).shape == (5, out_dim) and c.queries(Q).dtype == np.float32
    with pytest.raises(ValueError, match=r"shape \(n, 64\)"):
        c.queries(np.ones((5, 63), dtype=np.float32))
    with pytest.raises(AttributeError):
        c.variant = "x"  # frozen


def test_float32_is_the_input(D64):
    c = compress(D64, "float32")
    assert c.documents is D64 and c.codes is None


@pytest.mark.parametrize(
    "bad,msg",
    [
        (
            "int8",
            "unknown compression variant 'int8'; valid forms: float32, trunc-<d>, pca-<d>, sq8, sq4, binary, pq-<m>x<nbits>",
        ),
        ("sq16", "unknown compression variant 'sq16'"),
        ("PQ-8x8", "unknown compression variant 'PQ-8x8'"),
        (" sq8", "unknown compression variant ' sq8'"),
        ("pca-x", "unknown compression variant 'pca-x'"),
        ("pq-8", "unknown compression variant 'pq-8'"),
        ("trunc-0", "'trunc-0': the output dimension must be >= 1"),
        ("trunc-65", "'trunc-65': output dimension 65 exceeds the index's dimension 64"),
        ("pca-300", "'pca-300': output dimension 300 exceeds"),
        ("trunc-08", "'trunc-08': dimension '08' has leading zeros"),
        ("pq-7x8", "'pq-7x8': m = 7 does not divide the index's dimension 64"),
        ("pq-0x8", "'pq-0x8': the number of sub-quantizers m must be >= 1"),
        ("pq-8x0", "'pq-8x0': nbits must be in 1..16, got 0"),
        ("pq-8x17", "'pq-8x17': nbits must be in 1..16, got 17"),
        ("pq-8x9", "'pq-8x9': PQ training needs at least 2^9 = 512 documents"),
    ],
)
def test_bad_variants_name_the_string(D64, bad, msg):
    with pytest.raises(ValueError) as e:
        compress(D64, bad)
    assert msg in str(e.value)


def test_pca_needs_more_documents_than_dimensions():
    X = np.random.default_rng(9).standard_normal((4, 8)).astype(np.float32)
    with pytest.raises(ValueError, match=r"'pca-4': PCA to 4 dimensions needs at least 5 documents"):
        compress(X, "pca-4")
    assert compress(X, "pca-3").documents.shape == (4, 3)


def test_bad_inputs():
    with pytest.raises(ValueError, match="2-d"):
        compress(np.ones(8, dtype=np.float32), "sq8")
    with pytest.raises(ValueError, match="2-d"):
        compress(np.ones((0, 8), dtype=np.float32), "sq8")
    X = np.ones((10, 8), dtype=np.float32)
    X[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        compress(X, "binary")
    with pytest.raises(TypeError, match="valid forms"):
        compress(np.ones((10, 8), dtype=np.float32), 8)


@pytest.mark.parametrize("variant", ["pq-8x4", "pq-16x8", "sq4", "pca-16", "trunc-16", "binary"])
def test_deterministic(D64, variant):
    """Same input, seed and thread count: bit-identical (across thread counts it is not promised).
    Two faiss threads only for one PQ case: OpenMP under a loaded 2-core machine is slow."""
    for threads in (None, 2) if variant == "pq-16x8" else (None,):
        a, b = compress(D64, variant, seed=3, threads=threads), compress(D64, variant, seed=3, threads=threads)
        assert a.documents.tobytes() == b.documents.tobytes()
        if a.codes is not None:
            assert a.codes.tobytes() == b.codes.tobytes()


def test_threads_restored(D64):
    before = faiss.omp_get_max_threads()
    compress(D64, "sq8", threads=2)
    assert faiss.omp_get_max_threads() == before == 1


@pytest.mark.parametrize(
    "dim,want",
    [
        (
            384,
            [
                "trunc-192",
                "trunc-96",
                "trunc-48",
                "trunc-32",
                "pca-192",
                "pca-96",
                "pca-48",
                "pca-32",
                "sq8",
                "sq4",
                "binary",
                "pq-96x8",
                "pq-48x8",
                "pq-24x8",
            ],
        ),
        (
            64,
            [
                "trunc-32",
                "trunc-16",
                "trunc-8",
                "pca-32",
                "pca-16",
                "pca-8",
                "sq8",
                "sq4",
                "binary",
                "pq-16x8",
                "pq-8x8",
                "pq-4x8",
            ],
        ),
        (
            100,
            [
                "trunc-50",
                "trunc-32",
                "trunc-25",
                "trunc-12",
                "pca-50",
                "pca-32",
                "pca-25",
                "pca-12",
                "sq8",
                "sq4",
                "binary",
                "pq-25x8",
            ],
        ),
        (8, ["trunc-4", "trunc-2", "trunc-1", "pca-4", "pca-2", "pca-1", "sq8", "sq4", "binary", "pq-2x8", "pq-1x8"]),
        (1, ["sq8", "sq4", "binary"]),
    ],
)
def test_default_variants(dim, want):
    got = default_variants(dim)
    assert got == want
    for v in got:
        parse_variant(v, dim)


def test_figure_families_are_the_compression_families():
    """The report's figure (whose env has no faiss) names the same families as capgap.compress."""
    from capgap.compress import FAMILIES
    from capgap.figures import COMPRESSION_FAMILIES, COMPRESSION_MARKERS

    assert COMPRESSION_FAMILIES == (*(f for f in FAMILIES if f != "float32"), "other")
    assert set(COMPRESSION_MARKERS) == set(COMPRESSION_FAMILIES)
