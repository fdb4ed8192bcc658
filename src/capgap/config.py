"""The configuration schema as the single source of every setting's default.

``schemas/config.schema.yaml`` (JSON Schema, validated by the Snakefile with Snakemake's
``validate``, which also fills in its defaults) documents every key of a capgap config. Its
``default`` values are the only defaults: the settings dataclasses (``probe.ProbeConfig``,
``finetune.FinetuneConfig``, ``colbert.ColbertConfig``, ...) take their field defaults from
``section_defaults``, so the DAG, ``capgap diagnose`` and the Python API run the same settings,
and ``tests/test_config.py`` fails when a dataclass and the schema disagree.
"""

from __future__ import annotations

import functools
from dataclasses import MISSING, fields
from pathlib import Path

SCHEMA_PATH = Path(__file__).with_name("schemas") / "config.schema.yaml"


@functools.cache
def schema() -> dict:
    """The parsed config schema (``SCHEMA_PATH``), read once per process."""
    import yaml

    return yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))


def section_defaults(section: str) -> dict:
    """``{key: default}`` for every key of config section ``section`` whose schema entry has a
    ``default``. Raises ``KeyError`` for an unknown section."""
    props = schema()["properties"][section]["properties"]
    return {k: v["default"] for k, v in props.items() if "default" in v}


def item_defaults(*path: str) -> dict:
    """``{key: default}`` of a keyed collection's items or a nested object: ``item_defaults(
    "encoders")`` for one encoder's keys, ``item_defaults("datasets", "split")`` for a dataset's
    ``split``. Raises ``KeyError`` for an unknown path."""
    node = schema()["properties"][path[0]]["additionalProperties"]
    for key in path[1:]:
        node = node["properties"][key]
    return {k: v["default"] for k, v in node["properties"].items() if "default" in v}


def field_defaults(cls) -> dict:
    """``{field: default}`` of a dataclass (``default_factory`` called); fields without a
    default are left out."""
    out = {}
    for f in fields(cls):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


def without(section: dict, *keys: str) -> dict:
    """A config section without the DAG's switches (``enabled``, ...): what a method's
    settings dataclass receives."""
    return {k: v for k, v in dict(section).items() if k not in keys}


# --------------------------------------------------------------------------- what the DAG reads
# The workflow's view of a validated config (workflow/rules/*.smk): which rules run where
# (``enabled``) and each rule's params. Params are ``canonical``: reordering keys in a config
# file changes nothing, so it reruns nothing.

# rules whose config section has a ``datasets`` list (null: every dataset)
_PER_DATASET = ("compress", "colbert", "twin_negatives")


def canonical(obj):
    """Nested dicts with keys sorted: params whose meaning is unchanged compare equal, so
    reordering keys in a config file does not trigger reruns."""
    if isinstance(obj, dict):
        return {k: canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [canonical(v) for v in obj]
    return obj


def settings(config, section: str, drop=()) -> dict:
    """Config section ``section`` as a rule's params: without ``enabled`` (and the keys in
    ``drop``), keys sorted (``canonical``)."""
    return canonical({k: v for k, v in config[section].items() if k not in ("enabled", *drop)})


def finetune_params(config, encoder: str) -> dict:
    """The finetune section for one encoder: ``steps_by_encoder[encoder]`` overrides ``steps``."""
    ft = settings(config, "finetune", drop=("steps_by_encoder",))
    ft["steps"] = config["finetune"]["steps_by_encoder"].get(encoder, ft["steps"])
    return canonical(ft)


def regimes(config) -> dict:
    """The ladder's fine-tuning regimes (``ladder.regimes``: name -> overrides of the finetune section)."""
    return dict(config["ladder"].get("regimes") or {})


def regime_params(config, encoder: str, regime: str) -> dict:
    """The finetune section for one encoder (``finetune_params``) with one regime's overrides."""
    return canonical({**finetune_params(config, encoder), **regimes(config)[regime]})


def colbert_params(config, dataset: str) -> dict:
    """The colbert section for one dataset: ``steps_by_dataset[dataset]`` overrides ``steps`` (the
    paper fine-tunes GTE-ModernColBERT on LIMIT only; steps 0 elsewhere = zero-shot)."""
    cb = config["colbert"]
    out = settings(config, "colbert", drop=("datasets", "steps_by_dataset"))
    if "steps_by_dataset" in cb:
        out["steps"] = cb["steps_by_dataset"].get(dataset, cb["steps"])
    return canonical(out)


def has_twins(config, dataset: str) -> bool:
    """Whether a dataset has near-miss twins: source ``near-miss``, or a ``near_miss`` key."""
    spec = config["datasets"][dataset]
    return spec.get("source") == "near-miss" or "near_miss" in spec


def enabled(config, rule: str, dataset: str | None = None) -> bool:
    """Whether the optional rule ``rule`` runs (on ``dataset``, when given): the one switch of
    the DAG.

    - ``bm25``, ``probe``, ``finetune``, ``ladder``, ``hardness``: their section's ``enabled``;
    - ``compress``, ``colbert``: ``enabled``, and the section's ``datasets`` unset or naming
      ``dataset``;
    - ``twin_negatives``: the same, and ``finetune`` enabled (it compares against rule
      finetune's adapter) and ``dataset`` has twins (``has_twins``);
    - ``finetune_regime``: ``ladder.enabled``, regimes configured (``ladder.regimes``), and
      ``ladder.regime_datasets`` unset or naming ``dataset``.
    """
    if rule == "finetune_regime":
        lad = config["ladder"]
        names = lad.get("regime_datasets")
        return bool(lad["enabled"] and regimes(config) and (dataset is None or names is None or dataset in names))
    on = bool(config[rule]["enabled"])
    if rule == "twin_negatives":
        on = on and enabled(config, "finetune") and (dataset is None or has_twins(config, dataset))
    if on and rule in _PER_DATASET and dataset is not None:
        names = config[rule]["datasets"]
        on = names is None or dataset in names
    return on
