"""Where a dataset comes from: explicit path, offline data mirror, generator, or download.

Public API
----------
- ``obtain(name, spec, mirror=None, cache_dir=None)`` -> ``RetrievalSet``; raises
  ``DatasetUnavailable`` (with a hint for the user) when no source works.
- ``locate(name, spec, mirror=None, cache_dir=None)`` -> ``(kind, folder)``: the one decision
  of where a dataset comes from, behind both ``availability`` and ``obtain``.
- ``download_beir(name, dest, url=None, md5=None, timeout=30)``: the official BEIR zip,
  md5-verified, extracted atomically.
- ``download_limit(name, dest, base_url=None, commit=LIMIT_COMMIT, timeout=30)``: LIMIT's
  JSONL files from the google-deepmind/limit GitHub repository at a pinned commit,
  sha256-verified where the hash is pinned.
- ``download_bright(category, dest, base_url=None, revision=BRIGHT_REVISION, long=False)``:
  one BRIGHT category (HF dataset ``xlangai/BRIGHT``: configs ``examples`` and ``documents``,
  one parquet file per category), converted once into BEIR layout plus ``excluded.tsv``
  (``bright_to_beir``).
- ``is_offline()``: true when ``HF_HUB_OFFLINE``/``CAPGAP_OFFLINE`` is set; no network is
  tried then.

Downloads use pooch (L. Uieda et al., "Pooch: A friend to fetch your data files", JOSS 5(45):1943,
2020, doi:10.21105/joss.01943): ``pooch.retrieve`` streams into a temporary file, verifies the
hash and only then renames it into place (``_retrieve``).

Resolution order for a dataset spec (config ``datasets.<name>``), decided by ``locate``: ``path``
(a local BEIR-layout folder; configured but missing: unavailable) ->
``$CAPGAP_DATA_MIRROR/<mirror_name>`` -> ``generated`` / ``near-miss`` (no files needed) -> an earlier download
in the cache -> download (``source: beir``, ``limit`` or ``bright``) unless offline ->
``DatasetUnavailable``.

Exclusions (``RetrievalSet.excluded``): BRIGHT's ``excluded_ids`` (``["N/A"]`` = none) and, for
BEIR sets whose queries are also documents (ArguAna, Quora: ``BEIR_SELF_RETRIEVAL``, or
``ignore_identical_ids: true`` in the config), the document whose id equals the query id, as
BEIR's ``EvaluateRetrieval(ignore_identical_ids=True)`` does. Excluded documents are removed
from every method's ranking before top-k, and the probe treats them as neither gold nor
non-gold.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import urllib.parse
import urllib.request
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Mapping

from .config import item_defaults
from .data import RetrievalSet, assemble, load_beir_dir, self_retrieval_exclusions
from .errors import DataFormatError, DatasetUnavailable
from .io import _umask, sha256_file

log = logging.getLogger(__name__)

_SOURCE_DEFAULT = item_defaults("datasets")["source"]
_NEAR_MISS_TYPES = item_defaults("datasets", "near_miss")["types"]  # the schema holds every default (capgap.config)
MIRROR_ENV = "CAPGAP_DATA_MIRROR"
BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"
# md5 of the official archives as the BEIR README publishes them (the paper's 7 BEIR sets as
# capgap chooses them, see README "Reproduce the paper").
BEIR_MD5 = {
    "scifact": "5f7d1de60b170fc8027bb7898e2efca1",
    "trec-covid": "ce62140cb23feb9becf6270d0d1fe6d1",
    "nfcorpus": "a89dba18a62ef92f7d323ec890a0d38d",
    "fiqa": "17918ed23cd04fb15047f73e6c3bd9d9",
    "arguana": "8ad3e3c2a5867cdced806d6503f29b99",
    "scidocs": "38121350fc3a4d2f48850f6aff52e4a9",
    "quora": "18fb154900ba42a600f84b839c173167",
}
# BEIR evaluates these with ignore_identical_ids=True: their queries are also corpus documents.
BEIR_SELF_RETRIEVAL = frozenset({"arguana", "quora"})

BRIGHT_URL = "https://huggingface.co/datasets/xlangai/BRIGHT/resolve/{revision}/{config}/{category}-00000-of-00001.parquet"
BRIGHT_REVISION = "main"  # pin a commit with `revision:` in the dataset's config
BRIGHT_CATEGORIES = ("biology", "earth_science", "economics", "psychology", "robotics", "stackoverflow",
                     "sustainable_living", "leetcode", "pony", "aops", "theoremqa_theorems", "theoremqa_questions")

LIMIT_COMMIT = "90c5dd3a7c3c0d68bc6cc7a0c5b0f4ca124dfdcb"
LIMIT_RAW = "https://raw.githubusercontent.com/google-deepmind/limit/{commit}/data/{name}/{file}"
LIMIT_FILES = ("corpus.jsonl", "queries.jsonl", "qrels.jsonl")
# sha256 of the files at LIMIT_COMMIT (google-deepmind/limit).
LIMIT_SHA256 = {
    ("limit-small", "corpus.jsonl"): "ebc38fa10c96fa02e4501e41968edf586efffc6241b6cd10f1c8757c1854dc53",
    ("limit-small", "queries.jsonl"): "0afedee8bb9aec36053568673bc7b5eb3e5fc416b49d44f187026de930084db8",
    ("limit-small", "qrels.jsonl"): "f6a0cbf1ac3c405e1cffc96c87bd19a5f77a671d123f547cf946bf17874a27f8",
}

HINT = (
    "Provide it with a data mirror (export {env}=/path/to/folder holding '{mirror}/' in BEIR "
    "layout) or a 'path:' in the config{online}; then run again (the data "
    "rule reruns by itself once the dataset becomes available)."
)
ONLINE_HINT = ", or let capgap download it: unset HF_HUB_OFFLINE and CAPGAP_OFFLINE (with make: make run OFFLINE=0)"


def is_offline() -> bool:
    """True when the user asked for no network (``HF_HUB_OFFLINE`` or ``CAPGAP_OFFLINE`` truthy)."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes") for v in ("HF_HUB_OFFLINE", "CAPGAP_OFFLINE"))


