"""capgap's layers (docs/architecture.md): every import under src/capgap, read with ``ast`` (module
level, inside functions, under ``if TYPE_CHECKING``), makes one import graph; the graph has no
cycle, no module imports one of a higher layer, and an import inside a function carries a
``# lazy:`` comment saying which heavy package (torch, faiss, ...) it keeps out of a rule's env.

The layer table lives here and, the same, in docs/architecture.md (checked below). A package
and its modules count as one unit (``capgap.data`` and ``capgap.data.corpus`` alike), so the
packages (``capgap.report.*``, ``capgap.diagnosis.*``, ``capgap.probe.*``, ...) are placed whole.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "capgap"
DOC = ROOT / "docs" / "architecture.md"

# layer -> units; a unit covers itself and every module below it (``capgap.data`` covers
# ``capgap.data.corpus``). A module may import its own layer and any layer below, never above.
LAYERS = {
    0: (
        "capgap.errors",
        "capgap.arrays",
        "capgap.config",
        "capgap.io",
        "capgap.locks",
        "capgap.logs",
        "capgap.paths",
        "capgap.provenance",
        "capgap.metrics",
        "capgap.retrieval",
    ),
    1: ("capgap.data", "capgap.trec", "capgap.generate", "capgap.sources", "capgap.synthetic"),
    2: ("capgap.evaluate", "capgap.index", "capgap.encoders", "capgap.training", "capgap.figures"),
    3: (
        "capgap.probe",
        "capgap.bm25",
        "capgap.finetune",
        "capgap.colbert",
        "capgap.compress",
        "capgap.hardness",
        "capgap.nearmiss",
        "capgap.diagnosis",
        "capgap.ladder",
    ),
    4: ("capgap", "capgap.report", "capgap.paper", "capgap.mteb", "capgap.stages", "capgap.config_check", "capgap.cli"),
}
# Units exempt from the '# lazy:' rule (none: the splits of issue 28 have landed)
PENDING_LAZY: tuple[str, ...] = ()
LAZY = re.compile(r"#\s*lazy:")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _imports(name: str, path: Path, known) -> list[tuple[str, int, bool]]:
    """``(imported capgap module, line, inside a function)`` of every import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    in_function = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            in_function.update(id(n) for n in ast.walk(node) if n is not node)
    out = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # ``from capgap import figures``: the name is a module; else the package itself
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        for t in dict.fromkeys(targets):
            if t == "capgap" or t.startswith("capgap."):
                out.append((t, node.lineno, id(node) in in_function))
    return out


def _unit(module: str) -> tuple[str, int] | None:
    """The layer-table unit covering ``module`` (the longest match) and its layer. The root
    package ``capgap`` covers only its own ``__init__``."""
    best = None
    for layer, units in LAYERS.items():
        for u in units:
            covers = module == u or (u != "capgap" and module.startswith(u + "."))
            if covers and (best is None or len(u) > len(best[0])):
                best = (u, layer)
    return best


@pytest.fixture(scope="module")
def graph():
    mods = _modules()
    return mods, {m: _imports(m, p, mods) for m, p in mods.items()}


def test_every_module_has_a_layer(graph):
    mods, _ = graph
    missing = [m for m in mods if _unit(m) is None]
    assert not missing, f"modules without a layer: {missing}; add them to LAYERS here and to docs/architecture.md"


def test_no_import_from_a_lower_layer_into_a_higher_one(graph):
    _, edges = graph
    bad = []
    for m, imps in edges.items():
        um, lm = _unit(m)
        for t, line, _ in imps:
            ut = _unit(t)
            assert ut is not None, f"{m} line {line} imports {t}, which is no capgap module"
            if ut[1] > lm:
                bad.append(f"{m} (layer {lm}) line {line} imports {t} (layer {ut[1]})")
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def _cycle(nodes, succ):
    """One cycle of the directed graph as a list of nodes, or None (iterative DFS)."""
    color = {n: 0 for n in nodes}
    for start in nodes:
        if color[start]:
            continue
        stack, path = [(start, iter(sorted(succ.get(start, ()))))], [start]
        color[start] = 1
        while stack:
            n, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[n] = 2
                stack.pop()
                path.pop()
            elif color.get(nxt, 2) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif color.get(nxt) == 0:
                color[nxt] = 1
                stack.append((nxt, iter(sorted(succ.get(nxt, ())))))
                path.append(nxt)
    return None


