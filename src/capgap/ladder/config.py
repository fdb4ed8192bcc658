"""The ladder's settings (config ``ladder``): one dataclass, its defaults read from the schema."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import section_defaults

_D = section_defaults("ladder")  # the schema holds every default (capgap.config)


@dataclass(frozen=True)
class LadderConfig:
    """Settings of the shared rungs (config ``ladder``, documented in the schema). ``steps``,
    ``batch_size``, ``lr``, ``weight_decay``: AdamW on each head; ``temperature``, ``loss``,
    ``candidates``, ``n_negatives``: its InfoNCE (``capgap.finetune.infonce_loss``,
    ``candidate_masks``); ``width_factor``: the ReLU head's hidden units per dimension;
    ``top_m``: neighbours averaged by ``nn-transfer-top<m>``; ``seed``."""

    steps: int = _D["steps"]
    batch_size: int = _D["batch_size"]
    lr: float = _D["lr"]
    weight_decay: float = _D["weight_decay"]
    temperature: float = _D["temperature"]
    loss: str = _D["loss"]
    candidates: str = _D["candidates"]
    n_negatives: int = _D["n_negatives"]
    width_factor: int = _D["width_factor"]
    top_m: int = _D["top_m"]
    seed: int = _D["seed"]

    def __post_init__(self):
        if self.loss not in ("avg", "set"):
            raise ValueError(f"ladder.loss must be 'avg' or 'set', got {self.loss!r}")
        if self.candidates not in ("full", "sampled"):
            raise ValueError(f"ladder.candidates must be 'full' or 'sampled', got {self.candidates!r}")
        if self.steps < 1 or self.batch_size < 1 or self.temperature <= 0 or self.lr <= 0:
            raise ValueError("ladder: steps and batch_size must be >= 1, temperature and lr > 0")
        if self.width_factor < 2:
            raise ValueError(f"ladder.width_factor must be >= 2 (the ReLU head starts as the identity), got {self.width_factor}")
        if self.top_m < 2:
            raise ValueError(f"ladder.top_m must be >= 2 (top 1 is nn-transfer itself), got {self.top_m}")

    @classmethod
    def from_config(cls, cfg: dict | None) -> "LadderConfig":
        """From a config section (``enabled``, ``regimes``, ``regime_datasets``: the workflow's,
        ignored). Raises ``ValueError`` for unknown keys."""
        cfg = {k: v for k, v in dict(cfg or {}).items() if k not in ("enabled", "regimes", "regime_datasets")}
        unknown = set(cfg) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"ladder: unknown keys {sorted(unknown)}")
        return cls(**cfg)
