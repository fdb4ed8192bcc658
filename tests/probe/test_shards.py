"""The index and the probe scattered over shards and gathered (issue 30): the shard ranges by
hand, and the gathered files byte for byte against the unsharded stage's, with the bundled
MiniLM on CPU, on a generated, a near-miss and a duplicate-document set; text-tied queries and
the duplicates' second solve on a synthetic geometry."""

from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace as NS

import numpy as np
import pytest

from capgap import index as index_mod
from capgap import stages
from capgap.data import Corpus
from capgap.errors import DataFormatError
from capgap.index import build_index, build_index_shard, gather_index, shard_chunks
from capgap.probe import probe
from capgap.probe.result import ProbeResult
from capgap.probe.shards import gather_shards, probe_shard, shard_batches

from ..core.test_index import HashEncoder

DATA = Path(__file__).parents[1] / "data"
MINILM = {"model": "sentence-transformers/all-MiniLM-L6-v2", "batch_size": 4}
PROBE_CFG = {"C": 1000.0, "C_max": 1.0e8, "eps": 1e-3, "max_iter": 2000, "lp_check_max_docs": 2000, "batch_size": None}
SPECS = {  # as tests/configs/tiny.yaml (limit-gen, near-miss) and a tests/data case with identical documents
    "limit-gen": {
        "source": "generated",
        "split": {"heldout_fraction": 0.5, "seed": 0},
        "generator": {"n_queries": 40, "pool_size": 12, "n_distractors": 48, "attributes_per_doc": 12, "seed": 0},
    },
    "near-miss": {
        "source": "near-miss",
        "split": {"heldout_fraction": 0.5, "seed": 0},
        "near_miss": {"n_people": 12, "n_train": 16, "n_heldout": 16, "seed": 0},
    },
    "tie-handling-inconsistent": {
        "source": "local",
        "path": str(DATA / "tie-handling-inconsistent"),
        "split": {"heldout_fraction": 0.5, "seed": 0},
    },
}


def test_shard_chunks_by_hand():
    # 10 documents in chunks of 3: chunks 0..3 (the last holds 1 document); 3 shards take
    # floor(k * 4 / 3) .. floor((k + 1) * 4 / 3): [0, 1), [1, 2), [2, 4)
    assert [list(shard_chunks(10, 3, k, chunk_size=3)) for k in range(3)] == [[0], [1], [2, 3]]
    assert [list(shard_chunks(10, 1, 0, chunk_size=3))] == [[0, 1, 2, 3]]
    # more shards than chunks (4 documents: 2 chunks; floor(k * 2 / 3) = 0, 0, 1, 2): the first
    # shard is empty, each chunk still in exactly one shard
    assert [list(shard_chunks(4, 3, k, chunk_size=3)) for k in range(3)] == [[], [0], [1]]
    with pytest.raises(ValueError, match="shard 3 of 3"):
        shard_chunks(10, 3, 3)


def test_shard_batches_by_hand():
    # 8 batches over 3 shards: floor(k * 8 / 3) = 0, 2, 5, 8
    assert [list(shard_batches(8, 3, k)) for k in range(3)] == [[0, 1], [2, 3, 4], [5, 6, 7]]
    assert [list(shard_batches(2, 3, k)) for k in range(3)] == [[], [0], [1]]
    with pytest.raises(ValueError):
        shard_batches(8, 0, 0)


def test_stage_shard_names():
    assert stages.shard_of("1-of-3") == (0, 3) and stages.shard_of("3-of-3") == (2, 3)
    for bad in ("0-of-3", "4-of-3", "1of3", "a-of-3"):
        with pytest.raises(ValueError, match="expected '<i>-of-<n>'"):
            stages.shard_of(bad)


def test_shard_labels_integral_floats_and_inverse():
    """The rules' shard names (workflow/rules/common.smk's shard_files, the report's stage
    table): 1 shard is no shard job; 2.0, which the schema's integer admits, is 2; each name
    parses back with shard_of; 2.5, 0 and True are refused."""
    from capgap.paths import shard_labels

    assert shard_labels(1) == [] and shard_labels(1.0) == []
    assert shard_labels(2.0) == ["1-of-2", "2-of-2"] == shard_labels(2)
    assert [stages.shard_of(x) for x in shard_labels(3)] == [(0, 3), (1, 3), (2, 3)]
    assert shard_labels(np.int64(3)) == shard_labels(3)
    for bad in (2.5, 0, -1, True, np.bool_(True), "2", None, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="expected a positive integer"):
            shard_labels(bad)


