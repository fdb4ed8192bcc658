"""Where a dataset's files are: the mirror, a local path, the cache (``locate``,
``availability``), and the digests of a source folder (``file_hashes``, ``source_digest``).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Mapping

from ..config import item_defaults
from ..data.assemble import _qrels_files
from ..io import sha256_file, write_json
from .bright import _bright_folder
from .download import default_cache_dir, is_offline
from .limit import LIMIT_FILES

_SOURCE_DEFAULT = item_defaults("datasets")["source"]


MIRROR_ENV = "CAPGAP_DATA_MIRROR"

HINT = (
    "Provide it with a data mirror (export {env}=/path/to/folder holding '{mirror}/' in BEIR "
    "layout) or a 'path:' in the config{online}; then run again (the data "
    "rule reruns by itself once the dataset becomes available)."
)
ONLINE_HINT = ", or let capgap download it: unset HF_HUB_OFFLINE and CAPGAP_OFFLINE (with make: make run OFFLINE=0)"


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
    if (
        spec.get("source", _SOURCE_DEFAULT) not in ("generated", "near-miss")
        and mirror
        and (Path(mirror) / mirror_name / "corpus.jsonl").is_file()
    ):
        return "mirror", Path(mirror) / mirror_name
    return None


def source_files(folder: str | Path) -> list[Path]:
    """The files ``capgap.data.load_beir_dir`` reads from a BEIR-layout folder (corpus, queries,
    every qrels file, ``excluded.tsv``), sorted; other files (notes, READMEs) are not data."""
    folder = Path(folder)
    files = [folder / "corpus.jsonl", folder / "queries.jsonl", folder / "excluded.tsv", *_qrels_files(folder).values()]
    return sorted({p for p in files if p.is_file()})


def file_hashes(folder: str | Path) -> dict[str, str]:
    """sha256 of every data file of ``folder`` (``source_files``), by relative path. Hashes are
    cached by (path, size, mtime) in ``default_cache_dir() / "sha256-cache.json"``, so an
    unchanged corpus is not re-read at every Snakemake parse."""
    folder = Path(folder)
    cache_file = default_cache_dir() / "sha256-cache.json"
    try:
        cache = json.loads(cache_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cache = {}
    out, changed = {}, False
    for p in source_files(folder):
        file_stat = p.stat()
        key = f"{p.resolve()}:{file_stat.st_size}:{file_stat.st_mtime_ns}"
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


def locate(
    name: str, spec: Mapping, mirror: str | Path | None = None, cache_dir: str | Path | None = None
) -> tuple[str, Path | None]:
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
    folder_name = {"beir": spec.get("beir_name", mirror_name), "bright": _bright_folder(name, spec)[1]}.get(
        source, mirror_name
    )
    folder = _datasets_cache(cache_dir) / folder_name
    files = {"beir": ("corpus.jsonl",), "bright": ("corpus.jsonl", "excluded.tsv")}.get(source, LIMIT_FILES)
    if all((folder / f).is_file() for f in files):  # an earlier download: usable offline too
        return f"download:{source}", folder
    return "download", None


def availability(
    name: str, spec: Mapping, mirror: str | Path | None = None, cache_dir: str | Path | None = None
) -> str:
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