def default_cache_dir() -> Path:
    """``$CAPGAP_CACHE`` or ``~/.cache/capgap``: where downloads are kept."""
    return Path(os.environ.get("CAPGAP_CACHE") or Path.home() / ".cache" / "capgap")


def _retrieve(url: str, known_hash: str | None, folder: Path, fname: str, timeout: float,
              unzip_to: Path | None = None) -> Path:
    """``pooch.retrieve`` ``url`` as ``folder/fname`` and return that path (a file already there
    is reused when it matches ``known_hash``, e.g. ``"md5:…"``, or when there is none); with
    ``unzip_to``, also extract the zip into that folder (``pooch.Unzip``; ``zipfile`` keeps every
    member inside it).

    A partial download is never trusted: pooch streams into a temporary file in ``folder``,
    checks the hash and only then renames it to ``fname``; an error (an interrupted transfer
    included: requests/urllib3 enforce ``Content-Length``) deletes the temporary file.
    ``timeout`` bounds the connection and every read (requests semantics), so a server that
    stops answering fails within it. ``file://`` URLs (local copies, tests) are copied: pooch
    knows only network protocols. A hash mismatch raises ``DataFormatError`` naming the file,
    the URL and both hashes; network errors propagate as ``OSError``
    (``requests.RequestException`` is one).
    """
    import pooch

    http = pooch.HTTPDownloader(timeout=timeout, progressbar=False)

    def download(u: str, out: str, p) -> None:
        os.chmod(out, 0o666 & ~_umask())  # pooch's temporary file is created 0600
        if u.startswith("file:"):
            shutil.copyfile(urllib.request.url2pathname(urllib.parse.urlparse(u).path), out)
        else:
            http(u, out, p)

    try:
        pooch.retrieve(url, known_hash, fname=fname, path=folder, progressbar=False, downloader=download,
                       processor=pooch.Unzip(extract_dir=str(unzip_to)) if unzip_to else None)
    except ValueError as e:  # pooch's hash mismatch; requests' InvalidURL & co. are OSErrors too
        if isinstance(e, OSError):
            raise
        raise DataFormatError(Path(folder) / fname, None, None, f"{e} (downloaded from {url})") from e
    return Path(folder) / fname


