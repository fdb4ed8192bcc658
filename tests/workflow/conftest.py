"""The workflow tests' shared pieces: Snakemake on the tiny config, and the one tiny DAG run
(``tiny_run``, once per session) that every test reading the tiny run's results shares."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import ROOT

BIN = Path(sys.executable).parent
TINY = ROOT / "tests" / "configs" / "tiny.yaml"


def _env(mirror):
    env = dict(
        os.environ,
        PATH=f"{BIN}:{os.environ['PATH']}",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        CAPGAP_DATA_MIRROR=str(mirror),
    )
    return env


def _smk(workdir, configfile, mirror, *args):
    cmd = [
        str(BIN / "snakemake"),
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(configfile),
        "--cores",
        "2",
        *args,
    ]
    return subprocess.run(cmd, env=_env(mirror), capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, mirror):
    """The tiny config's DAG run to the end, once: tests read its folder and never change it
    (a test that needs a changed folder copies it)."""
    work = tmp_path_factory.mktemp("dag")
    r = _smk(work, TINY, mirror)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return work


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(items):
    """Every test that uses the tiny DAG run is an end-to-end test: marker ``slow``; under
    pytest-xdist they carry the group ``tiny_run`` (``--dist loadgroup``; tests/README.md)."""
    for item in items:
        if "tiny_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.xdist_group("tiny_run"))
