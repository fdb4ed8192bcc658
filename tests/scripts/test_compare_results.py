"""scripts/compare_results.py: byte-identical results pass; a changed number never does."""

import subprocess
import sys

from ..conftest import ROOT

HEAD = "dataset,encoder,method,split,metric,k,value\n"
ROWS = "d,e,probe,all,recall,10,1.0\nd,e,pretrained,all,recall,10,0.5\n"


def _run(tmp_path, old, new, *flags):
    (tmp_path / "a.csv").write_text(old)
    (tmp_path / "b.csv").write_text(new)
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "compare_results.py"),
            *flags,
            str(tmp_path / "a.csv"),
            str(tmp_path / "b.csv"),
        ],
        capture_output=True,
        text=True,
    ).returncode


def test_identical_and_changed(tmp_path):
    assert _run(tmp_path, HEAD + ROWS, HEAD + ROWS) == 0
    assert _run(tmp_path, HEAD + ROWS, HEAD + ROWS.replace("0.5", "0.50001")) == 1
    assert _run(tmp_path, HEAD + ROWS, HEAD + ROWS.replace("0.5", "0.50001"), "--allow-additions") == 1


def test_additions_pass_only_when_allowed(tmp_path):
    new = (
        HEAD.replace("value\n", "value,compression\n")
        + "".join(r + ",\n" for r in ROWS.splitlines())
        + "d,e,probe,all,recall,10,0.9,sq8\n"
    )
    assert _run(tmp_path, HEAD + ROWS, new) == 1
    assert _run(tmp_path, HEAD + ROWS, new, "--allow-additions") == 0
    # a recorded row whose new column is not empty is a change, not an addition
    assert _run(tmp_path, HEAD + ROWS, new.replace("1.0,\n", "1.0,sq4\n"), "--allow-additions") == 1
    # a recorded row missing is never an addition
    assert _run(tmp_path, HEAD + ROWS, HEAD + ROWS.splitlines()[0] + "\n", "--allow-additions") == 1


def test_malformed_files_are_refused(tmp_path):
    """Rows of the wrong width or two rows with one key can hide a changed number: exit 2."""
    dup = HEAD + "d,e,probe,all,recall,2,0.5\nd,e,probe,all,recall,2,0.7\n"
    assert _run(tmp_path, dup, dup.replace("0.5", "0.9"), "--allow-additions") == 2
    wide = HEAD + ROWS.replace("1.0\n", "1.0,0.9\n")
    assert _run(tmp_path, HEAD + ROWS, wide, "--allow-additions") == 2


def test_new_metric_rows_between_recorded_rows_are_additions(tmp_path):
    """results.csv sorts rows by metric within a method, so rows of a newer metric (``rprec``,
    ``recall_cap``) land between recorded rows: still additions, the recorded rows keep their order."""
    new = HEAD + (
        "d,e,probe,all,recall,10,1.0\nd,e,probe,all,recall_cap,10,1.0\nd,e,probe,all,rprec,,0.8\n"
        "d,e,pretrained,all,recall,10,0.5\nd,e,pretrained,all,recall_cap,10,0.6\nd,e,pretrained,all,rprec,,0.4\n"
    )
    assert _run(tmp_path, HEAD + ROWS, new) == 1
    assert _run(tmp_path, HEAD + ROWS, new, "--allow-additions") == 0
