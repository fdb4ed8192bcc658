"""Model resolution, weight pins, and the embedding against an independent computation."""

import numpy as np
import pytest
import torch

from capgap.encoders import BUNDLED, EncoderSpec, load_encoder, resolve_model
from capgap.errors import ModelIntegrityError, ModelNotFound

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def minilm():
    return load_encoder(EncoderSpec("minilm", MINILM), threads=2)


def test_bundled_minilm_resolves_and_is_pinned(minilm):
    assert minilm.resolved.origin == "bundled"
    assert minilm.resolved.weights_sha256 == BUNDLED[MINILM].sha256
    fp = minilm.fingerprint()
    assert (fp["dim"], fp["pooling"], fp["normalize"], fp["max_length"]) == (384, "mean", True, 256)


def test_embedding_equals_manual_mean_pooling(minilm):
    """sentence-transformers output == transformers forward + mask-weighted mean + L2 norm."""
    from transformers import AutoModel, AutoTokenizer

    texts = ["Who likes Joshua Trees?", "Geneva likes quokkas, river otters and tapirs."]
    path = minilm.resolved.path
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    batch = tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    ref = (hidden * mask).sum(1) / mask.sum(1)
    ref = torch.nn.functional.normalize(ref, dim=-1).numpy()
    got = minilm.encode_queries(texts)
    assert got.shape == (2, 384) and got.dtype == np.float32
    assert np.allclose(got, ref, atol=1e-5)


def test_bundled_mpnet_unpacks_and_is_pinned():
    r = resolve_model(EncoderSpec("mpnet", "sentence-transformers/all-mpnet-base-v2"))
    assert r.origin == "bundled" and r.weights_sha256 == BUNDLED["sentence-transformers/all-mpnet-base-v2"].sha256


def test_pinned_sha_mismatch_is_an_error(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"not the weights")
    with pytest.raises(ModelIntegrityError, match="does not match"):
        resolve_model(EncoderSpec("x", "some/model", path=str(tmp_path), sha256="0" * 64))


def test_offline_unbundled_model_not_found():
    with pytest.raises(ModelNotFound, match="not available offline"):
        resolve_model(EncoderSpec("x", "distilbert-base-uncased"))


def test_unknown_encoder_key():
    with pytest.raises(ValueError, match="unknown keys"):
        EncoderSpec.from_config("x", {"model": "m", "pooling_mode": "cls"})


def test_dtype_applies_on_cuda_only_and_is_validated():
    """bfloat16 weights are a CUDA setting (Qwen3-Embedding-4B in config/paper.yaml): on CPU the
    model runs float32 and the index fingerprint is unchanged; an unknown dtype is an error."""
    from capgap.encoders import EncoderSpec, load_encoder

    plain = load_encoder(EncoderSpec("m", "sentence-transformers/all-MiniLM-L6-v2"), device="cpu")
    bf = load_encoder(EncoderSpec("m", "sentence-transformers/all-MiniLM-L6-v2", dtype="bfloat16"), device="cpu")
    assert bf.fingerprint() == plain.fingerprint() and "dtype" not in bf.fingerprint()
    assert next(bf.model.parameters()).dtype == next(plain.model.parameters()).dtype
    with pytest.raises(ValueError, match="dtype must be"):
        load_encoder(EncoderSpec("m", "sentence-transformers/all-MiniLM-L6-v2", dtype="int8"), device="cpu")
