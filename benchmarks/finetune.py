"""Step rate of capgap's frozen-index fine-tuning against a re-encoding trainer, in one process.

capgap: LoRA (rank 16) on the query side, InfoNCE over a 50k-document frozen index (synthetic
unit vectors; the score matrix is batch x 50k), batch 32 queries.
Reference: sentence-transformers' ``SentenceTransformerTrainer`` with
``MultipleNegativesRankingLoss`` and the same LoRA adapter, batch 32 (query, document) pairs:
it re-encodes the 32 positive documents at every step (in-batch negatives).
Queries and documents are LIMIT-style texts from capgap's generator (documents list 30
attributes). Prints steps/s of each and the ratio.

Run: .venv/bin/python benchmarks/finetune.py [--encoders minilm,mpnet] [--steps 20]
Needs the ``datasets`` package for the reference trainer (pip install datasets).
"""

import argparse
import os
import platform
import tempfile
import time

import numpy as np

MODELS = {"minilm": "sentence-transformers/all-MiniLM-L6-v2", "mpnet": "sentence-transformers/all-mpnet-base-v2"}


def ours(name, steps, n_docs, queries, gold):
    from capgap.encoders import EncoderSpec, load_encoder
    from capgap.finetune import FinetuneConfig, train_query_encoder

    enc = load_encoder(EncoderSpec(name, MODELS[name]), threads=os.cpu_count())
    rng = np.random.default_rng(0)
    D = rng.standard_normal((n_docs, enc.dim)).astype(np.float32)
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    cfg = FinetuneConfig(
        steps=steps, batch_size=32, lr=2e-3, lora_rank=16, lora_alpha=32, eval_every=0, checkpoint_every=10**9
    )
    res = train_query_encoder(enc, D, queries, gold, cfg, threads=os.cpu_count())
    return res.steps_per_s


def reference(name, steps, queries, docs):
    from datasets import Dataset
    from peft import LoraConfig
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.losses import MultipleNegativesRankingLoss

    from capgap.encoders import EncoderSpec, resolve_model

    model = SentenceTransformer(resolve_model(EncoderSpec(name, MODELS[name])).path, device="cpu")
    targets = {"bert": ["query", "key", "value"], "mpnet": ["q", "k", "v"]}[model[0].auto_model.config.model_type]
    model.add_adapter(LoraConfig(r=16, lora_alpha=32, lora_dropout=0.1, target_modules=targets))
    n = steps * 32
    ds = Dataset.from_dict(
        {"anchor": [queries[i % len(queries)] for i in range(n)], "positive": [docs[i % len(docs)] for i in range(n)]}
    )
    with tempfile.TemporaryDirectory() as out:
        args = SentenceTransformerTrainingArguments(
            output_dir=out,
            max_steps=steps,
            per_device_train_batch_size=32,
            learning_rate=2e-3,
            save_strategy="no",
            report_to=[],
            logging_steps=10**9,
            dataloader_num_workers=0,
            seed=0,
        )
        trainer = SentenceTransformerTrainer(
            model=model, args=args, train_dataset=ds, loss=MultipleNegativesRankingLoss(model)
        )
        t = time.perf_counter()
        trainer.train()
        return steps / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--encoders", default="minilm,mpnet")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--docs", type=int, default=50000)
    args = ap.parse_args()
    import torch

    from capgap.generate import generate_limit_style

    corpus, queries, qrels = generate_limit_style(
        n_queries=400, pool_size=40, n_distractors=60, attributes_per_doc=30, seed=0
    )
    pos = {d: i for i, d in enumerate(corpus.ids)}
    gold = [[pos[d] for d in qrels.gold(q)] for q in queries.ids]
    docs = [corpus.texts[g[0]] for g in gold]  # one positive document per query, as MNRL pairs
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)"
    )
    print(
        f"batch 32, LoRA rank 16, {args.steps} steps each (after the model is loaded); frozen index: {args.docs} documents\n"
    )
    print("| encoder | capgap frozen-index steps/s | s/step | re-encoding trainer steps/s | s/step | ratio |")
    print("|---|---|---|---|---|---|")
    for name in args.encoders.split(","):
        a = ours(name, args.steps, args.docs, list(queries.texts), gold)
        b = reference(name, args.steps, list(queries.texts), docs)
        print(f"| {name} | {a:.2f} | {1 / a:.3f} | {b:.2f} | {1 / b:.3f} | {a / b:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
