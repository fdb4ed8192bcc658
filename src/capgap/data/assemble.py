"""From files to one ``RetrievalSet``: the gold rule every loader applies (``gold_rule``), the
seeded split (``split_queries``), the merge of a dataset's qrels files and their split
(``assemble``), and a whole BEIR folder (``load_beir_dir``).
"""

from __future__ import annotations

import hashlib
import logging
import unicodedata
from pathlib import Path
from typing import Mapping

from ..config import item_defaults
from ..errors import DataFormatError
from .canonical import load_excluded
from .corpus import (
    UNFINDABLE_REASONS,
    Corpus,
    Qrels,
    Queries,
    RetrievalSet,
    Split,
    load_corpus,
    load_qrels,
    load_queries,
)

log = logging.getLogger("capgap.data")
_SPLIT = item_defaults("datasets", "split")  # the schema holds every default (capgap.config)


def near_id(d: str, known: set, folded: Mapping[str, str] | None = None) -> str | None:
    """A corpus id that ``d`` becomes once whitespace is stripped or Unicode is NFC-normalised,
    or (with ``folded``: casefolded corpus id -> id) whose case alone differs, else None: the
    usual ways one id gets written twice. Ids are never rewritten (docs/evaluation.md): this
    only names the likely intended one in a message."""
    for cand in (d.strip(), unicodedata.normalize("NFC", d), unicodedata.normalize("NFC", d.strip())):
        if cand != d and cand in known:
            return cand
    hit = (folded or {}).get(unicodedata.normalize("NFC", d.strip()).casefold())
    return hit if hit != d else None


def gold_rule(
    corpus: Corpus, judgements: Mapping[str, Mapping[str, int]], excluded: Mapping[str, tuple[str, ...]] | None = None
) -> tuple[dict, dict, int]:
    """The one rule for gold that no method can find, applied by every loader (``assemble``:
    BEIR, BRIGHT, LIMIT, local folders, the generator) as the benchmarks' own evaluators apply
    it: BRIGHT's run.py (``ground_truth[q][gid] = 1`` for every ``gold_ids`` entry, excluded ids
    removed from the scores, pytrec_eval), BEIR's ``EvaluateRetrieval`` and MTEB (pytrec_eval on
    the qrels as written): such a gold document **stays in the query's gold set and is never
    retrieved**, so recall@k and nDCG@k keep the full gold set as denominator / ideal DCG.

    A gold judgement (grade > 0) is unfindable when its document is ``empty`` (in
    ``corpus.empty_ids``: empty title and text, left out of the corpus), ``absent`` (not in the
    corpus at all) or ``excluded`` (in ``excluded[q]``: removed from q's ranking). A non-gold
    judgement (grade <= 0) of a document not in the corpus changes no metric and is dropped
    (counted).

    Returns ``(findable, unfindable, dropped_non_gold)``: the judgements whose document can be
    ranked (query -> {doc: grade}), query -> ``((doc, grade, reason), ...)`` in judgement order,
    and the number of non-gold judgements of documents not in the corpus."""
    ids, empty = set(corpus.ids), set(corpus.empty_ids)
    excluded = excluded or {}
    findable: dict[str, dict[str, int]] = {}
    unfindable: dict[str, list] = {}
    dropped = 0
    for q, docs in judgements.items():
        ex = set(excluded.get(q, ()))
        into = findable.setdefault(q, {})
        for d, g in docs.items():
            if d not in ids:
                if g > 0:
                    unfindable.setdefault(q, []).append((d, g, "empty" if d in empty else "absent"))
                else:
                    dropped += 1
            elif g > 0 and d in ex:
                unfindable.setdefault(q, []).append((d, g, "excluded"))
            else:
                into[d] = g
    return findable, {q: tuple(v) for q, v in unfindable.items()}, dropped


# --------------------------------------------------------------------------- split


def _stable_key(seed: int, qid: str) -> str:
    return hashlib.sha256(f"{seed}\x00{qid}".encode()).hexdigest()


def split_queries(query_ids, heldout_fraction: float = _SPLIT["heldout_fraction"], seed: int = _SPLIT["seed"]) -> Split:
    """Seeded, stable train/held-out split.

    Queries are ordered by ``sha256(seed, query_id)`` and the first
    ``round(heldout_fraction * n)`` are held out. The assignment depends only on the ids and
    the seed, not on file order. Raises ``ValueError`` for a fraction outside [0, 1].
    """
    if not 0.0 <= heldout_fraction <= 1.0:
        raise ValueError(f"heldout_fraction must be in [0, 1], got {heldout_fraction}")
    ids = sorted(set(query_ids), key=lambda q: _stable_key(seed, q))
    n_held = int(round(heldout_fraction * len(ids)))
    held = set(ids[:n_held])
    order = list(query_ids)
    return Split(
        train=tuple(q for q in order if q not in held),
        heldout=tuple(q for q in order if q in held),
        rule=f"seeded fraction: heldout_fraction={heldout_fraction}, seed={seed}",
    )


