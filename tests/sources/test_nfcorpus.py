"""NFCorpus (BEIR's official nfcorpus.zip in the data mirror) through capgap's loader, checked
against counts derived here with plain Python from the mirror's files and against the figures
the mirror's README states. Needs $CAPGAP_DATA_MIRROR with nfcorpus/ (a failure in CI when it
is missing: see the ``nfcorpus_dir`` fixture)."""

import json
import statistics
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import yaml

from capgap.data import describe, load_beir_dir
from capgap.sources import prepare

from ..conftest import ROOT

SPLIT = {"train_qrels": ["train"], "heldout_qrels": ["test"]}


def _raw_qrels(path: Path) -> list[tuple[int, str, str, int]]:
    """(line, query, doc, grade) of a BEIR qrels TSV: split on LF, the CR of CRLF cut off,
    the header skipped. Independent of capgap's readers."""
    rows = []
    for i, line in enumerate(path.read_bytes().decode("utf-8").split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line or (i == 1 and line.startswith("query-id")):
            continue
        q, d, s = line.split("\t")
        rows.append((i, q, d, int(s)))
    return rows


@pytest.fixture(scope="module")
def raw(nfcorpus_dir):
    """Plain-Python facts about the mirror's NFCorpus files."""
    files = {stem: _raw_qrels(nfcorpus_dir / "qrels" / f"{stem}.tsv") for stem in ("train", "dev", "test")}
    judged = {stem: {q for _, q, _, s in rows if s > 0} for stem, rows in files.items()}
    test_gold = defaultdict(dict)
    for _, q, d, s in files["test"]:
        if s > 0:
            test_gold[q][d] = s
    corpus = [
        json.loads(line) for line in (nfcorpus_dir / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line
    ]
    queries = [
        json.loads(line) for line in (nfcorpus_dir / "queries.jsonl").read_text(encoding="utf-8").splitlines() if line
    ]
    kept = judged["train"] | judged["test"]

    def groups(texts):
        c = Counter(texts)
        return sum(1 for n in c.values() if n > 1), sum(n for n in c.values() if n > 1)

    by_pair = defaultdict(set)
    for stem, rows in files.items():
        for _, q, d, s in rows:
            by_pair[(q, d)].add((stem, s))
    return {
        "files": files,
        "judged": judged,
        "test_gold": test_gold,
        "n_docs": len(corpus),
        "n_queries": len(queries),
        "crlf": {stem: (nfcorpus_dir / "qrels" / f"{stem}.tsv").read_bytes().count(b"\r\n") for stem in files},
        "dup_docs": groups(unicodedata.normalize("NFC", f"{c.get('title') or ''} {c['text']}".strip()) for c in corpus),
        "dup_queries": groups(
            " ".join(unicodedata.normalize("NFC", q["text"]).split()) for q in queries if q["_id"] in kept
        ),
        "pairs_in_two_files": sum(1 for v in by_pair.values() if len({f for f, _ in v}) > 1),
        "grade_conflicts": sum(1 for v in by_pair.values() if len({s for _, s in v}) > 1),
    }


@pytest.fixture(scope="module")
def rs(nfcorpus_dir):
    return load_beir_dir(nfcorpus_dir, "nfcorpus", SPLIT)


def test_mirror_files_are_what_the_readme_says(raw):
    # the mirror README (NFCorpus section): every qrels line CRLF, 3,633 docs, 3,237 queries
    assert raw["crlf"] == {"train": 110575 + 1, "dev": 11385 + 1, "test": 12334 + 1}  # + the header line
    assert (raw["n_docs"], raw["n_queries"]) == (3633, 3237)
    assert {k: len(v) for k, v in raw["judged"].items()} == {"train": 2590, "dev": 324, "test": 323}
    assert Counter(s for *_, s in raw["files"]["test"]) == {1: 11758, 2: 576}
    assert Counter(s for *_, s in raw["files"]["train"]) == {1: 110575}
    # the three files judge disjoint query sets, so no pair is in two files and none conflicts
    assert not (
        raw["judged"]["train"] & raw["judged"]["dev"]
        or raw["judged"]["train"] & raw["judged"]["test"]
        or raw["judged"]["dev"] & raw["judged"]["test"]
    )
    assert raw["pairs_in_two_files"] == 0 and raw["grade_conflicts"] == 0


def test_loader_counts_equal_the_plain_python_counts(rs, raw):
    assert len(rs.corpus) == raw["n_docs"] == 3633
    assert set(rs.split.train) == raw["judged"]["train"] and len(rs.split.train) == 2590
    assert set(rs.split.heldout) == raw["judged"]["test"] and len(rs.split.heldout) == 323
    assert len(rs.queries) == 2590 + 323
    # gold per held-out query: the test file's positive grades, as written (2 direct, 1 indirect)
    assert {q: rs.qrels.gold(q) for q in rs.split.heldout} == raw["test_gold"]
    sizes = sorted(len(rs.qrels.gold(q)) for q in rs.split.heldout)
    want = sorted(len(g) for g in raw["test_gold"].values())
    assert sizes == want
    assert (sizes[0], statistics.median(sizes), sizes[-1]) == (1, 16, 475)  # README: min 1 / median 16 / max 475
    assert round(statistics.mean(sizes), 1) == 38.2 and sum(sizes) == 12334
    assert sum(1 for n in sizes if n >= 2) == 300
    assert Counter(s for q in rs.split.heldout for s in rs.qrels.gold(q).values()) == {1: 11758, 2: 576}
    assert sum(len(rs.qrels.gold(q)) for q in rs.split.train) == 110575
    # CRLF: no id carries the '\r'
    assert not any("\r" in q or any("\r" in d for d in rs.qrels.judgements[q]) for q in rs.queries.ids)


def test_dev_queries_are_in_neither_split_and_counted(rs, raw):
    dev = raw["judged"]["dev"]
    assert not dev & (set(rs.split.train) | set(rs.split.heldout)) and not dev & set(rs.queries.ids)
    assert dict(rs.dropped_unused) == {"dev": len(dev)} == {"dev": 324}
    assert (
        rs.dropped_queries
        == raw["n_queries"] - len(raw["judged"]["train"] | raw["judged"]["dev"] | raw["judged"]["test"])
        == 0
    )
    assert (
        rs.split.rule
        == "dataset qrels files: train=['train'], heldout=['test'], unused=['dev'] (324 queries judged only there dropped)"
    )


def test_all_three_files_merge_without_grade_conflicts(nfcorpus_dir, raw):
    # a fraction split merges train, dev and test: the cross-file grade check passes on the real files
    merged = load_beir_dir(nfcorpus_dir, "nfcorpus", {"heldout_fraction": 0.5, "seed": 0, "train_qrels": []})
    assert len(merged.queries) == 3237 and merged.qrels.n_judgements() == sum(len(r) for r in raw["files"].values())


def test_nfcorpus_config_status_json(nfcorpus_dir, raw, monkeypatch, tmp_path):
    """What the data rule records for config/nfcorpus.yaml's nfcorpus (sources.prepare)."""
    monkeypatch.setenv("CAPGAP_CACHE", str(tmp_path / "cache"))
    cfg = yaml.safe_load((ROOT / "config" / "nfcorpus.yaml").read_text())
    spec = cfg["datasets"]["nfcorpus"]
    assert spec["encoders"] == ["minilm"] and spec["split"] == SPLIT and spec["source"] == "beir"
    assert not cfg["compress"]["enabled"] and not cfg["colbert"]["enabled"]
    _, st = prepare("nfcorpus", {k: v for k, v in spec.items() if k != "encoders"}, mirror=nfcorpus_dir.parent)
    assert st["available"] and st["source"]["kind"] == "mirror"
    assert (st["n_docs"], st["n_queries"], st["n_train"], st["n_heldout"]) == (3633, 2913, 2590, 323)
    assert st["dropped_queries_without_gold"] == 0 and st["dropped_queries_unused_qrels"] == {"dev": 324}
    # README: 40 groups of identical documents (80 documents) and 17 groups of identical queries;
    # counted here from the files, the 17 are among the kept (train + test) queries (all 3,237: 21)
    assert (st["duplicate_documents"]["groups"], st["duplicate_documents"]["items"]) == raw["dup_docs"] == (40, 80)
    assert (st["duplicate_queries"]["groups"], st["duplicate_queries"]["items"]) == raw["dup_queries"] == (17, 34)
    assert st == {
        **describe(load_beir_dir(nfcorpus_dir, "nfcorpus", SPLIT)),
        "source": st["source"],
        "dataset": "nfcorpus",
        "available": True,
    }
