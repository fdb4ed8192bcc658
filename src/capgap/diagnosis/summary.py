"""The summary of a diagnosis: the verdict counts, the mean recalls and a plain-language
reading of where the bottleneck is (``Diagnosis.summary``, written to summary.json and
summary.md by ``capgap.diagnosis.outputs``).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from .inputs import _array_info
from .prepare import _note

VERDICTS = ("index-limited", "compression-limited", "undetermined", "encoder-limited", "ann-limited", "ok")


def _summary(rows: list[dict], k: int, has_ann: bool, notes: list[str], extra: Mapping) -> dict:
    """The summary dict of per-query ``rows``: counts, ``extra`` (``diagnose``'s entries), verdicts,
    mean recalls, ``notes`` (the same list) and the reading (``_reading``). ``capacity@k``: the
    mean per-query capacity (the better of the probe's recall and the encoder's, each reached by a
    query vector at hand); ``unused_capacity``: capacity minus encoder recall (never negative)."""
    n = len(rows)

    def mean(key):
        return float(np.mean([r[key] for r in rows])) if rows else float("nan")

    s = {
        "queries": n,
        "k": k,
        **extra,
        "verdicts": {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS},
        f"probe_recall@{k}": mean(f"probe_recall@{k}"),
        "certified": mean("certified"),
        f"encoder_recall@{k}": mean(f"encoder_recall@{k}"),
        f"capacity@{k}": mean(f"capacity@{k}"),
        "notes": notes,
    }
    s["unused_capacity"] = s[f"capacity@{k}"] - s[f"encoder_recall@{k}"]  # >= 0: per query, capacity >= encoder
    if has_ann:
        s[f"ann_recall@{k}"] = mean(f"ann_recall@{k}")
        s[f"ann_vs_exact@{k}"] = mean(f"ann_vs_exact@{k}")
    s["reading"] = _reading(s, k, has_ann)
    return s


def _reading(s: dict, k: int, has_ann: bool) -> str:
    """A plain-language reading of where the bottleneck is."""
    n = max(s["queries"], 1)
    v = s["verdicts"]
    worst = max((x for x in VERDICTS if x != "ok"), key=lambda x: v[x])
    parts = [
        f"At k = {k}, the index admits {s[f'capacity@{k}']:.3f} recall (per query the better of the probe's "
        f"vector, {s[f'probe_recall@{k}']:.3f}, and your query vector; {s['certified']:.0%} of queries "
        f"certified); the query encoder reaches {s[f'encoder_recall@{k}']:.3f} with exact search"
    ]
    if has_ann:
        parts.append(
            f" and {s[f'ann_recall@{k}']:.3f} with your ANN (which returns {s[f'ann_vs_exact@{k}']:.3f} of "
            f"the exact top-{k})"
        )
    unc = s.get("uncompressed")
    if unc:
        parts.append(
            f". Uncompressed, the same documents admit {unc[f'probe_recall@{k}']:.3f} recall; the index's "
            f"{s['index']['kind']} vectors lose {unc['lost_to_compression']} queries to compression"
        )
    parts.append(f". {v['ok']} of {s['queries']} queries are fully served. ")
    if v[worst] == 0:
        parts.append("No bottleneck at this k.")
    else:
        where = {
            "index-limited": "the index itself: no query vector puts their gold documents in the top k; "
            "better document embeddings or a larger k, not query-side training, would help",
            "compression-limited": "the index's compression: the uncompressed vectors admit the answer, the "
            "index's own reconstructed vectors do not; a finer code (more bytes per "
            "vector) or re-ranking with the full-precision vectors would help",
            "undetermined": "no query vector at hand (the probe's, the encoder's) serves them and nothing proves "
            "that none can, so index and encoder are not told apart; a larger k or the exact LP "
            "(probe.lp_check_max_docs) may decide them",
            "encoder-limited": "the query encoder: the index admits the answer but the encoder's query vectors "
            f"miss it ({s['unused_capacity']:.3f} recall of capacity unused); tune or replace "
            "the query side",
            "ann-limited": "the approximate search: exact search finds the gold documents, the ANN index loses "
            "them; tune the ANN (more probes, candidates) before anything else",
        }[worst]
        verb = "is undetermined:" if worst == "undetermined" else "is limited by"
        parts.append(f"The largest group ({v[worst]} queries, {v[worst] / n:.0%}) {verb} {where}.")
    return "".join(parts)


def _capped_recall(ranked: Sequence[str], gold: set[str], k: int) -> float:
    """|top-k of ``ranked`` ∩ ``gold``| / min(k, |gold|)."""
    return len(set(ranked[:k]) & gold) / min(k, len(gold))


def admitted_but_missed(
    probe_rows: Sequence[Mapping], run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]], k: int
) -> list[dict]:
    """Queries the index admits but an encoder's exact run misses at k: the DAG report's
    "geometrically easy but missed" list (encoder-limited queries, as ``diagnose`` defines them).

    ``probe_rows``: the probe's per-query JSON lines (``query_id``, ``certified``,
    ``recall@{k}``, ``n_gold``); ``run``: query id -> ranked document ids (decoded, e.g. by
    ``capgap.trec.read_run``); ``qrels``: query id -> {doc id: grade}. Returns dicts
    ``query_id, n_gold, encoder_recall (capped), best_gold_rank`` (None: no gold document in
    the run) for every such query, in probe order."""
    out = []
    for p in probe_rows:
        q = p["query_id"]
        gold = {d for d, g in qrels.get(q, {}).items() if g > 0}
        if not gold:
            continue
        key = f"recall@{k}"
        probe_r = p[key] * len(gold) / min(k, len(gold)) if key in p else None
        if probe_r is None or not (p["certified"] or probe_r >= 1):
            continue
        ranked = list(run.get(q, []))
        enc = _capped_recall(ranked, gold, k)
        if enc < 1:
            ranks = [i + 1 for i, d in enumerate(ranked) if d in gold]
            out.append(
                {
                    "query_id": q,
                    "n_gold": len(gold),
                    "encoder_recall": round(enc, 6),
                    "best_gold_rank": min(ranks) if ranks else None,
                }
            )
    return out


def _summary_extra(
    case,
    pr,
    pu,
    rows: list[dict],
    admitted: list[tuple],
    k: int,
    metric: str,
    index_info: Mapping | None,
    uncompressed_info: Mapping | None,
) -> dict:
    """The summary's entries beyond the means and counts: metric, unmatched ids, zero-norm rows,
    probe vectors that are no L2 query, what the index (and the uncompressed vectors) are."""
    extra = {
        "metric": metric,
        "left_out_without_qrels": case.unmatched["rows_without_judgements"]["count"],
        **case.unmatched,
    }
    if case.zero is not None:
        extra["zero_norm"] = case.zero
    if pr.reachable is not None:
        extra["probe_not_l2_query"] = pr.reachable.count(False)
        extra["probe_l2_lp"] = len(pr.l2_lp)
    extra["score_scale"] = case.score_scale
    if case.id_defaults:
        extra["id_defaults"] = dict(case.id_defaults)
    extra["index"] = dict(index_info) if index_info is not None else _array_info(case.D)
    extra["uncompressed"] = None
    if pu is not None:
        extra["uncompressed"] = _uncompressed_summary(case, pu, rows, admitted, k, uncompressed_info)
    return extra


def _uncompressed_summary(case, pu, rows: list[dict], admitted: list[tuple], k: int, info: Mapping | None) -> dict:
    """The summary's ``uncompressed``: what the vectors are, the probe's means on them, and how
    many queries each geometry admits; a note when the index admits some the uncompressed
    vectors do not."""
    admitted_c, admitted_u = [c for c, _ in admitted], [u for _, u in admitted]
    unc = dict(info) if info is not None else _array_info(case.U)
    unc |= {
        f"probe_recall@{k}": float(np.mean([r[f"uncompressed_probe_recall@{k}"] for r in rows])),
        "certified": float(np.mean([r["uncompressed_certified"] for r in rows])),
        "admitted": int(sum(admitted_u)),
        "admitted_by_index": int(sum(admitted_c)),
        "lost_to_compression": sum(r["verdict"] == "compression-limited" for r in rows),
        "admitted_only_by_index": int(sum(c and not u for u, c in zip(admitted_u, admitted_c))),
    }
    if pu.reachable is not None:
        unc["probe_not_l2_query"] = pu.reachable.count(False)
    if unc["admitted_only_by_index"]:
        _note(
            case.notes,
            f"{unc['admitted_only_by_index']} queries are admitted by the index's own vectors but not by the "
            "uncompressed ones (compression moved or merged non-gold documents); their verdicts follow the index",
        )
    return unc
