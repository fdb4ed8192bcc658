"""Paths are data (issue 27, kind 6): data, results, mirror, config and diagnose files under
folders named with spaces, quotes and non-ASCII letters work; the one path the tools cannot take
(a Python interpreter Snakemake puts unquoted in job commands) is refused at start, by the
Snakefile and by the Makefile, naming the path and the reason."""

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from capgap.paths import PathError, UnsafePath, check_interpreter, check_mirror, shell_special

from .conftest import ROOT

BIN = Path(sys.executable).parent
ODD = Path("my data") / "ünï 'q'"  # a space, a single quote, non-ASCII letters
SOURCE = ROOT / "tests" / "data" / "source-edit"


def test_shell_special_characters_are_named_and_letters_are_not():
    assert shell_special("/x/my data/ünï 'q'") == [" ", "'"]
    assert shell_special('/a"b/$c`d') == ['"', "$", "`"]
    assert shell_special("/home/jürgen/capgap-1.0/.venv") == []
    check_interpreter("/home/jürgen/.venv/bin/python")  # non-ASCII letters are fine
    with pytest.raises(UnsafePath) as e:
        check_interpreter("/x/my data/ünï 'q'/.venv/bin/python")
    msg = str(e.value)
    assert "'/x/my data/ünï \\'q\\'/.venv/bin/python'" in msg or "\"/x/my data/ünï 'q'/.venv/bin/python\"" in msg
    assert "holds a space, \"'\"" in msg and "without quoting the interpreter's path" in msg and "VENV=" in msg


def test_a_data_mirror_that_names_no_folder_is_refused_with_its_likely_cause(tmp_path, monkeypatch):
    """A mirror under ODD is a mirror; the same path with the quotes, '~', space or typo a user
    can leave in it names no folder, and the message says which."""
    mirror = tmp_path / ODD
    mirror.mkdir(parents=True)
    check_mirror(str(mirror))
    check_mirror("")  # unset or empty: no mirror
    monkeypatch.chdir(tmp_path)
    check_mirror(str(ODD))  # relative to the current folder (Snakemake's working directory)
    monkeypatch.setenv("HOME", str(tmp_path))
    for value, cause in ((f"'{mirror}'", "the quotes around it are part of the value"),
                         (f"{mirror} ", "leading or trailing whitespace"),
                         (f"~/{ODD}", f"did you mean {str(mirror)!r}"),
                         (str(mirror / "nope"), "no such folder"),
                         ("nope", f"relative to the current folder {str(tmp_path)!r}")):
        with pytest.raises(PathError) as e:
            check_mirror(value)
        assert str(e.value).startswith(f"capgap: $CAPGAP_DATA_MIRROR is {value!r}, which is not a folder: ") and cause in str(e.value), str(e.value)
    (mirror / "f").write_text("")
    with pytest.raises(PathError, match="it is a file, not a folder"):
        check_mirror(str(mirror / "f"))
    (mirror / "scifact").mkdir()
    (mirror / "scifact" / "corpus.jsonl").write_text("")
    check_mirror(str(mirror))  # the mirror: one folder per dataset
    with pytest.raises(PathError) as e:  # one dataset's folder: one level too deep
        check_mirror(str(mirror / "scifact"))
    assert "holds corpus.jsonl itself" in str(e.value) and repr(str(mirror)) in str(e.value)


