"""Retrieval sets in BEIR layout: corpus, queries, qrels, and the train/held-out split.

Modules: ``tsv`` (line readers and their checks), ``corpus`` (the records and one-file
readers), ``assemble`` (gold rule, split, qrels merge, a BEIR folder), ``canonical`` (the
normalised copy and ``describe``), ``edits`` / ``twins`` (near-miss twins). This package is the
data layer: it imports only ``capgap.config``, ``errors``, ``io`` and ``retrieval``
(docs/architecture.md).

Public API
----------
- ``Corpus``, ``Queries``, ``Qrels``, ``Split``, ``RetrievalSet``: frozen records, validated
  in one constructor each.
- ``load_corpus(path)``, ``load_queries(path)``, ``load_qrels(path)``: read one BEIR file
  (``corpus.jsonl``, ``queries.jsonl``, ``qrels/*.tsv`` or LIMIT's ``qrels.jsonl``), raising
  ``DataFormatError(path, line, field)`` on bad input.
- ``iter_lines(path)``: the one text-line reader every input reader uses (UTF-8, BOM skipped,
  a bad byte reported with its line and column); ``check_id(path, line, field, value)``: the
  one id check every reader applies; ``split_tsv(path, line, text)``: the TAB split every TSV
  reader applies, naming an empty column (a trailing TAB) as such.
- ``load_beir_dir(folder, split_cfg)``: a whole dataset folder, qrels resolved against the
  corpus and queries, split into train / held-out.
- ``split_queries(query_ids, heldout_fraction, seed)``: the seeded, stable fraction rule.
- ``write_canonical(rs, folder)`` / ``load_canonical(folder)``: the normalised copy the
  pipeline's later stages read (``corpus.jsonl``, ``queries.jsonl``, ``qrels.tsv``,
  ``split.tsv``, ``excluded.tsv``, ``twins.tsv``).
- ``RetrievalSet.twins``: near-miss twins of gold documents, made by the edit rules of
  ``capgap.data.edits`` (``add_twins``; ``TWIN_TYPES``) and paired with their queries by
  ``TwinPairs`` (``capgap.data.twins``).
- ``RetrievalSet.excluded``: per query, documents removed from every method's ranking before
  top-k (BRIGHT's ``excluded_ids``; BEIR's self-retrieval convention, where a document whose id
  equals the query id is ignored). They are neither gold nor non-gold, for the probe too.

Conventions (the gold rule, dropped queries, encodings, text normalisation, ids, numbers):
docs/data.md.
"""

from .assemble import assemble, gold_rule, load_beir_dir, split_queries
from .canonical import (
    describe,
    load_canonical,
    load_excluded,
    load_split,
    load_twins,
    load_unfindable,
    twin_counts,
    write_canonical,
)
from .corpus import (
    SPLITS,
    UNFINDABLE_REASONS,
    Corpus,
    Qrels,
    Queries,
    RetrievalSet,
    Split,
    corpus_hash,
    excluded_positions,
    iter_qrels,
    load_corpus,
    load_qrels,
    load_queries,
    query_records,
    self_retrieval_exclusions,
    unfindable_counts,
)
from .edits import EDITS, flip_spatial, negate, swap_roles, why_not
from .edits import TYPES as TWIN_TYPES
from .tsv import check_id, iter_lines, split_tsv
from .twins import TwinPairs, add_twins, twin_id

__all__ = [
    "SPLITS",
    "UNFINDABLE_REASONS",
    "Corpus",
    "Queries",
    "Qrels",
    "Split",
    "RetrievalSet",
    "load_corpus",
    "load_queries",
    "iter_qrels",
    "load_qrels",
    "query_records",
    "excluded_positions",
    "self_retrieval_exclusions",
    "corpus_hash",
    "unfindable_counts",
    "gold_rule",
    "split_queries",
    "assemble",
    "load_beir_dir",
    "write_canonical",
    "load_split",
    "load_excluded",
    "load_twins",
    "load_canonical",
    "load_unfindable",
    "describe",
    "twin_counts",
    "iter_lines",
    "check_id",
    "split_tsv",
    "TWIN_TYPES",
    "EDITS",
    "why_not",
    "negate",
    "swap_roles",
    "flip_spatial",
    "twin_id",
    "add_twins",
    "TwinPairs",
]
