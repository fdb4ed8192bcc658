"""DVC round trip through a local directory remote: `dvc repro` -> `dvc push` -> results, reports,
the DVC cache and Snakemake's state removed (a fresh machine) -> `dvc pull` (+ `snakemake
--touch`, what `make pull` runs) -> `snakemake -n` has nothing to do and the results are the same.

The project's folder starts from the session's tiny DAG run (``tiny_run``: its results,
reports, logs and Snakemake state, copied in after the project's first commit), so `dvc repro`
runs both stages' commands without computing the tiny DAG a second time: the experiments
stage's Snakemake finds its jobs done, the report stage reruns the report."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..conftest import ROOT

BIN = Path(sys.executable).parent


def test_dvc_push_pull_round_trip(tiny_run, mirror, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    # the project as committed (git archive), with the tiny config as the default config
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(repo)], input=archive, check=True)
    for rel in ("workflow", "src/capgap", "dvc.yaml", "Snakefile", "Makefile"):  # the working tree's version
        src, dst = ROOT / rel, repo / rel
        if src.is_dir():
            shutil.rmtree(dst)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, dst)
    shutil.copy(ROOT / "tests" / "configs" / "tiny.yaml", repo / "config" / "config.yaml")
    env = dict(
        os.environ,
        PATH=f"{BIN}:{os.environ['PATH']}",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        CAPGAP_DATA_MIRROR=str(mirror),
        DVC_NO_ANALYTICS="1",
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@t",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@t",
    )

    def run(*cmd, timeout=900):
        r = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, " ".join(cmd) + "\n" + r.stdout[-3000:] + r.stderr[-3000:]
        return r.stdout + r.stderr

    run("git", "init", "-q")
    run("git", "add", "-A")
    run("git", "commit", "-qm", "capgap")
    # the tiny DAG's outputs and Snakemake's record of them, modification times kept: the
    # experiments stage's Snakemake has nothing to do (the same Snakefile, config and inputs)
    for rel in ("results", "reports", "logs", "benchmarks/rules", ".snakemake"):
        shutil.copytree(
            tiny_run / rel,
            repo / rel,
            symlinks=True,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("locks", "log", "incomplete") if rel == ".snakemake" else None,
        )
    remote = tmp_path / "remote"
    run(str(BIN / "dvc"), "remote", "add", "-d", "shared", str(remote))  # what a user configures
    run(str(BIN / "dvc"), "repro", timeout=1500)
    run("git", "add", "dvc.lock", ".dvc/config")
    run("git", "commit", "-qm", "results")
    run(str(BIN / "dvc"), "push")
    before = (repo / "reports" / "results.csv").read_bytes()
    assert len(before.splitlines()) > 100 and any(remote.rglob("*"))
    for rel in ("results", "reports/figures", "reports/plots", ".dvc/cache", ".snakemake", "logs", "benchmarks/rules"):
        shutil.rmtree(repo / rel, ignore_errors=True)
    for f in ("results.csv", "report.md", "report.html", "summary.json", "metrics.json"):
        (repo / "reports" / f).unlink()
    run(str(BIN / "dvc"), "pull")
    run(str(BIN / "snakemake"), "--touch", "--cores", "1", "--quiet")  # make pull
    out = run(str(BIN / "snakemake"), "-n", "--cores", "1")
    assert "Nothing to be done" in out, out[-2000:]
    assert (repo / "reports" / "results.csv").read_bytes() == before
    assert "Data and pipelines are up to date" in run(str(BIN / "dvc"), "status")
