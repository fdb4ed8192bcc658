"""Dataset resolution and downloads, tested on files in the exact upstream formats, served by a
local HTTP server at the upstream URL paths (and as file:// URLs)."""

import hashlib
import json
import shutil
import socket
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from capgap import sources
from capgap.data import load_corpus
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


@pytest.fixture
def server(monkeypatch):
    """A local HTTP server. ``routes``: URL path -> bytes (else 404); a path in ``partial``
    announces its full Content-Length but sends half, then closes; ``hits``: paths asked for."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    routes, partial, hits = {}, set(), []

    class Handler(BaseHTTPRequestHandler):  # HTTP/1.0: the connection closes after each reply
        def do_GET(self):
            hits.append(self.path)
            if self.path not in routes:
                return self.send_error(404)
            body = routes[self.path]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2] if self.path in partial else body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield SimpleNamespace(url=f"http://127.0.0.1:{httpd.server_port}", routes=routes, partial=partial, hits=hits)
    httpd.shutdown()
    httpd.server_close()


BEIR_PATH = "/thakur/BEIR/datasets/scifact.zip"  # the official archive's path


def _lines(path):
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def test_download_beir_over_http(mirror, tmp_path, server, monkeypatch):
    monkeypatch.delenv("CAPGAP_DATA_MIRROR")
    z = _beir_zip(mirror, tmp_path)
    server.routes[BEIR_PATH] = z.read_bytes()
    md5 = hashlib.md5(z.read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    folder = download_beir("scifact", cache, url=server.url + BEIR_PATH, md5=md5)
    assert folder == cache / "scifact"
    for rel in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        assert (folder / rel).read_bytes() == (mirror / "scifact" / rel).read_bytes()
    assert sorted(p.name for p in cache.iterdir()) == ["scifact", "scifact.zip"]  # no temp file or folder
    assert hashlib.md5((cache / "scifact.zip").read_bytes()).hexdigest() == md5
    # loaded from the cache (offline: conftest), and reused without asking the server again
    rs = obtain("scifact", {"source": "beir"}, mirror=None, cache_dir=cache)
    assert rs.source["kind"] == "download:beir"
    assert len(rs.corpus) == _lines(mirror / "scifact" / "corpus.jsonl")
    assert download_beir("scifact", cache, url=server.url + BEIR_PATH, md5=md5) == folder
    assert server.hits == [BEIR_PATH]


def test_download_beir_checksum_mismatch(mirror, tmp_path, server):
    z = _beir_zip(mirror, tmp_path)
    server.routes[BEIR_PATH] = z.read_bytes()
    got = hashlib.md5(z.read_bytes()).hexdigest()
    url = server.url + BEIR_PATH
    with pytest.raises(DataFormatError) as e:
        download_beir("scifact", tmp_path / "cache", url=url, md5="0" * 32)
    msg = str(e.value)
    assert url in msg and "0" * 32 in msg and got in msg and "scifact.zip" in e.value.path
    assert list((tmp_path / "cache").iterdir()) == []  # nothing kept: not the archive, not a temp file
    # file:// URLs work too (pooch itself knows only network protocols)
    with pytest.raises(DataFormatError, match="md5"):
        download_beir("scifact", tmp_path / "cache", url=z.as_uri(), md5="0" * 32)
    assert download_beir("scifact", tmp_path / "cache", url=z.as_uri(), md5=got) == tmp_path / "cache" / "scifact"
    # the official scifact archive's published md5 is pinned
    assert sources.BEIR_MD5["scifact"] == "5f7d1de60b170fc8027bb7898e2efca1"


def test_download_limit_verifies_pinned_sha(mirror, tmp_path, server):
    """LIMIT's files at their GitHub raw path: /<commit>/data/<name>/<file>."""
    base = server.url + "/{commit}/data/{name}/{file}"
    for f in ("corpus.jsonl", "queries.jsonl", "qrels.jsonl"):
        server.routes[f"/{sources.LIMIT_COMMIT}/data/limit-small/{f}"] = (mirror / "limit-small" / f).read_bytes()
    folder = download_limit("limit-small", tmp_path / "dl", base_url=base)
    for f in ("corpus.jsonl", "queries.jsonl", "qrels.jsonl"):
        assert (folder / f).read_bytes() == (mirror / "limit-small" / f).read_bytes()
    # a file that differs from the pinned sha256 is rejected, naming the URL and both hashes
    bad = b'{"_id": "x", "text": "y"}\n'
    path = f"/{sources.LIMIT_COMMIT}/data/limit-small/corpus.jsonl"
    server.routes[path] = bad
    with pytest.raises(DataFormatError, match="sha256") as e:
        download_limit("limit-small", tmp_path / "dl2", base_url=base)
    msg = str(e.value)
    assert server.url + path in msg and hashlib.sha256(bad).hexdigest() in msg
    assert hashlib.sha256((mirror / "limit-small" / "corpus.jsonl").read_bytes()).hexdigest() in msg
    assert not (tmp_path / "dl2" / "limit-small" / "corpus.jsonl").exists()
    assert [p.name for p in (tmp_path / "dl2" / "limit-small").iterdir()] == []
    # the same from file:// URLs
    shutil.copytree(mirror / "limit-small", tmp_path / "bad" / "limit-small")
    (tmp_path / "bad" / "limit-small" / "corpus.jsonl").write_bytes(bad)
    with pytest.raises(DataFormatError, match="sha256"):
        download_limit("limit-small", tmp_path / "dl3", base_url=(tmp_path / "bad").as_uri() + "/{name}/{file}")


