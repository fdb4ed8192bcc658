"""MTEB's published numbers beside capgap's pre-trained rows (capgap.mteb, the report's section
"MTEB's published numbers beside ours")."""

import json

import pandas as pd
import pytest
import yaml

from capgap import mteb
from capgap.data import load_beir_dir
from capgap.errors import DataFormatError
from capgap.report import MARKDOWN_SECTIONS, ReportInputs, gather, mteb_comparison, paper_comparison, render_mteb

from ..conftest import ROOT

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
REF = {
    "source": "embeddings-benchmark/results",
    "split": "test",
    "tolerance": 0.001,
    "models": {
        MINILM: {
            "revision": "8b3219a92973c328a8e22fadcfa821b5dc75636a",
            "tasks": {"SciFact": {"dataset": "scifact", "ndcg@10": 0.64508, "recall@10": 0.78333, "recall@100": 0.925}},
        }
    },
}
TEST_RULE = "dataset qrels files: train=['train'], heldout=['test']"


def _rows(values: dict, split: str = "heldout", dataset: str = "scifact", encoder: str = "minilm") -> pd.DataFrame:
    """Pre-trained rows as results.csv holds them: ``values`` (metric, k) -> value, plus a train
    row that must never be compared."""
    rows = [
        dict(dataset=dataset, encoder=encoder, method="pretrained", split=split, metric=m, k=k, value=v)
        for (m, k), v in values.items()
    ]
    rows.append(
        dict(dataset=dataset, encoder=encoder, method="pretrained", split="train", metric="ndcg", k=10, value=0.99)
    )
    df = pd.DataFrame(rows)
    df["k"] = df["k"].astype("Int64")
    return df


def _status(rule: str = TEST_RULE, dataset: str = "scifact") -> dict:
    return {"dataset": dataset, "available": True, "n_docs": 10, "split_rule": rule, "source": {"kind": "mirror"}}


def test_the_checked_in_table():
    """The published values of the issue, their source file and revision; every dataset named
    is one of capgap's BEIR datasets; nothing for BRIGHT (no values on file)."""
    ref = mteb.load_reference()
    assert ref["source"] == "embeddings-benchmark/results" and ref["split"] == "test" and ref["tolerance"] == 0.001
    m = ref["models"][MINILM]
    assert m["revision"] == "8b3219a92973c328a8e22fadcfa821b5dc75636a"
    assert {t: (v["ndcg@10"], v["recall@10"], v["recall@100"]) for t, v in m["tasks"].items()} == {
        "SciFact": (0.64508, 0.78333, 0.925),
        "NFCorpus": (0.31594, 0.15499, 0.31151),
        "ArguAna": (0.50167, 0.7909, 0.97724),
        "FiQA2018": (0.36867, 0.44131, 0.70606),
        "SCIDOCS": (0.21641, 0.23087, 0.51012),
        "TRECCOVID": (0.47232, 0.01284, 0.08552),
        "QuoraRetrieval": (0.87552, 0.95029, 0.9944),
    }
    mp = ref["models"]["sentence-transformers/all-mpnet-base-v2"]
    assert {t: (v["ndcg@10"], v["recall@10"], v["recall@100"]) for t, v in mp["tasks"].items()} == {
        "SciFact": (0.6557, 0.79011, 0.94167),
        "NFCorpus": (0.33289, 0.16637, 0.33853),
    }
    beir = set(yaml.safe_load((ROOT / "src" / "capgap" / "paper_reference.yaml").read_text())["beir"])
    assert {v["dataset"] for e in ref["models"].values() for v in e["tasks"].values()} <= beir
    assert mteb.source_path(MINILM, m["revision"], "SciFact") == (
        "results/sentence-transformers__all-MiniLM-L6-v2/8b3219a92973c328a8e22fadcfa821b5dc75636a/SciFact.json"
    )


def test_a_difference_above_the_tolerance_is_flagged():
    """nDCG@10 0.01 above MTEB's: flagged with the difference; recall@10 0.0005 off: agrees;
    recall@100 not computed (eval.ks without 100): said so, not compared; train rows ignored."""
    df = _rows({("ndcg", 10): 0.65508, ("recall", 10): 0.78383, ("recall", 20): 0.8})
    rows = mteb.compare(df, [_status()], {"minilm": MINILM, "other": "x/y"}, REF)
    by = {r["metric"]: r for r in rows}
    assert list(by) == ["ndcg@10", "recall@10", "recall@100"]
    assert by["ndcg@10"]["diff"] == pytest.approx(0.01, abs=1e-12) and by["ndcg@10"]["flagged"] is True
    assert by["ndcg@10"]["verdict"] == "differs by +0.01000: likely an index or evaluation error"
    assert by["recall@10"]["diff"] == pytest.approx(0.0005, abs=1e-12) and by["recall@10"]["flagged"] is False
    assert by["recall@10"]["verdict"] == "agrees (within 0.001)"
    assert by["recall@100"]["ours"] is None and by["recall@100"]["verdict"] == "not computed (eval.ks has no 100)"
    md = "\n".join(render_mteb(rows, tolerance=0.001))
    assert (
        "| scifact | minilm (sentence-transformers/all-MiniLM-L6-v2) | ndcg@10 | heldout | 0.64508 | 0.65508 | +0.01000 | "
        "⚠ **differs by +0.01000: likely an index or evaluation error** |"
    ) in md
    assert (
        "**1 of 2 compared values agree with MTEB within 0.001**; 1 differ: scifact / minilm ndcg@10; "
        "1 not compared (see verdict)."
    ) in md


