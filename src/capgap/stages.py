"""One function per pipeline rule, named after it; ``workflow/scripts/<rule>.py`` only calls it.

Every stage has the same signature, ``stage(inputs, outputs, params, threads=1)``: the rule's
named inputs, outputs and params (Snakemake's ``snakemake.input`` / ``.output`` / ``.params``,
or any object with those attributes, e.g. ``types.SimpleNamespace`` in tests). A stage reads
its inputs, calls the method module that owns the work, and writes its outputs atomically;
the logic lives in the method modules (``probe``, ``finetune``, ``colbert``, ``bm25``, ...).
A dataset's name travels in its canonical folder (``status.json``), not as a parameter.
"""

from __future__ import annotations

import json
import logging
import pickle
import time
from pathlib import Path

import numpy as np

from .data import load_canonical, write_canonical
from .errors import DataFormatError
from .evaluate import evaluate_queries, write_curve, write_rows
from .io import atomic_open, load_query_embeddings, save_npz, write_json, write_jsonl
from .logs import log_to  # noqa: F401  (every script's first call)

log = logging.getLogger(__name__)


def data(inputs, outputs, params, threads: int = 1) -> dict:
    """Rule ``data``: obtain dataset ``params.dataset`` as ``params.spec`` (its config section)
    says (``sources.prepare``); write its canonical copy, then ``status.json`` (last: it marks
    the copy complete) to ``outputs[0]``. Returns the status."""
    from .sources import prepare  # lazy: pooch (each rule's env loads only its own method)

    out = Path(outputs[0])
    out.mkdir(parents=True, exist_ok=True)
    rs, status = prepare(params.dataset, params.spec)
    if rs is not None:
        write_canonical(rs, out)
    write_json(out / "status.json", status)
    return status


def index(inputs, outputs, params, threads: int = 1) -> dict:
    """Rule ``index``: embed the corpus of ``inputs.data`` once with encoder
    ``params.encoder_name`` (config ``params.encoder``) into the folder of
    ``outputs.fingerprint`` (``capgap.index.build_index``); or, when ``inputs.shards`` lists
    the ``index_shard`` jobs' files (``index.shards`` > 1), gather them into the same files
    (``capgap.index.gather_index``). Returns the index fingerprint."""
    from .index import build_index, gather_index  # lazy: torch, faiss (each rule's env loads only its own method)

    rs = load_canonical(inputs.data)
    shards = list(getattr(inputs, "shards", None) or [])
    if shards:
        idx = gather_index(rs.corpus, shards, Path(outputs.fingerprint).parent)
        log.info("gathered %d documents from %d index shards", len(rs.corpus), len(shards))
        return idx.fingerprint
    enc = _encoder(params, threads)
    t = time.perf_counter()
    idx = build_index(rs.corpus, enc, Path(outputs.fingerprint).parent)
    log.info("embedded %d documents in %.1f s", len(rs.corpus), time.perf_counter() - t)
    return idx.fingerprint


def index_shard(inputs, outputs, params, threads: int = 1) -> dict:
    """Rule ``index_shard``: shard ``params.shard`` (Snakemake's ``"<i>-of-<n>"``, i from 1) of
    the corpus of ``inputs.data`` embedded with encoder ``params.encoder_name`` (config
    ``params.encoder``) into ``outputs.embeddings`` and its ``outputs.meta``
    (``capgap.index.build_index_shard``). Returns the shard's metadata."""
    from .index import build_index_shard  # lazy: torch, faiss (each rule's env loads only its own method)

    k, n = shard_of(params.shard)
    rs = load_canonical(inputs.data)
    enc = _encoder(params, threads)
    t = time.perf_counter()
    emb = build_index_shard(rs.corpus, enc, outputs.embeddings, n, k)
    log.info("index shard %s: embedded %d documents in %.1f s", params.shard, len(emb), time.perf_counter() - t)
    return json.loads(Path(outputs.meta).read_text())


def shard_of(item: str) -> tuple[int, int]:
    """``"<i>-of-<n>"`` (a shard as the rules name it, ``paths.shard_labels``; Snakemake's
    scattergather convention, i from 1) -> ``(i - 1, n)``: the 0-based shard and the count.
    Raises ``ValueError`` for another form or i outside 1..n."""
    i, sep, n = str(item).partition("-of-")
    if not (sep and i.isdigit() and n.isdigit() and 1 <= int(i) <= int(n)):
        raise ValueError(f"shard {item!r}: expected '<i>-of-<n>' with 1 <= i <= n")
    return int(i) - 1, int(n)