def test_download_bright_over_http(tmp_path, server):
    """One BRIGHT category at its Hugging Face path: /<revision>/<config>/<category>-00000-of-00001.parquet."""
    import pandas as pd

    examples = pd.DataFrame(
        {
            "id": ["0", "1"],
            "query": ["Why do cats purr?", "Do bees sleep?"],
            "gold_ids": [["d1", "d1"], ["d2"]],
            "gold_ids_long": [["d1"], ["d2"]],
            "excluded_ids": [["N/A"], ["d3"]],
        }
    )
    documents = pd.DataFrame({"id": ["d1", "d2", "d3", "d4"], "content": ["Purring.", "Bees rest.", "Bee farms.", " "]})
    for config, frame in (("examples", examples), ("documents", documents)):
        frame.to_parquet(tmp_path / f"{config}.parquet")
        server.routes[f"/main/{config}/biology-00000-of-00001.parquet"] = (tmp_path / f"{config}.parquet").read_bytes()
    base = server.url + "/{revision}/{config}/{category}-00000-of-00001.parquet"
    folder = sources.download_bright("biology", tmp_path / "cache", base_url=base)
    assert folder == tmp_path / "cache" / "bright-biology"
    corpus = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines()]
    # the blank document is written as it is; the loader leaves it out (data.gold_rule counts gold pointing at it)
    assert [d["_id"] for d in corpus] == ["d1", "d2", "d3", "d4"] and corpus[3]["text"] == " "
    assert load_corpus(folder / "corpus.jsonl").empty_ids == ("d4",)
    assert (folder / "qrels" / "test.tsv").read_text() == "query-id\tcorpus-id\tscore\n0\td1\t1\n1\td2\t1\n"
    assert (folder / "excluded.tsv").read_text() == "query-id\tcorpus-id\n1\td3\n"
    raw = tmp_path / "cache" / ".bright-raw" / "main" / "biology"
    assert (raw / "examples.parquet").read_bytes() == (tmp_path / "examples.parquet").read_bytes()
    assert sorted(p.name for p in raw.iterdir()) == ["documents.parquet", "examples.parquet"]


