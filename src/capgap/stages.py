"""Where each pipeline rule's stage lives: ``STAGES``, rule -> (module, function).

A stage is the one function ``workflow/scripts/<rule>.py`` calls, and it sits with the method it
runs (the probe's in ``capgap.probe.stage``, fine-tuning's in ``capgap.finetune.stage``, BM25's
in ``capgap.bm25``, ...). Every stage has the same signature, ``stage(inputs, outputs, params,
threads=1)``: the rule's named inputs, outputs and params (Snakemake's ``snakemake.input`` /
``.output`` / ``.params``, or any object with those attributes, e.g. ``types.SimpleNamespace``
in tests). A stage reads its inputs, calls its method, and writes its outputs atomically. A
dataset's name travels in its canonical folder (``status.json``), not as a parameter.

``capgap.stages.<rule>`` is the rule's stage, imported on first use only: each rule's
environment (``envs/``) holds its own method's packages, not every method's. The report rule has
no stage: its script calls ``capgap.report.build_report``.
"""

from __future__ import annotations

import importlib

from .paths import shard_of  # noqa: F401  (the shard rules' "<i>-of-<n>" names, re-exported)

STAGES = {
    "data": ("capgap.sources", "data_stage"),
    "index": ("capgap.index", "index_stage"),
    "index_shard": ("capgap.index", "index_shard_stage"),
    "pretrained": ("capgap.index", "pretrained_stage"),
    "probe": ("capgap.probe.stage", "probe_stage"),
    "probe_shard": ("capgap.probe.stage", "probe_shard_stage"),
    "compress": ("capgap.compress", "compress_stage"),
    "finetune": ("capgap.finetune.stage", "finetune_stage"),
    "finetune_regime": ("capgap.finetune.stage", "finetune_regime_stage"),
    "twin_negatives": ("capgap.nearmiss", "twin_negatives_stage"),
    "ladder": ("capgap.ladder.stage", "ladder_stage"),
    "bm25": ("capgap.bm25", "bm25_stage"),
    "colbert": ("capgap.colbert.stage", "colbert_stage"),
    "hardness": ("capgap.hardness", "hardness_stage"),
}


def __getattr__(rule: str):
    """``capgap.stages.<rule>``: the stage function of ``rule`` (``STAGES``), imported now."""
    if rule not in STAGES:
        raise AttributeError(
            f"module 'capgap.stages' has no attribute {rule!r} (the rules with a stage: {', '.join(STAGES)})"
        )
    module, name = STAGES[rule]
    return getattr(importlib.import_module(module), name)


def __dir__():
    return sorted([*globals(), *STAGES])