def test_values_that_match_agree():
    df = _rows({("ndcg", 10): 0.6450816521455776, ("recall", 10): 0.7833333333333333, ("recall", 100): 0.925})
    rows = mteb.compare(df, [_status()], {"minilm": MINILM}, REF)
    assert [(r["metric"], r["flagged"], r["verdict"]) for r in rows] == [
        ("ndcg@10", False, "agrees (within 0.001)"),
        ("recall@10", False, "agrees (within 0.001)"),
        ("recall@100", False, "agrees (within 0.001)"),
    ]
    md = "\n".join(render_mteb(rows, tolerance=0.001))
    assert (
        "| scifact | minilm (sentence-transformers/all-MiniLM-L6-v2) | recall@100 | heldout | 0.92500 | 0.92500 | +0.00000 | "
        "agrees (within 0.001) |"
    ) in md
    assert "**3 of 3 compared values agree with MTEB within 0.001**." in md
    assert (
        "- `results/sentence-transformers__all-MiniLM-L6-v2/8b3219a92973c328a8e22fadcfa821b5dc75636a/SciFact.json` "
        "(revision folder `8b3219a92973c328a8e22fadcfa821b5dc75636a`)"
    ) in md


def test_a_nan_value_is_not_computed_never_agreeing():
    """capgap's nDCG@10 NaN (``abs(nan) > tol`` is False): not computed, not compared, not counted
    as agreeing; the finite values beside it are compared as before."""
    df = _rows({("ndcg", 10): float("nan"), ("recall", 10): 0.78333, ("recall", 100): float("inf")})
    rows = mteb.compare(df, [_status()], {"minilm": MINILM}, REF)
    assert [(r["metric"], r["ours"], r["diff"], r["flagged"], r["verdict"]) for r in rows] == [
        ("ndcg@10", None, None, False, "not computed (capgap's value is nan)"),
        ("recall@10", 0.78333, 0.0, False, "agrees (within 0.001)"),
        ("recall@100", None, None, False, "not computed (capgap's value is inf)"),
    ]
    md = "\n".join(render_mteb(rows, tolerance=0.001))
    assert (
        "| scifact | minilm (sentence-transformers/all-MiniLM-L6-v2) | ndcg@10 | heldout | 0.64508 | – | – | "
        "not computed (capgap's value is nan) |"
    ) in md
    assert "**1 of 1 compared values agree with MTEB within 0.001**; 2 not compared (see verdict)." in md


def test_no_comparison_on_another_split_model_or_dataset():
    """A seeded-fraction split holds no split equal to BEIR's test queries: not comparable,
    naming the rule; another model or dataset: no row."""
    df = _rows({("ndcg", 10): 0.6, ("recall", 10): 0.7, ("recall", 100): 0.9})
    rule = "seeded fraction: heldout_fraction=0.5, seed=0"
    rows = mteb.compare(df, [_status(rule)], {"minilm": MINILM}, REF)
    assert {r["verdict"] for r in rows} == {
        f"not comparable (no capgap split is BEIR's test qrels; split rule: {rule})"
    }
    assert all(r["diff"] is None for r in rows)
    assert mteb.compare(df, [_status()], {"minilm": "sentence-transformers/all-mpnet-base-v2"}, REF) == []
    assert (
        mteb.compare(
            _rows({("ndcg", 10): 0.6}, dataset="nfcorpus"), [_status(dataset="nfcorpus")], {"minilm": MINILM}, REF
        )
        == []
    )
    assert mteb.not_run(df, {"minilm": "sentence-transformers/all-mpnet-base-v2"}, REF) == [f"SciFact ({MINILM})"]