def download_beir(name: str, dest: str | Path, url: str | None = None, md5: str | None = None, timeout: float = 30) -> Path:
    """Download and extract a BEIR dataset; return the folder holding ``corpus.jsonl``.

    The archive holds ``<name>/corpus.jsonl``, ``<name>/queries.jsonl`` and
    ``<name>/qrels/*.tsv``; it is kept as ``dest/<name>.zip``, extracted into a temporary folder
    and renamed to ``dest/<name>`` only when complete. An existing complete folder is reused.

    Parameters
    ----------
    name : str
        The BEIR dataset name (``scifact``, ...).
    dest : str or Path
        The download cache folder.
    url : str, optional
        The archive URL (default: the official archive, ``BEIR_URL``); ``file://`` works too.
    md5 : str, optional
        The archive's md5 (default: the published checksum, ``BEIR_MD5``; ``""``: none).
    timeout : float
        Seconds the connection and each read may take.

    Returns
    -------
    Path
        ``dest/<name>``.

    Raises
    ------
    DataFormatError
        The md5 does not match (the message names the URL and both hashes), the file is not a
        zip archive (it is deleted), or the archive holds no ``corpus.jsonl``.
    OSError
        The download failed (``requests.RequestException`` for HTTP; the timeout included).
    """
    dest = Path(dest)
    final = dest / name
    if (final / "corpus.jsonl").is_file():
        return final
    url = url or BEIR_URL.format(name=name)
    md5 = md5 if md5 is not None else BEIR_MD5.get(name)
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=dest))
    try:
        try:
            archive = _retrieve(url, f"md5:{md5}" if md5 else None, dest, f"{name}.zip", timeout, unzip_to=tmp)
        except zipfile.BadZipFile as e:  # only possible without an md5: do not keep it
            (dest / f"{name}.zip").unlink(missing_ok=True)
            raise DataFormatError(dest / f"{name}.zip", None, None, f"not a zip archive ({e}; from {url}), deleted") from e
        inner = tmp / name if (tmp / name / "corpus.jsonl").is_file() else tmp
        if not (inner / "corpus.jsonl").is_file():
            raise DataFormatError(archive, None, None, "archive has no corpus.jsonl")
        os.replace(inner, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def download_limit(name: str, dest: str | Path, base_url: str | None = None, commit: str = LIMIT_COMMIT, timeout: float = 30) -> Path:
    """Download LIMIT's JSONL files (``corpus``, ``queries``, ``qrels``) for ``name``.

    Files already in ``dest/<name>`` are reused (those with a pinned sha256 only when they
    match it).

    Parameters
    ----------
    name : str
        The LIMIT dataset (``limit-small``, ``limit``).
    dest : str or Path
        The download cache folder.
    base_url : str, optional
        A format string with ``{commit}``, ``{name}``, ``{file}`` (default: the GitHub raw URL
        of google-deepmind/limit, ``LIMIT_RAW``).
    commit : str
        The repository commit; at ``LIMIT_COMMIT`` the files with a pinned sha256
        (``LIMIT_SHA256``) are verified.
    timeout : float
        Seconds the connection and each read may take.

    Returns
    -------
    Path
        ``dest/<name>``.

    Raises
    ------
    DataFormatError
        A file's sha256 does not match the pinned one (the message names the URL and both hashes).
    OSError
        A download failed (``requests.RequestException`` for HTTP; the timeout included).
    """
    final = Path(dest) / name
    for f in LIMIT_FILES:
        want = LIMIT_SHA256.get((name, f)) if commit == LIMIT_COMMIT else None
        url = (base_url or LIMIT_RAW).format(commit=commit, name=name, file=f)
        _retrieve(url, want and f"sha256:{want}", final, f, timeout)
    return final


def bright_to_beir(examples: str | Path, documents: str | Path, dest: str | Path, gold_key: str = "gold_ids") -> dict:
    """Convert one BRIGHT category's parquet files into BEIR layout in ``dest``.

    ``examples``: columns ``id``, ``query``, ``gold_ids``, ``gold_ids_long``, ``excluded_ids``
    (lists of str; ``["N/A"]`` means none); ``documents``: ``id``, ``content``. Writes
    ``corpus.jsonl`` (every document, an empty one with empty text: the loader leaves it out,
    counted), ``queries.jsonl``, ``qrels/test.tsv`` (score 1 per gold id, as BRIGHT's run.py
    builds its ground truth: every ``gold_ids`` entry, whether or not its document exists or has
    text; duplicated gold ids once: theoremqa_questions repeats some) and ``excluded.tsv``.
    Gold that no method can find is then handled by the one rule every loader applies
    (``capgap.data.gold_rule``: it stays gold, never found, counted). Exclusions of ids not in
    the documents are left out (they cannot be retrieved anyway), counted in the returned dict.

    Returns
    -------
    dict
        Counts: documents (with text), empty documents, queries, gold pairs (all of them) and of
        those the ones whose document is absent, empty or excluded, excluded pairs, exclusions
        of unknown ids.

    Raises
    ------
    DataFormatError
        ``(file, row, field)`` for a missing column, a missing id, or an id with a control
        character (``capgap.data.check_id``). An id both gold and excluded (BRIGHT's run.py
        asserts there is none) is logged and kept as gold that cannot be found.
    """
    import pandas as pd

    from .data import check_id
    from .io import write_jsonl

    ex = pd.read_parquet(examples)
    docs = pd.read_parquet(documents)
    for path, frame, cols in ((examples, ex, ("id", "query", gold_key, "excluded_ids")), (documents, docs, ("id", "content"))):
        missing = [c for c in cols if c not in frame.columns]
        if missing:
            raise DataFormatError(path, None, missing[0], f"column missing (has {list(frame.columns)})")
    dest = Path(dest)
    keep, empty = [], set()
    for i, (d, c) in enumerate(zip(docs["id"], docs["content"]), start=1):
        if d is None or str(d) == "":
            raise DataFormatError(documents, i, "id", "empty document id")
        check_id(documents, i, "id", str(d))
        if c is None or not str(c).strip():
            empty.add(str(d))
        keep.append((str(d), "" if c is None else str(c)))
    corpus_ids = {d for d, _ in keep}
    write_jsonl(dest / "corpus.jsonl", ({"_id": d, "title": "", "text": c} for d, c in keep))
    qrels, excl, dropped_excl = [], [], 0
    queries = []
    for i, r in enumerate(ex.to_dict("records"), start=1):
        q = str(r["id"])
        if not q:
            raise DataFormatError(examples, i, "id", "empty query id")
        check_id(examples, i, "id", q)
        queries.append({"_id": q, "text": str(r["query"])})
        gold = list(dict.fromkeys(check_id(examples, i, gold_key, str(g)) for g in (r[gold_key] if r[gold_key] is not None else [])))
        ex_ids = [check_id(examples, i, "excluded_ids", str(e))
                  for e in (r["excluded_ids"] if r["excluded_ids"] is not None else []) if str(e) != "N/A"]
        both = set(gold) & set(ex_ids) & (corpus_ids - empty)
        if both:
            log.warning("%s row %d: ids both gold and excluded %s (BRIGHT's run.py asserts there are none): kept as gold "
                        "that no method can find", examples, i, sorted(both)[:3])
        qrels += [(q, g) for g in gold]
        for e in dict.fromkeys(ex_ids):
            if e in corpus_ids and e not in empty:
                excl.append((q, e))
            else:
                dropped_excl += 1
    write_jsonl(dest / "queries.jsonl", queries)
    from .io import atomic_open

    with atomic_open(dest / "qrels" / "test.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        fh.writelines(f"{q}\t{d}\t1\n" for q, d in qrels)
    with atomic_open(dest / "excluded.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\n")
        fh.writelines(f"{q}\t{d}\n" for q, d in excl)
    excl_set = set(excl)
    return {"documents": len(keep) - len(empty), "empty_documents": len(empty), "queries": len(queries),
            "gold_pairs": len(qrels), "gold_pairs_absent": sum(d not in corpus_ids for _, d in qrels),
            "gold_pairs_empty": sum(d in empty for _, d in qrels), "gold_pairs_excluded": sum(p in excl_set for p in qrels),
            "excluded_pairs": len(excl), "exclusions_of_unknown_ids": dropped_excl}


def download_bright(category: str, dest: str | Path, base_url: str | None = None, revision: str = BRIGHT_REVISION,
                    long: bool = False, timeout: float = 30) -> Path:
    """Download one BRIGHT category and convert it to BEIR layout (``bright_to_beir``).

    Fetches ``examples/{category}-00000-of-00001.parquet`` and ``documents/...`` (or
    ``long_documents/...`` with ``gold_ids_long`` when ``long``), keeps them under
    ``dest/.bright-raw/<revision>/<category>/`` (no hash is published: a file there is reused),
    and writes ``dest/bright-{category}[-long]/`` atomically (an existing complete folder is
    reused without any download).

    Parameters
    ----------
    category : str
        One of ``BRIGHT_CATEGORIES``.
    dest : str or Path
        The download cache folder.
    base_url : str, optional
        A format string with ``{revision}``, ``{config}``, ``{category}`` (default: the Hugging
        Face resolve URL of ``xlangai/BRIGHT``, ``BRIGHT_URL``).
    revision : str
        The dataset revision (pin a commit for reproducibility).
    long : bool
        The ``long_documents`` corpus with ``gold_ids_long``.
    timeout : float
        Seconds the connection and each read may take.

    Returns
    -------
    Path
        ``dest/bright-{category}[-long]``.

    Raises
    ------
    ValueError
        An unknown category.
    DataFormatError
        The parquet files do not hold BRIGHT's columns or ids (``bright_to_beir``).
    OSError
        A download failed (``requests.RequestException`` for HTTP; the timeout included).
    """
    if category not in BRIGHT_CATEGORIES:
        raise ValueError(f"unknown BRIGHT category {category!r}; expected one of {BRIGHT_CATEGORIES}")
    dest = Path(dest)
    name = f"bright-{category}" + ("-long" if long else "")
    final = dest / name
    if (final / "corpus.jsonl").is_file() and (final / "excluded.tsv").is_file():
        return final
    raw = dest / ".bright-raw" / revision / category
    files = {config: _retrieve((base_url or BRIGHT_URL).format(revision=revision, config=config, category=category),
                               None, raw, f"{config}.parquet", timeout)
             for config in ("examples", "long_documents" if long else "documents")}
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=dest))
    try:
        info = bright_to_beir(files["examples"], files["long_documents" if long else "documents"], tmp,
                              "gold_ids_long" if long else "gold_ids")
        log.info("BRIGHT %s: %s", category, info)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _bright_folder(name: str, spec: Mapping) -> tuple[str, str]:
    """A BRIGHT dataset's category (config ``category``, else the name without ``bright-``) and
    the folder ``download_bright`` converts it into."""
    category = spec.get("category", name.removeprefix("bright-").removesuffix("-long"))
    return category, f"bright-{category}" + ("-long" if spec.get("long_documents") else "")


