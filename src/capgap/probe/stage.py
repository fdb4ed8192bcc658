"""Rules ``probe`` and ``probe_shard`` (``workflow/scripts/<rule>.py``): the capacity probe on a
rule's frozen index, whole or in shards; every stage's signature is ``stage(inputs, outputs,
params, threads=1)`` (see ``capgap.stages``)."""

from __future__ import annotations

import logging
import pickle
import time
from pathlib import Path

import numpy as np

from ..data import load_canonical
from ..evaluate import write_outputs
from ..index import load_index
from ..io import atomic_open, save_npz, write_jsonl
from ..paths import shard_of
from .config import ProbeConfig
from .records import evaluate, evaluate_results, probe_arguments
from .shards import gather_shards, probe_shard

log = logging.getLogger(__name__)


def probe_stage(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``probe``: the capacity probe with settings ``params.probe`` on every query of the
    frozen index (``capgap.probe.evaluate``); writes ``outputs.per_query`` (one JSON line per
    query), ``outputs.run`` (every query's w ranking), ``outputs.w`` (every query's w: ``w``
    ``(n_queries, dim) float32`` and ``query_ids`` in the same order, one ``.npz``; the ladder's
    nearest-train transfer reads it) and ``outputs.metrics``. When ``inputs.shards`` lists the
    ``probe_shard`` jobs' files (``probe.shards`` > 1), their results are gathered instead
    (``capgap.probe.shards.gather_shards``): the same files, byte for byte. The index must have
    been built from this corpus (else ``FingerprintMismatch``)."""
    rs = load_canonical(inputs.data)
    idx = load_index(Path(inputs.fingerprint).parent, corpus=rs.corpus)
    cfg = ProbeConfig.from_config(params.probe)
    shards = list(getattr(inputs, "shards", None) or [])
    if shards:
        kwargs = probe_arguments(rs, idx, cfg, params.ks, params.ndcg_k)
        parts = [_read_pickle(f) for f in shards]
        results = gather_shards(idx.embeddings, threads=threads, shards=parts, **kwargs)
        rows, records, run, W = evaluate_results(
            rs, idx, results, params.encoder_name, params.ks, params.ndcg_k, return_w=True
        )
    else:
        rows, records, run, W = evaluate(
            rs, idx, cfg, params.encoder_name, params.ks, params.ndcg_k, threads, return_w=True
        )
    write_jsonl(outputs.per_query, records)
    save_npz(outputs.w, w=W, query_ids=np.array(list(rs.queries.ids), dtype=str))
    return write_outputs(outputs, rows, run)


def probe_shard_stage(inputs, outputs, params, threads: int = 1) -> dict:
    """Rule ``probe_shard``: shard ``params.shard`` (``"<i>-of-<n>"``, ``capgap.paths.shard_of``)
    of the probe of rule ``probe`` (settings ``params.probe``) on the memory-mapped index of
    ``inputs.fingerprint``: the queries of its batches (``capgap.probe.shards.probe_shard``),
    pickled to ``outputs.results`` for the gather. Returns ``{"shard", "n_shards",
    "queries"}``."""
    k, n = shard_of(params.shard)
    rs = load_canonical(inputs.data)
    idx = load_index(Path(inputs.fingerprint).parent, corpus=rs.corpus)
    kwargs = probe_arguments(rs, idx, ProbeConfig.from_config(params.probe), params.ks, params.ndcg_k)
    t = time.perf_counter()
    part = probe_shard(idx.embeddings, n_shards=n, shard=k, threads=threads, progress=True, **kwargs)
    log.info("probe shard %s: %d queries in %.1f s", params.shard, len(part.results), time.perf_counter() - t)
    with atomic_open(outputs.results, "wb") as fh:
        pickle.dump(part, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return {"shard": k, "n_shards": n, "queries": len(part.results)}


def _read_pickle(path):
    """A ``probe_shard`` job's pickled ``ProbeShard`` (written by this workflow only)."""
    with open(path, "rb") as fh:
        return pickle.load(fh)