def _files(folder: Path, names) -> dict:
    return {n: (folder / n).read_bytes() for n in names}


def test_gathered_index_is_byte_identical_with_minilm(tmp_path):
    """23 documents of very different lengths (sentence-transformers sorts a call's texts by
    length before batching them, 4 to a forward pass here), chunks of 5: 3 shards take chunks
    [0], [1, 2], [3, 4] (shard_chunks); the gathered files equal the one-job build's bytes."""
    from capgap.encoders import EncoderSpec, load_encoder

    texts = tuple(" ".join(["word"] * (1 + (7 * i) % 23) + [f"doc {i}"]) for i in range(23))
    corpus = Corpus(tuple(f"d{i}" for i in range(23)), ("",) * 23, texts)
    enc = load_encoder(EncoderSpec.from_config("minilm", MINILM), threads=1)
    build_index(corpus, enc, tmp_path / "whole", chunk_size=5, progress=False)
    files = [tmp_path / "shards" / f"{k + 1}-of-3.npy" for k in range(3)]
    rows = [len(build_index_shard(corpus, enc, f, 3, k, chunk_size=5, progress=False)) for k, f in enumerate(files)]
    assert rows == [5, 10, 8]
    gather_index(corpus, files, tmp_path / "gathered")
    names = ("embeddings.npy", "doc_ids.json", "fingerprint.json")
    assert _files(tmp_path / "gathered", names) == _files(tmp_path / "whole", names)
    # a missing shard is refused, naming the first file that does not fit
    with pytest.raises(DataFormatError, match=r"1-of-3\.json: field 'start': shard 0 of 3 .* expected shard 0 of 2"):
        gather_index(corpus, files[:1] + files[2:], tmp_path / "bad")


def test_gather_index_refuses_shards_of_another_corpus(tmp_path):
    enc = HashEncoder()
    corpus = Corpus(tuple(f"d{i}" for i in range(10)), ("",) * 10, tuple(f"text {i}" for i in range(10)))
    files = [tmp_path / f"{k + 1}-of-2.npy" for k in range(2)]
    for k, f in enumerate(files):
        build_index_shard(corpus, enc, f, 2, k, chunk_size=3, progress=False)
    other = Corpus(corpus.ids, corpus.titles, corpus.texts[:-1] + ("changed",))
    with pytest.raises(DataFormatError, match="corpus_sha256"):
        gather_index(other, files, tmp_path / "idx")
    idx = gather_index(corpus, files, tmp_path / "idx")
    assert np.array_equal(idx.embeddings[9], enc.vec("text 9"))


def _same_results(a: list[ProbeResult], b: list[ProbeResult]) -> None:
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        for f in fields(ProbeResult):
            x, y = getattr(ra, f.name), getattr(rb, f.name)
            if isinstance(x, np.ndarray):
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), f.name
            else:
                assert repr(x) == repr(y), f.name  # repr: NaN == NaN, floats to the last bit


@pytest.mark.parametrize("order", [True, False])
def test_probe_shards_equal_one_probe_call(order, monkeypatch):
    """A geometry with text-tied queries (labels shared by 5 queries, not adjacent) and
    identical document copies (rows 100..109 = rows 0..9: the duplicate outcome, and queries
    whose gold holds two documents with copies, which the order witness refines in the shards'
    workers, or, without it, the second, graded solve in the gather): 3 shards and their gather
    give every field of every ProbeResult of one probe() call, bit for bit."""
    import capgap.probe.finish as F
    from capgap.probe.refine import ORDERED, REFINED

    if not order:
        monkeypatch.setattr(F, "order_witness", lambda *a, **k: None)
    rng = np.random.default_rng(7)
    D = rng.standard_normal((120, 12)).astype(np.float32)
    D[100:110] = D[0:10]
    gold = [sorted(rng.choice(120, size=1 + q % 4, replace=False).tolist()) for q in range(30)]
    gold += [[a, a + 1, 20 + a, 22 + a] for a in range(0, 10, 2)] + [[a, 30 + a] for a in range(10)]
    ties = [f"t{q % 9}" if q % 3 == 0 else f"q{q}" for q in range(len(gold))]  # t0: q0, q9, q18, q27, q36; ...
    kw = dict(tie_groups=ties, depth=5, C=1000.0, C_max=1e8, eps=1e-3, max_iter=500, lp_check_max_docs=2000)
    whole = probe(D, gold, threads=1, **kw)
    assert any(r.extra.get("refined") == (ORDERED if order else REFINED) for r in whole)  # the path is exercised
    assert any(r.tied == 5 for r in whole)
    parts = [probe_shard(D, gold, 3, k, threads=1, **kw) for k in range(3)]
    assert all(p.results for p in parts)
    for p in parts:  # every tie group inside one shard
        labels = {ties[q] for q in p.results}
        assert not any(ties[q] in labels for other in parts if other is not p for q in other.results)
    assert sorted(q for p in parts for q in p.results) == list(range(len(gold)))
    _same_results(gather_shards(D, gold, parts, threads=2, **kw), whole)
    with pytest.raises(ValueError, match="shard 1 of 3"):
        gather_shards(D, gold, [parts[0], parts[0], parts[2]], threads=1, **kw)


