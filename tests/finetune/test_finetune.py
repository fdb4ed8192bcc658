"""Fine-tuning: the loss in closed form, frozen documents, determinism, resume after a kill."""

import logging
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
    # by hand: scores [2, 1, 0], tau = 1, positive first -> -log softmax_0 = 0.408
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
    corpus, queries, qrels = generate_limit_style(
        n_queries=24, pool_size=10, n_distractors=14, attributes_per_doc=8, seed=1
    )
    folder = tmp_path_factory.mktemp("idx")
    build_index(corpus, load_encoder(MINILM, threads=2), folder, progress=False)
    pos = {d: i for i, d in enumerate(corpus.ids)}
    gold = [[pos[d] for d in qrels.gold(q)] for q in queries.ids]
    return folder, list(queries.texts), gold


def _cfg(**kw):
    base = dict(
        steps=6,
        batch_size=8,
        lr=2e-3,
        lora_rank=4,
        lora_alpha=8,
        lora_dropout=0.1,
        checkpoint_every=2,
        eval_every=3,
        seed=0,
    )
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
        train_query_encoder(
            killed,
            D,
            texts,
            gold,
            _cfg(),
            ckpt_path=ckpt,
            evaluate=lambda s: curve_eval(s, killed),
            threads=2,
            stop_after=3,
        )
    assert ckpt.is_file()  # last checkpoint: step 2
    resumed = load_encoder(MINILM, threads=2)
    r_res = train_query_encoder(
        resumed, D, texts, gold, _cfg(), ckpt_path=ckpt, evaluate=lambda s: curve_eval(s, resumed), threads=2
    )
    assert r_res.resumed_from == 2
    lr, ls = _lora(ref), _lora(resumed)
    assert all(torch.equal(lr[k], ls[k]) for k in lr)
    assert r_res.curve == r_ref.curve
    q = ["Who likes something?"]
    assert np.array_equal(ref.encode_queries(q), resumed.encode_queries(q))


def test_stale_checkpoint_is_not_resumed(tiny, tmp_path, caplog):
    """A checkpoint left by a killed run is resumed only for the same training data: after the
    train queries' texts change, training starts over, says why, and ends like a clean run."""
    folder, texts, gold = tiny
    D = load_index(folder).embeddings
    ckpt = tmp_path / "ckpt.pt"
    killed = load_encoder(MINILM, threads=2)
    with pytest.raises(KeyboardInterrupt):
        train_query_encoder(killed, D, texts, gold, _cfg(), ckpt_path=ckpt, threads=2, stop_after=3)
    assert ckpt.is_file()
    edited = [t + " please" for t in texts]  # same ids and count, other texts
    again = load_encoder(MINILM, threads=2)
    with caplog.at_level(logging.WARNING, logger="capgap.finetune"):
        r = train_query_encoder(again, D, edited, gold, _cfg(), ckpt_path=ckpt, threads=2)
    assert r.resumed_from == 0 and "the data differ" in caplog.text
    clean = load_encoder(MINILM, threads=2)
    train_query_encoder(clean, D, edited, gold, _cfg(), threads=2)
    la, lc = _lora(again), _lora(clean)
    assert all(torch.equal(la[k], lc[k]) for k in la)
    # other gold sets, or another index, are other training data too
    from capgap.finetune import training_digest

    base = training_digest(clean, D, edited, gold, None, _cfg())
    assert training_digest(clean, D, edited, [g[::-1] for g in gold][:-1] + [[0]], None, _cfg()) != base
    assert training_digest(clean, np.asarray(D) * 2, edited, gold, None, _cfg()) != base
    assert training_digest(clean, D, edited, gold, None, _cfg(), context=["held-out edited"]) != base


def test_config_errors():
    with pytest.raises(ValueError, match="loss"):
        FinetuneConfig(loss="mean")
    with pytest.raises(ValueError, match="unknown keys"):
        FinetuneConfig.from_config({"stepz": 3})


# --- save_adapter: atomic, and independent of PYTHONHASHSEED --------------------------------

_TINY_LORA = """
import sys
import torch
import transformers
from peft import LoraConfig, get_peft_model
from capgap.finetune import save_adapter

torch.manual_seed(0)
cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100)
model = get_peft_model(transformers.BertModel(cfg), LoraConfig(
    r=2, lora_alpha=4, target_modules=["query", "key", "value", "dense"], exclude_modules=["pooler.dense", "output.dense"]))
save_adapter(model, sys.argv[1])
"""


