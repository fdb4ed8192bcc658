"""The probe's settings: ``ProbeConfig`` and the allowed values of ``solve`` and ``pairs``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping

from ..config import section_defaults, without

_D = section_defaults("probe")  # the schema holds every default (capgap.config)
SOLVES = ("certificate", "optimum")
PAIRS = ("gold", "graded")  # ProbeConfig.pairs: gold vs non-gold pairs, or every two grade levels


@dataclass(frozen=True)
class ProbeConfig:
    """The probe's settings (config section ``probe`` minus ``enabled``), with the schema's
    defaults: the DAG, ``capgap diagnose``, the hardness task and ``probe()`` all use these.
    See ``probe`` for what each one means."""

    C: float = _D["C"]
    C_max: float | None = _D["C_max"]
    eps: float = _D["eps"]
    max_iter: int = _D["max_iter"]
    lp_check_max_docs: int = _D["lp_check_max_docs"]
    batch_size: int | None = _D["batch_size"]
    solve: str = _D["solve"]
    pairs: str = _D["pairs"]

    def __post_init__(self):
        if self.solve not in SOLVES:
            raise ValueError(f"probe.solve must be one of {SOLVES}, got {self.solve!r}")
        if self.pairs not in PAIRS:
            raise ValueError(f"probe.pairs must be one of {PAIRS}, got {self.pairs!r}")

    @classmethod
    def from_config(cls, cfg: Mapping | None = None) -> ProbeConfig:
        """From a config section (``enabled`` and ``shards``, how the DAG runs the probe, ignored;
        missing keys take the defaults). Raises ``ValueError`` naming unknown keys."""
        cfg = without(cfg or {}, "enabled", "shards")
        unknown = set(cfg) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"probe: unknown keys {sorted(unknown)}")
        return cls(**cfg)

    def kwargs(self) -> dict:
        """The settings as keyword arguments of ``probe()``."""
        return asdict(self)


@dataclass(frozen=True)
class SolveSettings:
    """The settings of one run of the probe's solver (``solver._probe``), resolved by
    ``probe()``: ``C_max`` >= ``C`` (no escalation: ``C_max == C``), ``workers`` processes.

    ``C``, ``C_max``, ``eps``, ``max_iter``, ``batch_size``, ``lp_check_max_docs``, ``depth``,
    ``solve`` and ``pairs``: ``probe()``'s parameters of those names; ``workers``: worker
    processes for the batches; ``progress``: a progress bar."""

    C: float
    C_max: float
    eps: float
    max_iter: int
    batch_size: int | None
    lp_check_max_docs: int
    depth: int = 0
    solve: str = _D["solve"]
    pairs: str = _D["pairs"]
    workers: int = 1
    progress: bool = False

    @classmethod
    def resolved(
        cls,
        *,
        C: float,
        C_max: float | None,
        eps: float,
        max_iter: int,
        batch_size: int | None,
        lp_check_max_docs: int,
        depth: int,
        solve: str,
        pairs: str,
        workers: int,
        progress: bool,
    ) -> SolveSettings:
        """From ``probe()``'s arguments: ``C_max`` None means ``C`` and is at least ``C``; numbers
        as ``float`` / ``int``."""
        return cls(
            C=float(C),
            C_max=float(C if C_max is None else max(C, C_max)),
            eps=float(eps),
            max_iter=int(max_iter),
            batch_size=batch_size,
            lp_check_max_docs=int(lp_check_max_docs),
            depth=int(depth),
            solve=solve,
            pairs=pairs,
            workers=int(workers),
            progress=bool(progress),
        )