def local_source(name: str, spec: Mapping, mirror: str | Path | None = None) -> tuple[str, Path] | None:
    """The local BEIR-layout folder a dataset is read from, if any: ``("path", folder)`` for a
    configured ``path:`` that exists, ``("mirror", folder)`` for the data mirror's copy, else None
    (generated, or to be downloaded). The one place that decides between the two; ``mirror``
    defaults to ``$CAPGAP_DATA_MIRROR``."""
    if mirror is None:
        mirror = os.environ.get(MIRROR_ENV) or None
    if spec.get("path") and Path(spec["path"]).is_dir():
        return "path", Path(spec["path"])
    if spec.get("path"):
        return None
    mirror_name = spec.get("mirror_name", name)
    if spec.get("source", _SOURCE_DEFAULT) not in ("generated", "near-miss") and mirror and (Path(mirror) / mirror_name / "corpus.jsonl").is_file():
        return "mirror", Path(mirror) / mirror_name
    return None


def source_files(folder: str | Path) -> list[Path]:
    """The files ``capgap.data.load_beir_dir`` reads from a BEIR-layout folder (corpus, queries,
    every qrels file, ``excluded.tsv``), sorted; other files (notes, READMEs) are not data."""
    from .data import _qrels_files

    folder = Path(folder)
    files = [folder / "corpus.jsonl", folder / "queries.jsonl", folder / "excluded.tsv", *_qrels_files(folder).values()]
    return sorted({p for p in files if p.is_file()})


