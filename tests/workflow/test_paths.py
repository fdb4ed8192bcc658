"""Paths are data (issue 27, kind 6), the workflow's side: data, results, mirror and config
under folders named with spaces, quotes and non-ASCII letters work through the DAG; the one path
the tools cannot take (a Python interpreter Snakemake puts unquoted in job commands) is refused
at start, by the Snakefile and by the Makefile, naming the path and the reason. The capgap.paths
checks themselves are in tests/core/test_paths.py."""

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
ODD = Path("my data") / "ünï 'q'"  # a space, a single quote, non-ASCII letters
SOURCE = ROOT / "tests" / "data" / "source-edit"


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "CAPGAP_DATA_MIRROR"}
    env.update(PATH=f"{BIN}:{os.environ['PATH']}", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **extra)
    return env


@pytest.mark.slow
def test_workflow_with_data_mirror_config_and_results_under_such_paths(tmp_path):
    """A local dataset (config ``path:``) and a mirror dataset, the config file, the mirror and
    the results folder all under ODD-like names: the DAG plans every job, and the data jobs
    (the ones that read those paths) run and copy every document (24 in the source)."""
    data, mirror, work = tmp_path / ODD, tmp_path / "my mirror" / "ü 'm'", tmp_path / "my results" / 'ü "r"'
    shutil.copytree(SOURCE, data)
    shutil.copytree(SOURCE, mirror / "mirrored")
    n_docs = sum(1 for line in (SOURCE / "corpus.jsonl").read_text().splitlines() if line.strip())
    assert n_docs == 24
    cfg = {
        "eval": {"ks": [1, 2], "ndcg_k": 10},
        "encoders": {"minilm": {"model": "sentence-transformers/all-MiniLM-L6-v2", "batch_size": 64}},
        "probe": {"enabled": False},
        "finetune": {"enabled": False},
        "colbert": {"enabled": False},
        "hardness": {"enabled": False},
        "bm25": {"enabled": True},
        "datasets": {
            "local": {
                "source": "local",
                "path": str(data),
                "encoders": ["minilm"],
                "split": {"heldout_fraction": 0.5, "seed": 0},
            },
            "mirrored": {"source": "beir", "encoders": ["minilm"], "split": {"heldout_fraction": 0.5, "seed": 0}},
        },
    }
    config = data / "config ü.yaml"
    config.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    base = [
        str(BIN / "snakemake"),
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(work),
        "--configfile",
        str(config),
        "--cores",
        "1",
    ]
    env = _env(CAPGAP_DATA_MIRROR=str(mirror), CAPGAP_CACHE=str(tmp_path / "cache ü"))
    r = subprocess.run([*base, "-n"], capture_output=True, text=True, timeout=300, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    from .test_reruns import _jobs

    assert _jobs(out) == {"data": 2, "index": 2, "pretrained": 2, "bm25": 2, "report": 1, "all": 1}, out[-3000:]
    # the same mirror with the quotes a user may leave in its value: stopped at start, named
    r = subprocess.run(
        [*base, "-n"], capture_output=True, text=True, timeout=300, env={**env, "CAPGAP_DATA_MIRROR": f"'{mirror}'"}
    )
    assert (
        r.returncode != 0
        and f"capgap: $CAPGAP_DATA_MIRROR is {repr(chr(39) + str(mirror) + chr(39))}, which is not a folder"
        in r.stdout + r.stderr
    )
    r = subprocess.run(
        [*base, "results/local/data", "results/mirrored/data"], capture_output=True, text=True, timeout=300, env=env
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    for ds, src in (("local", data), ("mirrored", mirror / "mirrored")):
        status = json.loads((work / "results" / ds / "data" / "status.json").read_text())
        assert status["available"] is True and status["source"]["folder"] == str(src.resolve())
        assert len((work / "results" / ds / "data" / "corpus.jsonl").read_text().splitlines()) == n_docs


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="the tests do not run in a virtualenv")
def test_snakefile_refuses_an_interpreter_path_it_cannot_run_jobs_with(tmp_path):
    """The same virtualenv reached through a folder named with a space and a quote: Snakemake
    would put that path unquoted in each job's command (exit status 127); the Snakefile stops at
    start, naming the path, before any job exists."""
    venv = tmp_path / "my venv ü'q"
    venv.symlink_to(Path(sys.prefix), target_is_directory=True)
    py = venv / "bin" / Path(sys.executable).name
    cmd = [
        str(py),
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(tmp_path / "w"),
        "--configfile",
        str(ROOT / "tests" / "configs" / "tiny.yaml"),
        "--cores",
        "1",
        "-n",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(PYTHONPATH=str(ROOT / "src")))
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "UnsafePath" in out, out[-3000:]
    assert f'capgap: the Python interpreter path {str(py)!r} holds a space, "\'"' in out, out[-3000:]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_makefile_refuses_a_virtualenv_path_at_start_and_takes_one_elsewhere(tmp_path):
    """`make` in a checkout under ODD: the virtualenv it would make there (.venv) is refused
    before anything is made, naming the path; with VENV elsewhere the same checkout runs its
    recipes (the PATH line included: pytest under that venv's python, found first on PATH);
    a checkout named with non-ASCII letters only keeps its .venv."""
    checkout = tmp_path / ODD
    (checkout / "src" / "capgap").mkdir(parents=True)
    shutil.copy(ROOT / "Makefile", checkout)
    for f in ("__init__.py", "paths.py"):
        shutil.copy(ROOT / "src" / "capgap" / f, checkout / "src" / "capgap")
    py = f"PY={sys.executable}"
    r = subprocess.run(["make", "run", py], cwd=checkout, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and not (checkout / ".venv").exists(), r.stdout + r.stderr
    assert f'capgap: the virtualenv path {str(checkout / ".venv")!r} holds a space, "\'"' in r.stderr, r.stderr
    assert "VENV=" in r.stderr
    # a virtualenv elsewhere: the real one, reached through a plain folder name
    if not (Path(sys.prefix) / ".installed").is_file():
        pytest.skip("the test's virtualenv was not made by `make install` (no .installed)")
    venv = tmp_path / "venv"
    venv.symlink_to(Path(sys.prefix), target_is_directory=True)
    shutil.copy(ROOT / "pyproject.toml", checkout)  # the ruff settings `make test` lints with
    os.utime(checkout / "pyproject.toml", (0, 0))  # older than .installed: nothing is installed
    (checkout / "t").mkdir()
    (checkout / "t" / "test_here.py").write_text(
        "import shutil, sys\n"
        f"def test_here():\n    assert shutil.which('python') == {str(venv / 'bin' / 'python')!r}\n"
        f"    assert sys.prefix == {str(venv)!r}\n"
    )
    r = subprocess.run(
        ["make", "test", py, f"VENV={venv}", "PYTEST_ARGS=-p no:cacheprovider t/test_here.py"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr
    plain = tmp_path / "ünï"
    shutil.copytree(checkout / "src", plain / "src")
    shutil.copy(ROOT / "Makefile", plain)
    assert subprocess.run(["make", "paths", py], cwd=plain, capture_output=True, text=True).returncode == 0
