"""Paths are data (issue 27, kind 6), capgap.paths and the tools that take a path: mirror and
diagnose files under folders named with spaces, quotes and non-ASCII letters work, and a path
that cannot be used is refused naming the path and the reason. The workflow's side (the DAG,
the Snakefile and the Makefile under such paths) is in tests/workflow/test_paths.py."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from capgap.paths import PathError, UnsafePath, check_interpreter, check_mirror, shell_special

from ..conftest import ROOT

ODD = Path("my data") / "ünï 'q'"  # a space, a single quote, non-ASCII letters


def test_shell_special_characters_are_named_and_letters_are_not():
    assert shell_special("/x/my data/ünï 'q'") == [" ", "'"]
    assert shell_special('/a"b/$c`d') == ['"', "$", "`"]
    assert shell_special("/home/jürgen/capgap-1.0/.venv") == []
    check_interpreter("/home/jürgen/.venv/bin/python")  # non-ASCII letters are fine
    with pytest.raises(UnsafePath) as e:
        check_interpreter("/x/my data/ünï 'q'/.venv/bin/python")
    msg = str(e.value)
    assert "'/x/my data/ünï \\'q\\'/.venv/bin/python'" in msg or "\"/x/my data/ünï 'q'/.venv/bin/python\"" in msg
    assert 'holds a space, "\'"' in msg and "without quoting the interpreter's path" in msg and "VENV=" in msg


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
    for value, cause in (
        (f"'{mirror}'", "the quotes around it are part of the value"),
        (f"{mirror} ", "leading or trailing whitespace"),
        (f"~/{ODD}", f"did you mean {str(mirror)!r}"),
        (str(mirror / "nope"), "no such folder"),
        ("nope", f"relative to the current folder {str(tmp_path)!r}"),
    ):
        with pytest.raises(PathError) as e:
            check_mirror(value)
        assert str(e.value).startswith(
            f"capgap: $CAPGAP_DATA_MIRROR is {value!r}, which is not a folder: "
        ) and cause in str(e.value), str(e.value)
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
    (d / "ann run ü.trec").write_text(
        "qa Q0 d2 1 1.0 ann\nqb Q0 d1 1 1.0 ann\nqc Q0 d0 1 1.0 ann\nqd Q0 d0 1 1.0 ann\n"
    )
    out = d / "out 'ü'"
    cmd = [
        sys.executable,
        "-m",
        "capgap.cli",
        "diagnose",
        "--doc-embeddings",
        str(d / "docs.npy"),
        "--query-embeddings",
        str(d / "queries.npy"),
        "--qrels",
        str(d / "qrels.tsv"),
        "--doc-ids",
        str(d / "doc_ids.txt"),
        "--query-ids",
        str(d / "query_ids.txt"),
        "--ann-run",
        str(d / "ann run ü.trec"),
        "--k",
        "1",
        "--out",
        str(out),
    ]
    r = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    )
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["verdicts"] == {
        "index-limited": 1,
        "compression-limited": 0,
        "undetermined": 0,
        "encoder-limited": 1,
        "ann-limited": 1,
        "ok": 1,
    }
    rows = list(csv.DictReader((out / "per_query.tsv").open(), delimiter="\t"))
    assert {r["query_id"]: r["verdict"] for r in rows} == {
        "qa": "index-limited",
        "qb": "encoder-limited",
        "qc": "ann-limited",
        "qd": "ok",
    }
    assert str(out) in r.stdout  # the paths it wrote, named as they are


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

    assert shlex.split(line.split("unlock it with: ", 1)[1]) == [
        smk,
        "--unlock",
        "--cores",
        "1",
        "--configfile",
        "my config ü.yaml",
    ]
