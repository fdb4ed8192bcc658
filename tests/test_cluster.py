"""A real SLURM cluster run (marker `cluster`, run by `make test-cluster` / .ci/run after
scripts/slurm_local.sh has started slurmctld + slurmd on localhost): the tiny config through
`snakemake --profile profiles/slurm` gives exactly the results.csv of a local run."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT

BIN = Path(sys.executable).parent
TINY = ROOT / "tests" / "configs" / "tiny.yaml"
RULES = ("data", "index", "pretrained", "probe", "finetune", "bm25", "colbert", "hardness", "report")

pytestmark = pytest.mark.cluster


def _env(mirror):
    return dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                CAPGAP_DATA_MIRROR=str(mirror))


@pytest.fixture(scope="module")
def cluster():
    if not os.environ.get("SLURM_CONF") or shutil.which("sinfo") is None:
        pytest.fail("no SLURM cluster: run `scripts/slurm_local.sh start` (make test-cluster does)")
    r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    assert "idle" in r.stdout or "mix" in r.stdout, r.stdout + r.stderr


def test_slurm_run_matches_local_run(cluster, mirror, tmp_path):
    # one thread and 3 GB per job: fits this node, and the local run uses the same threads so
    # the numbers must agree exactly. A workflow profile in place of profiles/default (a
    # --profile's set-threads/set-resources would be overridden by the workflow profile's).
    prof = tmp_path / "tiny_cluster_profile.yaml"
    prof.write_text(yaml.safe_dump({"set-threads": {r: 1 for r in RULES},
                                    "set-resources": {r: {"mem_mb": 3000, "runtime": 30, "gpu": 0} for r in RULES}}))
    base = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "--configfile", str(TINY), "--workflow-profile", str(prof)]
    local = subprocess.run(base + ["--directory", str(tmp_path / "local"), "--cores", "2"], env=_env(mirror),
                           capture_output=True, text=True, timeout=1200)
    assert local.returncode == 0, local.stderr[-3000:]
    slurm = subprocess.run(base + ["--directory", str(tmp_path / "slurm"), "--profile", str(ROOT / "profiles" / "slurm"),
                                   "--jobs", "2",
                                   # no accounting database here: the executor's documented squeue mode
                                   "--slurm-status-command", "squeue", "--slurm-no-account", "--slurm-keep-successful-logs",
                                   "--slurm-init-seconds-before-status-checks", "1", "--seconds-between-status-checks", "3"],
                           env=_env(mirror), capture_output=True, text=True, timeout=1800)
    assert slurm.returncode == 0, slurm.stdout[-3000:] + slurm.stderr[-3000:]
    # every job went through sbatch: one SLURM log per job, per rule
    logs = tmp_path / "slurm" / ".snakemake" / "slurm_logs"
    assert {p.name.removeprefix("rule_") for p in logs.iterdir()} >= {"data", "index", "pretrained", "probe", "finetune", "bm25",
                                                                      "colbert", "hardness", "report"}
    a = (tmp_path / "local" / "reports" / "results.csv").read_text()
    b = (tmp_path / "slurm" / "reports" / "results.csv").read_text()
    assert len(a.splitlines()) > 100 and a == b
