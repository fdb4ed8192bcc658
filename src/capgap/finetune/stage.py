"""Rules ``finetune`` and ``finetune_regime`` (``workflow/scripts/<rule>.py``): LoRA fine-tuning
of the query side against a rule's frozen index, then train / held-out evaluated exactly as the
pre-trained encoder; ``train_adapter`` is shared with rule ``twin_negatives``
(``capgap.nearmiss.twin_negatives_stage``). Every stage's signature is ``stage(inputs, outputs,
params, threads=1)`` (see ``capgap.stages``)."""

from __future__ import annotations

import time
from pathlib import Path

from ..evaluate import evaluate_encoder, write_curve, write_outputs, write_rows
from ..index import load_with_encoder
from ..io import write_json
from .adapter import save_adapter
from .config import FinetuneConfig
from .train import finetune_encoder


def finetune_stage(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``finetune``: LoRA fine-tuning of the query side against the frozen index
    (``finetune_encoder``, settings ``params.finetune``) on train-split queries only, resuming
    from ``params.checkpoint`` after a kill; then train and held-out evaluated exactly as the
    pre-trained encoder. Writes ``outputs.metrics`` (method ``finetuned``), ``outputs.curve``,
    ``outputs.run`` and ``outputs.adapter`` (peft ``save_pretrained``)."""
    rs, enc, idx = load_with_encoder(inputs, params, threads)
    res = train_adapter(rs, enc, idx, params, outputs, threads)
    rows, run = evaluate_encoder(
        rs, enc, idx, params.ks, params.ndcg_k, params.encoder_name, "finetuned", threads, queries=res.queries
    )
    rows = write_outputs(outputs, rows + res.convergence.rows(rs.name, params.encoder_name, "finetuned"), run)
    Path(params.checkpoint).unlink(missing_ok=True)  # the adapter is saved: the checkpoint has served
    return rows


def finetune_regime_stage(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``finetune_regime``: rung 5 of the learnability ladder, one fine-tuning regime
    (``params.regime``; ``params.finetune``: the finetune section with the regime's overrides,
    e.g. a LoRA rank, ``mode: full``, or ``validation_fraction`` for early stopping on a
    validation split of the train queries), trained as rule ``finetune`` trains (resuming
    from ``params.checkpoint``) and evaluated the same way: rows (method
    ``finetuned-<regime>``) to ``outputs.metrics``, the curve to ``outputs.curve``, and to
    ``outputs.record`` (JSON) the settings, the wall time and, with early stopping, the
    validation query ids, seed and the kept step. No adapter is kept (the rows are the result)."""
    rs, enc, idx = load_with_encoder(inputs, params, threads)
    cfg = FinetuneConfig.from_config(dict(params.finetune))
    t = time.perf_counter()
    res = finetune_encoder(rs, enc, idx, cfg, params.ks, ckpt_path=params.checkpoint, threads=threads)
    seconds = time.perf_counter() - t
    write_curve(outputs.curve, res.curve)
    method = f"finetuned-{params.regime}"
    rows, _ = evaluate_encoder(
        rs, enc, idx, params.ks, params.ndcg_k, params.encoder_name, method, threads, queries=res.queries
    )
    rows += res.convergence.rows(rs.name, params.encoder_name, method)
    write_json(
        outputs.record,
        {
            "regime": params.regime,
            "finetune": dict(params.finetune),
            "train_seconds": seconds,
            "steps_per_s": res.steps_per_s,
            "trainable": res.trainable,
            "early_stopping": res.early_stopping,
            "convergence": res.convergence.to_dict(),
        },
    )
    write_rows(outputs.metrics, rows)
    Path(params.checkpoint).unlink(missing_ok=True)
    return rows


def train_adapter(rs, enc, idx, params, outputs, threads, twin_negatives: bool = True):
    """LoRA fine-tuning with settings ``params.finetune`` (``finetune_encoder``, resuming from
    ``params.checkpoint``); writes ``outputs.curve`` and ``outputs.adapter``. Returns the
    ``TrainResult`` (its ``queries``: the final weights' query embeddings)."""
    cfg = FinetuneConfig.from_config(dict(params.finetune))
    res = finetune_encoder(
        rs, enc, idx, cfg, params.ks, ckpt_path=params.checkpoint, threads=threads, twin_negatives=twin_negatives
    )
    write_curve(outputs.curve, res.curve)
    save_adapter(enc.model[0].auto_model, outputs.adapter)
    return res
