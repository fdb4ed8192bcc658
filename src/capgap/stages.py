"""One function per pipeline stage; ``workflow/scripts/*.py`` only adapt Snakemake to these.

Each stage reads its inputs, calls the library, and writes its outputs atomically.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Mapping, Sequence

from .data import load_canonical, write_canonical
from .errors import DatasetUnavailable
from .evaluate import evaluate_rankings, rankings_to_ids, write_rows, write_run
from .io import write_json

log = logging.getLogger(__name__)


def prepare_dataset(name: str, spec: Mapping, out_dir: str | Path, mirror: str | None = None) -> dict:
    """Obtain dataset ``name`` and write its canonical copy plus ``status.json`` to ``out_dir``.

    An unobtainable dataset is not an error here: ``status.json`` then says
    ``available: false`` with the reason and a hint, and the report lists it.
    Bad data (``DataFormatError``) is an error: nothing downstream runs on it.
    """
    from .sources import obtain

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        rs = obtain(name, spec, mirror=mirror)
    except DatasetUnavailable as e:
        log.warning("%s", e)
        status = {"dataset": name, "available": False, "reason": e.reason, "hint": e.hint}
        write_json(out / "status.json", status)
        return status
    write_canonical(rs, out)
    status = {
        "dataset": name,
        "available": True,
        "n_docs": len(rs.corpus),
        "n_queries": len(rs.queries),
        "n_train": len(rs.split.train),
        "n_heldout": len(rs.split.heldout),
        "dropped_queries_without_gold": rs.dropped_queries,
        "split_rule": rs.split.rule,
        "source": rs.source,
    }
    write_json(out / "status.json", status)  # written last: marks the copy complete
    return status


def build_frozen_index(data_dir: str | Path, encoder_name: str, encoder_cfg: Mapping, out_dir: str | Path, threads: int = 1) -> dict:
    """Embed the dataset's corpus once with the encoder; returns the index fingerprint."""
    from .encoders import EncoderSpec, load_encoder
    from .index import build_index

    rs = load_canonical(data_dir)
    enc = load_encoder(EncoderSpec.from_config(encoder_name, dict(encoder_cfg)), threads=threads)
    t = time.perf_counter()
    idx = build_index(rs.corpus, enc, out_dir)
    log.info("embedded %d documents in %.1f s", len(rs.corpus), time.perf_counter() - t)
    return idx.fingerprint


def evaluate_pretrained(
    data_dir: str | Path,
    index_dir: str | Path,
    dataset: str,
    encoder_name: str,
    encoder_cfg: Mapping,
    ks: Sequence[int],
    ndcg_k: int,
    out_csv: str | Path,
    out_run: str | Path,
    threads: int = 1,
) -> list[dict]:
    """Recall@k / nDCG of the pre-trained encoder's own query embeddings on the frozen index.

    The index fingerprint must match this encoder and corpus (else ``FingerprintMismatch``).
    """
    from .encoders import EncoderSpec, load_encoder
    from .index import index_fingerprint, load_index
    from .retrieval import exact_topk

    rs = load_canonical(data_dir)
    enc = load_encoder(EncoderSpec.from_config(encoder_name, dict(encoder_cfg)), threads=threads)
    index = load_index(index_dir, index_fingerprint(enc.fingerprint(), rs.corpus))
    q = enc.encode_queries(list(rs.queries.texts), progress=True)
    idx, sc = exact_topk(q, index.embeddings, max(ks), threads=threads)
    ranked = dict(zip(rs.queries.ids, rankings_to_ids(idx, index.doc_ids)))
    rows = evaluate_rankings(rs, ranked, ks, ndcg_k, dataset, encoder_name, "pretrained")
    write_run(out_run, rs.queries.ids, idx, sc, index.doc_ids, f"{encoder_name}-pretrained")
    write_rows(out_csv, rows)
    return rows


def evaluate_bm25(data_dir: str | Path, dataset: str, bm25_cfg: Mapping, ks: Sequence[int], ndcg_k: int, out_csv: str | Path, out_run: str | Path) -> list[dict]:
    """Recall@k / nDCG of BM25 (``bm25_cfg``: backend, method, k1, b, stopwords)."""
    from .bm25 import BM25

    rs = load_canonical(data_dir)
    bm = BM25(rs.corpus.passages(), **dict(bm25_cfg))
    idx, sc = bm.search(list(rs.queries.texts), max(ks))
    ranked = dict(zip(rs.queries.ids, rankings_to_ids(idx, rs.corpus.ids)))
    rows = evaluate_rankings(rs, ranked, ks, ndcg_k, dataset, "", "bm25")
    write_run(out_run, rs.queries.ids, idx, sc, rs.corpus.ids, "bm25")
    write_rows(out_csv, rows)
    return rows


def read_status(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())


def log_to(path: str | Path) -> None:
    """Send stderr and ``logging`` (INFO) to a rule's log file; first line of every script."""
    import sys

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    sys.stderr = open(path, "w", buffering=1)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
