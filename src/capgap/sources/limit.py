"""LIMIT's JSONL files from the google-deepmind/limit repository at a pinned commit
(``download_limit``, sha256-verified where pinned).
"""

from __future__ import annotations

from pathlib import Path

from .download import _retrieve

LIMIT_COMMIT = "90c5dd3a7c3c0d68bc6cc7a0c5b0f4ca124dfdcb"
LIMIT_RAW = "https://raw.githubusercontent.com/google-deepmind/limit/{commit}/data/{name}/{file}"
LIMIT_FILES = ("corpus.jsonl", "queries.jsonl", "qrels.jsonl")
# sha256 of the files at LIMIT_COMMIT (google-deepmind/limit).
LIMIT_SHA256 = {
    ("limit-small", "corpus.jsonl"): "ebc38fa10c96fa02e4501e41968edf586efffc6241b6cd10f1c8757c1854dc53",
    ("limit-small", "queries.jsonl"): "0afedee8bb9aec36053568673bc7b5eb3e5fc416b49d44f187026de930084db8",
    ("limit-small", "qrels.jsonl"): "f6a0cbf1ac3c405e1cffc96c87bd19a5f77a671d123f547cf946bf17874a27f8",
}


def download_limit(
    name: str, dest: str | Path, base_url: str | None = None, commit: str = LIMIT_COMMIT, timeout: float = 30
) -> Path:
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