def file_hashes(folder: str | Path) -> dict[str, str]:
    """sha256 of every data file of ``folder`` (``source_files``), by relative path. Hashes are
    cached by (path, size, mtime) in ``default_cache_dir() / "sha256-cache.json"``, so an
    unchanged corpus is not re-read at every Snakemake parse."""
    import json

    from .io import write_json

    folder = Path(folder)
    cache_file = default_cache_dir() / "sha256-cache.json"
    try:
        cache = json.loads(cache_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cache = {}
    out, changed = {}, False
    for p in source_files(folder):
        st = p.stat()
        key = f"{p.resolve()}:{st.st_size}:{st.st_mtime_ns}"
        if key not in cache:
            cache[key], changed = sha256_file(p), True
        out[p.relative_to(folder).as_posix()] = cache[key]
    if changed:
        try:
            write_json(cache_file, cache)
        except OSError:  # a read-only cache folder only costs the re-hashing
            pass
    return out


def folder_digest(folder: str | Path, hashes: Mapping[str, str] | None = None) -> str:
    """sha256 over the (relative path, content sha256) of every data file of ``folder``
    (``file_hashes``, or the ``hashes`` already computed): changes when a file's content
    changes, not when the folder moves."""
    hashes = file_hashes(folder) if hashes is None else hashes
    return hashlib.sha256("".join(f"{rel}\t{h}\n" for rel, h in sorted(hashes.items())).encode()).hexdigest()


def source_digest(name: str, spec: Mapping, mirror: str | Path | None = None) -> str:
    """The digest (``folder_digest``) of the local folder a dataset is read from
    (``local_source``), or "" when there is none (generated: its parameters are the config;
    downloads: fixed by their checksums). The data rule takes it as a parameter, so editing a
    ``path:`` dataset's or the mirror's files reruns the data job and everything downstream."""
    src = local_source(name, spec, mirror)
    return folder_digest(src[1]) if src else ""


def _datasets_cache(cache_dir: str | Path | None) -> Path:
    return Path(cache_dir) if cache_dir else default_cache_dir() / "datasets"


def locate(name: str, spec: Mapping, mirror: str | Path | None = None, cache_dir: str | Path | None = None) -> tuple[str, Path | None]:
    """Where dataset ``name`` comes from right now, without any network: the one decision
    behind both ``availability`` and ``obtain``, so the two cannot disagree.

    Parameters
    ----------
    name : str
        The dataset's name (config ``datasets.<name>``).
    spec : Mapping
        Its config (``source``, ``path``, ``mirror_name``, ``beir_name``, ``category``, ...).
    mirror : str or Path, optional
        The data mirror (default ``$CAPGAP_DATA_MIRROR``).
    cache_dir : str or Path, optional
        The download cache (default ``default_cache_dir() / "datasets"``).

    Returns
    -------
    (str, Path or None)
        The first that applies: ``("path", folder)`` or ``("mirror", folder)``
        (``local_source``); ``("missing-path", None)`` for a configured ``path:`` that does not
        exist; ``("generated", None)``; ``("undownloadable", None)`` for a source other than
        ``beir``, ``limit``, ``bright``; ``("download:<source>", folder)`` for a complete earlier
        download (every file the download writes); else ``("download", None)``.
    """
    source = spec.get("source", _SOURCE_DEFAULT)
    local = local_source(name, spec, mirror)
    if local:
        return local
    if spec.get("path"):
        return "missing-path", None
    if source in ("generated", "near-miss"):
        return "generated", None
    if source not in ("beir", "limit", "bright"):
        return "undownloadable", None
    mirror_name = spec.get("mirror_name", name)
    folder_name = {"beir": spec.get("beir_name", mirror_name), "bright": _bright_folder(name, spec)[1]}.get(source, mirror_name)
    folder = _datasets_cache(cache_dir) / folder_name
    files = {"beir": ("corpus.jsonl",), "bright": ("corpus.jsonl", "excluded.tsv")}.get(source, LIMIT_FILES)
    if all((folder / f).is_file() for f in files):  # an earlier download: usable offline too
        return f"download:{source}", folder
    return "download", None


def availability(name: str, spec: Mapping, mirror: str | Path | None = None, cache_dir: str | Path | None = None) -> str:
    """Cheap, network-free class of how ``name`` can be obtained right now (``locate``).

    The data rule takes this as a parameter, so a dataset that was unavailable is fetched as
    soon as it becomes available, while one that stays local never reruns because a mirror
    path changed.

    Returns
    -------
    str
        ``"local"`` when a configured path, the mirror, the generator or an earlier download
        provides it; else ``"remote:offline"`` or ``"remote:online"`` (``is_offline``).
    """
    kind, folder = locate(name, spec, mirror, cache_dir)
    if folder is not None or kind == "generated":
        return "local"
    return "remote:offline" if is_offline() else "remote:online"


def obtain(name: str, spec: Mapping, mirror: str | Path | None = None, cache_dir: str | Path | None = None) -> RetrievalSet:
    """Load dataset ``name`` per its config ``spec`` (see module docstring for the order).

    The returned set's ``source`` dict records where it came from (kind, folder, file
    sha256s). With ``spec["expand"]`` the corpus is grown with LIMIT-style distractors
    (``capgap.generate.expand_limit``; queries, qrels and split unchanged). With
    ``spec["near_miss"]`` (``{"types": [...]}``) every gold document gets its near-miss twins
    (``capgap.nearmiss.add_twins``; ``source["near_miss"]`` counts the added and skipped ones);
    ``source: near-miss`` generates the whole set (``capgap.generate.generate_near_miss``).

    Parameters
    ----------
    name, spec, mirror, cache_dir
        As for ``locate`` (``mirror`` defaults to ``$CAPGAP_DATA_MIRROR``).

    Returns
    -------
    RetrievalSet

    Raises
    ------
    DatasetUnavailable
        No source works: a configured path is missing, the source cannot be downloaded,
        offline mode is on, or the download failed (with a hint for the user).
    DataFormatError
        A source exists but holds bad data (a download's checksum mismatch included).
    """
    rs = _obtain(name, spec, mirror, cache_dir)
    if spec.get("ignore_identical_ids", spec.get("beir_name", spec.get("mirror_name", name)) in BEIR_SELF_RETRIEVAL):
        selfx = {q: d for q, d in self_retrieval_exclusions(rs.corpus, rs.queries).items() if q not in rs.qrels.gold(q)}
        merged = {q: tuple(dict.fromkeys(rs.excluded.get(q, ()) + selfx.get(q, ()))) for q in set(rs.excluded) | set(selfx)}
        rs = replace(rs, excluded=merged, source={**rs.source, "ignore_identical_ids": len(selfx)})
    if spec.get("expand"):
        from .generate import expand_limit

        corpus, info = expand_limit(rs.corpus, rs.queries, **dict(spec["expand"]))
        rs = replace(rs, corpus=corpus, source={**rs.source, "expanded": info})
    if spec.get("near_miss") and spec.get("source", _SOURCE_DEFAULT) != "near-miss":
        from .nearmiss import add_twins

        # the generator's sizes (filled in by the schema's defaults) mean nothing here
        rs, info = add_twins(rs, spec["near_miss"].get("types", _NEAR_MISS_TYPES))
        rs = replace(rs, source={**rs.source, "near_miss": info})
    return rs


def prepare(name: str, spec: Mapping, mirror: str | Path | None = None) -> tuple[RetrievalSet | None, dict]:
    """What the data rule records for dataset ``name``: the set (``obtain``) and its status.

    An unobtainable dataset is not an error here unless ``spec["required"]`` (set for every
    dataset by config ``require_datasets``): the set is then ``None`` and the status says
    ``available: false`` with the reason and a hint (the report lists it). When required,
    ``DatasetUnavailable`` propagates. Bad data (``DataFormatError``) always propagates.
    Otherwise the status is ``capgap.data.describe`` of the set plus ``dataset`` and
    ``available: true``.
    """
    from .data import describe

    try:
        rs = obtain(name, spec, mirror=mirror)
    except DatasetUnavailable as e:
        if spec.get("required"):
            raise
        log.warning("%s", e)
        return None, {"dataset": name, "available": False, "reason": e.reason, "hint": e.hint}
    return rs, {"dataset": name, "available": True, **describe(rs)}


def _obtain(name: str, spec: Mapping, mirror: str | Path | None, cache_dir: str | Path | None) -> RetrievalSet:
    split_cfg = spec.get("split", {})
    source = spec.get("source", _SOURCE_DEFAULT)
    mirror_name = spec.get("mirror_name", name)
    if mirror is None:
        mirror = os.environ.get(MIRROR_ENV) or None
    kind, folder = locate(name, spec, mirror, cache_dir)
    if kind == "missing-path":
        raise DatasetUnavailable(name, f"configured path {spec['path']} does not exist", "Fix 'path:' in the config.")
    if kind == "generated" and source == "near-miss":
        from .generate import generate_near_miss

        nm = dict(spec.get("near_miss", {}))
        rs, _ = generate_near_miss(**nm)
        return replace(rs, name=name)
    if kind == "generated":
        from .generate import generate_limit_style

        gen = dict(spec.get("generator", {}))
        corpus, queries, qrels = generate_limit_style(**gen)
        return assemble(name, corpus, queries, {"all": qrels}, split_cfg, {"kind": "generated", "generator": gen})
    hint = HINT.format(env=MIRROR_ENV, mirror=mirror_name, online=ONLINE_HINT if kind == "download" and is_offline() else "")
    where = f"not in the data mirror ({mirror})" if mirror else f"no data mirror (${MIRROR_ENV} unset)"
    if kind == "undownloadable":
        raise DatasetUnavailable(name, f"{where}; source '{source}' cannot be downloaded", hint)
    if kind == "download":
        if is_offline():
            raise DatasetUnavailable(name, f"{where}, and offline mode is on (HF_HUB_OFFLINE/CAPGAP_OFFLINE)", hint)
        cache = _datasets_cache(cache_dir)
        try:
            if source == "beir":
                folder = download_beir(spec.get("beir_name", mirror_name), cache, spec.get("url"), spec.get("md5"))
            elif source == "bright":
                folder = download_bright(_bright_folder(name, spec)[0], cache, spec.get("url"), spec.get("revision", BRIGHT_REVISION),
                                         bool(spec.get("long_documents")))
            else:
                folder = download_limit(mirror_name, cache)
        except OSError as e:  # requests' errors and timeouts are OSErrors
            raise DatasetUnavailable(name, f"{where}, and the download failed ({e})", hint) from e
        kind = f"download:{source}"
    rs = load_beir_dir(folder, name, split_cfg)
    hashes = file_hashes(folder)
    return replace(rs, source={"kind": kind, "folder": str(folder.resolve()), "sha256": hashes,
                               "digest": folder_digest(folder, hashes) if kind in ("path", "mirror") else ""})
