"""Writing outputs on a full disk: one capgap error naming the file, and an output set that is
whole or absent (``capgap.io.atomic_open``, ``output_set``; ``capgap diagnose``; the DAG's
writers). The full disk is simulated: the write of one chosen output raises ENOSPC, as a full
file system does (no root needed for a small tmpfs)."""

import errno
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace as NS

import numpy as np
import pytest
from click.testing import CliRunner

from capgap import io
from capgap.cli import main
from capgap.errors import CapgapError, OutputWriteError

from ..conftest import ROOT

FULL = os.strerror(errno.ENOSPC)  # "No space left on device"
OUTPUTS = ["per_query.tsv", "summary.json", "summary.md", "verdicts.png"]


class _FullFile:
    """A file whose every write raises ENOSPC, as a write on a full file system does."""

    def __init__(self, fh):
        self._fh = fh

    def write(self, data):
        raise OSError(errno.ENOSPC, FULL)

    def __getattr__(self, name):
        return getattr(self._fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()


@pytest.fixture
def disk_full_at(monkeypatch):
    """``disk_full_at(name)``: from now on, writing the temporary file of an output named
    ``name`` fails with ENOSPC (the outputs written before it succeed)."""
    names: dict[int, str] = {}
    mkstemp, fdopen = tempfile.mkstemp, os.fdopen

    def arm(name: str):
        def recording_mkstemp(*a, **kw):
            fd, tmp = mkstemp(*a, **kw)
            names[fd] = Path(tmp).name
            return fd, tmp

        def failing_fdopen(fd, *a, **kw):
            fh = fdopen(fd, *a, **kw)
            return _FullFile(fh) if names.get(fd, "").startswith(f".{name}.") else fh

        monkeypatch.setattr(io.tempfile, "mkstemp", recording_mkstemp)
        monkeypatch.setattr(io.os, "fdopen", failing_fdopen)

    return arm


def _inputs(tmp_path: Path) -> list[str]:
    """A tiny diagnosis (4 documents, 2 queries) and the ``capgap diagnose`` arguments without ``--out``."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "docs.npy", rng.standard_normal((4, 3)).astype(np.float32))
    np.save(tmp_path / "queries.npy", rng.standard_normal((2, 3)).astype(np.float32))
    (tmp_path / "qrels.tsv").write_text("q0\td0\t1\nq1\td2\t1\n")
    (tmp_path / "doc_ids.txt").write_text("d0\nd1\nd2\nd3\n")
    (tmp_path / "query_ids.txt").write_text("q0\nq1\n")
    return [
        "diagnose",
        "--doc-embeddings",
        str(tmp_path / "docs.npy"),
        "--query-embeddings",
        str(tmp_path / "queries.npy"),
        "--qrels",
        str(tmp_path / "qrels.tsv"),
        "--doc-ids",
        str(tmp_path / "doc_ids.txt"),
        "--query-ids",
        str(tmp_path / "query_ids.txt"),
        "--k",
        "1",
    ]


@pytest.mark.parametrize("name", OUTPUTS)
def test_diagnose_on_a_full_disk_names_the_file_and_leaves_no_output(tmp_path, disk_full_at, name):
    """Whichever of the four outputs meets the full disk (the text files first, or the figure
    from matplotlib's PNG writer): exit 1 with one line naming it, and no output, no
    temporary file and no folder left."""
    args = _inputs(tmp_path)
    out = tmp_path / "out"
    disk_full_at(name)
    r = CliRunner().invoke(main, args + ["--out", str(out)])
    assert r.exit_code == 1
    assert r.output == f"Error: cannot write {out / name}: {FULL}\n"
    assert not out.exists()


def _earlier_diagnosis(tmp_path):
    """A finished diagnosis in ``tmp_path/out`` (its four files' bytes: ``before``), then the
    query ids edited so that the next run is a different diagnosis. Returns ``(args, out, before)``."""
    args = _inputs(tmp_path)
    out = tmp_path / "out"
    assert CliRunner().invoke(main, args + ["--out", str(out)]).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(before) == sorted(OUTPUTS)
    (tmp_path / "query_ids.txt").write_text("q1\nq0\n")  # a different diagnosis: other rows
    return args, out, before


def test_a_failed_diagnosis_leaves_an_earlier_one_whole(tmp_path, disk_full_at):
    """A folder holding an earlier diagnosis keeps its four files, byte for byte, when the new
    one fails on its third output: the set is the old one or the new one, never a mix."""
    args, out, before = _earlier_diagnosis(tmp_path)
    disk_full_at("summary.md")
    r = CliRunner().invoke(main, args + ["--out", str(out)])
    assert r.output == f"Error: cannot write {out / 'summary.md'}: {FULL}\n"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_failed_rename_removes_the_outputs_already_renamed(tmp_path, monkeypatch):
    """Should the commit itself fail on the second rename, the first output is removed again:
    the set is absent, not half present."""
    replace = os.replace
    calls = []

    def second_fails(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, FULL)
        replace(src, dst)

    monkeypatch.setattr(io.os, "replace", second_fails)
    with pytest.raises(OutputWriteError) as e:
        with io.output_set():
            io.write_text(tmp_path / "a.txt", "a")
            io.write_text(tmp_path / "b.txt", "b")
            io.write_text(tmp_path / "c.txt", "c")
    assert str(e.value) == f"cannot write {tmp_path / 'b.txt'}: {FULL}"
    assert calls == [tmp_path / "a.txt", tmp_path / "b.txt"]
    assert sorted(os.listdir(tmp_path)) == []


def test_a_rename_failing_part_way_puts_the_earlier_set_back(tmp_path, monkeypatch):
    """Over an earlier set, a rename failing on the third output (EIO) after two were renamed:
    the two earlier outputs come back byte for byte, the third is untouched, and nothing else
    (no temporary file, no kept copy) is left."""
    for name in ("a.txt", "b.txt", "c.txt"):
        io.write_text(tmp_path / name, f"old {name}")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    replace = os.replace
    calls = []

    def third_fails(src, dst):
        calls.append(Path(dst).name)
        if len(calls) == 3:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        replace(src, dst)

    monkeypatch.setattr(io.os, "replace", third_fails)
    with pytest.raises(OutputWriteError) as e:
        with io.output_set():
            for name in ("a.txt", "b.txt", "c.txt"):
                io.write_text(tmp_path / name, f"new {name}")
    assert str(e.value) == f"cannot write {tmp_path / 'c.txt'}: {os.strerror(errno.EIO)}"
    assert calls[:3] == ["a.txt", "b.txt", "c.txt"]  # then a and b put back
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    # the same block without the failure replaces the set, leaving no kept copy behind
    monkeypatch.setattr(io.os, "replace", replace)
    with io.output_set():
        for name in ("a.txt", "b.txt", "c.txt"):
            io.write_text(tmp_path / name, f"new {name}")
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {n: f"new {n}" for n in ("a.txt", "b.txt", "c.txt")}


def test_a_rename_failing_part_way_leaves_an_earlier_diagnosis_whole(tmp_path, monkeypatch):
    """``capgap diagnose`` over an earlier diagnosis, its third rename (summary.md) failing with
    ENOSPC: one error line naming the file, exit 1, and the earlier four files byte for byte."""
    args, out, before = _earlier_diagnosis(tmp_path)
    replace = os.replace

    def summary_md_fails(src, dst):
        if Path(dst) == out / "summary.md":
            raise OSError(errno.ENOSPC, FULL)
        replace(src, dst)

    monkeypatch.setattr(io.os, "replace", summary_md_fails)
    r = CliRunner().invoke(main, args + ["--out", str(out)])
    assert r.exit_code == 1 and r.output == f"Error: cannot write {out / 'summary.md'}: {FULL}\n"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_outputs_of_a_set_appear_only_when_it_ends(tmp_path):
    with io.output_set():
        io.write_json(tmp_path / "a.json", {"x": 1})
        with io.output_set():  # joins the outer set
            io.save_npy(tmp_path / "b.npy", np.arange(3))
        assert [p for p in tmp_path.iterdir() if not p.name.startswith(".")] == []
    assert sorted(os.listdir(tmp_path)) == ["a.json", "b.npy"]
    assert np.load(tmp_path / "b.npy").tolist() == [0, 1, 2]


def test_a_full_disk_is_a_capgap_error_and_still_an_oserror(tmp_path, disk_full_at):
    """``OutputWriteError`` is what every writer raises on a full disk (code that tolerates a
    failed write with ``except OSError``, e.g. the dataset hash cache, still does); an
    ``OSError`` of another kind raised by the caller's own code in the block passes unchanged."""
    disk_full_at("m.npy")
    with pytest.raises(OutputWriteError) as e:
        io.save_npy(tmp_path / "m.npy", np.zeros(4))
    assert isinstance(e.value, CapgapError) and isinstance(e.value, OSError) and e.value.errno == errno.ENOSPC
    assert str(e.value) == f"cannot write {tmp_path / 'm.npy'}: {FULL}"
    with pytest.raises(FileNotFoundError):
        with io.atomic_open(tmp_path / "copy.txt") as fh:
            fh.write((tmp_path / "missing.txt").read_text())
    assert os.listdir(tmp_path) == []


def test_the_dags_writers_name_the_file_on_a_full_disk(tmp_path, disk_full_at, monkeypatch):
    """A DAG job (rule data: the canonical copy of a local dataset) meeting a full disk raises
    the one capgap error naming the file; the job's log shows it in one line
    (``capgap.logs.capgap_excepthook``), and Snakemake removes the failed job's outputs."""
    from capgap import stages

    monkeypatch.setenv("CAPGAP_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "d"
    disk_full_at("queries.jsonl")
    with pytest.raises(OutputWriteError) as e:
        stages.data(
            None,
            [out],
            NS(
                dataset="a",
                spec={
                    "source": "local",
                    "path": str(ROOT / "tests" / "data" / "source-edit"),
                    "split": {"heldout_fraction": 0.5, "seed": 0},
                },
            ),
        )
    assert str(e.value) == f"cannot write {out / 'queries.jsonl'}: {FULL}"
    assert sorted(p.name for p in out.iterdir()) == [
        "corpus.jsonl"
    ]  # no temporary file; status.json (the mark) not written