# --------------------------------------------------------------------------- datasets
def _qrels_files(folder: Path) -> dict[str, Path]:
    """Qrels files of a dataset folder by split name (``train``, ``dev``, ``test``, or ``all``
    for a top-level ``qrels.jsonl`` / ``qrels.tsv``). Two files for one name (``qrels/test.tsv``
    and ``qrels/test.jsonl``; ``qrels.jsonl`` and ``qrels.tsv``; ``qrels/all.tsv`` and
    ``qrels.tsv``) are a ``DataFormatError`` naming both, never one silently dropped."""
    files: dict[str, Path] = {}

    def add(stem: str, p: Path) -> None:
        if stem in files:  # qrels/test.tsv and qrels/test.jsonl: two files claim one split
            raise DataFormatError(
                p,
                None,
                None,
                f"two qrels files for split {stem!r}: {files[stem]} and {p}; "
                "keep one (which would win is not a choice capgap makes)",
            )
        files[stem] = p

    sub = folder / "qrels"
    if sub.is_dir():
        for p in sorted(sub.iterdir()):
            if p.suffix in (".tsv", ".jsonl", ".txt"):
                add(p.stem, p)
    for name in ("qrels.jsonl", "qrels.tsv"):
        if (folder / name).is_file():
            add("all", folder / name)
    return files


def _where(qrels: Qrels, stem: str, q: str, d: str) -> str:
    """``path line N`` of judgement (q, d) in ``qrels`` (the file stem when it has no path)."""
    line = qrels.lines.get(q, {}).get(d)
    return f"{qrels.path or stem}" + (f" line {line}" if line is not None else "")


def _merge_qrels(name: str, qrels_by_file: Mapping[str, Qrels], files: list[str]) -> dict[str, dict[str, int]]:
    """The judgements of ``files`` (keys of ``qrels_by_file``) in one mapping. A (query,
    document) pair judged in two of them must have one grade: a different grade is a
    ``DataFormatError`` naming both files and lines (never a silent last-file-wins)."""
    merged: dict[str, dict[str, int]] = {}
    origin: dict[tuple[str, str], str] = {}  # (query, doc) -> the file it was first read from
    for f in files:
        qr = qrels_by_file[f]
        for q, docs in qr.judgements.items():
            into = merged.setdefault(q, {})
            for d, score in docs.items():
                prev = into.get(d)
                if prev is not None and prev != score:
                    first = origin[(q, d)]
                    raise DataFormatError(
                        qr.path or f,
                        qr.lines.get(q, {}).get(d),
                        "score",
                        f"{name}: ({q!r}, {d!r}) judged {prev} in "
                        f"{_where(qrels_by_file[first], first, q, d)} and {score} in "
                        f"{_where(qr, f, q, d)}; a pair has one grade: fix one of the files",
                    )
                if prev is None:
                    into[d] = score
                    origin[(q, d)] = f
    return merged


def _first_line(qrels: Qrels, q: str) -> int | None:
    """The first line of ``qrels``'s file that judges query ``q`` (None when not read from a file)."""
    lines = [n for n in qrels.lines.get(q, {}).values() if n is not None]
    return min(lines) if lines else None


def _two_splits(
    name: str, both: list[str], qrels_by_file: Mapping[str, Qrels], train_files: list[str], held_files: list[str]
) -> DataFormatError:
    """The error for queries with gold in both a train and a held-out qrels file: names the first
    such query, the two files and the first line of each that judges it, and the count."""
    q = both[0]

    def where(files: list[str]) -> tuple[str, int | None]:
        for f in files:
            qr = qrels_by_file[f]
            if any(s > 0 for s in qr.judgements.get(q, {}).values()):
                return qr.path or f, _first_line(qr, q)
        return "?", None

    (tp, tl), (hp, hl) = where(train_files), where(held_files)
    at = lambda p, n: p + (f" line {n}" if n is not None else "")  # noqa: E731
    more = f" ({len(both)} queries in all, e.g. {both[:3]})" if len(both) > 1 else ""
    return DataFormatError(
        hp,
        hl,
        "query-id",
        f"{name}: query {q!r} is claimed by two splits: train in {at(tp, tl)} "
        f"and held-out in {at(hp, hl)}{more}; a query belongs to one split: "
        "remove its judgements from one of the files",
    )


