"""Checks of a whole config against itself and the installed models, run once at start.

The schema (``capgap.config``) checks each value's type and each section's keys, but not the
*names* a value refers to: an encoder listed by a dataset, a key of ``finetune.steps_by_encoder``
or ``colbert.steps_by_dataset``, a dataset in ``colbert.datasets``. A misspelled name there
would otherwise be silently ignored (the override falls back to the default, the dataset list
matches nothing). ``check_config`` runs every such check from one table, ``NAME_REFERENCES``,
plus the checks that need more than a name lookup (reserved names, compression variants,
near-miss twins, ``hardness.m_sweep.P``, encoder ``max_length`` against the model's positions),
and raises one ``ConfigError`` listing every problem, each with the known names. The Snakefile
calls it through ``startup`` (every check the workflow makes at start, in one place) before any
rule is defined, so a dry run fails too.

Public API: ``check_config(config) -> list[str]`` (warnings), ``startup(config, root)``,
``ConfigError``, ``NAME_REFERENCES``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Mapping

from .compress import parse_variant
from .encoders import EncoderSpec, max_length_problem, read_model_config
from .errors import CapgapError
from .paths import check_interpreter, check_mirror
from .provenance import use_checkout

# path segments under results/{dataset}/ that an encoder name would collide with
RESERVED_ENCODER_NAMES = ("data", "bm25", "colbert", "colbert_work")
# results/hardness/ holds the parity task
RESERVED_DATASET_NAMES = ("hardness",)


class ConfigError(CapgapError, ValueError):
    """A config names something that does not exist (or is otherwise unusable).

    ``problems``: one message per problem, e.g. ``finetune.steps_by_encoder names unknown
    encoder 'minlm'; known: ['minilm']``. ``str(err)`` lists them all."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        head = "invalid config: " if len(problems) == 1 else f"invalid config ({len(problems)} problems):\n  "
        super().__init__(head + "\n  ".join(self.problems))


def _keys(m) -> list[str]:
    return list(m or {})


def _items(seq) -> list[str]:
    return list(seq or [])


def _datasets(cfg: Mapping) -> list[str]:
    return list(cfg.get("datasets") or {})


def _encoders(cfg: Mapping) -> list[str]:
    return list(cfg.get("encoders") or {})


def _section(cfg: Mapping, name: str) -> Mapping:
    return cfg.get(name) or {}


NAME_REFERENCES: tuple[tuple[str, str, Callable, Callable], ...] = (
    # (kind of name, config key in messages, names used, names that exist)
    (
        "encoder",
        "datasets.<name>.encoders",
        lambda c: (
            (f"datasets.{d}.encoders", e)
            for d, s in (c.get("datasets") or {}).items()
            for e in _items((s or {}).get("encoders"))
        ),
        _encoders,
    ),
    (
        "encoder",
        "finetune.steps_by_encoder",
        lambda c: (("finetune.steps_by_encoder", e) for e in _keys(_section(c, "finetune").get("steps_by_encoder"))),
        _encoders,
    ),
    (
        "dataset",
        "colbert.steps_by_dataset",
        lambda c: (("colbert.steps_by_dataset", d) for d in _keys(_section(c, "colbert").get("steps_by_dataset"))),
        _datasets,
    ),
    (
        "dataset",
        "colbert.datasets",
        lambda c: (("colbert.datasets", d) for d in _items(_section(c, "colbert").get("datasets"))),
        _datasets,
    ),
    (
        "dataset",
        "compress.datasets",
        lambda c: (("compress.datasets", d) for d in _items(_section(c, "compress").get("datasets"))),
        _datasets,
    ),
    (
        "dataset",
        "twin_negatives.datasets",
        lambda c: (("twin_negatives.datasets", d) for d in _items(_section(c, "twin_negatives").get("datasets"))),
        _datasets,
    ),
    (
        "dataset",
        "twin_negatives.transfer",
        lambda c: (("twin_negatives.transfer", d) for d in _items(_section(c, "twin_negatives").get("transfer"))),
        _datasets,
    ),
)
"""Every config value that names an encoder or a dataset: (kind, key, names used, names that
exist). A name used that does not exist is a ``ConfigError`` naming the key, the name and the
known names. Closed name sets (near-miss twin types, compression variant forms, encoder
``dtype``, ``bm25.method``) are enums or patterns in the schema, checked by its validation."""


def _name_problems(cfg: Mapping) -> list[str]:
    out = []
    for kind, _key, used, known in NAME_REFERENCES:
        have = known(cfg)
        for where, name in used(cfg):
            if name not in have:
                out.append(f"{where} names unknown {kind} {name!r}; known: {sorted(have)}")
    return out


# characters a dataset or encoder name may not hold: it is a folder name under results/ (a path
# separator or '.'/'..' would leave it or merge two names' folders) and a Snakemake wildcard value
# (braces are format fields in the rules' paths)
_NAME_FORBIDDEN = set("/\\{}") | {chr(c) for c in range(32)} | {chr(127)}


def name_problem(kind: str, name: str) -> str | None:
    """Why ``name`` cannot name a dataset or encoder (``kind``), or None: empty, ``.`` or
    ``..``, leading or trailing whitespace, or a character of ``/ \\ { }`` or a control
    character (it becomes a folder under ``results/`` and a Snakemake wildcard value)."""
    if name in ("", ".", ".."):
        return f"{kind} name {name!r} is not a folder name (results/{{dataset}}/{{encoder}}/ paths are made from it)"
    if name != name.strip():
        return f"{kind} name {name!r} starts or ends with whitespace"
    bad = sorted({c for c in name if c in _NAME_FORBIDDEN})
    if bad:
        return (
            f"{kind} name {name!r} holds {', '.join(repr(c) for c in bad)}: a name is a folder under results/ and "
            "a Snakemake wildcard value (no path separators, braces or control characters)"
        )
    return None


