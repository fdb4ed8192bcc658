"""``capgap diagnose`` (``capgap.diagnose(...)``): the capacity probe on a user's own frozen
index, with a verdict per query: index-limited, compression-limited, encoder-limited,
ann-limited, ok, or undetermined (no proof either way). Verdicts, recall, metrics (``ip``,
``cosine``, ``l2`` through augmented vectors), compressed faiss indexes and the input checks:
docs/diagnose.md.

Public API: ``diagnose`` -> ``Diagnosis``, ``write_diagnosis``, the loaders
(``load_embeddings``, ``load_matrix``, ``load_ids``, ``load_qrels_file``, ``load_run_file``,
``row_ids``, ``document_ids``, ``match_uncompressed``), ``validate_matrix``,
``resolve_metric`` and ``admitted_but_missed`` (the report's encoder-limited rows);
``capgap.cli`` wraps them.

Modules, in the order a diagnosis runs:

- ``inputs``: the user's files (``.npy``, ``.npz``, ids, qrels, runs), each checked;
  ``tables``: a Parquet or Arrow table's vectors and ids; ``faiss_io``: a faiss index's vectors;
- ``runs``: a run file's order when its ranks and scores disagree (distances);
- ``prepare``: query rows matched to the qrels, the ANN run's ids, rows of norm 0, the scoring
  matrices and their scales, the CLI's default ids;
- ``verdicts``: ``diagnose`` (probe, exact search, ANN -> a verdict per query); ``geometry``:
  what the probe proves per query (L2 query points, the proofs behind index-limited);
- ``summary``: verdict counts, means and the plain-language reading; ``outputs``:
  ``write_diagnosis``.
"""

from .faiss_io import SUPPORTED_FAISS
from .inputs import (
    FLOAT_DTYPES,
    METRICS,
    Embeddings,
    document_ids,
    load_embeddings,
    load_ids,
    load_matrix,
    match_uncompressed,
    resolve_metric,
    row_ids,
    validate_matrix,
)
from .outputs import write_diagnosis
from .prepare import ZERO_NORM_POLICIES
from .qrels import load_qrels_file
from .runs import load_run_file
from .summary import VERDICTS, admitted_but_missed
from .verdicts import Diagnosis, diagnose

__all__ = [
    "FLOAT_DTYPES",
    "METRICS",
    "SUPPORTED_FAISS",
    "VERDICTS",
    "ZERO_NORM_POLICIES",
    "Diagnosis",
    "Embeddings",
    "admitted_but_missed",
    "diagnose",
    "document_ids",
    "load_embeddings",
    "load_ids",
    "load_matrix",
    "load_qrels_file",
    "load_run_file",
    "match_uncompressed",
    "resolve_metric",
    "row_ids",
    "validate_matrix",
    "write_diagnosis",
]