def assemble(
    name: str,
    corpus: Corpus,
    queries: Queries,
    qrels_by_file: dict[str, Qrels],
    split_cfg: Mapping | None = None,
    source: dict | None = None,
    excluded: Mapping[str, tuple[str, ...]] | None = None,
) -> RetrievalSet:
    """Merge per-file qrels, drop queries without gold (counted), and split train/held-out.

    ``split_cfg`` keys: ``train_qrels`` / ``heldout_qrels`` (lists of qrels file stems, default
    ``["train"]`` / ``["test"]``) used when *both* exist; otherwise ``heldout_fraction``
    (default 0.5) and ``seed`` (default 0) over all judged queries.

    With the files rule, a qrels file named in neither list (BEIR's ``dev``) is not used: a
    query whose gold is only there is in neither split; it is dropped and counted per file in
    ``RetrievalSet.dropped_unused`` (status.json ``dropped_queries_unused_qrels``), apart from
    ``dropped_queries`` (no gold in any file), and the split rule names the unused files.
    One fact stated twice differently is an error naming both places (``DataFormatError``):
    a (query, document) pair judged with different grades in any two qrels files of the
    dataset, used by the split or not (``_merge_qrels``), and, under the files rule, a query
    with gold in both a train and a held-out file ("two splits claiming one query", which
    would put it in both sets). A query judged in a used file and in an unused one (BEIR's
    ``dev``) is not a conflict: the unused file's judgements take no part (logged).

    Gold that no method can find (``gold_rule``: absent, empty or ``excluded``) stays in its
    query's gold set (``RetrievalSet.unfindable``); a query none of whose gold can be found is
    dropped and counted (``dropped_unfindable``), as no probe or encoder can be asked about it.
    """
    split_cfg = {**_SPLIT, **dict(split_cfg or {})}
    train_files = [f for f in split_cfg["train_qrels"] if f in qrels_by_file]
    held_files = [f for f in split_cfg["heldout_qrels"] if f in qrels_by_file]
    use_files = bool(train_files and held_files)
    chosen = list(dict.fromkeys(train_files + held_files)) if use_files else list(qrels_by_file)
    unused = [f for f in qrels_by_file if f not in chosen]
    findable, unfindable, _ = gold_rule(corpus, _merge_qrels(name, qrels_by_file, chosen), excluded)
    qrels = Qrels(findable)
    if unused:  # one grade per pair across *every* qrels file of the dataset, used by the split or not
        _merge_qrels(name, qrels_by_file, chosen + unused)
    keep = [q for q in queries.ids if qrels.gold(q)]

    kept_set, known = set(keep), set(queries.ids)
    dropped_unused: dict[str, int] = {}
    only_unused: set[str] = set()
    for f in unused:
        judged = {q for q, d in qrels_by_file[f].judgements.items() if q in known and any(s > 0 for s in d.values())}
        if judged - kept_set:
            dropped_unused[f] = len(judged - kept_set)
            only_unused |= judged - kept_set
        if judged & kept_set:
            log.info(
                "%s: %d kept queries also have judgements in unused qrels file %r; those are ignored",
                name,
                len(judged & kept_set),
                f,
            )
    only_unfindable = [q for q in queries.ids if not qrels.gold(q) and unfindable.get(q) and q not in only_unused]
    if only_unfindable:
        log.warning(
            "%s: dropped %d queries none of whose gold documents can be found (absent, empty or excluded), e.g. %s",
            name,
            len(only_unfindable),
            only_unfindable[:3],
        )
    dropped = len(queries) - len(keep) - len(only_unused) - len(only_unfindable)
    if dropped:
        log.warning("%s: dropped %d of %d queries without any gold document", name, dropped, len(queries))
    if only_unused:
        log.warning(
            "%s: dropped %d of %d queries judged only in qrels files the split does not use (%s): neither "
            "train nor held-out",
            name,
            len(only_unused),
            len(queries),
            ", ".join(f"{f}: {n}" for f, n in dropped_unused.items()),
        )
    kept = queries.subset(keep)
    if not len(kept):
        if only_unfindable:  # every gold id misses the corpus: most likely ids that do not match (case, spaces, prefix)
            pairs = [(q, d, why) for q in only_unfindable for d, _, why in unfindable[q]]
            by = {w: sum(1 for *_, x in pairs if x == w) for w in ("absent", "empty", "excluded")}
            raise ValueError(
                f"{name}: no query has a gold document that can be found: {len(pairs)} gold judgements of "
                f"{len(only_unfindable)} queries, {by['absent']} absent from the corpus, {by['empty']} "
                f"empty, {by['excluded']} excluded; e.g. qrels document ids "
                f"{[d for _, d, _ in pairs[:3]]} vs corpus ids {list(corpus.ids[:3])}: do the qrels and "
                "the corpus use the same ids?"
            )
        raise ValueError(f"{name}: no query has a gold document")
    if use_files:
        train_q = {
            q for f in train_files for q, d in qrels_by_file[f].judgements.items() if any(s > 0 for s in d.values())
        }
        held_q = {
            q for f in held_files for q, d in qrels_by_file[f].judgements.items() if any(s > 0 for s in d.values())
        }
        both = train_q & held_q
        if both:
            raise _two_splits(name, sorted(both, key=queries.ids.index), qrels_by_file, train_files, held_files)
        rule = f"dataset qrels files: train={train_files}, heldout={held_files}"
        if unused:
            rule += f", unused={unused} ({len(only_unused)} queries judged only there dropped)"
        split = Split(
            train=tuple(q for q in kept.ids if q in train_q),
            heldout=tuple(q for q in kept.ids if q in held_q),
            rule=rule,
        )
    else:
        split = split_queries(kept.ids, float(split_cfg["heldout_fraction"]), int(split_cfg["seed"]))
    # keep only judgements of kept queries
    qrels = Qrels({q: dict(qrels.judgements[q]) for q in kept.ids})
    unf = {q: unfindable[q] for q in kept.ids if q in unfindable}
    n_unf = sum(len(v) for v in unf.values())
    if n_unf:
        log.warning(
            "%s: %d gold pairs name a document no method can find (%s); they stay gold, never found (gold_rule)",
            name,
            n_unf,
            ", ".join(f"{r}: {sum(x[2] == r for v in unf.values() for x in v)}" for r in UNFINDABLE_REASONS),
        )
    kept_ids = set(kept.ids)
    excl = {q: tuple(v) for q, v in (excluded or {}).items() if q in kept_ids and v}
    return RetrievalSet(
        name,
        corpus,
        kept,
        qrels,
        split,
        dropped,
        dict(source or {}),
        excluded=excl,
        dropped_unused=dropped_unused,
        unfindable=unf,
        dropped_unfindable=len(only_unfindable),
    )


