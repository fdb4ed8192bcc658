"""Known-harmless library log messages, kept out of the job logs.

Without this filter every job log opens with messages that look like failures and are not,
burying the warnings that matter:

- faiss's loader (logger ``faiss.loader``, INFO/DEBUG, at ``import faiss``) tries each SIMD
  build in turn and reports each one the wheel does not ship: ``Loading faiss with AVX512
  support.`` / ``Could not load library with AVX512 support due to:
  ModuleNotFoundError("No module named 'faiss.swigfaiss_avx512'")``, then the fallback.
- transformers (logger ``transformers.modeling_utils``, WARNING) prints a load report when a
  checkpoint holds keys the model does not expect. sentence-transformers' MiniLM/MPNet
  checkpoints carry the ``embeddings.position_ids`` buffer, which newer BERT code builds itself:
  ``BertModel LOAD REPORT ... embeddings.position_ids | UNEXPECTED`` (transformers 5), or
  ``Some weights of the model checkpoint at ... were not used when initializing BertModel:
  ['embeddings.position_ids']`` (transformers 4).

``quiet_known_noise()`` installs a ``logging.Filter`` on exactly those two loggers. It drops a
record only when it is one of the messages above, in these exact forms:

- ``faiss.loader`` below WARNING: the ``FAISS_OPT_LEVEL is not set`` note, ``Loading faiss[
  with X support].``, and ``Could not load library with X support due to: ModuleNotFoundError``
  (the wheel lacks that build). Kept: ``Successfully loaded faiss ...`` (one line naming the
  build in use), a fallback caused by any other ``ImportError`` (a broken install, e.g. an
  undefined symbol), and every WARNING/ERROR (e.g. ``No module named 'faiss.swigfaiss'``).
- ``transformers.modeling_utils``: a load report (either form) whose only entries are
  UNEXPECTED ``position_ids`` buffers. A report with any MISSING, MISMATCH or CONVERSION entry,
  or with any other unexpected key, is kept whole, as is every other message.

Nothing else changes: no logger's level, handler or propagation is touched, so a genuine
warning from transformers, sentence-transformers or faiss still reaches the log.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from .provenance import code_summary, code_version

FAISS_LOGGER = "faiss.loader"
TRANSFORMERS_LOGGER = "transformers.modeling_utils"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# the harmless position-id buffer, possibly under a prefix ("bert.embeddings.position_ids")
_POSITION_IDS = re.compile(r"^(?:[\w{}, ]+\.)*position_ids$")

_FAISS_NOISE = (
    re.compile(r"^Environment variable FAISS_OPT_LEVEL is not set, so let's pick the instruction set"),
    re.compile(r"^Loading faiss( with [\w-]+ support)?\.$"),
    re.compile(r"^Could not load library with [\w-]+ support due to:\s*ModuleNotFoundError\("),
)

_V4_UNUSED = re.compile(
    r"^Some weights of the model checkpoint at .* were not used when initializing \w+: \[(.*?)\]", re.S
)


class _FaissLoaderNoise(logging.Filter):
    """Drops faiss's SIMD-probing messages (module docstring); keeps WARNING and above."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        msg = record.getMessage()
        return not any(p.search(msg) for p in _FAISS_NOISE)


def _only_position_ids(keys: list[str]) -> bool:
    return bool(keys) and all(_POSITION_IDS.match(k.strip()) for k in keys)


def _is_harmless_load_report(msg: str) -> bool:
    """True for a transformers load report listing only UNEXPECTED ``position_ids`` buffers."""
    text = _ANSI.sub("", msg)
    m = _V4_UNUSED.search(text)
    if m:  # transformers 4: one message for unused keys; other kinds come as separate messages
        return _only_position_ids(re.findall(r"'([^']*)'", m.group(1)))
    if "LOAD REPORT" not in text.split("\n", 1)[0]:
        return False
    lines = text.split("\n")
    try:  # table: header "Key | Status ...", a "---+---" rule, then one row per entry
        start = next(i for i, line in enumerate(lines) if re.match(r"^-+(\+-+)+\s*$", line)) + 1
    except StopIteration:
        return False
    keys = []
    for line in lines[start:]:
        if not line.strip():
            break
        cells = [c.strip() for c in line.split(" | ")]
        if len(cells) < 2 or cells[1] != "UNEXPECTED":
            return False
        keys.append(cells[0])
    return _only_position_ids(keys)


class _TransformersLoadNoise(logging.Filter):
    """Drops transformers' load report when it lists only unexpected ``position_ids``."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            return not _is_harmless_load_report(record.getMessage())
        except Exception:  # a record we cannot read is never hidden
            return True


_FILTERS: dict[str, type[logging.Filter]] = {
    FAISS_LOGGER: _FaissLoaderNoise,
    TRANSFORMERS_LOGGER: _TransformersLoadNoise,
}


def quiet_known_noise() -> list[str]:
    """Install the filters (module docstring) on ``faiss.loader`` and
    ``transformers.modeling_utils``; returns those logger names.

    Idempotent (a second call adds nothing), cheap (imports neither library), and effective
    whether called before or after the libraries are imported: a logger's filters apply to the
    records created on it, whatever handler (the root's, or transformers' own) writes them.
    Call it once per process before the models load, e.g. right after ``logs.log_to``.
    Raises nothing.
    """
    for name, cls in _FILTERS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, cls) for f in logger.filters):
            logger.addFilter(cls())
    return list(_FILTERS)


def capgap_excepthook(kind: type[BaseException], err: BaseException, tb) -> None:
    """``sys.excepthook`` of a workflow job: a capgap error (``CapgapError``: bad data naming its
    file, line and field, a full disk naming the output) ends the log as one line,
    ``Error: <message>``, the line Snakemake shows on the console (``show-failed-logs``);
    any other exception gets Python's traceback.

    Parameters
    ----------
    kind, err, tb
        As ``sys.excepthook`` receives them.
    """
    import sys  # lazy: only when an uncaught exception reaches the hook

    from .errors import CapgapError  # lazy: as above

    if isinstance(err, CapgapError):
        sys.stderr.write(f"Error: {err}\n")
        sys.stderr.flush()
    else:
        sys.__excepthook__(kind, err, tb)


def log_to(path: str | Path) -> None:
    """Send stderr and ``logging`` (INFO) to a rule's log file: the first call of every
    workflow script. Logs which capgap code runs, loudly when it is not the workflow's checkout
    (``capgap.provenance``), quiets known library noise (``quiet_known_noise``), and ends the
    log of a job stopped by a capgap error with that error in one line (``capgap_excepthook``)."""
    import sys

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    sys.stderr = open(path, "w", buffering=1)
    sys.excepthook = capgap_excepthook
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    quiet_known_noise()
    log = logging.getLogger("capgap.stages")
    v = code_version()
    log.info("capgap code: %s", code_summary(v))
    if v["matches"] is False:
        log.warning(
            "the imported capgap (%s) is not the workflow's checkout %s: this job runs other code than the "
            "Snakefile's; reinstall (pip install -e .) or put the checkout's src/ first on PYTHONPATH",
            v["path"],
            v["expected"],
        )
