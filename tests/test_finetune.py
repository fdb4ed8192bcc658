"""Fine-tuning: the loss in closed form, frozen documents, determinism, resume after a kill."""

import math

import numpy as np
import pytest
import torch

from capgap.encoders import EncoderSpec, load_encoder
from capgap.finetune import FinetuneConfig, infonce_loss, train_query_encoder
from capgap.generate import generate_limit_style
from capgap.index import build_index, load_index
from capgap.io import sha256_file

MINILM = EncoderSpec("minilm", "sentence-transformers/all-MiniLM-L6-v2")


def test_single_positive_matches_seed_example():
    # seed 003: scores [2, 1, 0], tau = 1, positive first -> -log softmax_0 = 0.408
    loss = infonce_loss(torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([[True, False, False]]), 1.0)
    assert math.isclose(float(loss), -math.log(math.exp(2) / (math.exp(2) + math.exp(1) + 1)), rel_tol=1e-6)
    assert abs(float(loss) - 0.408) < 1e-3


def test_multi_positive_forms_by_hand():
    s = torch.tensor([[3.0, 1.0, 2.0, 0.0]])
    gold = torch.tensor([[True, True, False, False]])
    tau = 0.5
    e = [math.exp(x / tau) for x in (3.0, 1.0, 2.0, 0.0)]
    neg = e[2] + e[3]
    avg = -0.5 * (math.log(e[0] / (e[0] + neg)) + math.log(e[1] / (e[1] + neg)))  # other gold masked
    st = -math.log((e[0] + e[1]) / sum(e))
    assert math.isclose(float(infonce_loss(s, gold, tau, "avg")), avg, rel_tol=1e-5)  # float32
    assert math.isclose(float(infonce_loss(s, gold, tau, "set")), st, rel_tol=1e-5)
    big = infonce_loss(torch.tensor([[1e4, 1e4]]), torch.tensor([[True, False]]), 1.0)
    assert math.isclose(float(big), math.log(2), rel_tol=1e-6)  # stable at large scores


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    corpus, queries, qrels = generate_limit_style(n_queries=24, pool_size=10, n_distractors=14, attributes_per_doc=8, seed=1)
    folder = tmp_path_factory.mktemp("idx")
    build_index(corpus, load_encoder(MINILM, threads=2), folder, progress=False)
    pos = {d: i for i, d in enumerate(corpus.ids)}
    gold = [[pos[d] for d in qrels.relevant(q)] for q in queries.ids]
    return folder, list(queries.texts), gold


def _cfg(**kw):
    base = dict(steps=6, batch_size=8, lr=2e-3, lora_rank=4, lora_alpha=8, lora_dropout=0.1, checkpoint_every=2, eval_every=3, seed=0)
    base.update(kw)
    return FinetuneConfig(**base)


def _lora(enc):
    return {k: v.clone() for k, v in enc.model.state_dict().items() if "lora_" in k}


def test_documents_frozen_and_only_lora_learns(tiny):
    folder, texts, gold = tiny
    before = sha256_file(folder / "embeddings.npy")
    index = load_index(folder)
    enc = load_encoder(MINILM, threads=2)
    base_w = enc.model[0].auto_model.encoder.layer[0].attention.self.query.weight.detach().clone()
    res = train_query_encoder(enc, index.embeddings, texts, gold, _cfg(), threads=2)
    assert sha256_file(folder / "embeddings.npy") == before  # the index file is untouched
    names = [n for n, p in enc.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    assert res.trainable == sum(p.numel() for n, p in enc.model.named_parameters() if "lora_" in n)
    # BERT's pooler is not adapted: only the named attention projections
    assert all(m.rsplit(".", 1)[-1] in ("query", "key", "value") for m in res.adapted_modules)
    base = enc.model[0].auto_model.base_model.model.encoder.layer[0].attention.self.query.base_layer.weight
    assert torch.equal(base, base_w)
    assert any(float(v.abs().sum()) > 0 for k, v in _lora(enc).items() if "lora_B" in k)  # it learned


def test_deterministic_for_a_seed(tiny):
    folder, texts, gold = tiny
    D = load_index(folder).embeddings
    a, b = load_encoder(MINILM, threads=2), load_encoder(MINILM, threads=2)
    train_query_encoder(a, D, texts, gold, _cfg(), threads=2)
    train_query_encoder(b, D, texts, gold, _cfg(), threads=2)
    la, lb = _lora(a), _lora(b)
    assert la.keys() == lb.keys() and all(torch.equal(la[k], lb[k]) for k in la)


def test_resume_after_kill_ends_identically(tiny, tmp_path):
    folder, texts, gold = tiny
    D = load_index(folder).embeddings
    qtexts = texts[:6]

    def curve_eval(step, enc):
        return {"q0": float(enc.encode_queries(qtexts[:1])[0, 0])}

    ref = load_encoder(MINILM, threads=2)
    r_ref = train_query_encoder(ref, D, texts, gold, _cfg(), evaluate=lambda s: curve_eval(s, ref), threads=2)
    ckpt = tmp_path / "ckpt.pt"
    killed = load_encoder(MINILM, threads=2)
    with pytest.raises(KeyboardInterrupt):
        train_query_encoder(killed, D, texts, gold, _cfg(), ckpt_path=ckpt, evaluate=lambda s: curve_eval(s, killed), threads=2, stop_after=3)
    assert ckpt.is_file()  # last checkpoint: step 2
    resumed = load_encoder(MINILM, threads=2)
    r_res = train_query_encoder(resumed, D, texts, gold, _cfg(), ckpt_path=ckpt, evaluate=lambda s: curve_eval(s, resumed), threads=2)
    assert r_res.resumed_from == 2
    lr, ls = _lora(ref), _lora(resumed)
    assert all(torch.equal(lr[k], ls[k]) for k in lr)
    assert r_res.curve == r_ref.curve
    q = ["Who likes something?"]
    assert np.array_equal(ref.encode_queries(q), resumed.encode_queries(q))


def test_config_errors():
    with pytest.raises(ValueError, match="loss"):
        FinetuneConfig(loss="mean")
    with pytest.raises(ValueError, match="unknown keys"):
        FinetuneConfig.from_config({"stepz": 3})
