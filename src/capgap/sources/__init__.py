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


Modules: ``download`` (offline switch, cache folder, pooch retrieval), ``beir``, ``limit``,
``bright`` (one source each), ``locate`` (mirror, local paths, cache, digests), ``obtain``
(spec -> ``RetrievalSet``; the data rule's ``prepare`` and its stage, ``data_stage``), ``status``
(the data rule's params and the ``status.json`` it writes).
"""

from .beir import BEIR_MD5, BEIR_SELF_RETRIEVAL, BEIR_URL, download_beir
from .bright import BRIGHT_CATEGORIES, BRIGHT_REVISION, BRIGHT_URL, bright_to_beir, download_bright
from .download import default_cache_dir, is_offline
from .limit import LIMIT_COMMIT, LIMIT_FILES, LIMIT_RAW, LIMIT_SHA256, download_limit
from .locate import (
    HINT,
    MIRROR_ENV,
    ONLINE_HINT,
    availability,
    file_hashes,
    folder_digest,
    local_source,
    locate,
    source_digest,
    source_files,
)
from .obtain import data_stage, obtain, prepare
from .status import current_availability, current_digest, dataset_spec, read_status, unobtained

__all__ = [
    "BEIR_MD5",
    "BEIR_SELF_RETRIEVAL",
    "BEIR_URL",
    "download_beir",
    "BRIGHT_CATEGORIES",
    "BRIGHT_REVISION",
    "BRIGHT_URL",
    "bright_to_beir",
    "download_bright",
    "default_cache_dir",
    "is_offline",
    "LIMIT_COMMIT",
    "LIMIT_FILES",
    "LIMIT_RAW",
    "LIMIT_SHA256",
    "download_limit",
    "HINT",
    "MIRROR_ENV",
    "ONLINE_HINT",
    "availability",
    "file_hashes",
    "folder_digest",
    "local_source",
    "locate",
    "source_digest",
    "source_files",
    "obtain",
    "prepare",
    "data_stage",
    "current_availability",
    "current_digest",
    "dataset_spec",
    "read_status",
    "unobtained",
]
