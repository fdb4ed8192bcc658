"""Downloads and the offline switch: ``is_offline``, the cache folder, and ``_retrieve`` (pooch:
stream into a temporary file, verify the hash, rename into place).
"""

from __future__ import annotations

import os
import shutil
import urllib.parse
from pathlib import Path

from ..errors import DataFormatError
from ..io import _umask


def is_offline() -> bool:
    """True when the user asked for no network (``HF_HUB_OFFLINE`` or ``CAPGAP_OFFLINE`` truthy)."""
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes") for v in ("HF_HUB_OFFLINE", "CAPGAP_OFFLINE")
    )


def default_cache_dir() -> Path:
    """``$CAPGAP_CACHE`` or ``~/.cache/capgap``: where downloads are kept."""
    return Path(os.environ.get("CAPGAP_CACHE") or Path.home() / ".cache" / "capgap")


def _retrieve(
    url: str, known_hash: str | None, folder: Path, fname: str, timeout: float, unzip_to: Path | None = None
) -> Path:
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
        pooch.retrieve(
            url,
            known_hash,
            fname=fname,
            path=folder,
            progressbar=False,
            downloader=download,
            processor=pooch.Unzip(extract_dir=str(unzip_to)) if unzip_to else None,
        )
    except ValueError as e:  # pooch's hash mismatch; requests' InvalidURL & co. are OSErrors too
        if isinstance(e, OSError):
            raise
        raise DataFormatError(Path(folder) / fname, None, None, f"{e} (downloaded from {url})") from e
    return Path(folder) / fname
