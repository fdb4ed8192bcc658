"""Shared fixtures: the repository root and the offline data mirror ($CAPGAP_DATA_MIRROR)."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _mirror() -> Path | None:
    env = os.environ.get("CAPGAP_DATA_MIRROR")
    for cand in [Path(env)] if env else []:
        if (cand / "limit-small" / "corpus.jsonl").is_file():
            return cand.resolve()
    return None


@pytest.fixture(scope="session")
def mirror() -> Path:
    """The real-data mirror. Missing is a failure in CI (it is always laid beside the repo)."""
    m = _mirror()
    if m is None:
        if os.environ.get("CI"):
            pytest.fail("CI without a data mirror ($CAPGAP_DATA_MIRROR): the real-data tests cannot run")
        pytest.skip("no data mirror (set CAPGAP_DATA_MIRROR, see the README)")
    return m


@pytest.fixture(scope="session")
def nfcorpus_dir(mirror) -> Path:
    """The mirror's NFCorpus folder (BEIR's nfcorpus.zip). A mirror without it is a failure in
    CI, like a missing mirror; elsewhere the test is skipped."""
    folder = mirror / "nfcorpus"
    if not (folder / "corpus.jsonl").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"CI with a data mirror without nfcorpus/ ({mirror}): the NFCorpus tests cannot run")
        pytest.skip(f"the data mirror {mirror} has no nfcorpus/")
    return folder


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    """Tests never touch the network."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
