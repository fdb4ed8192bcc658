"""The ladder's settings (config ``ladder``): one dataclass, its defaults read from the schema."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import section_defaults
from ..training import Convergence

_D = section_defaults("ladder")  # the schema holds every default (capgap.config)


@dataclass(frozen=True)
class LadderConfig:
    """Settings of the shared rungs (config ``ladder``, documented in the schema). ``steps``: the
    step cap of each head, which stops at convergence (``tol``, ``n_iter_no_change``: the rule
    checked every ``eval_every`` steps, ``convergence()``) or there; ``optimizer``: ``adamw``
    (``batch_size``, ``lr``, ``schedule``, ``decay_fraction``, ``weight_decay``) or ``lbfgs`` (full batch,
    ``history_size``); ``temperature``, ``loss``, ``candidates``, ``n_negatives``: the
    InfoNCE (``capgap.finetune.infonce_loss``, ``candidate_masks``); ``validation_fraction``,
    ``patience``: early stopping of the train-only heads; ``width_factor``: the ReLU head's
    hidden units per dimension; ``top_m``: neighbours averaged by ``nn-transfer-top<m>``;
    ``seed``."""

    steps: int = _D["steps"]
    tol: float = _D["tol"]
    n_iter_no_change: int = _D["n_iter_no_change"]
    eval_every: int = _D["eval_every"]
    optimizer: str = _D["optimizer"]
    history_size: int = _D["history_size"]
    batch_size: int = _D["batch_size"]
    lr: float = _D["lr"]
    schedule: str = _D["schedule"]
    decay_fraction: float = _D["decay_fraction"]
    weight_decay: float = _D["weight_decay"]
    temperature: float = _D["temperature"]
    loss: str = _D["loss"]
    candidates: str = _D["candidates"]
    n_negatives: int = _D["n_negatives"]
    width_factor: int = _D["width_factor"]
    validation_fraction: float = _D["validation_fraction"]
    patience: int = _D["patience"]
    top_m: int = _D["top_m"]
    seed: int = _D["seed"]

    def __post_init__(self):
        if self.loss not in ("avg", "set"):
            raise ValueError(f"ladder.loss must be 'avg' or 'set', got {self.loss!r}")
        if self.candidates not in ("full", "sampled"):
            raise ValueError(f"ladder.candidates must be 'full' or 'sampled', got {self.candidates!r}")
        if self.optimizer not in ("adamw", "lbfgs"):
            raise ValueError(f"ladder.optimizer must be 'adamw' or 'lbfgs', got {self.optimizer!r}")
        if self.schedule not in ("stable-decay", "constant", "cosine"):
            raise ValueError(f"ladder.schedule must be 'stable-decay', 'constant' or 'cosine', got {self.schedule!r}")
        if not 0 < self.decay_fraction <= 1:
            raise ValueError(f"ladder.decay_fraction must be in (0, 1], got {self.decay_fraction}")
        if min(self.steps, self.batch_size, self.eval_every, self.n_iter_no_change, self.history_size) < 1:
            raise ValueError("ladder: steps, batch_size, eval_every, n_iter_no_change and history_size must be >= 1")
        if self.temperature <= 0 or self.lr <= 0 or self.tol < 0 or self.patience < 0:
            raise ValueError("ladder: temperature and lr must be > 0, tol and patience >= 0")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"ladder.validation_fraction must be in [0, 1), got {self.validation_fraction}")
        if self.width_factor < 2:
            raise ValueError(
                f"ladder.width_factor must be >= 2 (the ReLU head starts as the identity), got {self.width_factor}"
            )
        if self.top_m < 2:
            raise ValueError(f"ladder.top_m must be >= 2 (top 1 is nn-transfer itself), got {self.top_m}")

    def convergence(self) -> Convergence:
        """The convergence rule every head trains under: ``tol``, ``n_iter_no_change``, the cap
        ``steps``."""
        return Convergence(self.tol, self.n_iter_no_change, self.steps)

    @classmethod
    def from_config(cls, cfg: dict | None) -> "LadderConfig":
        """From a config section (``enabled``, ``regimes``, ``regime_datasets``: the workflow's,
        ignored). Raises ``ValueError`` for unknown keys."""
        cfg = {k: v for k, v in dict(cfg or {}).items() if k not in ("enabled", "regimes", "regime_datasets")}
        unknown = set(cfg) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"ladder: unknown keys {sorted(unknown)}")
        return cls(**cfg)
