"""`dvc status` names the stage a source edit makes stale.

dvc.lock is not committed (docs/snakemake-dvc.md): `dvc repro` writes it after the run it did,
so it records the code and config that produced the outputs beside it. What must hold is that
dvc.yaml tracks the right sources: after a stage's state is recorded, editing a file it depends
on makes `dvc status` name that stage, and no other.

A tiny DVC project per test, offline, in seconds: the repository's dvc.yaml with the files its
stages depend on (copied from this checkout), and each output present (the content of an
output does not enter into whether a dependency changed). `dvc commit -f` records that state,
through DVC, as `dvc repro` would after a run; then `dvc status --json` is read before and
after one edit.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ..conftest import ROOT

BIN = Path(sys.executable).parent
DVC_YAML = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def _dvc(project: Path, *args) -> str:
    r = subprocess.run(
        [str(BIN / "dvc"), *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": f"{BIN}:/usr/bin:/bin", "DVC_NO_ANALYTICS": "1", "HOME": os.environ.get("HOME", str(project))},
    )
    assert r.returncode == 0, f"dvc {' '.join(args)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}"
    return r.stdout


def _status(project: Path) -> dict[str, set[str]]:
    """stage -> what `dvc status --json` says changed in it (dependency paths, params files)."""
    out = {}
    for stage, changes in json.loads(_dvc(project, "status", "--json") or "{}").items():
        for change in changes:
            assert isinstance(change, dict), change
            for kind in ("changed deps", "changed outs"):
                out.setdefault(stage, set()).update(change.get(kind, {}))
    return out


def _outs(stage: dict) -> list[str]:
    return [
        next(iter(o)) if isinstance(o, dict) else o for key in ("outs", "metrics", "plots") for o in stage.get(key, [])
    ]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A DVC project of the repository's stages, their state recorded by `dvc commit`."""
    project = tmp_path_factory.mktemp("dvc") / "project"
    project.mkdir()
    outs = {o for st in DVC_YAML.values() for o in _outs(st)}
    sources = {d for st in DVC_YAML.values() for d in st["deps"] if d not in outs}
    sources |= {next(iter(p)) for st in DVC_YAML.values() for p in st["params"]}
    sources = {
        s for s in sources if not any(s.startswith(f"{t}/") for t in sources)
    }  # src/capgap/report is in src/capgap
    for rel in sorted(sources | {"dvc.yaml", ".dvcignore"}):
        src, dst = ROOT / rel, project / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(src, dst)
    for rel in outs:  # a folder output holds one file; a file output is a file
        path = project / rel
        if path.suffix:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                "{}\n" if path.suffix == ".json" else "k,recall\n1,0.5\n" if path.suffix == ".csv" else "x\n"
            )
        else:
            path.mkdir(parents=True, exist_ok=True)
            (path / "part").write_text("x\n")
    _dvc(project, "init", "--no-scm", "-q")
    _dvc(project, "commit", "-f", "-q")
    assert (project / "dvc.lock").is_file()
    assert _status(project) == {}  # recorded: nothing stale before an edit
    return project


def _edit_config(project: Path, section: str, key: str, value) -> None:
    path = project / "config" / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg.setdefault(section, {})[key] = value
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


EDITS = {
    # a method's code: the experiments, not the report (its own code is unchanged)
    "probe code": ("src/capgap/probe/solver.py", {"experiments": {"src/capgap"}}),
    # the report's code is part of src/capgap: both stages
    "report code": ("src/capgap/report/build.py", {"experiments": {"src/capgap"}, "report": {"src/capgap/report"}}),
    "a rule file": ("workflow/rules/probe.smk", {"experiments": {"workflow/rules"}}),
    "the report script": (
        "workflow/scripts/report.py",
        {"experiments": {"workflow/scripts"}, "report": {"workflow/scripts/report.py"}},
    ),
    "the profile": ("profiles/default/config.yaml", {"experiments": {"profiles/default"}}),
    "the paper's numbers": (
        "src/capgap/paper_reference.yaml",
        {"experiments": {"src/capgap"}, "report": {"src/capgap/paper_reference.yaml"}},
    ),
}


@pytest.mark.parametrize("what", sorted(EDITS))
def test_editing_a_tracked_source_makes_its_stage_stale(recorded, tmp_path, what):
    rel, stale = EDITS[what]
    project = tmp_path / "p"
    shutil.copytree(recorded, project, symlinks=True)
    with open(project / rel, "a") as fh:
        fh.write("\n# edited\n")
    assert _status(project) == stale


@pytest.mark.parametrize(
    "section, key, value, stale",
    [
        ("bm25", "k1", 1.3, {"experiments": {"config/config.yaml"}}),
        ("eval", "ndcg_k", 7, {"experiments": {"config/config.yaml"}, "report": {"config/config.yaml"}}),
        # index.shards only splits jobs into byte-identical outputs: deliberately untracked (dvc.yaml)
        ("index", "shards", 2, {}),
    ],
)
def test_editing_a_tracked_config_section_makes_its_stage_stale(recorded, tmp_path, section, key, value, stale):
    project = tmp_path / "p"
    shutil.copytree(recorded, project, symlinks=True)
    _edit_config(project, section, key, value)
    assert _status(project) == stale