def test_silent_server_times_out(tmp_path):
    """A server that accepts the connection and never answers fails within the timeout."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)  # the kernel completes the handshakes; nobody ever reads or replies
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        t = time.perf_counter()
        with pytest.raises(OSError, match="(?i)timed? ?out"):
            download_beir("scifact", tmp_path / "b", url=url + BEIR_PATH, timeout=0.5)
        with pytest.raises(OSError, match="(?i)timed? ?out"):
            download_limit("limit-small", tmp_path / "l", base_url=url + "/{commit}/{name}/{file}", timeout=0.5)
        assert time.perf_counter() - t < 10
    assert list((tmp_path / "b").iterdir()) == [] and list((tmp_path / "l" / "limit-small").iterdir()) == []


def test_partial_download_is_never_trusted(mirror, tmp_path, server):
    """A transfer cut short (fewer bytes than its Content-Length) fails and leaves nothing that a
    later call would use, even where no hash is known; a later complete transfer works."""
    z = _beir_zip(mirror, tmp_path)
    server.routes[BEIR_PATH] = z.read_bytes()
    server.partial.add(BEIR_PATH)
    cache = tmp_path / "cache"
    with pytest.raises(OSError):
        download_beir("scifact", cache, url=server.url + BEIR_PATH, md5="")  # "": no md5 check
    assert list(cache.iterdir()) == []
    spec = {"source": "beir", "url": server.url + BEIR_PATH, "md5": ""}
    assert sources.availability("scifact", spec, mirror=tmp_path, cache_dir=cache) == "remote:offline"
    # LIMIT at an unpinned commit (no sha256 known)
    path = "/abc/data/limit-small/corpus.jsonl"
    server.routes[path] = (mirror / "limit-small" / "corpus.jsonl").read_bytes()
    server.partial.add(path)
    with pytest.raises(OSError):
        download_limit("limit-small", cache, base_url=server.url + "/{commit}/data/{name}/{file}", commit="abc")
    assert list((cache / "limit-small").iterdir()) == []
    # the complete transfer, later
    server.partial.clear()
    folder = download_beir("scifact", cache, url=server.url + BEIR_PATH, md5="")
    assert (folder / "corpus.jsonl").read_bytes() == (mirror / "scifact" / "corpus.jsonl").read_bytes()


def test_stale_archive_is_not_trusted(mirror, tmp_path, server):
    """A truncated archive already in the cache: with an md5 it is downloaded again; without one
    it is rejected and deleted, and the next call downloads it."""
    z = _beir_zip(mirror, tmp_path)
    data = z.read_bytes()
    server.routes[BEIR_PATH] = data
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "scifact.zip").write_bytes(data[: len(data) // 2])
    folder = download_beir("scifact", cache, url=server.url + BEIR_PATH, md5=hashlib.md5(data).hexdigest())
    assert server.hits == [BEIR_PATH] and (cache / "scifact.zip").read_bytes() == data
    shutil.rmtree(folder)
    (cache / "scifact.zip").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataFormatError, match="not a zip"):
        download_beir("scifact", cache, url=server.url + BEIR_PATH, md5="")
    assert list(cache.iterdir()) == []
    assert (download_beir("scifact", cache, url=server.url + BEIR_PATH, md5="") / "queries.jsonl").read_bytes() == (
        mirror / "scifact" / "queries.jsonl"
    ).read_bytes()


def test_offline_never_connects(tmp_path, server, monkeypatch):
    """Offline (conftest sets HF_HUB_OFFLINE=1), no source is downloaded, and no socket connects."""

    def refuse(*args):
        raise AssertionError(f"a connection was attempted offline: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    specs = {
        "scifact": {"source": "beir", "url": server.url + BEIR_PATH},
        "limit-small": {"source": "limit"},
        "bright-biology": {"source": "bright", "url": server.url + "/{revision}/{config}/{category}"},
    }
    for name, spec in specs.items():
        assert sources.availability(name, spec, mirror=tmp_path, cache_dir=tmp_path / "c") == "remote:offline"
        with pytest.raises(DatasetUnavailable) as e:
            obtain(name, spec, mirror=tmp_path, cache_dir=tmp_path / "c")
        assert "offline" in e.value.reason and "CAPGAP_OFFLINE" in e.value.hint
    assert server.hits == []


def test_http_error_is_unavailable(tmp_path, server, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    url = server.url + "/thakur/BEIR/datasets/nothing.zip"  # not served: 404
    with pytest.raises(DatasetUnavailable, match="download failed") as e:
        obtain("nothing", {"source": "beir", "url": url}, mirror=tmp_path, cache_dir=tmp_path / "c")
    assert "404" in e.value.reason and server.hits == ["/thakur/BEIR/datasets/nothing.zip"]


LIMIT_FILES = ["corpus.jsonl", "queries.jsonl", "qrels.jsonl"]


@pytest.mark.parametrize(
    "case, spec, files, expected",
    [
        ("mirror", {"source": "limit", "mirror_name": "m"}, ["mirror/m/"], "local"),
        (
            "generated",
            {"source": "generated", "generator": {"n_queries": 3, "pool_size": 4, "n_distractors": 2}},
            [],
            "local",
        ),
        ("path missing, generated", {"source": "generated", "path": "nowhere"}, [], "remote:offline"),
        ("path missing, cached", {"source": "beir", "path": "nowhere"}, ["cache/x/"], "remote:offline"),
        ("beir cached", {"source": "beir", "beir_name": "b"}, ["cache/b/"], "local"),
        ("limit partly cached", {"source": "limit"}, ["cache/x/corpus.jsonl"], "remote:offline"),
        ("limit cached", {"source": "limit"}, [f"cache/x/{f}" for f in LIMIT_FILES], "local"),
        (
            "bright partly cached",
            {"source": "bright", "category": "pony"},
            ["cache/bright-pony/excluded.tsv"],
            "remote:offline",
        ),
        (
            "bright cached",
            {"source": "bright", "category": "pony"},
            ["cache/bright-pony/", "cache/bright-pony/excluded.tsv"],
            "local",
        ),
        ("undownloadable, cached", {"source": "local"}, ["cache/x/"], "remote:offline"),
    ],
)
def test_availability_and_obtain_agree(tmp_path, monkeypatch, case, spec, files, expected):
    """``availability`` says "local" exactly when ``obtain`` (offline) succeeds: both ask ``locate``.
    ``files``: "folder/" is a complete BEIR-layout folder, else one LIMIT-format file."""
    monkeypatch.chdir(tmp_path)
    contents = {
        "corpus.jsonl": '{"_id": "d1", "title": "", "text": "Cats purr."}\n',
        "queries.jsonl": '{"_id": "q1", "text": "Who purrs?"}\n',
        "qrels.jsonl": '{"query-id": "q1", "corpus-id": "d1", "score": 1}\n',
        "qrels/test.tsv": "query-id\tcorpus-id\tscore\nq1\td1\t1\n",
        "excluded.tsv": "query-id\tcorpus-id\n",
    }
    for rel in files:
        folder, _, single = rel.rpartition("/")
        for n in [single] if single else ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"]:
            (tmp_path / folder / n).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / folder / n).write_text(contents[n])
    args = dict(mirror=tmp_path / "mirror", cache_dir=tmp_path / "cache")
    assert sources.availability("x", spec, **args) == expected
    if expected == "local":
        assert len(obtain("x", spec, **args).queries) == (3 if spec["source"] == "generated" else 1)
    else:
        with pytest.raises(DatasetUnavailable):
            obtain("x", spec, **args)


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
    rs = obtain(
        "limit-x",
        {"source": "limit", "mirror_name": "limit-small", "expand": {"n_docs": 300, "seed": 1}},
        mirror=mirror,
    )
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
