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
