"""docs/configuration.md's key tables are the ones scripts/config_reference.py generates from
the config schema (the schema is the config reference; the page carries it, never a hand copy)."""

import importlib.util

from ..conftest import ROOT


def _script():
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "scripts" / "config_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_table_is_the_generated_one():
    mod = _script()
    import yaml

    block = mod.render(yaml.safe_load(mod.SCHEMA.read_text(encoding="utf-8")))
    text = mod.DOC.read_text(encoding="utf-8")
    assert mod.replace_block(text, block) == text, (
        "docs/configuration.md is out of date: run python scripts/config_reference.py"
    )


def test_every_schema_key_has_a_row():
    mod = _script()
    import yaml

    schema = yaml.safe_load(mod.SCHEMA.read_text(encoding="utf-8"))
    text = mod.DOC.read_text(encoding="utf-8")
    for section, node in schema["properties"].items():
        assert f"| `{section}` |" in text
        for key in node.get("properties") or {}:
            assert f"| `{section}.{key}` |" in text