def _tiny_peft(seed: int = 0):
    import transformers
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    cfg = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100
    )
    return get_peft_model(transformers.BertModel(cfg), LoraConfig(r=2, target_modules=["query", "key", "value"]))


def test_adapter_is_byte_identical_across_hash_seeds(tmp_path):
    """peft keeps target_modules / exclude_modules as sets and writes list(set): without
    save_adapter the order changes with PYTHONHASHSEED (1 and 2 differ with peft 0.21.2)."""
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "tiny_lora.py"
    script.write_text(_TINY_LORA)
    outs = {}
    for seed in ("1", "2"):
        out = tmp_path / f"seed{seed}" / "adapter"
        env = {**os.environ, "PYTHONHASHSEED": seed, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        subprocess.run([sys.executable, str(script), str(out)], env=env, check=True, capture_output=True, timeout=300)
        outs[seed] = out
    files = sorted(p.name for p in outs["1"].iterdir())
    assert "adapter_config.json" in files and files == sorted(p.name for p in outs["2"].iterdir())
    for name in files:  # the config, the weights and peft's README
        assert (outs["1"] / name).read_bytes() == (outs["2"] / name).read_bytes(), name
    cfg = json.loads((outs["1"] / "adapter_config.json").read_text())
    assert cfg["target_modules"] == ["dense", "key", "query", "value"]
    assert cfg["exclude_modules"] == ["output.dense", "pooler.dense"]
    text = (outs["1"] / "adapter_config.json").read_text()
    assert text == json.dumps(cfg, indent=2, sort_keys=True) + "\n"


def test_save_adapter_replaces_the_folder_and_leaves_no_temporaries(tmp_path):
    from peft import PeftModel

    from capgap.finetune import save_adapter

    out = tmp_path / "adapter"
    out.mkdir()
    (out / "stale.bin").write_bytes(b"old")
    model = _tiny_peft()
    assert save_adapter(model, out) == out
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    assert [p.name for p in tmp_path.iterdir()] == ["adapter"]  # no .adapter.*.tmp / .old left
    import transformers

    cfg = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100
    )
    back = PeftModel.from_pretrained(transformers.BertModel(cfg), out)
    a = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    b = {k: v for k, v in back.state_dict().items() if "lora_" in k}
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_failed_save_keeps_the_previous_adapter(tmp_path, monkeypatch):
    from capgap.finetune import save_adapter

    out = tmp_path / "adapter"
    model = _tiny_peft()
    save_adapter(model, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken(self, directory, **kw):
        (tmp_path / "seen").write_text(directory)
        open(f"{directory}/adapter_model.safetensors", "wb").write(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(type(model), "save_pretrained", broken)
    with pytest.raises(OSError, match="disk full"):
        save_adapter(model, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter", "seen"]
    assert (tmp_path / "seen").read_text() != str(out)  # it wrote into a sibling, not out_dir


def test_save_adapter_takes_the_encoder_and_rejects_a_plain_model(tmp_path):
    import json

    from capgap.finetune import add_lora, save_adapter

    enc = load_encoder(MINILM, threads=2)
    with pytest.raises(TypeError, match="no peft adapter"):
        save_adapter(enc, tmp_path / "none")
    add_lora(enc, _cfg())
    out = save_adapter(enc, tmp_path / "a")
    assert json.loads((out / "adapter_config.json").read_text())["target_modules"] == ["key", "query", "value"]
    assert not (tmp_path / "none").exists()


# --- the shared training loop (capgap.training) ----------------------------------------------


def _toy_run(ckpt=None, digest=None, stop_after=None, steps=7):
    """A tiny regression trained by run_loop: dropout (torch RNG), noise targets drawn from the
    sampler inside the batch loss, 10 items in batches of 4 (a new epoch every 2 steps)."""
    from capgap.training import run_loop, seed_everything

    sampler = seed_everything(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    X = torch.linspace(-1, 1, 40).reshape(10, 4)

    def batch_loss(batch):
        target = torch.from_numpy(sampler.standard_normal(len(batch)).astype(np.float32))
        return ((model(X[batch]).squeeze(1) - target) ** 2).mean()

    res = run_loop(
        batch_loss,
        model,
        opt,
        steps,
        10,
        4,
        sampler,
        ckpt_path=ckpt,
        digest=digest,
        checkpoint_every=2,
        evaluate=lambda step: {"w": float(model[0].weight.sum())},
        eval_every=3,
        stop_after=stop_after,
    )
    return model, res


def test_run_loop_resumes_exactly_and_only_for_its_digest(tmp_path, caplog):
    ref, r_ref = _toy_run()
    assert [p["step"] for p in r_ref.curve] == [3, 6, 7] and r_ref.resumed_from == 0 and r_ref.steps_run == 7
    assert not ref.training  # eval mode on return
    ckpt = tmp_path / "toy.pt"
    with pytest.raises(KeyboardInterrupt):
        _toy_run(ckpt, {"settings": "s", "data": "d"}, stop_after=3)
    assert ckpt.is_file() and not list(tmp_path.glob(".*tmp"))  # atomic: no temporary left
    back, r_back = _toy_run(ckpt, {"settings": "s", "data": "d"})
    assert r_back.resumed_from == 2 and r_back.steps_run == 5 and r_back.curve == r_ref.curve
    assert all(torch.equal(a, b) for a, b in zip(ref.state_dict().values(), back.state_dict().values()))
    # another digest: never resumed, the log names what differs, and it ends like a clean run
    ckpt.unlink()
    with pytest.raises(KeyboardInterrupt):
        _toy_run(ckpt, {"settings": "s", "data": "d"}, stop_after=3)
    with caplog.at_level(logging.WARNING, logger="capgap.training"):
        other, r_other = _toy_run(ckpt, {"settings": "s", "data": "other"})
    assert r_other.resumed_from == 0 and "the data differ" in caplog.text and "the settings" not in caplog.text
    assert all(torch.equal(a, b) for a, b in zip(ref.state_dict().values(), other.state_dict().values()))
    # a finished checkpoint: nothing left to train, the final curve point again
    _, r_done = _toy_run(ckpt, {"settings": "s", "data": "other"})
    assert r_done.resumed_from == 7 and r_done.steps_run == 0 and r_done.curve[-1] == r_ref.curve[-1]


def test_curve_evaluator_recall_per_split():
    from capgap.data import Corpus, Qrels, Queries, RetrievalSet, Split
    from capgap.training import curve_evaluator

    rs = RetrievalSet(
        "t",
        Corpus(("a", "b", "c"), ("", "", ""), ("x", "y", "z")),
        Queries(("q1", "q2", "q3"), ("find x", "find y", "find z")),
        Qrels({"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}),
        Split(("q1", "q2"), ("q3",)),
    )
    table = {"find x": [3.0, 2.0, 1.0], "find y": [3.0, 2.0, 1.0], "find z": [1.0, 2.0, 3.0]}  # q2's gold ranks 2nd
    prepared = []

    def scorer():
        prepared.append(1)
        return lambda texts: lambda a, b: np.array([table[t] for t in texts[a:b]])

    ev = curve_evaluator(rs, rs.corpus.ids, scorer, ks=[1, 2, 20])
    assert ev(5) == {"train_recall@1": 0.5, "train_recall@2": 1.0, "heldout_recall@1": 1.0, "heldout_recall@2": 1.0}
    assert prepared == [1]  # the scorer is prepared once per curve point, for both splits
    assert curve_evaluator(rs, rs.corpus.ids, scorer, ks=[20, 50], max_queries=1)(0) == {
        "train_recall@20": 1.0,
        "heldout_recall@20": 1.0,
    }


def test_run_loop_stops_once_the_watched_metric_stops_rising(tmp_path):
    """patience: with curve points every 3 steps whose watched values are 0.1, 0.5, 0.4, 0.3, ...
    and patience 2, the best is the second point and two points bring nothing better, so
    training stops at step 12 (of 30) with that point last; a resumed run trains no further and
    ends with the same curve and weights."""
    from capgap.training import run_loop, seed_everything

    values = iter([0.1, 0.5, 0.4, 0.3, 0.2, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9])

    def run(ckpt):
        sampler = seed_everything(0)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        X = torch.linspace(-1, 1, 40).reshape(10, 4)
        res = run_loop(
            lambda b: (model(X[b]) ** 2).mean(),
            model,
            opt,
            30,
            10,
            4,
            sampler,
            ckpt_path=ckpt,
            digest={"s": "x"},
            checkpoint_every=5,
            evaluate=lambda step: {"heldout_recall@2": next(values)},
            eval_every=3,
            patience=2,
            monitor=lambda p: p["heldout_recall@2"],
        )
        return model, res

    model, res = run(tmp_path / "c.pt")
    assert res.stopped_at == 12 and res.steps_run == 12
    assert [p["step"] for p in res.curve] == [3, 6, 9, 12] and [p["heldout_recall@2"] for p in res.curve] == [
        0.1,
        0.5,
        0.4,
        0.3,
    ]
    again, res2 = run(tmp_path / "c.pt")
    assert res2.steps_run == 0 and res2.stopped_at == 12 and res2.curve == res.curve
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    with pytest.raises(ValueError, match="patience"):
        run_loop(
            lambda b: None,
            model,
            torch.optim.SGD(model.parameters(), lr=1e-2),
            3,
            10,
            4,
            seed_everything(0),
            patience=1,
        )


def test_candidate_masks_by_hand():
    """Items 0 and 2 of gold [[1], [0, 3], [4]] and exclusions [[], [], [2]] over 5 documents.
    full: every document a candidate; gold rows 1 and 4, item 2's document 2 excluded. sampled:
    the batch's gold rows {1, 4} plus 2 documents drawn without replacement by the sampler (the
    same draw an independent generator of the same seed makes), ascending."""
    from capgap.finetune import candidate_masks

    gold, excl = [[1], [0, 3], [4]], [[], [], [2]]
    cand, mask, ex = candidate_masks(np.array([0, 2]), gold, excl, 5, "full", 1024)
    assert cand is None
    assert mask.numpy().astype(int).tolist() == [[0, 1, 0, 0, 0], [0, 0, 0, 0, 1]]
    assert ex.numpy().astype(int).tolist() == [[0, 0, 0, 0, 0], [0, 0, 1, 0, 0]]
    assert candidate_masks(np.array([0, 1]), gold, excl, 5, "full", 1024)[2] is None  # no exclusions in the batch
    cand, mask, ex = candidate_masks(np.array([0, 2]), gold, excl, 5, "sampled", 2, np.random.default_rng(7))
    want = sorted({1, 4} | set(np.random.default_rng(7).choice(5, size=2, replace=False).tolist()))
    assert cand.tolist() == want
    assert mask.numpy().tolist() == [[c == 1 for c in want], [c == 4 for c in want]]
    assert ex.numpy().tolist() == [[False] * len(want), [c == 2 for c in want]]
    with pytest.raises(ValueError, match="sampler"):
        candidate_masks(np.array([0]), gold, None, 5, "sampled", 2)


def test_final_evaluation_reuses_the_last_curve_points_encoding(tmp_path):
    """The last curve point encodes every query with the final weights (``TrainResult.queries``)
    and the final evaluation reuses it: the same bytes as encoding the queries again after
    training, so the same rows; with early stopping (best weights put back) nothing is reused."""
    from capgap.data import RetrievalSet
    from capgap.data.assemble import split_queries
    from capgap.evaluate import evaluate_encoder
    from capgap.finetune import finetune_encoder

    corpus, queries, qrels = generate_limit_style(
        n_queries=24, pool_size=10, n_distractors=14, attributes_per_doc=8, seed=1
    )
    rs = RetrievalSet("tiny", corpus, queries, qrels, split_queries(list(queries.ids), 0.25, 0))
    index = build_index(corpus, load_encoder(MINILM, threads=2), tmp_path / "idx", progress=False)
    enc = load_encoder(MINILM, threads=2)
    res = finetune_encoder(
        rs, enc, index, _cfg(steps=4, eval_every=2, eval_max_queries=5), [1, 2], threads=2, progress=False
    )
    again = enc.encode_queries(list(queries.texts))
    assert res.queries is not None and res.queries.dtype == np.float32 and np.array_equal(res.queries, again)
    assert [p["step"] for p in res.curve] == [2, 4]
    shared = evaluate_encoder(rs, enc, index, [1, 2], 2, "minilm", "finetuned", 2, queries=res.queries)[0]
    assert shared == evaluate_encoder(rs, enc, index, [1, 2], 2, "minilm", "finetuned", 2)[0]
    with pytest.raises(ValueError, match="queries"):
        evaluate_encoder(rs, enc, index, [1, 2], 2, "minilm", "finetuned", 2, queries=res.queries[:3])
    es = finetune_encoder(
        rs,
        load_encoder(MINILM, threads=2),
        index,
        _cfg(steps=4, eval_every=2, eval_max_queries=5, validation_fraction=0.25),
        [1, 2],
        threads=2,
        progress=False,
    )
    assert es.queries is None


def test_the_convergence_objective_is_the_fixed_samples_loss(tiny):
    """The rule's objective at the last curve point is the InfoNCE loss (temperature 0.05, avg
    form, the whole index) of the first eval_max_queries train queries, computed here from the
    trained encoder's own query embeddings (Encoder.encode_queries, eval mode) with the loss's
    formula written out in numpy; the training objective of the batches (the curve's ``loss``) is
    a different number."""
    folder, texts, gold = tiny
    D = load_index(folder).embeddings
    enc = load_encoder(MINILM, threads=2)
    res = train_query_encoder(enc, D, texts, gold, _cfg(eval_max_queries=10), threads=2)
    q = enc.encode_queries(texts[:10]).astype(np.float64)
    logits = q @ D.astype(np.float64).T / 0.05
    want = []
    for i, g in enumerate(gold[:10]):
        neg = np.delete(logits[i], g)
        lse = neg.max() + np.log(np.exp(neg - neg.max()).sum())
        want.append(np.mean([np.logaddexp(0.0, lse - logits[i, j]) for j in g]))  # -log(e^a / (e^a + sum e^neg))
    assert res.curve[-1]["objective"] == pytest.approx(float(np.mean(want)), rel=2e-4)
    assert res.curve[-1]["objective"] != pytest.approx(res.curve[-1]["loss"], rel=1e-3)


def test_early_stoppings_best_weights_are_not_taken_from_a_run_under_other_settings(tmp_path):
    """A run killed under lr 0.2 leaves <checkpoint>.best; the same folder under lr 0.01 refuses
    the checkpoint (its digest differs) and the .best file too: it keeps the step a clean lr
    0.01 run keeps, with the same weights."""
    from capgap.finetune.train import EarlyStop
    from capgap.training import PartialState, run_loop, seed_everything

    def toy(lr, ckpt, stop_after=None):
        sampler = seed_everything(0)
        model = torch.nn.Linear(3, 1, bias=False)
        X = torch.linspace(-1, 1, 36).reshape(12, 3)
        y = X @ torch.tensor([[1.0], [-2.0], [0.5]])
        early = EarlyStop(model, ["v1"], "validation_recall@1")
        digest = {"fine-tuning config": f"lr={lr}"}
        early.attach(PartialState(model, lambda k: True), ckpt, {**digest, "number of training items": 12})
        ev = early.wrap(lambda s: {}, lambda s: {"train_recall@1": 1.0 / (1.0 + float(((model(X) - y) ** 2).mean()))})
        try:
            run_loop(
                lambda b: ((model(X[b]) - y[b]) ** 2).mean(),
                model,
                torch.optim.SGD(model.parameters(), lr=lr),
                20,
                12,
                4,
                sampler,
                ckpt_path=ckpt,
                digest=digest,
                checkpoint_every=2,
                evaluate=ev,
                eval_every=2,
                stop_after=stop_after,
                monitor=early.monitor,
                validation=True,
            )
        except KeyboardInterrupt:
            return None, early
        early.restore(None)
        return model.weight.detach().clone(), early

    ckpt = tmp_path / "run" / "checkpoint.pt"
    toy(0.2, ckpt, stop_after=10)
    assert (tmp_path / "run" / "checkpoint.pt.best").is_file()
    w_new, e_new = toy(0.01, ckpt)
    w_clean, e_clean = toy(0.01, tmp_path / "clean" / "checkpoint.pt")
    assert e_new.best_step == e_clean.best_step and torch.equal(w_new, w_clean)