def test_diagnose_reads_and_writes_files_under_such_a_path(tmp_path):
    """`capgap diagnose` as a user types it, every input and the output folder under ODD.
    Verdicts by construction (5 documents in 3-d): qa's gold d2 has an exact copy d3 (no vector
    ranks d2 first: index-limited at k = 1); qb's embedding points at d1, its gold is d0
    (encoder-limited); qc's points at its gold d1 but the ANN run returns d0 (ann-limited); qd
    finds d0 (ok)."""
    d = tmp_path / ODD
    d.mkdir(parents=True)
    np.save(d / "docs.npy", np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 1], [0.5, 0.5, 0]], dtype=np.float32))
    np.save(d / "queries.npy", np.array([[0.5, 0.5, 0], [0, 1, 0], [0, 1, 0], [1, 0, 0]], dtype=np.float32))
    (d / "doc_ids.txt").write_text("d0\nd1\nd2\nd3\nd4\n")
    (d / "query_ids.txt").write_text("qa\nqb\nqc\nqd\n")
    (d / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nqa\td2\t1\nqb\td0\t1\nqc\td1\t1\nqd\td0\t1\n")
    (d / "ann run ü.trec").write_text("qa Q0 d2 1 1.0 ann\nqb Q0 d1 1 1.0 ann\nqc Q0 d0 1 1.0 ann\nqd Q0 d0 1 1.0 ann\n")
    out = d / "out 'ü'"
    cmd = [sys.executable, "-m", "capgap.cli", "diagnose", "--doc-embeddings", str(d / "docs.npy"), "--query-embeddings",
           str(d / "queries.npy"), "--qrels", str(d / "qrels.tsv"), "--doc-ids", str(d / "doc_ids.txt"), "--query-ids",
           str(d / "query_ids.txt"), "--ann-run", str(d / "ann run ü.trec"), "--k", "1", "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["verdicts"] == {"index-limited": 1, "compression-limited": 0, "undetermined": 0, "encoder-limited": 1, "ann-limited": 1, "ok": 1}
    rows = list(csv.DictReader((out / "per_query.tsv").open(), delimiter="\t"))
    assert {r["query_id"]: r["verdict"] for r in rows} == {"qa": "index-limited", "qb": "encoder-limited", "qc": "ann-limited", "qd": "ok"}
    assert str(out) in r.stdout  # the paths it wrote, named as they are


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "CAPGAP_DATA_MIRROR"}
    env.update(PATH=f"{BIN}:{os.environ['PATH']}", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **extra)
    return env


def test_workflow_with_data_mirror_config_and_results_under_such_paths(tmp_path):
    """A local dataset (config ``path:``) and a mirror dataset, the config file, the mirror and
    the results folder all under ODD-like names: the DAG plans every job, and the data jobs
    (the ones that read those paths) run and copy every document (24 in the source)."""
    data, mirror, work = tmp_path / ODD, tmp_path / "my mirror" / "ü 'm'", tmp_path / "my results" / "ü \"r\""
    shutil.copytree(SOURCE, data)
    shutil.copytree(SOURCE, mirror / "mirrored")
    n_docs = sum(1 for line in (SOURCE / "corpus.jsonl").read_text().splitlines() if line.strip())
    assert n_docs == 24
    cfg = {"eval": {"ks": [1, 2], "ndcg_k": 10},
           "encoders": {"minilm": {"model": "sentence-transformers/all-MiniLM-L6-v2", "batch_size": 64}},
           "probe": {"enabled": False}, "finetune": {"enabled": False}, "colbert": {"enabled": False},
           "hardness": {"enabled": False}, "bm25": {"enabled": True},
           "datasets": {"local": {"source": "local", "path": str(data), "encoders": ["minilm"], "split": {"heldout_fraction": 0.5, "seed": 0}},
                        "mirrored": {"source": "beir", "encoders": ["minilm"], "split": {"heldout_fraction": 0.5, "seed": 0}}}}
    config = data / "config ü.yaml"
    config.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    base = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "--directory", str(work), "--configfile", str(config), "--cores", "1"]
    env = _env(CAPGAP_DATA_MIRROR=str(mirror), CAPGAP_CACHE=str(tmp_path / "cache ü"))
    r = subprocess.run([*base, "-n"], capture_output=True, text=True, timeout=300, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    from .test_reruns import _jobs

    assert _jobs(out) == {"data": 2, "index": 2, "pretrained": 2, "bm25": 2, "report": 1, "all": 1}, out[-3000:]
    # the same mirror with the quotes a user may leave in its value: stopped at start, named
    r = subprocess.run([*base, "-n"], capture_output=True, text=True, timeout=300, env={**env, "CAPGAP_DATA_MIRROR": f"'{mirror}'"})
    assert r.returncode != 0 and f"capgap: $CAPGAP_DATA_MIRROR is {repr(chr(39) + str(mirror) + chr(39))}, which is not a folder" in r.stdout + r.stderr
    r = subprocess.run([*base, "results/local/data", "results/mirrored/data"], capture_output=True, text=True, timeout=300, env=env)
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
    cmd = [str(py), "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path / "w"),
           "--configfile", str(ROOT / "tests" / "configs" / "tiny.yaml"), "--cores", "1", "-n"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(PYTHONPATH=str(ROOT / "src")))
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "UnsafePath" in out, out[-3000:]
    assert f"capgap: the Python interpreter path {str(py)!r} holds a space, \"'\"" in out, out[-3000:]


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
    assert f"capgap: the virtualenv path {str(checkout / '.venv')!r} holds a space, \"'\"" in r.stderr, r.stderr
    assert "VENV=" in r.stderr
    # a virtualenv elsewhere: the real one, reached through a plain folder name
    if not (Path(sys.prefix) / ".installed").is_file():
        pytest.skip("the test's virtualenv was not made by `make install` (no .installed)")
    venv = tmp_path / "venv"
    venv.symlink_to(Path(sys.prefix), target_is_directory=True)
    (checkout / "pyproject.toml").write_text("")
    os.utime(checkout / "pyproject.toml", (0, 0))  # older than .installed: nothing is installed
    (checkout / "t").mkdir()
    (checkout / "t" / "test_here.py").write_text(
        "import shutil, sys\n"
        f"def test_here():\n    assert shutil.which('python') == {str(venv / 'bin' / 'python')!r}\n"
        f"    assert sys.prefix == {str(venv)!r}\n")
    r = subprocess.run(["make", "test", py, f"VENV={venv}", "PYTEST_ARGS=-p no:cacheprovider t/test_here.py"], cwd=checkout,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr
    plain = tmp_path / "ünï"
    shutil.copytree(checkout / "src", plain / "src")
    shutil.copy(ROOT / "Makefile", plain)
    assert subprocess.run(["make", "paths", py], cwd=plain, capture_output=True, text=True).returncode == 0


def test_unlock_command_printed_for_the_user_can_be_pasted_under_such_a_path(tmp_path, monkeypatch, capsys):
    """capgap.locks prints the `snakemake --unlock` command for the user to run when it cannot
    tell whether a run holds the lock; with a Snakemake under ODD that line, split as a shell
    splits it, is the command itself."""
    from capgap import locks

    smk = str(tmp_path / ODD / "bin" / "snakemake")
    monkeypatch.setattr(locks, "stale", lambda workdir: None)
    assert locks.main([str(tmp_path), smk, "--configfile", "my config ü.yaml"]) == 0
    line = capsys.readouterr().err.strip()
    import shlex

    assert shlex.split(line.split("unlock it with: ", 1)[1]) == [smk, "--unlock", "--cores", "1", "--configfile", "my config ü.yaml"]