def _other_problems(cfg: Mapping) -> list[str]:
    out = [
        p
        for kind, names in (("dataset", _datasets(cfg)), ("encoder", _encoders(cfg)))
        for p in (name_problem(kind, str(n)) for n in names)
        if p
    ]
    for d in _datasets(cfg):
        if d in RESERVED_DATASET_NAMES:
            out.append(f"dataset name {d!r} is reserved (results/{d}/ holds the parity task)")
    for e in _encoders(cfg):
        if e in RESERVED_ENCODER_NAMES:
            out.append(
                f"encoder name {e!r} is reserved (used as a results/ folder name); reserved: "
                f"{list(RESERVED_ENCODER_NAMES)}"
            )
    variants = _section(cfg, "compress").get("variants") or []
    if variants:
        for v in variants:
            try:
                parse_variant(v)
            except ValueError as e:
                out.append(f"compress.variants: {e}")
    specs = cfg.get("datasets") or {}
    for d in _items(_section(cfg, "twin_negatives").get("datasets")):
        spec = specs.get(d)
        if spec is not None and spec.get("source") != "near-miss" and "near_miss" not in spec:
            out.append(
                f"twin_negatives.datasets names {d!r}, which has no near-miss twins (give it source: "
                "near-miss or a near_miss key)"
            )
    hd = _section(cfg, "hardness")
    sweep = hd.get("m_sweep") or {}
    if hd.get("enabled") and "P" in sweep and sweep["P"] not in (hd.get("P") or []):
        out.append(f"hardness.m_sweep.P names P={sweep['P']}, which is not in hardness.P; known: {hd.get('P')}")
    return out


def _max_length_problems(cfg: Mapping) -> list[str]:
    """Encoders (and ColBERT, when enabled) whose token lengths exceed the positions their
    checkpoint's config.json states (``capgap.encoders.max_length_problem``)."""
    out = []
    for name, enc in (cfg.get("encoders") or {}).items():
        try:
            spec = EncoderSpec.from_config(name, dict(enc or {}))
        except (TypeError, ValueError) as e:
            out.append(f"encoders.{name}: {e}")
            continue
        problem = max_length_problem(spec)
        if problem:
            out.append(problem)
    cb = _section(cfg, "colbert")
    if cb.get("enabled") and cb.get("model"):
        for key in ("query_length", "document_length"):
            if cb.get(key):
                spec = EncoderSpec("colbert", cb["model"], sha256=cb.get("sha256"), max_length=int(cb[key]))
                problem = max_length_problem(spec, key=f"colbert.{key}")
                if problem:
                    out.append(problem)
    return out


def _max_length_unchecked(cfg: Mapping) -> list[str]:
    """Encoders with a ``max_length`` whose checkpoint's config.json is not found offline (a hub
    model not downloaded yet): checked only when the model loads, which the warning says."""
    out = []
    for name, enc in (cfg.get("encoders") or {}).items():
        try:
            spec = EncoderSpec.from_config(name, dict(enc or {}))
        except (TypeError, ValueError):
            continue  # reported as a problem by _max_length_problems
        if spec.max_length and read_model_config(spec) is None:
            out.append(
                f"encoders.{name}.max_length {spec.max_length} is not checked against {spec.model}'s positions "
                "now: its config.json is not found offline (local path, bundled package or HF cache); it is "
                "checked when the model loads"
            )
    return out


def check_config(cfg: Mapping, models: bool = True) -> list[str]:
    """Check every name a (schema-validated) config refers to, and, with ``models``, each
    encoder's ``max_length`` (and ColBERT's ``query_length`` / ``document_length``) against
    the positions its checkpoint's ``config.json`` states (read offline, nothing loaded).

    Returns warnings (settings that are valid but have no effect). Raises ``ConfigError``
    listing every problem: a name in ``NAME_REFERENCES`` that names no encoder / dataset
    (with the known names), a reserved dataset or encoder name, a malformed compression
    variant, a ``twin_negatives.datasets`` entry without twins, a ``hardness.m_sweep.P`` not
    in ``hardness.P``, or a length above the model's positions.
    """
    problems = _name_problems(cfg) + _other_problems(cfg)
    if models:
        problems += _max_length_problems(cfg)
    if problems:
        raise ConfigError(problems)
    warnings = []
    if models:
        warnings += _max_length_unchecked(cfg)
    if _section(cfg, "twin_negatives").get("enabled") and not _section(cfg, "finetune").get("enabled"):
        warnings.append(
            "twin_negatives is enabled but finetune is not; twin_negatives compares against the "
            "finetune rule's adapter, so it does not run"
        )
    return warnings


def startup(config: Mapping, root: str | Path) -> list[str]:
    """Every check the workflow makes at start, once, from the Snakefile (after the schema has
    validated ``config``, before any rule exists, so a dry run fails too):

    - every job imports checkout ``root``'s capgap (``provenance.use_checkout``: ``root/src``
      first on ``PYTHONPATH``, ``$CAPGAP_CHECKOUT`` set; jobs log which code ran);
    - Snakemake puts this interpreter's path unquoted in every script job's command line: one
      with a space or a quote is refused, naming it (``paths.check_interpreter``); so is a data
      mirror that names no folder (``paths.check_mirror``: a literal '~' or quotes, a typo);
    - the config against itself and the models (``check_config``): its warnings are printed to
      stderr (``capgap: ...``) and returned.
    """
    use_checkout(root)
    check_interpreter()
    check_mirror()
    warnings = check_config(config)
    for w in warnings:
        print(f"capgap: {w}", file=sys.stderr)
    return warnings
