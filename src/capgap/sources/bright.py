"""BRIGHT (HF dataset ``xlangai/BRIGHT``): one category's ``examples`` and ``documents``
parquet files (``download_bright``), converted once into BEIR layout plus ``excluded.tsv``
(``bright_to_beir``).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Mapping

from ..data import check_id
from ..errors import DataFormatError
from ..io import atomic_open, write_jsonl
from .download import _retrieve

log = logging.getLogger("capgap.sources")


BRIGHT_URL = (
    "https://huggingface.co/datasets/xlangai/BRIGHT/resolve/{revision}/{config}/{category}-00000-of-00001.parquet"
)
BRIGHT_REVISION = "main"  # pin a commit with `revision:` in the dataset's config
BRIGHT_CATEGORIES = (
    "biology",
    "earth_science",
    "economics",
    "psychology",
    "robotics",
    "stackoverflow",
    "sustainable_living",
    "leetcode",
    "pony",
    "aops",
    "theoremqa_theorems",
    "theoremqa_questions",
)


def bright_to_beir(examples: str | Path, documents: str | Path, dest: str | Path, gold_key: str = "gold_ids") -> dict:
    """Convert one BRIGHT category's parquet files into BEIR layout in ``dest``.

    ``examples``: columns ``id``, ``query``, ``gold_ids``, ``gold_ids_long``, ``excluded_ids``
    (lists of str; ``["N/A"]`` means none); ``documents``: ``id``, ``content``. Writes
    ``corpus.jsonl`` (every document, an empty one with empty text: the loader leaves it out,
    counted), ``queries.jsonl``, ``qrels/test.tsv`` (score 1 per gold id, as BRIGHT's run.py
    builds its ground truth: every ``gold_ids`` entry, whether or not its document exists or has
    text; duplicated gold ids once: theoremqa_questions repeats some) and ``excluded.tsv``.
    Gold that no method can find is then handled by the one rule every loader applies
    (``capgap.data.gold_rule``: it stays gold, never found, counted). Exclusions of ids not in
    the documents are left out (they cannot be retrieved anyway), counted in the returned dict.

    Returns
    -------
    dict
        Counts: documents (with text), empty documents, queries, gold pairs (all of them) and of
        those the ones whose document is absent, empty or excluded, excluded pairs, exclusions
        of unknown ids and of empty documents (both left out: neither can be retrieved).

    Raises
    ------
    DataFormatError
        ``(file, row, field)`` for a missing column, a missing id, or an id with a control
        character (``capgap.data.check_id``). An id both gold and excluded (BRIGHT's run.py
        asserts there is none) is logged and kept as gold that cannot be found.
    """
    import pandas as pd

    ex = pd.read_parquet(examples)
    docs = pd.read_parquet(documents)
    for path, frame, cols in (
        (examples, ex, ("id", "query", gold_key, "excluded_ids")),
        (documents, docs, ("id", "content")),
    ):
        missing = [c for c in cols if c not in frame.columns]
        if missing:
            raise DataFormatError(path, None, missing[0], f"column missing (has {list(frame.columns)})")
    dest = Path(dest)
    keep, empty = [], set()
    for i, (d, c) in enumerate(zip(docs["id"], docs["content"]), start=1):
        if d is None or str(d) == "":
            raise DataFormatError(documents, i, "id", "empty document id")
        check_id(documents, i, "id", str(d))
        if c is None or not str(c).strip():
            empty.add(str(d))
        keep.append((str(d), "" if c is None else str(c)))
    corpus_ids = {d for d, _ in keep}
    write_jsonl(dest / "corpus.jsonl", ({"_id": d, "title": "", "text": c} for d, c in keep))
    qrels, excl, dropped_excl, excl_empty = [], [], 0, 0
    queries = []
    for i, r in enumerate(ex.to_dict("records"), start=1):
        q = str(r["id"])
        if not q:
            raise DataFormatError(examples, i, "id", "empty query id")
        check_id(examples, i, "id", q)
        queries.append({"_id": q, "text": str(r["query"])})
        gold = list(
            dict.fromkeys(
                check_id(examples, i, gold_key, str(g)) for g in (r[gold_key] if r[gold_key] is not None else [])
            )
        )
        ex_ids = [
            check_id(examples, i, "excluded_ids", str(e))
            for e in (r["excluded_ids"] if r["excluded_ids"] is not None else [])
            if str(e) != "N/A"
        ]
        both = set(gold) & set(ex_ids) & (corpus_ids - empty)
        if both:
            log.warning(
                "%s row %d: ids both gold and excluded %s (BRIGHT's run.py asserts there are none): kept as "
                "gold that no method can find",
                examples,
                i,
                sorted(both)[:3],
            )
        qrels += [(q, g) for g in gold]
        for e in dict.fromkeys(ex_ids):
            if e in corpus_ids and e not in empty:
                excl.append((q, e))
            elif e in empty:
                excl_empty += 1  # left out of the corpus already: nothing to exclude
            else:
                dropped_excl += 1
    write_jsonl(dest / "queries.jsonl", queries)
    with atomic_open(dest / "qrels" / "test.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        fh.writelines(f"{q}\t{d}\t1\n" for q, d in qrels)
    with atomic_open(dest / "excluded.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\n")
        fh.writelines(f"{q}\t{d}\n" for q, d in excl)
    excl_set = set(excl)
    return {
        "documents": len(keep) - len(empty),
        "empty_documents": len(empty),
        "queries": len(queries),
        "gold_pairs": len(qrels),
        "gold_pairs_absent": sum(d not in corpus_ids for _, d in qrels),
        "gold_pairs_empty": sum(d in empty for _, d in qrels),
        "gold_pairs_excluded": sum(p in excl_set for p in qrels),
        "excluded_pairs": len(excl),
        "exclusions_of_unknown_ids": dropped_excl,
        "exclusions_of_empty_documents": excl_empty,
    }


def download_bright(
    category: str,
    dest: str | Path,
    base_url: str | None = None,
    revision: str = BRIGHT_REVISION,
    long: bool = False,
    timeout: float = 30,
) -> Path:
    """Download one BRIGHT category and convert it to BEIR layout (``bright_to_beir``).

    Fetches ``examples/{category}-00000-of-00001.parquet`` and ``documents/...`` (or
    ``long_documents/...`` with ``gold_ids_long`` when ``long``), keeps them under
    ``dest/.bright-raw/<revision>/<category>/`` (no hash is published: a file there is reused),
    and writes ``dest/bright-{category}[-long]/`` atomically (an existing complete folder is
    reused without any download).

    Parameters
    ----------
    category : str
        One of ``BRIGHT_CATEGORIES``.
    dest : str or Path
        The download cache folder.
    base_url : str, optional
        A format string with ``{revision}``, ``{config}``, ``{category}`` (default: the Hugging
        Face resolve URL of ``xlangai/BRIGHT``, ``BRIGHT_URL``).
    revision : str
        The dataset revision (pin a commit for reproducibility).
    long : bool
        The ``long_documents`` corpus with ``gold_ids_long``.
    timeout : float
        Seconds the connection and each read may take.

    Returns
    -------
    Path
        ``dest/bright-{category}[-long]``.

    Raises
    ------
    ValueError
        An unknown category.
    DataFormatError
        The parquet files do not hold BRIGHT's columns or ids (``bright_to_beir``).
    OSError
        A download failed (``requests.RequestException`` for HTTP; the timeout included).
    """
    if category not in BRIGHT_CATEGORIES:
        raise ValueError(f"unknown BRIGHT category {category!r}; expected one of {BRIGHT_CATEGORIES}")
    dest = Path(dest)
    name = f"bright-{category}" + ("-long" if long else "")
    final = dest / name
    if (final / "corpus.jsonl").is_file() and (final / "excluded.tsv").is_file():
        return final
    raw = dest / ".bright-raw" / revision / category
    files = {
        config: _retrieve(
            (base_url or BRIGHT_URL).format(revision=revision, config=config, category=category),
            None,
            raw,
            f"{config}.parquet",
            timeout,
        )
        for config in ("examples", "long_documents" if long else "documents")
    }
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=dest))
    try:
        info = bright_to_beir(
            files["examples"],
            files["long_documents" if long else "documents"],
            tmp,
            "gold_ids_long" if long else "gold_ids",
        )
        log.info("BRIGHT %s: %s", category, info)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _bright_folder(name: str, spec: Mapping) -> tuple[str, str]:
    """A BRIGHT dataset's category (config ``category``, else the name without ``bright-``) and
    the folder ``download_bright`` converts it into."""
    category = spec.get("category", name.removeprefix("bright-").removesuffix("-long"))
    return category, f"bright-{category}" + ("-long" if spec.get("long_documents") else "")
