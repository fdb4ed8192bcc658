"""The report's title, question and evaluation tie rule (stated once, for every method)."""

from __future__ import annotations

from .context import ReportContext

TIE_RULE = (
    "Identical documents score identically; a non-gold document tied with a gold one ranks first "
    "(pessimistic), in every method, so the probe's capacity stays a lower bound on any encoder; a document a "
    "method does not retrieve (BM25: no query term in it) is not ranked; recall@k and nDCG@k are computed "
    "from each gold document's rank in the full ranking."
)


def render(ctx: ReportContext) -> list[str]:
    """The title, what the report answers, how recall@k and nDCG@k are defined, and the tie rule."""
    return [
        "# capgap report",
        "",
        "Is retrieval failing because the index can't represent the answer, or because the query encoder can't "
        "learn it? Recall@k = |top-k ∩ gold| / |gold| averaged over queries (LIMIT/MTEB); "
        f"nDCG@{ctx.ndcg_k} with linear gain (trec_eval). Splits: train, held-out, all queries. "
        "Generated from `reports/results.csv`.",
        "",
        "**How numbers are computed.** " + TIE_RULE,
        "",
    ]
