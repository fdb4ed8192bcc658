"""The frozen index: exact contents, fingerprint checks, NaN rejection, resume after a kill."""

import numpy as np
import pytest

from capgap.data import Corpus
from capgap.errors import DataFormatError, FingerprintMismatch
from capgap.index import build_index, index_fingerprint, load_index


class HashEncoder:
    """Deterministic stand-in encoder: a text's vector is seeded by its characters."""

    def __init__(self, dim=8, fail_after=None):
        self.dim, self.calls, self.fail_after = dim, 0, fail_after

    def fingerprint(self):
        return {
            "model": "hash",
            "weights_sha256": "0",
            "pooling": "none",
            "normalize": False,
            "max_length": 0,
            "dim": self.dim,
            "document_prompt": "",
        }

    def vec(self, t):
        return np.random.default_rng(sum(map(ord, t))).standard_normal(self.dim).astype(np.float32)

    def encode_documents(self, texts, progress=False):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise KeyboardInterrupt("killed")
        return np.stack([self.vec(t) for t in texts])


CORPUS = Corpus(tuple(f"d{i}" for i in range(10)), ("",) * 10, tuple(f"text {i}" for i in range(10)))


def test_contents_and_fingerprint(tmp_path):
    enc = HashEncoder()
    idx = build_index(CORPUS, enc, tmp_path, chunk_size=3, progress=False)
    assert idx.embeddings.shape == (10, 8) and idx.embeddings.dtype == np.float32
    assert np.array_equal(idx.embeddings[4], enc.vec("text 4"))
    assert idx.doc_ids == CORPUS.ids
    assert not (tmp_path / "parts").exists()
    fp = index_fingerprint(enc.fingerprint(), CORPUS)
    assert load_index(tmp_path, fp).fingerprint == fp
    other = Corpus(CORPUS.ids, CORPUS.titles, CORPUS.texts[:-1] + ("changed",))
    with pytest.raises(FingerprintMismatch) as e:
        load_index(tmp_path, index_fingerprint(enc.fingerprint(), other))
    assert e.value.keys == ["corpus_sha256"]
    with pytest.raises(FingerprintMismatch) as e:
        load_index(tmp_path, {**fp, "model": "another"})
    assert e.value.keys == ["model"]


def test_resume_after_kill(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        build_index(CORPUS, HashEncoder(fail_after=2), tmp_path, chunk_size=3, progress=False)
    assert not (tmp_path / "fingerprint.json").exists()  # incomplete index is not trusted
    assert len(list((tmp_path / "parts").glob("part_*.npy"))) == 2
    with pytest.raises(DataFormatError, match="incomplete"):
        load_index(tmp_path)
    enc = HashEncoder()
    idx = build_index(CORPUS, enc, tmp_path, chunk_size=3, progress=False)
    assert enc.calls == 2  # 4 chunks, 2 reused
    assert np.array_equal(idx.embeddings[9], enc.vec("text 9"))


def test_parts_of_another_build_are_discarded(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        build_index(CORPUS, HashEncoder(dim=8, fail_after=2), tmp_path, chunk_size=3, progress=False)
    enc = HashEncoder(dim=4)
    idx = build_index(CORPUS, enc, tmp_path, chunk_size=3, progress=False)
    assert enc.calls == 4 and idx.embeddings.shape == (10, 4)


def test_nan_rejected(tmp_path):
    class NaNEncoder(HashEncoder):
        def encode_documents(self, texts, progress=False):
            out = super().encode_documents(texts)
            out[0, 0] = np.nan
            return out

    with pytest.raises(ValueError, match="NaN"):
        build_index(CORPUS, NaNEncoder(), tmp_path, progress=False)


def test_zero_norm_document_under_cosine_names_the_document(tmp_path):
    """An encoder that normalises scores by cosine: a document embedded to the zero vector has no
    cosine (0/0), so the build stops naming its corpus row and id; an inner-product encoder's
    zero row scores 0, which is defined, and is kept."""

    class ZeroEncoder(HashEncoder):
        normalize = True

        def fingerprint(self):
            return {**super().fingerprint(), "normalize": self.normalize}

        def encode_documents(self, texts, progress=False):
            out = super().encode_documents(texts)
            out /= np.linalg.norm(out, axis=1, keepdims=True)
            out[[t == "text 7" for t in texts]] = 0.0
            return out

    with pytest.raises(ValueError, match=r"document row 7 \(0-based; ids \['d7'\]\) has norm 0"):
        build_index(CORPUS, ZeroEncoder(), tmp_path / "cos", chunk_size=3, progress=False)
    ip = ZeroEncoder()
    ip.normalize = False
    idx = build_index(CORPUS, ip, tmp_path / "ip", chunk_size=3, progress=False)
    assert not idx.embeddings[7].any()
    # an index of normalised embeddings holding a zero row (e.g. written by an older build) is refused on load
    fp = {**idx.fingerprint, "normalize": True}
    import json

    (tmp_path / "ip" / "fingerprint.json").write_text(json.dumps(fp))
    with pytest.raises(DataFormatError, match=r"embeddings.npy: .*row 7 \(0-based; ids \['d7'\]\) has norm 0"):
        load_index(tmp_path / "ip")