def test_no_import_cycle_between_units(graph):
    """Package-level: ``capgap.data`` -> ``capgap.nearmiss`` -> ``capgap.data`` is a cycle even when
    the two imports sit in different modules of the packages, or inside functions."""
    _, edges = graph
    succ = {}
    for m, imps in edges.items():
        um = _unit(m)[0]
        for t, _, _ in imps:
            ut = _unit(t)[0]
            if ut != um:
                succ.setdefault(um, set()).add(ut)
    units = sorted({u for us in LAYERS.values() for u in us})
    assert _cycle(units, succ) is None, f"import cycle: {' -> '.join(_cycle(units, succ))}"


def test_no_import_cycle_between_modules(graph):
    """Module-level, within packages too (``capgap.data.corpus`` importing ``capgap.data``, whose
    ``__init__`` imports ``capgap.data.corpus``, is a cycle)."""
    mods, edges = graph
    succ = {m: {t for t, _, _ in imps if t != m} for m, imps in edges.items()}
    assert _cycle(sorted(mods), succ) is None, f"import cycle: {' -> '.join(_cycle(sorted(mods), succ))}"


def test_function_level_imports_say_why(graph):
    mods, edges = graph
    bad = []
    for m, imps in edges.items():
        if _unit(m)[0] in PENDING_LAZY:
            continue
        lines = mods[m].read_text(encoding="utf-8").splitlines()
        for t, line, inside in imps:
            if inside and not LAZY.search(lines[line - 1]):
                bad.append(f"{mods[m].relative_to(ROOT)}:{line} imports {t} inside a function")
    assert not bad, (
        "function-level capgap imports without a '# lazy: <heavy package>' comment (import it at "
        "module level, or say which heavy package it keeps out of a rule's env):\n" + "\n".join(bad)
    )


def test_the_layer_table_is_the_one_in_docs():
    """docs/architecture.md's table (``| <layer> | <name> | `capgap.x`, ... |``) lists the same units
    in the same layers."""
    found = {}
    for row in re.findall(r"^\|\s*(\d)\s*\|[^|]*\|([^|]*)\|", DOC.read_text(encoding="utf-8"), re.M):
        found[int(row[0])] = tuple(sorted(re.findall(r"`(capgap(?:\.[a-z_0-9]+)*)`", row[1])))
    assert found == {k: tuple(sorted(v)) for k, v in LAYERS.items()}


def test_the_graph_sees_function_level_and_relative_imports(tmp_path):
    """The reader itself, on a module written here: relative, absolute, ``from capgap import x``
    and function-level imports all become edges, with the right line and placement."""
    pkg = tmp_path / "capgap"
    (pkg / "data").mkdir(parents=True)
    (pkg / "data" / "__init__.py").write_text("from .corpus import Corpus\n")
    (pkg / "data" / "corpus.py").write_text("from ..errors import E\n\n\ndef f():\n    from capgap import nearmiss\n")
    known = {"capgap", "capgap.data", "capgap.data.corpus", "capgap.errors", "capgap.nearmiss"}
    global SRC
    old, SRC = SRC, pkg
    try:
        assert _module_name(pkg / "data" / "corpus.py") == "capgap.data.corpus"
        assert _imports("capgap.data", pkg / "data" / "__init__.py", known) == [("capgap.data.corpus", 1, False)]
        got = _imports("capgap.data.corpus", pkg / "data" / "corpus.py", known)
        assert sorted(got) == [("capgap.errors", 1, False), ("capgap.nearmiss", 5, True)]
    finally:
        SRC = old
    assert _cycle(["a", "b", "c"], {"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle(["a", "b", "c"], {"a": {"b", "c"}, "b": {"c"}}) is None
    assert _unit("capgap.report.sections") == ("capgap.report", 4)
    assert _unit("capgap") == ("capgap", 4)
    assert _unit("capgap.data.corpus") == ("capgap.data", 1)
