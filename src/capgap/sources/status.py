"""What the data rule knows about a dataset before and after it runs: its params (``dataset_spec``,
``current_availability``, ``current_digest``) and the ``status.json`` its job wrote
(``read_status``, ``unobtained``). Called by ``workflow/rules/data.smk`` and the Snakefile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from ..config import canonical
from ..data import TWIN_TYPES
from .locate import availability, source_digest

_STATUS_CACHE: dict = {}


def dataset_spec(config: Mapping, dataset: str) -> dict:
    """How to obtain one dataset: its config minus the encoder list (which does not change
    the data, so adding an encoder must not rerun the data rule), plus ``required: true`` under
    ``require_datasets`` (then an unobtainable dataset fails its data job). ``near_miss`` is
    reduced to what it means for the source (only ``types`` unless the source is near-miss:
    the generator's sizes, filled in by the schema's defaults, mean nothing elsewhere), with
    the types in ``capgap.data.TWIN_TYPES`` order, so neither reruns anything. Keys sorted
    (``capgap.config.canonical``)."""
    spec = {k: v for k, v in config["datasets"][dataset].items() if k != "encoders"}
    if "near_miss" in spec:
        nm = dict(spec["near_miss"])
        if spec.get("source") != "near-miss":
            nm = {"types": nm.get("types", list(TWIN_TYPES))}
        nm["types"] = [t for t in TWIN_TYPES if t in nm.get("types", TWIN_TYPES)]
        spec["near_miss"] = nm
    if config["require_datasets"]:
        spec["required"] = True
    return canonical(spec)


def read_status(folder: str | Path) -> dict:
    """``status.json`` in a data folder as the data job wrote it (``{}`` when not written),
    parsed once per version of the file (the DAG asks for it many times per evaluation)."""
    path = Path(folder) / "status.json"
    if not path.is_file():
        return {}
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _STATUS_CACHE:
        _STATUS_CACHE[key] = json.loads(path.read_text())
    return _STATUS_CACHE[key]


def current_availability(name: str, spec: Mapping, status: Mapping) -> str:
    """How the dataset can be obtained now (no network): ``availability``. A dataset already
    obtained (``status``: its recorded ``status.json``) stays ``"local"``: a run without the
    mirror must not replace a good copy by an 'unavailable' one."""
    return "local" if status.get("available") else availability(name, spec)


def current_digest(name: str, spec: Mapping, status: Mapping) -> str:
    """``source_digest`` of the dataset's local folder; when that folder is gone (a run without
    the mirror), the digest its data job recorded (``status``), so a good copy is kept."""
    return source_digest(name, spec) or status.get("source", {}).get("digest", "")


def unobtained(statuses: Mapping[str, Mapping]) -> list[str]:
    """One line per dataset whose recorded status (``statuses``: name -> ``read_status``) says it
    was not obtained, with the reason and the hint (also listed in reports/report.md)."""
    return [
        f"capgap: dataset '{ds}' was not obtained: {st['reason']}. {st['hint']}"
        for ds, st in statuses.items()
        if st and not st.get("available")
    ]
