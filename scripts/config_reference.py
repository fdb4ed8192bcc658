"""docs/configuration.md's key table, generated from the config schema
(src/capgap/schemas/config.schema.yaml): one row per key with its default and the schema's
description, one table per top-level section.

    python scripts/config_reference.py           # rewrite the table in docs/configuration.md
    python scripts/config_reference.py --check   # exit 1 when the committed table differs

The table lies between ``<!-- config-keys:begin -->`` and ``<!-- config-keys:end -->``;
tests/scripts/test_config_reference.py checks that it equals what this script generates.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "src" / "capgap" / "schemas" / "config.schema.yaml"
DOC = ROOT / "docs" / "configuration.md"
BEGIN, END = "<!-- config-keys:begin -->", "<!-- config-keys:end -->"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(node: dict) -> str:
    if "default" not in node:
        return "–"
    return f"`{json.dumps(node['default'], ensure_ascii=False)}`"


def _rows(node: dict, path: list[str]) -> list[tuple[str, str, str]]:
    """(key, default, description) for ``node`` (when it has a description, or is a leaf other
    than an undescribed ``<name>`` entry of a described mapping) and every key below it;
    ``<name>`` stands for a name the user chooses."""
    children = dict(node.get("properties") or {})
    named = node.get("additionalProperties")
    out = []
    leaf = not children and not isinstance(named, dict)
    if path and ("description" in node or leaf and path[-1] != "<name>"):
        out.append((".".join(path), _default(node), _cell(node.get("description", ""))))
    for key, child in children.items():
        out += _rows(child, path + [key])
    if isinstance(named, dict):
        out += _rows(named, path + ["<name>"])
    return out


def render(schema: dict) -> str:
    """The Markdown block: per top-level section a heading line, then its key table."""
    parts = []
    for section, node in schema["properties"].items():
        rows = _rows(node, [section])
        head = f"**`{section}`**"
        lines = [head, "", "| key | default | meaning |", "|---|---|---|"]
        lines += [f"| `{k}` | {d} | {m} |" for k, d, m in rows]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def replace_block(text: str, block: str) -> str:
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise ValueError(f"{DOC}: no {BEGIN} ... {END} block")
    return text[: i + len(BEGIN)] + "\n" + block + "\n" + text[j:]


def main(argv: list[str]) -> int:
    text = DOC.read_text(encoding="utf-8")
    new = replace_block(text, render(yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))))
    if "--check" in argv:
        if new != text:
            print(f"{DOC} is out of date: run python scripts/config_reference.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
