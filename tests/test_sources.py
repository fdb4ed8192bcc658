"""Dataset resolution and downloads, tested on files in the exact upstream formats (file:// URLs)."""

import hashlib
import shutil
import time
import zipfile

import pytest

from capgap import sources
from capgap.errors import DataFormatError, DatasetUnavailable
from capgap.sources import download_beir, download_limit, obtain


def _beir_zip(mirror, tmp_path, name="scifact"):
    """A zip in the official BEIR archive layout: <name>/corpus.jsonl, queries.jsonl, qrels/*.tsv."""
    z = tmp_path / f"{name}.zip"
    src = mirror / name
    with zipfile.ZipFile(z, "w") as zf:
        for p in sorted(src.rglob("*")):
            if p.is_file():
                zf.write(p, f"{name}/{p.relative_to(src)}")
    return z


def test_download_beir_from_archive(mirror, tmp_path):
    z = _beir_zip(mirror, tmp_path)
    md5 = hashlib.md5(z.read_bytes()).hexdigest()
    folder = download_beir("scifact", tmp_path / "cache", url=z.as_uri(), md5=md5)
    assert (folder / "corpus.jsonl").read_bytes() == (mirror / "scifact" / "corpus.jsonl").read_bytes()
    assert (folder / "qrels" / "test.tsv").is_file()
    assert not list((tmp_path / "cache").glob(".scifact.*"))  # no temp folder left behind


def test_download_beir_checksum_mismatch(mirror, tmp_path):
    z = _beir_zip(mirror, tmp_path)
    with pytest.raises(DataFormatError, match="md5"):
        download_beir("scifact", tmp_path / "cache", url=z.as_uri(), md5="0" * 32)
    assert not (tmp_path / "cache" / "scifact").exists()
    # the official scifact archive's published md5 is pinned
    assert sources.BEIR_MD5["scifact"] == "5f7d1de60b170fc8027bb7898e2efca1"


def test_download_limit_verifies_pinned_sha(mirror, tmp_path):
    base = (mirror.as_uri()) + "/{name}/{file}"
    folder = download_limit("limit-small", tmp_path, base_url=base)
    for f in ("corpus.jsonl", "queries.jsonl", "qrels.jsonl"):
        assert (folder / f).read_bytes() == (mirror / "limit-small" / f).read_bytes()
    # a file that differs from the pinned sha256 is rejected
    bad = tmp_path / "bad" / "limit-small"
    shutil.copytree(mirror / "limit-small", bad)
    (bad / "corpus.jsonl").write_text('{"_id": "x", "text": "y"}\n')
    with pytest.raises(DataFormatError, match="sha256"):
        download_limit("limit-small", tmp_path / "dl2", base_url=(tmp_path / "bad").as_uri() + "/{name}/{file}")


def test_obtain_order_mirror_then_generated(mirror, tmp_path):
    rs = obtain("limit-small", {"source": "limit"}, mirror=mirror)
    assert rs.source["kind"] == "mirror" and len(rs.corpus) == 46
    assert set(rs.source["sha256"]) == {"corpus.jsonl", "queries.jsonl", "qrels.jsonl"}
    rs = obtain("x", {"source": "local", "path": str(mirror / "limit-small")})
    assert rs.source["kind"] == "path"
    rs = obtain("gen", {"source": "generated", "generator": {"n_queries": 5, "pool_size": 4, "n_distractors": 3}})
    assert rs.source["kind"] == "generated" and len(rs.queries) == 5


def test_offline_without_mirror_is_unavailable_fast(tmp_path, monkeypatch):
    monkeypatch.delenv("CAPGAP_DATA_MIRROR", raising=False)
    t = time.perf_counter()
    with pytest.raises(DatasetUnavailable) as e:
        obtain("scifact", {"source": "beir"}, mirror=None, cache_dir=tmp_path)
    assert time.perf_counter() - t < 5  # no network attempt offline
    assert "offline" in e.value.reason and "CAPGAP_DATA_MIRROR" in e.value.hint


def test_download_failure_is_unavailable(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("CAPGAP_OFFLINE", "0")
    spec = {"source": "beir", "url": (tmp_path / "missing.zip").as_uri()}
    with pytest.raises(DatasetUnavailable, match="download failed"):
        obtain("nothing", spec, mirror=tmp_path, cache_dir=tmp_path / "c")


def test_availability_classes(mirror, tmp_path, monkeypatch):
    from capgap.sources import availability

    monkeypatch.delenv("CAPGAP_DATA_MIRROR", raising=False)
    assert availability("limit-small", {"source": "limit"}, mirror=mirror) == "local"
    assert availability("g", {"source": "generated"}) == "local"
    assert availability("limit-small", {"source": "limit"}, mirror=tmp_path, cache_dir=tmp_path) == "remote:offline"
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert availability("limit-small", {"source": "limit"}, mirror=tmp_path, cache_dir=tmp_path) == "remote:online"


def test_earlier_download_is_used_offline(mirror, tmp_path, monkeypatch):
    monkeypatch.delenv("CAPGAP_DATA_MIRROR", raising=False)
    download_limit("limit-small", tmp_path, base_url=mirror.as_uri() + "/{name}/{file}")
    rs = obtain("limit-small", {"source": "limit"}, mirror=None, cache_dir=tmp_path)  # offline (conftest)
    assert rs.source["kind"] == "download:limit" and len(rs.queries) == 1000


def test_outputs_have_usual_permissions(tmp_path):
    import os

    from capgap.io import write_text

    write_text(tmp_path / "x.txt", "hi")
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "x.txt").stat().st_mode & 0o777 == 0o666 & ~mask


def test_limit_expanded_from_mirror(mirror):
    """limit-50k's recipe at a small size: LIMIT-small's real queries/qrels/split, grown corpus."""
    from capgap.sources import obtain

    base = obtain("limit-small", {"source": "limit"}, mirror=mirror)
    rs = obtain("limit-x", {"source": "limit", "mirror_name": "limit-small", "expand": {"n_docs": 300, "seed": 1}}, mirror=mirror)
    assert len(rs.corpus) == 300 and set(base.corpus.ids) <= set(rs.corpus.ids)
    assert rs.queries == base.queries and rs.qrels.judgements == base.qrels.judgements
    assert rs.split.train == base.split.train
    assert rs.source["kind"] == "mirror" and rs.source["expanded"]["n_real"] == len(base.corpus) == 46
    # no distractor likes any query's attribute ("Who likes X?" -> X), not even as part of a
    # longer attribute: checked on whole words of the parsed attribute lists
    from capgap.generate import parse_likes

    asked = {t.removeprefix("Who likes ").removesuffix("?").lower() for t in base.queries.texts}
    new = [t for d, t in zip(rs.corpus.ids, rs.corpus.texts) if d not in set(base.corpus.ids)]
    assert len(new) == 254
    for t in new:
        for a in parse_likes(t)[1]:
            w = a.lower().split()
            assert not any(" ".join(w[i:j]) in asked for i in range(len(w)) for j in range(i + 1, len(w) + 1)), a
