"""Model resolution, weight pins, and the embedding against an independent computation."""

import json
import logging
from pathlib import Path

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


# --- max_length against the model's positions ----------------------------------------------

LONG_DOC = "alpha beta gamma delta " * 200  # ~800 word pieces, as d7 of the max-length case


def test_max_length_above_positions_is_a_load_time_error():
    """max_length 1024 on MiniLM (512 positions) fails at load time, naming the encoder, the
    configured value and the model's limit, instead of a tensor-size traceback mid-index."""
    spec = EncoderSpec.from_config("minilm1024", {"model": MINILM, "max_length": 1024})
    with pytest.raises(
        ValueError,
        match=r"^encoder 'minilm1024': max_length 1024 exceeds "
        r"sentence-transformers/all-MiniLM-L6-v2's 512 position embeddings; "
        r"set encoders\.minilm1024\.max_length to at most 512",
    ):
        load_encoder(spec, device="cpu", threads=2)


def test_max_length_at_the_limit_embeds_a_long_document():
    enc = load_encoder(EncoderSpec("minilm512", MINILM, max_length=512), device="cpu", threads=2)
    assert enc.fingerprint()["max_length"] == 512
    assert len(enc.model.tokenizer(LONG_DOC)["input_ids"]) > 512  # would overflow without truncation
    emb = enc.encode_documents([LONG_DOC, "short"])
    assert emb.shape == (2, 384) and np.isfinite(emb).all()


@pytest.mark.parametrize("bad", [0, -5, "512", 512.0, True])
def test_max_length_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="max_length must be a positive integer"):
        load_encoder(EncoderSpec("m", MINILM, max_length=bad), device="cpu")


def test_position_limit_subtracts_the_roberta_padding_offset():
    """RoBERTa-style embeddings (RoBERTa, XLM-R, MPNet) start positions at padding_idx + 1;
    BERT-style ones at 0; a model without max_position_embeddings has no known limit."""
    import transformers

    from capgap.encoders import position_limit

    small = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, vocab_size=50)
    roberta = transformers.RobertaModel(transformers.RobertaConfig(max_position_embeddings=34, pad_token_id=1, **small))
    limit, text = position_limit(roberta)
    assert limit == 32 and text.startswith("32 usable positions (34 position embeddings")
    mpnet = transformers.MPNetModel(transformers.MPNetConfig(max_position_embeddings=34, **small))
    assert position_limit(mpnet)[0] == 32
    bert = transformers.BertModel(transformers.BertConfig(max_position_embeddings=40, **small))
    assert position_limit(bert) == (40, "40 position embeddings")

    class NoPositions:
        config = object()

    assert position_limit(NoPositions()) is None


def test_checkpoint_default_above_positions_is_clamped_with_a_warning(tmp_path, caplog):
    """No max_length configured and a checkpoint whose own max_seq_length exceeds its positions
    (a checkpoint inconsistency): clamped to the limit, with a warning naming both."""
    src = resolve_model(EncoderSpec("m", MINILM)).path
    folder = tmp_path / "minilm"
    folder.mkdir()
    for p in Path(src).iterdir():
        if p.name != "sentence_bert_config.json":
            (folder / p.name).symlink_to(p)
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 1024, "do_lower_case": False}))
    with caplog.at_level(logging.WARNING, logger="capgap.encoders"):
        enc = load_encoder(EncoderSpec("local", MINILM, path=str(folder)), device="cpu", threads=2)
    assert enc.max_length == 512 and enc.model.max_seq_length == 512
    assert any(
        "max_seq_length 1024 exceeds its 512 position embeddings; clamped to 512" in r.getMessage()
        for r in caplog.records
    )
    assert enc.encode_documents([LONG_DOC]).shape == (1, 384)


def test_zero_norm_embedding_of_a_normalising_encoder_is_an_error():
    """sentence-transformers normalises with torch's F.normalize (eps 1e-12), which leaves a zero
    vector zero: its cosine is undefined, so ``encode`` names the encoder, the rows and ids; a
    NaN row is named the same way; an encoder that does not normalise keeps a zero row (its
    inner products, 0, are defined)."""
    from capgap.encoders import Encoder

    class Stub:
        def __init__(self, out):
            self.out = out

        def encode(self, texts, **kw):
            return self.out[: len(texts)].copy()

    out = np.eye(3, 4, dtype=np.float32)
    out[1] = 0.0
    spec = EncoderSpec("stub", "stub/model")
    enc = Encoder(spec, Stub(out), None, "mean", True, 4, 16)
    with pytest.raises(
        ValueError, match=r"encoder 'stub' embedded 1 scifact queries to norm 0 .*row 1 \(0-based; ids \['q1'\]\)"
    ):
        enc.encode_queries(["a", "", "c"], ids=["q0", "q1", "q2"], what="scifact queries")
    out[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"NaN/inf embeddings for queries: row 1 \(0-based; ids \['q1'\]\)"):
        enc.encode_queries(["a", "", "c"], ids=["q0", "q1", "q2"])
    out[1] = 0.0
    plain = Encoder(spec, Stub(out), None, "mean", False, 4, 16)
    assert not plain.encode_documents(["a", "", "c"])[1].any()
