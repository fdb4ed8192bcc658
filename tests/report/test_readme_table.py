"""capgap.report.readme_table: the README's results table from a hand-made results.csv, its stamp,
and the marked block it replaces."""

import hashlib

import pytest

from capgap.report import readme_table
from capgap.report.results import collect

CSV = """dataset,encoder,method,split,metric,k,value,compression
toy,minilm,pretrained,all,recall,2,0.25,
toy,minilm,pretrained,all,recall,10,0.5,
toy,minilm,pretrained,all,recall,100,1.0,
toy,minilm,pretrained,all,ndcg,10,0.4,
toy,minilm,pretrained,train,recall,10,0.4,
toy,minilm,pretrained,heldout,recall,10,0.6,
toy,minilm,probe,all,recall,2,1.0,
toy,minilm,probe,all,recall,10,1.0,
toy,minilm,probe,all,ndcg,10,1.0,
toy,minilm,probe,train,recall,10,1.0,
toy,minilm,probe,heldout,recall,10,1.0,
toy,minilm,probe,all,recall,2,0.5,sq8
toy,,bm25,all,recall,2,0.125,
toy,,bm25,heldout,recall,10,0.75,
toy,minilm,head-linear,all,recall,2,0.9,
parity-P8,mlp,probe,all,recall,2,1.0,
"""

TABLE = """| dataset | method | R@2 | R@10 | R@100 | nDCG@10 | R@10 train / held-out |
|---|---|---|---|---|---|---|
| toy | probe (minilm) | 1.000 | 1.000 | – | 1.000 | 1.000 / 1.000 |
| toy | pretrained (minilm) | 0.250 | 0.500 | 1.000 | 0.400 | 0.400 / 0.600 |
| toy | bm25 | 0.125 | – | – | – | – / 0.750 |"""


def test_table_from_a_hand_made_csv(tmp_path):
    (tmp_path / "results.csv").write_text(CSV)
    assert readme_table.results_table(collect([tmp_path / "results.csv"])) == TABLE


def test_stamp_and_block(tmp_path):
    (tmp_path / "results.csv").write_text(CSV)
    (tmp_path / "logs" / "probe" / "toy").mkdir(parents=True)
    (tmp_path / "logs" / "probe" / "toy" / "minilm.log").write_text(
        "2026-01-01 00:00:00,000 INFO capgap.stages: capgap code: commit 0123456789ab from /x/src/capgap\nrest\n"
    )
    (tmp_path / "logs" / "data").mkdir()
    (tmp_path / "logs" / "data" / "toy.log").write_text(
        "x INFO capgap.stages: capgap code: commit 0123456789ab from /x/src/capgap\n"
    )
    (tmp_path / "logs" / "data" / "old.log").write_text("a log without the line\n")
    cfg = tmp_path / "config.yaml"
    cfg.write_text("datasets: {}\n")
    sha = hashlib.sha256(b"datasets: {}\n").hexdigest()
    readme = tmp_path / "README.md"
    readme.write_text(f"# t\n\n{readme_table.BEGIN}\nold table\n{readme_table.END}\n\nafter\n")
    assert (
        readme_table.main(
            [
                str(tmp_path / "results.csv"),
                "--logs",
                str(tmp_path / "logs"),
                "--config",
                str(cfg),
                "--source",
                "`reports/results.csv`",
                "--write",
                str(readme),
            ]
        )
        == 0
    )
    assert readme.read_text() == (
        f"# t\n\n{readme_table.BEGIN}\n{TABLE}\n\nRendered from `reports/results.csv` by "
        f"`python -m capgap.report.readme_table`: capgap commit 0123456789ab (all 2 jobs), config `{cfg}` "
        f"(sha256 `{sha}`).\n{readme_table.END}\n\nafter\n"
    )


def test_stamp_lists_several_commits_and_none():
    assert readme_table.stamp({"aaa (with uncommitted changes)": 3, "bbb": 1}, "c.yaml", "ff", "x") == (
        "Rendered from x by `python -m capgap.report.readme_table`: capgap commits "
        "aaa (with uncommitted changes): 3 jobs; bbb: 1 job, config `c.yaml` (sha256 `ff`)."
    )
    assert "capgap commit not recorded," in readme_table.stamp({}, "c.yaml", "ff", "x")


def test_missing_markers():
    with pytest.raises(ValueError, match="results:begin"):
        readme_table.replace_block("no markers", "t")
