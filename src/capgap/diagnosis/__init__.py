"""``capgap diagnose`` (``capgap.diagnose(...)``): the capacity probe on a user's own frozen index, with a verdict per query.

When a query fails, which part failed? (arXiv 2610.02749 adds the first question, the index, to
the two the ANN literature separates, the encoder and the approximate search):

- **index-limited**: the index geometry does not admit the answer: the probe (a per-query
  ranking SVM, ``capgap.probe``) cannot place the gold documents in the top k (not certified
  and its recall@k below 1) and a proof says no vector can (else **undetermined**);
- **compression-limited** (only with the documents' uncompressed vectors, ``uncompressed``):
  the index's own vectors do not admit the answer, as for index-limited, but the uncompressed
  vectors of the same documents do (certified or probe recall@k 1 there): compression (SQ,
  PQ, ...) lost it. It takes the place of index-limited; a query admitted by neither stays
  index-limited, and a query the index's vectors admit goes on to the encoder and ANN verdicts
  whatever the uncompressed vectors say (the index is what is searched);
- **encoder-limited**: the probe can, but exact search with the user's query embedding misses
  gold documents at k;
- **ann-limited**: exact search finds them, the user's approximate search (``--ann-run``)
  misses some;
- **ok**.

Recall here is *capped*: |top-k ∩ gold| / min(k, |gold|), so a query with more gold documents
than k can still be fully served. ANN recall against exact search (|ANN top-k ∩ exact top-k| /
k) is reported apart from gold-document recall.

Metrics. ``ip`` ranks by q.d; ``cosine`` by q.d of L2-normalised rows (copies: inputs are never
written, and a ``.npy`` is memory-mapped read-only; a row of norm 0 (every value 0)
has no cosine: an error naming the file and rows, or with ``zero_norm="set-apart"`` left out and
counted, never scored as 0); ``l2`` by -|q - d|^2, a faiss
``IndexFlatL2``'s own order (``load_embeddings`` reports a faiss file's metric, and the CLI uses
it unless ``--metric`` is given; ``resolve_metric`` refuses another). Under ``l2`` everything is
an inner product of augmented vectors: q.d - |d|^2/2 = (q, 1).(d, -|d|^2/2) ranks each query's
documents like -|q - d|^2. Exact search scores (q, 1) against them; the probe runs on the
augmented documents and returns w' = (w, c). When c > 0 the L2 query w/c ranks exactly as w'
does; when c <= 0, w' is no L2 query (c < 0 ranks the *farthest* documents first), so its
numbers are not used: the row (``probe_l2_query`` False) gets the ranking by w.d instead,
which the L2 queries t*w approach as t grows (strict orders kept, ties pessimistic), a lower
bound. Where it does not serve the query, the exact LP with c >= 0 (``geometry.l2_feasible``)
finds an L2 query point that ranks the gold set first, or proves that none does (cause
``l2-unreachable`` where only c < 0 separates it).

Verdicts need evidence: a query is admitted when a vector at hand serves it (the probe's, or
the user's own query), and index-limited (compression-limited) only with a proof that no vector
serves it (``geometry.index_limit_proof``: identical copies, or an exact inseparability proof
when the whole gold set must fill the top k); otherwise it is **undetermined**. Scores are
computed at powers of two that keep them inside float32's range (``prepare._score_scales``).

Compressed indexes. ``load_embeddings`` reconstructs the vectors of a faiss flat, SQ, PQ,
IVF-Flat/SQ/PQ or HNSW index (``SUPPORTED_FAISS``): for SQ and PQ the decoded vectors, which
the index's search scores a float query against (asymmetric scoring, ``capgap.compress``), so
the probe and exact search run on the geometry the index really has. An IVF index's coarse
quantizer and an HNSW graph only choose which vectors a search visits: an ANN effect, judged
through ``ann_run``, not a change of geometry (IVF codes are decoded and added back to their
centroid, the vector IVF search scores).

Inputs are checked before anything is scored: matrices 2-d, float32/float16 (``diagnose`` also
takes float64), every value finite (blockwise, naming the first bad row), matching dims, ids
matching the rows, at least one query row judged by the qrels (a partial mismatch is counted
in the summary and logged), qrels naming only known documents, and a gold document per judged
query.

Public API: ``diagnose(D, Q, qrels, doc_ids, query_ids, k=10, ann_run=None, metric="ip",
uncompressed=None)`` -> ``Diagnosis`` (per-query rows and a summary), ``write_diagnosis(diag,
out_dir)``, the loaders ``load_embeddings`` (matrix, faiss metric, index kind, bytes per
vector, faiss ids), ``load_matrix`` (matrix), ``load_ids``, ``load_qrels_file``,
``load_run_file``, ``row_ids`` (an ids file or a table's id column), ``document_ids`` and
``match_uncompressed`` (faiss ids or a table's ids to rows), and
``validate_matrix``, ``resolve_metric``; ``admitted_but_missed`` (the encoder-limited verdict
on the DAG's probe rows and runs, for the report). ``capgap.cli`` wraps them.

Modules, in the order a diagnosis runs:

- ``inputs``: reading the user's files (``.npy``, ``.npz``, ids, qrels, runs), each checked;
  ``tables``: the vectors and ids of a Parquet or Arrow table; ``faiss_io``: the vectors of a
  faiss index file;
- ``runs``: a run file's order when its ranks and scores disagree (distances);
- ``prepare``: query rows matched to the qrels, the ANN run's ids checked, rows of norm 0,
  the scoring matrices and their scales, the CLI's default ids;
- ``verdicts``: ``diagnose`` (probe, exact search, ANN -> a verdict per query); ``geometry``:
  what the probe proves per query (L2 query points, the proofs behind index-limited);
- ``summary``: the verdict counts, the means and the plain-language reading;
- ``outputs``: ``write_diagnosis``.
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
    load_qrels_file,
    load_run_file,
    match_uncompressed,
    resolve_metric,
    row_ids,
    validate_matrix,
)
from .outputs import write_diagnosis
from .prepare import ZERO_NORM_POLICIES
from .summary import VERDICTS
from .summary import admitted_but_missed
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