@pytest.mark.parametrize("name", list(SPECS))
def test_sharded_stages_write_the_unsharded_bytes(name, tmp_path, monkeypatch, mirror):
    """The DAG's stage functions on a real set with the bundled MiniLM: index and probe in one
    job, then 3 index_shard jobs (chunks of 8 documents, so the shards split the corpus) + the
    index gather and 3 probe_shard jobs + the probe gather: every output file byte-identical."""
    monkeypatch.setattr(index_mod, "CHUNK_SIZE", 8)
    data = tmp_path / "data"
    stages.data(None, [data], NS(dataset=name, spec=SPECS[name]))
    enc = dict(encoder_name="minilm", encoder=MINILM)
    out = {}
    for mode in ("whole", "sharded"):
        d = tmp_path / mode
        fp = d / "index" / "fingerprint.json"
        if mode == "whole":
            stages.index(NS(data=data), NS(fingerprint=fp), NS(**enc), threads=1)
        else:
            shard_files = [d / "index_shards" / f"{k}-of-3.npy" for k in (1, 2, 3)]
            for k, f in enumerate(shard_files, 1):
                stages.index_shard(
                    NS(data=data),
                    NS(embeddings=f, meta=f.with_suffix(".json")),
                    NS(**enc, shard=f"{k}-of-3"),
                    threads=1,
                )
            stages.index(NS(data=data, shards=shard_files), NS(fingerprint=fp), NS(**enc), threads=1)
        params = NS(**enc, probe=PROBE_CFG, ks=[2, 10, 20], ndcg_k=10)
        outputs = NS(
            metrics=d / "probe" / "metrics.csv",
            per_query=d / "probe" / "per_query.jsonl",
            run=d / "probe" / "run.trec",
            w=d / "probe" / "w.npz",
        )
        inputs = NS(data=data, fingerprint=fp, embeddings=fp.parent / "embeddings.npy")
        if mode == "whole":
            stages.probe(inputs, outputs, params, threads=1)
        else:
            parts = [d / "probe_shards" / f"{k}-of-3.pkl" for k in (1, 2, 3)]
            for k, f in enumerate(parts, 1):
                got = stages.probe_shard(inputs, NS(results=f), NS(**vars(params), shard=f"{k}-of-3"), threads=2)
                assert got["shard"] == k - 1 and got["n_shards"] == 3
            stages.probe(NS(**vars(inputs), shards=parts), outputs, params, threads=2)
        out[mode] = {
            **_files(d / "index", ("embeddings.npy", "doc_ids.json", "fingerprint.json")),
            **_files(d / "probe", ("metrics.csv", "per_query.jsonl", "run.trec", "w.npz")),
        }
    n_docs = len(np.load(tmp_path / "whole" / "index" / "embeddings.npy"))
    assert n_docs > 16  # at least 3 chunks of 8: every index shard embeds documents
    assert out["sharded"].keys() == out["whole"].keys()
    for f in out["whole"]:
        assert out["sharded"][f] == out["whole"][f], f


def test_only_the_solving_shards_copy_the_index(monkeypatch):
    """``probe_shard`` runs batches and makes the index's column-major copy (``setup.transposed``);
    ``gather_shards`` runs none (the second solve makes its own) and makes none for its own
    environment."""
    from capgap.probe import setup

    made = []
    real = setup.transposed
    monkeypatch.setattr(setup, "transposed", lambda docs: made.append(docs.shape) or real(docs))
    rng = np.random.default_rng(3)
    D = rng.standard_normal((80, 6)).astype(np.float32)
    gold = [rng.choice(80, size=2, replace=False).tolist() for _ in range(12)]
    parts = [probe_shard(D, gold, 2, k, threads=1) for k in range(2)]
    assert made == [(80, 6)] * 2
    made.clear()
    _same_results(gather_shards(D, gold, parts, threads=1), probe(D, gold, threads=1))
    assert made == [(80, 6)]  # probe()'s own; the gather made none (no duplicates here: no second solve)