def load_beir_dir(folder: str | Path, name: str | None = None, split_cfg: Mapping | None = None) -> RetrievalSet:
    """Load a dataset folder in BEIR layout (or LIMIT's, with ``qrels.jsonl``).

    Expects ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/{train,dev,test}.tsv`` or
    ``qrels.jsonl``; an optional ``excluded.tsv`` (query-id, corpus-id) lists documents removed
    from a query's ranking. A qrels line naming a document not in the corpus (or one left out
    as empty) is gold no method can find (``gold_rule``: kept, never found, logged with its file
    and line, counted). Raises ``DataFormatError`` for a missing file or any bad record (a
    qrels line naming an unknown query included).
    """
    folder = Path(folder)
    for f in ("corpus.jsonl", "queries.jsonl"):
        if not (folder / f).is_file():
            raise DataFormatError(folder / f, None, None, "file not found")
    files = _qrels_files(folder)
    if not files:
        raise DataFormatError(folder / "qrels", None, None, "no qrels file (qrels/*.tsv or qrels.jsonl)")
    corpus = load_corpus(folder / "corpus.jsonl")
    queries = load_queries(folder / "queries.jsonl")
    qrels = {k: load_qrels(p, None, queries) for k, p in files.items()}
    known = set(corpus.ids)
    for qr in qrels.values():  # gold of a document not in the corpus: kept, never found (gold_rule), each line named
        absent = [(q, d) for q, docs in qr.judgements.items() for d, g in docs.items() if g > 0 and d not in known]
        folded = {unicodedata.normalize("NFC", k).casefold(): k for k in known} if absent else None
        for q, d in absent[:5]:
            near = near_id(d, known, folded)
            log.warning(
                "%s line %s: gold document %r of query %r is %s corpus.jsonl: it stays gold and no method can "
                "find it%s",
                qr.path,
                qr.lines.get(q, {}).get(d),
                d,
                q,
                "empty in" if d in corpus.empty_ids else "not in",
                f" (did you mean {near!r}?)" if near else "",
            )
        if len(absent) > 5:
            log.warning("%s: %d such gold judgements in all", qr.path, len(absent))
    excluded = load_excluded(folder / "excluded.tsv", corpus, queries) if (folder / "excluded.tsv").is_file() else None
    return assemble(name or folder.name, corpus, queries, qrels, split_cfg, excluded=excluded)