def pretrained(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``pretrained``: recall@k / nDCG of the pre-trained encoder's own query embeddings
    on its frozen index (``evaluate.evaluate_queries``, as ``evaluate_encoder`` does); writes
    ``outputs.run``, ``outputs.metrics`` and, when the rule names it, ``outputs.queries``: the
    query embeddings (``q`` ``(n_queries, dim) float32`` and ``query_ids``, one ``.npz``, written
    atomically; the ladder reads them instead of loading the encoder again). The index must
    match this encoder and corpus (else ``FingerprintMismatch``)."""
    rs, enc, idx = _load_with_index(inputs, params, threads)
    q = enc.encode_queries(list(rs.queries.texts), progress=True, ids=rs.queries.ids, what=f"{rs.name} queries")
    rows, run = evaluate_queries(rs, q, idx.embeddings, idx.doc_ids, params.ks, params.ndcg_k, params.encoder_name, "pretrained", threads)
    if getattr(outputs, "queries", None):
        save_npz(outputs.queries, q=np.asarray(q, dtype=np.float32), query_ids=np.array(list(rs.queries.ids), dtype=str))
    return _write(outputs, rows, run)


def bm25(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``bm25``: BM25 with settings ``params.bm25`` (``capgap.bm25.evaluate``); writes
    ``outputs.run`` and ``outputs.metrics``."""
    from .bm25 import evaluate  # lazy: bm25s (each rule's env loads only its own method)

    return _write(outputs, *evaluate(load_canonical(inputs.data), params.bm25, params.ks, params.ndcg_k))


def probe(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``probe``: the capacity probe with settings ``params.probe`` on every query of the
    frozen index (``capgap.probe.evaluate``); writes ``outputs.per_query`` (one JSON line per
    query), ``outputs.run`` (every query's w ranking), ``outputs.w`` (every query's w: ``w``
    ``(n_queries, dim) float32`` and ``query_ids`` in the same order, one ``.npz``; the ladder's
    nearest-train transfer reads it) and ``outputs.metrics``. When ``inputs.shards`` lists the
    ``probe_shard`` jobs' files (``probe.shards`` > 1), their results are gathered instead
    (``capgap.probe.shards.gather_shards``): the same files, byte for byte. The index must have
    been built from this corpus (else ``FingerprintMismatch``)."""
    from .index import load_index  # lazy: torch, faiss (each rule's env loads only its own method)
    from .probe import ProbeConfig, evaluate, evaluate_results, probe_arguments  # lazy: quadprog, scipy (each rule's env loads only its own method)
    from .probe.shards import gather_shards  # lazy: quadprog, scipy (each rule's env loads only its own method)

    rs = load_canonical(inputs.data)
    idx = load_index(Path(inputs.fingerprint).parent, corpus=rs.corpus)
    cfg = ProbeConfig.from_config(params.probe)
    shards = list(getattr(inputs, "shards", None) or [])
    if shards:
        kwargs = probe_arguments(rs, idx, cfg, params.ks, params.ndcg_k)
        parts = [_read_pickle(f) for f in shards]
        results = gather_shards(idx.embeddings, threads=threads, shards=parts, **kwargs)
        rows, records, run, W = evaluate_results(rs, idx, results, params.encoder_name, params.ks, params.ndcg_k, return_w=True)
    else:
        rows, records, run, W = evaluate(rs, idx, cfg, params.encoder_name, params.ks, params.ndcg_k, threads, return_w=True)
    write_jsonl(outputs.per_query, records)
    save_npz(outputs.w, w=W, query_ids=np.array(list(rs.queries.ids), dtype=str))
    return _write(outputs, rows, run)


def probe_shard(inputs, outputs, params, threads: int = 1) -> dict:
    """Rule ``probe_shard``: shard ``params.shard`` (``"<i>-of-<n>"``, ``shard_of``) of the
    probe of rule ``probe`` (settings ``params.probe``) on the memory-mapped index of
    ``inputs.fingerprint``: the queries of its batches (``capgap.probe.shards.probe_shard``),
    pickled to ``outputs.results`` for the gather. Returns ``{"shard", "n_shards",
    "queries"}``."""
    from .index import load_index  # lazy: torch, faiss (each rule's env loads only its own method)
    from .probe import ProbeConfig, probe_arguments  # lazy: quadprog, scipy (each rule's env loads only its own method)
    from .probe.shards import probe_shard as solve_shard  # lazy: quadprog, scipy (each rule's env loads only its own method)

    k, n = shard_of(params.shard)
    rs = load_canonical(inputs.data)
    idx = load_index(Path(inputs.fingerprint).parent, corpus=rs.corpus)
    kwargs = probe_arguments(rs, idx, ProbeConfig.from_config(params.probe), params.ks, params.ndcg_k)
    t = time.perf_counter()
    part = solve_shard(idx.embeddings, n_shards=n, shard=k, threads=threads, progress=True, **kwargs)
    log.info("probe shard %s: %d queries in %.1f s", params.shard, len(part.results), time.perf_counter() - t)
    with atomic_open(outputs.results, "wb") as fh:
        pickle.dump(part, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return {"shard": k, "n_shards": n, "queries": len(part.results)}


def _read_pickle(path):
    """A ``probe_shard`` job's pickled ``ProbeShard`` (written by this workflow only)."""
    with open(path, "rb") as fh:
        return pickle.load(fh)


def compress(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``compress``: the capacity probe (settings ``params.probe``) and the pre-trained
    encoder on the frozen index and on each compressed variant of it (``params.compress``:
    ``variants``, ``seed``; ``capgap.compress.evaluate_variants``); writes ``outputs.metrics``
    (column ``compression`` names the variant). The pre-trained query embeddings are rule
    pretrained's (``inputs.queries``: no encoder is loaded here, the queries are not encoded
    twice). The index must have been built from this corpus (else ``FingerprintMismatch``);
    query embeddings of another dimension raise ``DataFormatError``."""
    from .compress import evaluate_variants  # lazy: faiss (each rule's env loads only its own method)
    from .probe import ProbeConfig  # lazy: quadprog, scipy (each rule's env loads only its own method)

    rs, idx, q = _load_with_queries(inputs)
    cfg = params.compress
    rows = evaluate_variants(rs, idx, q, cfg["variants"], ProbeConfig.from_config(params.probe), params.encoder_name, params.ks,
                             params.ndcg_k, seed=cfg["seed"], threads=threads)
    return _write_rows(outputs.metrics, rows)


def finetune(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``finetune``: LoRA fine-tuning of the query side against the frozen index
    (``capgap.finetune.finetune_encoder``, settings ``params.finetune``) on train-split queries only, resuming
    from ``params.checkpoint`` after a kill; then train and held-out evaluated exactly as the
    pre-trained encoder. Writes ``outputs.metrics`` (method ``finetuned``), ``outputs.curve``,
    ``outputs.run`` and ``outputs.adapter`` (peft ``save_pretrained``)."""
    from .evaluate import evaluate_encoder  # lazy: torch (each rule's env loads only its own method)

    rs, enc, idx = _load_with_index(inputs, params, threads)
    res = _train_adapter(rs, enc, idx, params, outputs, threads)
    rows, run = evaluate_encoder(rs, enc, idx, params.ks, params.ndcg_k, params.encoder_name, "finetuned", threads,
                                 queries=res.queries)
    rows = _write(outputs, rows + res.convergence.rows(rs.name, params.encoder_name, "finetuned"), run)
    Path(params.checkpoint).unlink(missing_ok=True)  # the adapter is saved: the checkpoint has served
    return rows


def finetune_regime(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``finetune_regime``: rung 5 of the learnability ladder, one fine-tuning regime
    (``params.regime``; ``params.finetune``: the finetune section with the regime's overrides,
    e.g. a LoRA rank, ``mode: full``, or ``validation_fraction`` for early stopping on a
    validation split of the train queries), trained as rule ``finetune`` trains (resuming
    from ``params.checkpoint``) and evaluated the same way: rows (method
    ``finetuned-<regime>``) to ``outputs.metrics``, the curve to ``outputs.curve``, and to
    ``outputs.record`` (JSON) the settings, the wall time and, with early stopping, the
    validation query ids, seed and the kept step. No adapter is kept (the rows are the result)."""
    from .evaluate import evaluate_encoder  # lazy: torch (each rule's env loads only its own method)
    from .finetune import FinetuneConfig, finetune_encoder  # lazy: torch, peft (each rule's env loads only its own method)

    rs, enc, idx = _load_with_index(inputs, params, threads)
    cfg = FinetuneConfig.from_config(dict(params.finetune))
    t = time.perf_counter()
    res = finetune_encoder(rs, enc, idx, cfg, params.ks, ckpt_path=params.checkpoint, threads=threads)
    seconds = time.perf_counter() - t
    write_curve(outputs.curve, res.curve)
    method = f"finetuned-{params.regime}"
    rows, _ = evaluate_encoder(rs, enc, idx, params.ks, params.ndcg_k, params.encoder_name, method, threads, queries=res.queries)
    rows += res.convergence.rows(rs.name, params.encoder_name, method)
    write_json(outputs.record, {"regime": params.regime, "finetune": dict(params.finetune), "train_seconds": seconds,
                                "steps_per_s": res.steps_per_s, "trainable": res.trainable, "early_stopping": res.early_stopping,
                                "convergence": res.convergence.to_dict()})
    _write_rows(outputs.metrics, rows)
    Path(params.checkpoint).unlink(missing_ok=True)
    return rows


def ladder(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``ladder``: rungs 2-4 of the learnability ladder (``capgap.ladder.evaluate_ladder``,
    settings ``params.ladder``): shared query heads on the pre-trained encoder's query embeddings
    (``inputs.queries``, written by rule pretrained: no encoder is loaded here), fit on all
    queries and on train queries, and nearest-train transfer of the probe's w
    (``inputs.w``, rule probe's ``w.npz``); rows to ``outputs.metrics`` (methods
    ``capgap.ladder.method_names``). The index must have been built from this corpus (else
    ``FingerprintMismatch``); query embeddings of another dimension raise ``DataFormatError``."""
    from .ladder import LadderConfig, evaluate_ladder, load_witnesses  # lazy: torch (each rule's env loads only its own method)

    rs, idx, q = _load_with_queries(inputs)
    W = load_witnesses(inputs.w, list(rs.queries.ids))
    rows, seconds = evaluate_ladder(rs, q, idx.embeddings, idx.doc_ids, W, LadderConfig.from_config(params.ladder), params.ks,
                                    params.ndcg_k, params.encoder_name, threads)
    log.info("ladder: %s", ", ".join(f"{m} {s:.1f} s" for m, s in seconds.items()))
    return _write_rows(outputs.metrics, rows)


def twin_negatives(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``twin_negatives``: near-miss twins as hard negatives or not
    (``capgap.nearmiss.twin_negative_rows``). Fine-tunes the query encoder on the near-miss
    set ``inputs.data`` exactly as rule ``finetune`` (settings ``params.finetune``) but with the
    twins left out of the InfoNCE softmax, resuming from ``params.checkpoint``; writes its
    ``outputs.curve`` and ``outputs.adapter``. Rows (``outputs.metrics``): that adapter on the
    near-miss set (method ``finetuned-no-twins``, twin rows included), and on every transfer
    target (``inputs.targets`` data folders, ``inputs.target_indexes`` fingerprints, same
    encoder) both adapters: ``finetuned-no-twins@<set>`` and, loaded from ``inputs.adapter``
    (rule ``finetune``: twins as negatives), ``finetuned@<set>``."""
    from .finetune import load_adapter  # lazy: torch, peft (each rule's env loads only its own method)
    from .index import index_fingerprint, load_index  # lazy: torch, faiss (each rule's env loads only its own method)
    from .nearmiss import twin_negative_rows  # lazy: torch (each rule's env loads only its own method)

    rs, enc, idx = _load_with_index(inputs, params, threads)
    targets = []
    for folder, fp in zip(inputs.targets, inputs.target_indexes):
        t = load_canonical(folder)
        targets.append((t, load_index(Path(fp).parent, index_fingerprint(enc.fingerprint(), t.corpus))))
    res = _train_adapter(rs, enc, idx, params, outputs, threads, twin_negatives=False)
    with_twins = _encoder(params, threads)
    load_adapter(with_twins, inputs.adapter)
    rows = twin_negative_rows(rs, idx, enc, with_twins, targets, params.ks, params.ndcg_k, params.encoder_name, threads)
    rows += res.convergence.rows(rs.name, params.encoder_name, "finetuned-no-twins")
    _write_rows(outputs.metrics, rows)
    Path(params.checkpoint).unlink(missing_ok=True)  # the adapter is saved: the checkpoint has served
    return rows


def colbert(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``colbert``: late interaction (``capgap.colbert.run_colbert``, settings ``params.colbert``):
    fine-tune a PyLate ColBERT on the train queries, encode the corpus, retrieve by MaxSim
    (exact, or index candidates re-scored exactly) and evaluate train/held-out with the same
    metrics code as every method (method ``colbert``). ``params.work`` (not an output, so a
    killed job keeps it) holds, per training digest, the checkpoint, the fine-tuned model, the
    encoded documents and the PLAID index; ``params.extensions``: where PLAID compiles its C++
    extensions. With an ANN backend, rows ``ann_recall@k`` (split ``all``) give the index's
    recall against exact MaxSim top-k on ``ann_sample`` queries. Writes ``outputs.metrics``,
    ``outputs.curve`` and ``outputs.run``."""
    from .colbert import ColbertConfig, run_colbert  # lazy: torch, PyLate (each rule's env loads only its own method)

    rs = load_canonical(inputs.data)
    cfg = ColbertConfig.from_config(dict(params.colbert))
    res = run_colbert(rs, cfg, params.work, params.extensions, params.ks, params.ndcg_k, threads=threads)
    write_curve(outputs.curve, res.curve)
    return _write(outputs, res.rows, res.run)


def hardness(inputs, outputs, params, threads: int = 1) -> list[dict]:
    """Rule ``hardness``: the parity-task experiments (``capgap.hardness.run_grid``, settings
    ``params.hardness``, probe settings ``params.probe``): rows to ``outputs.metrics`` (the
    results.csv columns), sizes and chance agreement to ``outputs.summary`` (JSON)."""
    from .hardness import run_grid  # lazy: torch, quadprog (each rule's env loads only its own method)
    from .probe import ProbeConfig  # lazy: quadprog, scipy (each rule's env loads only its own method)

    t = time.perf_counter()
    rows, summary = run_grid(params.hardness, ProbeConfig.from_config(params.probe))
    log.info("hardness: %d rows in %.1f s", len(rows), time.perf_counter() - t)
    write_json(outputs.summary, summary)
    return _write_rows(outputs.metrics, rows)


def _encoder(params, threads):
    """The encoder ``params.encoder_name`` with config ``params.encoder``."""
    from .encoders import EncoderSpec, load_encoder  # lazy: torch (each rule's env loads only its own method)

    return load_encoder(EncoderSpec.from_config(params.encoder_name, dict(params.encoder)), threads=threads)


def _train_adapter(rs, enc, idx, params, outputs, threads, twin_negatives: bool = True):
    """LoRA fine-tuning with settings ``params.finetune`` (``capgap.finetune.finetune_encoder``,
    resuming from ``params.checkpoint``); writes ``outputs.curve`` and ``outputs.adapter``.
    Returns the ``TrainResult`` (its ``queries``: the final weights' query embeddings)."""
    from .finetune import FinetuneConfig, finetune_encoder, save_adapter  # lazy: torch, peft (each rule's env loads only its own method)

    cfg = FinetuneConfig.from_config(dict(params.finetune))
    res = finetune_encoder(rs, enc, idx, cfg, params.ks, ckpt_path=params.checkpoint, threads=threads,
                           twin_negatives=twin_negatives)
    write_curve(outputs.curve, res.curve)
    save_adapter(enc.model[0].auto_model, outputs.adapter)
    return res


def _load_with_index(inputs, params, threads):
    """The canonical dataset, the loaded encoder, and its frozen index (fingerprint-checked)."""
    from .index import index_fingerprint, load_index  # lazy: torch, faiss (each rule's env loads only its own method)

    rs = load_canonical(inputs.data)
    enc = _encoder(params, threads)
    return rs, enc, load_index(Path(inputs.fingerprint).parent, index_fingerprint(enc.fingerprint(), rs.corpus))


def _load_with_queries(inputs):
    """The canonical dataset, its frozen index (built from this corpus, else
    ``FingerprintMismatch``) and rule pretrained's query embeddings (``inputs.queries``, one row
    per query in the dataset's order; ``DataFormatError`` for a missing query or another dimension)."""
    from .index import load_index  # lazy: torch, faiss (each rule's env loads only its own method)

    rs = load_canonical(inputs.data)
    idx = load_index(Path(inputs.fingerprint).parent, corpus=rs.corpus)
    q = load_query_embeddings(inputs.queries, list(rs.queries.ids))
    if q.shape[1] != idx.embeddings.shape[1]:
        raise DataFormatError(inputs.queries, None, "q", f"dimension {q.shape[1]}, the index's is {idx.embeddings.shape[1]}")
    return rs, idx, q


def _write_rows(path, rows: list[dict]) -> list[dict]:
    write_rows(path, rows)
    return rows


def _write(outputs, rows: list[dict], run) -> list[dict]:
    """Write a method's run to ``outputs.run`` and its rows to ``outputs.metrics``."""
    run.write(outputs.run)
    return _write_rows(outputs.metrics, rows)
