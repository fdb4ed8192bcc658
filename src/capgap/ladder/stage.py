"""Rule ``ladder`` (``workflow/scripts/ladder.py``): rungs 2-4 of the learnability ladder on a
rule's frozen index; the signature is every stage's, ``stage(inputs, outputs, params,
threads=1)`` (see ``capgap.stages``)."""

from __future__ import annotations

import logging

from ..evaluate import write_rows
from ..index import load_with_queries
from .config import LadderConfig
from .rungs import evaluate_ladder, load_witnesses

log = logging.getLogger(__name__)


def ladder_stage(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``ladder``: rungs 2-4 of the learnability ladder (``capgap.ladder.evaluate_ladder``,
    settings ``params.ladder``): shared query heads on the pre-trained encoder's query embeddings
    (``inputs.queries``, written by rule pretrained: no encoder is loaded here), fit on all
    queries and on train queries, and nearest-train transfer of the probe's w
    (``inputs.w``, rule probe's ``w.npz``); rows to ``outputs.metrics`` (methods
    ``capgap.ladder.method_names``). The index must have been built from this corpus (else
    ``FingerprintMismatch``); query embeddings of another dimension raise ``DataFormatError``."""
    rs, idx, q = load_with_queries(inputs)
    W = load_witnesses(inputs.w, list(rs.queries.ids))
    rows, seconds = evaluate_ladder(
        rs,
        q,
        idx.embeddings,
        idx.doc_ids,
        W,
        LadderConfig.from_config(params.ladder),
        params.ks,
        params.ndcg_k,
        params.encoder_name,
        threads,
    )
    log.info("ladder: %s", ", ".join(f"{m} {s:.1f} s" for m, s in seconds.items()))
    write_rows(outputs.metrics, rows)
    return rows
