"""A changed config reruns what it changes, offline and online (issue 27, kind 4).

A folder with results of one dataset; the config then adds a second local dataset and one to
download whose download fails (a loopback port nothing listens on: refused at once, no
network). In both modes the new local dataset is computed and the report, rebuilt for the new
config, names the dataset that was not obtained. Online, the dataset to download waits for its
data checkpoint, and Snakemake skips a missing checkpoint whose downstream report exists
(snakemake/snakemake#3870): rule all takes every data folder as a plain input so it cannot.
"""

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ..conftest import ROOT

BIN = Path(sys.executable).parent
SOURCE = ROOT / "tests" / "data" / "source-edit"
# nothing listens on the discard port of the loopback interface: the connection is refused at once
UNREACHABLE = "http://127.0.0.1:9/gone.zip"
OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "CAPGAP_OFFLINE", "CAPGAP_DATA_MIRROR")

pytestmark = pytest.mark.slow


def _config(data: Path, *names: str) -> dict:
    """The tiny config: pre-trained MiniLM and BM25 on local datasets ``names`` (one folder),
    plus 'gone' (BEIR, download refused) when named."""
    local = {
        "source": "local",
        "path": str(data),
        "encoders": ["minilm"],
        "split": {"heldout_fraction": 0.5, "seed": 0},
    }
    ds = {
        n: ({"source": "beir", "url": UNREACHABLE, "encoders": ["minilm"]} if n == "gone" else dict(local))
        for n in names
    }
    return {
        "eval": {"ks": [1, 2, 5, 10], "ndcg_k": 10},
        "encoders": {"minilm": {"model": "sentence-transformers/all-MiniLM-L6-v2", "batch_size": 64}},
        "probe": {"enabled": False},
        "finetune": {"enabled": False},
        "colbert": {"enabled": False},
        "hardness": {"enabled": False},
        "bm25": {"enabled": True},
        "datasets": ds,
    }


def _smk(work: Path, config: dict, online: bool, cache: Path, *args: str) -> subprocess.CompletedProcess:
    """Snakemake on ``work``; offline (HF_HUB_OFFLINE=1) or online (every offline switch unset),
    no data mirror either way."""
    cfg = work.parent / f"{work.name}.yaml"
    cfg.write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE_VARS}
    env.update(PATH=f"{BIN}:{os.environ['PATH']}", CAPGAP_CACHE=str(cache))
    if not online:
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    cmd = [
        str(BIN / "snakemake"),
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(work),
        "--configfile",
        str(cfg),
        "--cores",
        "2",
        *args,
    ]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def _jobs(out: str) -> dict[str, int]:
    """Job counts per rule from the first 'Job stats' table."""
    m = re.search(r"job\s+count\n[-\s]+\n(.*?)\n[-\s]*\n", out + "\n", re.S)
    return {
        p[0]: int(p[1])
        for p in (line.split() for line in (m.group(1).splitlines() if m else []))
        if len(p) == 2 and p[0] != "total"
    }


def _values(work: Path, dataset: str) -> dict:
    with open(work / "reports" / "results.csv") as fh:
        return {
            (r["encoder"], r["method"], r["split"], r["metric"], r["k"]): r["value"]
            for r in csv.DictReader(fh)
            if r["dataset"] == dataset
        }


@pytest.fixture(scope="module")
def one_dataset(tmp_path_factory):
    """A results folder of the tiny config with dataset 'a' only (offline, as `make run`)."""
    root = tmp_path_factory.mktemp("reruns")
    shutil.copytree(SOURCE, root / "data")
    r = _smk(root / "base", _config(root / "data", "a"), False, root / "cache")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return root


@pytest.mark.parametrize("online", [False, True], ids=["offline", "online"])
def test_adding_datasets_to_a_folder_with_results_reruns_them(one_dataset, tmp_path, online):
    work = tmp_path / "work"
    shutil.copytree(one_dataset / "base", work, symlinks=True)
    before = _values(work, "a")
    assert before and not _values(work, "b")
    config = _config(one_dataset / "data", "a", "b", "gone")
    cache = tmp_path / "cache"
    r = _smk(work, config, online, cache, "-n")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    if online:
        # 'gone' waits for its data checkpoint: the jobs after it are known once it has run
        assert _jobs(out) == {"data": 2, "report": 1, "all": 1}, out[-3000:]
    else:
        assert _jobs(out) == {"data": 2, "index": 1, "pretrained": 1, "bm25": 1, "report": 1, "all": 1}, out[-3000:]
    r = _smk(work, config, online, cache)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    # 'b' holds the same files, split and seed as 'a': every number of 'b' is the number of 'a'
    assert _values(work, "b") == before == _values(work, "a")
    assert {m for _, m, *_ in _values(work, "b")} == {"pretrained", "bm25"}
    assert not _values(work, "gone")
    md = (work / "reports" / "report.md").read_text()
    missing = md.split("## Datasets that could not be obtained", 1)[1].split("\n## ", 1)[0]
    why = "the download failed" if online else "offline mode is on"
    assert "**gone**" in missing and why in missing, missing
    assert f"capgap: dataset 'gone' was not obtained: no data mirror ($CAPGAP_DATA_MIRROR unset), and {why}" in out
    # nothing left to do: the failed download is recorded, not retried on every run
    r = _smk(work, config, online, cache, "-n")
    assert "Nothing to be done" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
