"""Fine-tuning settings (config section ``finetune``; every default in the schema)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..config import section_defaults
from ..training import Convergence, json_digest

_D = section_defaults("finetune")  # the schema holds every default (capgap.config)
DEFAULT_TARGETS = _D["target_modules"]


@dataclass(frozen=True)
class FinetuneConfig:
    """Training settings (config ``finetune``). ``steps``: optimiser steps (the paper: 3,000,
    final checkpoint); ``lr``: AdamW learning rate; ``temperature``: InfoNCE tau; ``lora_*``:
    LoRA rank, alpha, dropout; ``target_modules``: attention projections to adapt, per
    ``model_type`` (BERT: query/key/value; a bare ``dense`` would also wrap BERT's pooler);
    ``loss``: ``avg`` or ``set``; ``candidates``: ``full`` or ``sampled`` (``n_negatives``);
    ``checkpoint_every``, ``eval_every`` (training-curve points), ``eval_max_queries`` (per split
    for curve points; the final evaluation uses all queries); ``seed``; ``precision``: ``auto``
    (bf16 autocast on CUDA, float32 on CPU), ``bf16`` or ``fp32``; ``mode``: ``lora`` (the
    paper's) or ``full`` (every weight of the query encoder trains; LoRA settings unused);
    ``validation_fraction``: 0 (the paper's protocol: train on every train query, keep the
    final checkpoint) or the fraction of train queries carved out (``validation_split``, seed
    ``validation_seed``) for early stopping: the weights of the best validation curve point are
    kept, and training stops after ``patience`` points without a new best (0: never stops);
    ``tol``, ``n_iter_no_change``: the convergence rule (``convergence``), ``steps`` its cap;
    ``stop_at_convergence`` False: train to the cap, the rule judging the last point only."""

    steps: int = _D["steps"]
    batch_size: int = _D["batch_size"]
    lr: float = _D["lr"]
    weight_decay: float = _D["weight_decay"]
    temperature: float = _D["temperature"]
    lora_rank: int = _D["lora_rank"]
    lora_alpha: int = _D["lora_alpha"]
    lora_dropout: float = _D["lora_dropout"]
    target_modules: dict = field(default_factory=lambda: {k: list(v) for k, v in DEFAULT_TARGETS.items()})
    loss: str = _D["loss"]
    candidates: str = _D["candidates"]
    n_negatives: int = _D["n_negatives"]
    checkpoint_every: int = _D["checkpoint_every"]
    eval_every: int = _D["eval_every"]
    eval_max_queries: int = _D["eval_max_queries"]
    seed: int = _D["seed"]
    precision: str = _D["precision"]
    mode: str = _D["mode"]
    validation_fraction: float = _D["validation_fraction"]
    validation_seed: int = _D["validation_seed"]
    patience: int = _D["patience"]
    tol: float = _D["tol"]
    n_iter_no_change: int = _D["n_iter_no_change"]
    stop_at_convergence: bool = _D["stop_at_convergence"]

    def __post_init__(self):
        if self.mode not in ("lora", "full"):
            raise ValueError(f"finetune.mode must be 'lora' or 'full', got {self.mode!r}")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"finetune.validation_fraction must be in [0, 1), got {self.validation_fraction}")
        if self.validation_fraction > 0 and self.eval_every < 1:
            raise ValueError("finetune: early stopping (validation_fraction > 0) needs eval_every >= 1")
        if self.precision not in ("auto", "bf16", "fp32"):
            raise ValueError(f"finetune.precision must be 'auto', 'bf16' or 'fp32', got {self.precision!r}")
        if self.loss not in ("avg", "set"):
            raise ValueError(f"finetune.loss must be 'avg' or 'set', got {self.loss!r}")
        if self.candidates not in ("full", "sampled"):
            raise ValueError(f"finetune.candidates must be 'full' or 'sampled', got {self.candidates!r}")
        if self.eval_every < 1 or self.tol < 0 or self.n_iter_no_change < 1:
            raise ValueError("finetune: eval_every and n_iter_no_change must be >= 1, tol >= 0 (the convergence rule)")
        if self.steps < 1 or self.batch_size < 1 or self.temperature <= 0:
            raise ValueError("finetune: steps and batch_size must be >= 1 and temperature > 0")

    def convergence(self) -> Convergence:
        """The convergence rule of this run: ``tol``, ``n_iter_no_change``, cap ``steps``,
        ``stop_at_convergence``."""
        return Convergence(self.tol, self.n_iter_no_change, self.steps, self.stop_at_convergence)

    @classmethod
    def from_config(cls, cfg: dict) -> "FinetuneConfig":
        known = set(cls.__dataclass_fields__)
        unknown = set(cfg) - known
        if unknown:
            raise ValueError(f"finetune: unknown keys {sorted(unknown)}")
        return cls(**cfg)

    def digest(self) -> str:
        return json_digest(asdict(self))[:16]
