"""A real SLURM cluster run (marker `cluster`, run by `make test-cluster` / .ci/run after
scripts/slurm_local.sh has started slurmctld + slurmd on localhost): the tiny config through
`snakemake --profile profiles/slurm` gives exactly the results.csv of a local run, unsharded and
with the index and the probe scattered over 3 shards each (separate SLURM jobs)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ..conftest import ROOT

BIN = Path(sys.executable).parent
TINY = ROOT / "tests" / "configs" / "tiny.yaml"
RULES = (
    "data",
    "index",
    "index_shard",
    "pretrained",
    "probe",
    "probe_shard",
    "finetune",
    "bm25",
    "colbert",
    "hardness",
    "report",
)

pytestmark = pytest.mark.cluster


def _env(mirror):
    return dict(
        os.environ,
        PATH=f"{BIN}:{os.environ['PATH']}",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        CAPGAP_DATA_MIRROR=str(mirror),
    )


@pytest.fixture(scope="module")
def cluster():
    if not os.environ.get("SLURM_CONF") or shutil.which("sinfo") is None:
        pytest.fail("no SLURM cluster: run `scripts/slurm_local.sh start` (make test-cluster does)")
    r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    assert "idle" in r.stdout or "mix" in r.stdout, r.stdout + r.stderr


def _profile(folder: Path) -> Path:
    """One thread and 3 GB per job: fits this node, and the local run uses the same threads so
    the numbers must agree exactly. A workflow profile in place of profiles/default (a
    --profile's set-threads/set-resources would be overridden by the workflow profile's)."""
    prof = folder / "tiny_cluster_profile.yaml"
    prof.write_text(
        yaml.safe_dump(
            {
                "set-threads": {r: 1 for r in RULES},
                "set-resources": {r: {"mem_mb": 3000, "runtime": 30, "gpu": 0} for r in RULES},
            }
        )
    )
    return prof


def _base(config: Path, prof: Path) -> list[str]:
    return [
        str(BIN / "snakemake"),
        "-s",
        str(ROOT / "Snakefile"),
        "--configfile",
        str(config),
        "--workflow-profile",
        str(prof),
    ]


def _slurm(base: list[str], work: Path, mirror) -> subprocess.CompletedProcess:
    return subprocess.run(
        base
        + [
            "--directory",
            str(work),
            "--profile",
            str(ROOT / "profiles" / "slurm"),
            "--jobs",
            "2",
            # no accounting database here: the executor's documented squeue mode
            "--slurm-status-command",
            "squeue",
            "--slurm-no-account",
            "--slurm-keep-successful-logs",
            "--slurm-init-seconds-before-status-checks",
            "1",
            "--seconds-between-status-checks",
            "3",
        ],
        env=_env(mirror),
        capture_output=True,
        text=True,
        timeout=1800,
    )


@pytest.fixture(scope="module")
def local_run(mirror, tmp_path_factory) -> Path:
    """The tiny config run locally, unsharded, once for the module: its working directory."""
    tmp = tmp_path_factory.mktemp("local")
    local = subprocess.run(
        _base(TINY, _profile(tmp)) + ["--directory", str(tmp / "work"), "--cores", "2"],
        env=_env(mirror),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert local.returncode == 0, local.stderr[-3000:]
    return tmp / "work"


def test_slurm_run_matches_local_run(cluster, local_run, mirror, tmp_path):
    slurm = _slurm(_base(TINY, _profile(tmp_path)), tmp_path / "slurm", mirror)
    assert slurm.returncode == 0, slurm.stdout[-3000:] + slurm.stderr[-3000:]
    # every job went through sbatch: one SLURM log per job, per rule
    logs = tmp_path / "slurm" / ".snakemake" / "slurm_logs"
    assert {p.name.removeprefix("rule_") for p in logs.iterdir()} >= {
        "data",
        "index",
        "pretrained",
        "probe",
        "finetune",
        "bm25",
        "colbert",
        "hardness",
        "report",
    }
    a = (local_run / "reports" / "results.csv").read_text()
    b = (tmp_path / "slurm" / "reports" / "results.csv").read_text()
    assert len(a.splitlines()) > 100 and a == b


def test_sharded_slurm_run_matches_unsharded_local_run(cluster, local_run, mirror, tmp_path):
    """index.shards: 3 and probe.shards: 3 on SLURM: each shard its own SLURM job (its own job
    id in the executor's per-job logs), and the gathered index, probe outputs and results.csv
    byte-identical to the unsharded local run's."""
    cfg = yaml.safe_load(TINY.read_text())
    cfg["index"] = {"shards": 3}
    cfg["probe"]["shards"] = 3
    sharded = tmp_path / "tiny_sharded.yaml"
    sharded.write_text(yaml.safe_dump(cfg))
    slurm = _slurm(_base(sharded, _profile(tmp_path)), tmp_path / "slurm", mirror)
    assert slurm.returncode == 0, slurm.stdout[-3000:] + slurm.stderr[-3000:]
    logs = tmp_path / "slurm" / ".snakemake" / "slurm_logs"
    pairs = [(d.name, "minilm") for d in (local_run / "results").iterdir() if (d / "minilm" / "index").is_dir()]
    assert len(pairs) == 3  # limit-gen, limit-small, near-miss (not-there is unavailable)
    for rule in ("index_shard", "probe_shard"):
        # .snakemake/slurm_logs/rule_<rule>/<dataset>_<encoder>_<i>-of-3/<SLURM job id>.log
        jobs = {f.stem: f.parent.name for f in (logs / f"rule_{rule}").glob("*/*.log")}
        assert len(jobs) == 3 * len(pairs), (rule, jobs)  # 9 distinct SLURM job ids
        assert sorted(jobs.values()) == sorted(f"{ds}_{enc}_{i}-of-3" for ds, enc in pairs for i in (1, 2, 3))
    for ds, enc in pairs:
        for rel in (
            "index/embeddings.npy",
            "index/doc_ids.json",
            "index/fingerprint.json",
            "probe/metrics.csv",
            "probe/per_query.jsonl",
            "probe/run.trec",
            "probe/w.npz",
        ):
            a, b = local_run / "results" / ds / enc / rel, tmp_path / "slurm" / "results" / ds / enc / rel
            assert a.read_bytes() == b.read_bytes(), (ds, rel)
        assert not (tmp_path / "slurm" / "results" / ds / enc / "probe_shards").exists() or not any(
            (tmp_path / "slurm" / "results" / ds / enc / "probe_shards").iterdir()
        )  # temp(): gone after the gather
    a = (local_run / "reports" / "results.csv").read_text()
    b = (tmp_path / "slurm" / "reports" / "results.csv").read_text()
    assert len(a.splitlines()) > 100 and a == b
    # the report's wall time per stage names every shard job, where a sharded run's work is
    md = (tmp_path / "slurm" / "reports" / "report.md").read_text()
    for ds, enc in pairs:
        for rule in ("index_shard", "probe_shard"):
            for k in (1, 2, 3):
                assert f"| {rule} | {ds}/{enc}/{k}-of-3 |" in md, (rule, ds, k)
