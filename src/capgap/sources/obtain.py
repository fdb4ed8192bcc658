"""From a dataset spec to a ``RetrievalSet`` (``obtain``) and the data rule's status
(``prepare``): the resolution order of ``capgap.sources``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Mapping

from ..config import item_defaults
from ..data import (
    RetrievalSet,
    add_twins,
    assemble,
    describe,
    load_beir_dir,
    self_retrieval_exclusions,
    write_canonical,
)
from ..errors import DatasetUnavailable
from ..generate import expand_limit, generate_limit_style, generate_near_miss
from ..io import write_json
from .beir import BEIR_SELF_RETRIEVAL, download_beir
from .bright import BRIGHT_REVISION, _bright_folder, download_bright
from .download import is_offline
from .limit import download_limit
from .locate import HINT, MIRROR_ENV, ONLINE_HINT, _datasets_cache, file_hashes, folder_digest, locate

log = logging.getLogger("capgap.sources")
_SOURCE_DEFAULT = item_defaults("datasets")["source"]
_NEAR_MISS_TYPES = item_defaults("datasets", "near_miss")["types"]  # the schema holds every default (capgap.config)


def obtain(
    name: str, spec: Mapping, mirror: str | Path | None = None, cache_dir: str | Path | None = None
) -> RetrievalSet:
    """Load dataset ``name`` per its config ``spec`` (see module docstring for the order).

    The returned set's ``source`` dict records where it came from (kind, folder, file
    sha256s). With ``spec["expand"]`` the corpus is grown with LIMIT-style distractors
    (``capgap.generate.expand_limit``; queries, qrels and split unchanged). With
    ``spec["near_miss"]`` (``{"types": [...]}``) every gold document gets its near-miss twins
    (``capgap.data.add_twins``; ``source["near_miss"]`` counts the added and skipped ones);
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
        merged = {
            q: tuple(dict.fromkeys(rs.excluded.get(q, ()) + selfx.get(q, ()))) for q in set(rs.excluded) | set(selfx)
        }
        rs = replace(rs, excluded=merged, source={**rs.source, "ignore_identical_ids": len(selfx)})
    if spec.get("expand"):
        corpus, info = expand_limit(rs.corpus, rs.queries, **dict(spec["expand"]))
        rs = replace(rs, corpus=corpus, source={**rs.source, "expanded": info})
    if spec.get("near_miss") and spec.get("source", _SOURCE_DEFAULT) != "near-miss":
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
        nm = dict(spec.get("near_miss", {}))
        rs, _ = generate_near_miss(**nm)
        return replace(rs, name=name)
    if kind == "generated":
        gen = dict(spec.get("generator", {}))
        corpus, queries, qrels = generate_limit_style(**gen)
        return assemble(name, corpus, queries, {"all": qrels}, split_cfg, {"kind": "generated", "generator": gen})
    hint = HINT.format(
        env=MIRROR_ENV, mirror=mirror_name, online=ONLINE_HINT if kind == "download" and is_offline() else ""
    )
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
                folder = download_bright(
                    _bright_folder(name, spec)[0],
                    cache,
                    spec.get("url"),
                    spec.get("revision", BRIGHT_REVISION),
                    bool(spec.get("long_documents")),
                )
            else:
                folder = download_limit(mirror_name, cache)
        except OSError as e:  # requests' errors and timeouts are OSErrors
            raise DatasetUnavailable(name, f"{where}, and the download failed ({e})", hint) from e
        kind = f"download:{source}"
    rs = load_beir_dir(folder, name, split_cfg)
    hashes = file_hashes(folder)
    return replace(
        rs,
        source={
            "kind": kind,
            "folder": str(folder.resolve()),
            "sha256": hashes,
            "digest": folder_digest(folder, hashes) if kind in ("path", "mirror") else "",
        },
    )


def data_stage(inputs, outputs, params, threads: int = 1) -> dict:
    """Rule ``data`` (``stage(inputs, outputs, params, threads)``, see ``capgap.stages``): obtain
    dataset ``params.dataset`` as ``params.spec`` (its config section) says (``prepare``); write
    its canonical copy, then ``status.json`` (last: it marks the copy complete) to
    ``outputs[0]``. Returns the status."""
    out = Path(outputs[0])
    out.mkdir(parents=True, exist_ok=True)
    rs, status = prepare(params.dataset, params.spec)
    if rs is not None:
        write_canonical(rs, out)
    write_json(out / "status.json", status)
    return status
