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

Conventions (BEIR, Thakur et al. 2021): a qrels score <= 0 is *not gold*; a query with no gold
document is dropped and counted (``RetrievalSet.dropped_queries``), never silently kept; a
query with empty text is an error. Gold that no method can find (a document absent from the
corpus, empty, or excluded for that query) follows one rule for every loader, the benchmarks'
own (``gold_rule``): it stays gold, never found, counted in status.json (``unfindable_gold``).
Grades are kept as written (NFCorpus: 2 and 1). Under the files split rule a qrels file in
neither ``train_qrels`` nor ``heldout_qrels`` (BEIR's ``dev``) is not used: its queries are in
neither split, dropped and counted apart (``RetrievalSet.dropped_unused``). One fact stated twice
differently is an error naming both places: a pair judged with two different grades, in one file
or in any two qrels files of the dataset (used by the split or not); a query with gold in both a
train and a held-out qrels file; two qrels files for one split name.

- Encoding: input files are UTF-8; a byte-order mark at the start of a file is skipped; any
  other undecodable byte is a ``DataFormatError`` naming line and column.
- Text: every document title and text and every query text is NFC-normalised
  (``unicodedata.normalize("NFC", ...)``) once, at load. The canonical copy, the corpus
  fingerprint (``corpus_hash``), BM25 and the encoders therefore all see the same characters:
  "café" typed with a combining accent (NFD) and with a precomposed "é" (NFC) are one word.
- Ids are never normalised or rewritten: an id matches only the same code points, and every
  reader keeps ids exactly as the file format delimits them (JSON strings as is; TSV columns
  split on TAB only, not stripped). An id containing a control character (Unicode category Cc,
  e.g. TAB, LF, CR, NUL, DEL, U+0085) or a line/paragraph separator (U+2028, U+2029) is a
  ``DataFormatError``: ids are written to TSV and TREC files, where such characters would
  split a line or column and silently change the data. Spaces are allowed; TREC run files
  percent-encode them (``capgap.trec``).
- Numbers: a qrels score must be a finite integer grade; JSON's non-standard ``NaN`` /
  ``Infinity`` constants are rejected.
"""

from .assemble import assemble, gold_rule, load_beir_dir, split_queries
from .canonical import (describe, load_canonical, load_excluded, load_split, load_twins, load_unfindable, twin_counts,
                        write_canonical)
from .corpus import (SPLITS, UNFINDABLE_REASONS, Corpus, Qrels, Queries, RetrievalSet, Split, corpus_hash,
                     excluded_positions, iter_qrels, load_corpus, load_qrels, load_queries, query_records,
                     self_retrieval_exclusions, unfindable_counts)
from .edits import EDITS, flip_spatial, negate, swap_roles, why_not
from .edits import TYPES as TWIN_TYPES
from .tsv import check_id, iter_lines, split_tsv
from .twins import TwinPairs, add_twins, twin_id

__all__ = [
    "SPLITS", "UNFINDABLE_REASONS", "Corpus", "Queries", "Qrels", "Split", "RetrievalSet", "load_corpus",
    "load_queries",
    "iter_qrels", "load_qrels", "query_records", "excluded_positions", "self_retrieval_exclusions", "corpus_hash",
    "unfindable_counts", "gold_rule", "split_queries", "assemble", "load_beir_dir", "write_canonical", "load_split",
    "load_excluded", "load_twins", "load_canonical", "load_unfindable", "describe", "twin_counts", "iter_lines",
    "check_id", "split_tsv", "TWIN_TYPES", "EDITS", "why_not", "negate", "swap_roles", "flip_spatial", "twin_id",
    "add_twins", "TwinPairs",
]
