"""The committed dvc.lock is current: `dvc status` finds no dependency or parameter of a DVC
stage changed except `results/` (an output of the pipeline, absent from a fresh clone). After
editing code or config, `make lock` updates it."""

import json
import subprocess
import sys
from pathlib import Path

from ..conftest import ROOT

BIN = Path(sys.executable).parent


def test_dvc_lock_is_current():
    r = subprocess.run([str(BIN / "dvc"), "status", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={"PATH": f"{BIN}:/usr/bin:/bin", "DVC_NO_ANALYTICS": "1", "HOME": str(Path.home())})
    assert r.returncode == 0, r.stderr[-2000:]
    stale = []
    for stage, changes in json.loads(r.stdout or "{}").items():
        for change in changes:
            if not isinstance(change, dict):
                continue
            for path, what in change.get("changed deps", {}).items():
                if path != "results":
                    stale.append(f"{stage}: {path} {what}")
    assert not stale, "dvc.lock is older than the code or config; run `make lock` and commit it:\n" + "\n".join(stale)
