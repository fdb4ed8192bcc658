"""The official BEIR zips: pinned md5s, ``download_beir`` (verified, extracted atomically), and
the self-retrieval sets (``BEIR_SELF_RETRIEVAL``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from ..errors import DataFormatError
from .download import _retrieve

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


def download_beir(
    name: str, dest: str | Path, url: str | None = None, md5: str | None = None, timeout: float = 30
) -> Path:
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
            raise DataFormatError(
                dest / f"{name}.zip", None, None, f"not a zip archive ({e}; from {url}), deleted"
            ) from e
        inner = tmp / name if (tmp / name / "corpus.jsonl").is_file() else tmp
        if not (inner / "corpus.jsonl").is_file():
            raise DataFormatError(archive, None, None, "archive has no corpus.jsonl")
        os.replace(inner, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