@pytest.mark.parametrize(
    "split_cfg, files",
    [
        (None, ("train", "test")),  # scifact in config/config.yaml
        ({"train_qrels": ["train"], "heldout_qrels": ["test"]}, ("train", "dev", "test")),
    ],
)
def test_the_split_rules_of_beir_test_qrels_are_mtebs_test_split(tmp_path, split_cfg, files):
    """The split rule capgap writes for a BEIR folder with train and test qrels (and dev, unused,
    as for NFCorpus) is read as MTEB's test split; the held-out queries are the test file's."""
    (tmp_path / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"doc {i}"}) + "\n" for i in range(6))
    )
    (tmp_path / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": f"query {i}"}) + "\n" for i in range(6))
    )
    (tmp_path / "qrels").mkdir()
    for i, f in enumerate(files):
        (tmp_path / "qrels" / f"{f}.tsv").write_text(
            f"query-id\tcorpus-id\tscore\nq{2 * i}\td{2 * i}\t1\nq{2 * i + 1}\td{2 * i + 1}\t1\n"
        )
    rs = load_beir_dir(tmp_path, "scifact", split_cfg)
    assert mteb.mteb_split({"available": True, "split_rule": rs.split.rule, "source": {"kind": "mirror"}}) == "heldout"
    test_index = files.index("test")
    assert rs.split.heldout == (f"q{2 * test_index}", f"q{2 * test_index + 1}")


def test_the_default_report_shows_the_mteb_column(tmp_path):
    """config/config.yaml computes all three metrics (ks holds 10 and 100, ndcg_k 10) and runs
    MiniLM on SciFact and NFCorpus with BEIR's train/test qrels: gathered from the report rule's
    inputs, the report has the MTEB section (after the paper's numbers) with all six values
    compared."""
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    assert {10, 100} <= set(cfg["eval"]["ks"]) and cfg["eval"]["ndcg_k"] == 10
    models = {n: e["model"] for n, e in cfg["encoders"].items()}
    ref = mteb.load_reference()
    tables, data = [], []
    for ds in ("scifact", "nfcorpus"):
        assert cfg["datasets"][ds]["source"] == "beir" and "minilm" in cfg["datasets"][ds]["encoders"]
        assert not cfg["datasets"][ds].get("split", {}).get("heldout_fraction")
        task = next(v for v in ref["models"][models["minilm"]]["tasks"].values() if v["dataset"] == ds)
        df = _rows(
            {("ndcg", 10): task["ndcg@10"], ("recall", 10): task["recall@10"], ("recall", 100): task["recall@100"]},
            dataset=ds,
        )
        df["compression"] = ""
        (tmp_path / ds).mkdir()
        df.to_csv(tmp_path / ds / "metrics.csv", index=False)
        rule = TEST_RULE + ", unused=['dev'] (1 queries judged only there dropped)"
        (tmp_path / ds / "status.json").write_text(json.dumps(_status(rule, ds)))
        tables.append(str(tmp_path / ds / "metrics.csv"))
        data.append(str(tmp_path / ds))
    ctx = gather(ReportInputs(tables=tables, data=data), cfg["eval"]["ks"], cfg["eval"]["ndcg_k"], models=models)
    assert [(r["dataset"], r["metric"], r["verdict"]) for r in ctx.mteb_rows] == [
        (ds, m, "agrees (within 0.001)")
        for ds in ("scifact", "nfcorpus")
        for m in ("ndcg@10", "recall@10", "recall@100")
    ]
    sections = list(MARKDOWN_SECTIONS)
    assert sections.index(mteb_comparison) == sections.index(paper_comparison) + 1
    md = "\n".join(mteb_comparison.render(ctx))
    assert md.startswith("## MTEB's published numbers beside ours\n")
    assert "| dataset | encoder | metric | split | MTEB | capgap | capgap − MTEB | verdict |" in md


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda t: t.replace("recall@10: 0.78333", "recall@10: 0.9x"),
            "ref.yaml:8: field 'models.sentence-transformers/all-MiniLM-L6-v2.tasks.SciFact.recall@10': expected a number in [0, 1], got '0.9x'",
        ),
        (
            lambda t: t.replace("recall@10: 0.78333", "recall@5: 0.78333"),
            "ref.yaml:8: field 'models.sentence-transformers/all-MiniLM-L6-v2.tasks.SciFact.recall@5': unknown metric "
            "(expected one of ndcg@10, recall@10, recall@100)",
        ),
        (
            lambda t: t.replace("    revision: abc\n", ""),
            "ref.yaml:5: field 'models.sentence-transformers/all-MiniLM-L6-v2.revision': expected the revision folder of the "
            "model's results (a string)",
        ),
        (
            lambda t: t.replace("split: test", "split: dev"),
            "ref.yaml:2: field 'split': expected 'test' (MTEB's BEIR split), got 'dev'",
        ),
    ],
)
def test_a_bad_reference_table_names_file_line_and_field(tmp_path, edit, message):
    text = (
        "source: embeddings-benchmark/results\nsplit: test\ntolerance: 0.001\nmodels:\n"
        f"  {MINILM}:\n    revision: abc\n    tasks:\n      SciFact: {{dataset: scifact, ndcg@10: 0.64508, recall@10: 0.78333}}\n"
    )
    assert mteb.parse_reference(text, "ref.yaml")["models"][MINILM]["tasks"]["SciFact"]["recall@10"] == 0.78333
    text = edit(text)
    with pytest.raises(DataFormatError) as e:
        mteb.parse_reference(text, "ref.yaml")
    assert str(e.value) == message
