"""The ladder's heads side by side: which optimiser converges fastest (capgap.ladder.fit_head).

For each dataset x encoder a pipeline run has produced (rule data's canonical folder, rule
index's embeddings, rule pretrained's queries.npz: loaded as rule ladder loads them,
``capgap.stages._load_with_queries``), each variant (an optimiser, batch size and schedule:
overrides of ``LadderConfig``) fits the fit-all heads (``head-linear-all``, ``head-mlp-all``:
every query with a gold row) under the convergence rule, with 1 torch thread, and reports the
wall time of ``fit_head``, the steps, whether the rule stopped it, the final objective and the
held-out R-precision (``capgap.evaluate.evaluate_queries``, as the rule reports it). With ``--ladder``
it runs ``capgap.ladder.evaluate_ladder`` instead, as rule ladder does: the four heads, the
train-only ones on the train queries less the validation split, keeping the best validation
point (and the transfer rungs when rule probe's w.npz is there); the wall time is then each
head's fit plus its evaluation, and ``--out`` also gets every result row. With ``--curve`` every curve point also records the held-out
R-precision (its time is left out of the wall time) and the curves go to ``--out`` (JSON).

Run (after the pipeline's data, index and pretrained rules):
  OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/heads.py --results results \\
      --pairs nfcorpus/minilm,limit-small/minilm,limit-small/mpnet,scifact/minilm \\
      --variants 'default:' 'adamw-b64:optimizer=adamw,eval_every=100,steps=4000'
A variant is ``name:key=value,...`` (LadderConfig fields; ``name:`` alone is the schema's defaults).
"""

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace as NS

import numpy as np


def load_pair(results: Path, dataset: str, encoder: str):
    """(RetrievalSet, FrozenIndex, query embeddings) as rule ladder loads them."""
    from capgap.stages import _load_with_queries

    base = results / dataset
    return _load_with_queries(
        NS(
            data=base / "data",
            fingerprint=base / encoder / "index" / "fingerprint.json",
            queries=base / encoder / "pretrained" / "queries.npz",
        )
    )


def parse_variant(spec: str, base):
    name, _, rest = spec.partition(":")
    kw = {}
    for item in filter(None, rest.split(",")):
        k, _, v = item.partition("=")
        field = type(base).__dataclass_fields__[k]
        kw[k] = v if field.type in ("str", str) else (float(v) if field.type in ("float", float) else int(v))
    return name, replace(base, **kw)


def heldout_rprec(rs, head_vectors, documents, doc_ids, ks=(1, 10)) -> float:
    from capgap.evaluate import evaluate_queries

    rows, _ = evaluate_queries(rs, head_vectors, documents, doc_ids, list(ks), 10, "enc", "head", 1)
    return next(r["value"] for r in rows if (r["split"], r["metric"]) == ("heldout", "rprec"))


def main():
    import torch

    from capgap.evaluate import Judged
    from capgap.ladder import LadderConfig, apply_head, evaluate_ladder, fit_head, method_names

    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default="results")
    ap.add_argument("--pairs", default="nfcorpus/minilm")
    ap.add_argument("--variants", nargs="+", default=["default:"])
    ap.add_argument("--kinds", default="linear,mlp")
    ap.add_argument(
        "--ladder", action="store_true", help="the four heads as rule ladder fits them (capgap.ladder.evaluate_ladder)"
    )
    ap.add_argument("--curve", action="store_true", help="held-out R-precision at every curve point")
    ap.add_argument("--out", default=None, help="JSON file for the results (and curves)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    out = []
    print("| dataset x encoder | variant | head | held-out R-prec | steps | converged | wall s | objective | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for pair in a.pairs.split(","):
        dataset, encoder = pair.split("/")
        rs, idx, X = load_pair(Path(a.results), dataset, encoder)
        D, doc_ids = np.asarray(idx.embeddings, dtype=np.float32), idx.doc_ids
        qids = list(rs.queries.ids)
        j = Judged.of(rs, qids, doc_ids)
        excluded = [list(e) for e in j.excluded] if any(len(e) for e in j.excluded) else None
        items = [i for i in range(len(qids)) if len(j.gold[i])]
        for spec in a.variants:
            name, cfg = parse_variant(spec, LadderConfig())
            if a.ladder:  # the four heads (and transfer, with the probe's w) as rule ladder fits them
                from capgap.ladder import load_witnesses

                w_file = Path(a.results) / dataset / encoder / "probe" / "w.npz"
                W = load_witnesses(w_file, qids) if w_file.is_file() else None
                load = os.getloadavg()[0]
                rows, seconds = evaluate_ladder(rs, X, D, doc_ids, W, cfg, [1, 10], 10, encoder, threads=1)
                out.append({"pair": pair, "variant": name, "rows": rows, "seconds": seconds})
                for method in [m for m in method_names(cfg) if m in seconds and m.startswith("head-")]:
                    val = {(r["split"], r["metric"]): r["value"] for r in rows if r["method"] == method}
                    rec = {
                        "pair": pair,
                        "variant": name,
                        "head": method,
                        "heldout_rprec": val[("heldout", "rprec")],
                        "steps": int(val[("train", "steps")]),
                        "converged": bool(val[("train", "converged")]),
                        "seconds": seconds[method],
                        "objective": val[("train", "train_loss")],
                        "load": load,
                        "config": cfg.__dict__,
                    }
                    report(rec)
                    out.append(rec)
                if a.out:
                    Path(a.out).write_text(json.dumps(out, indent=1, default=float))
                continue
            for kind in a.kinds.split(","):
                extra = {"seconds": 0.0}
                evaluate = None
                if a.curve:

                    def evaluate(head, step, extra=extra):
                        t = time.perf_counter()
                        v = heldout_rprec(rs, apply_head(head, X), D, doc_ids)
                        extra["seconds"] += time.perf_counter() - t
                        return {"heldout_rprec": v, "time": time.perf_counter() - extra["t0"] - extra["seconds"]}

                load = os.getloadavg()[0]
                extra["t0"] = t = time.perf_counter()
                head, res = fit_head(
                    kind,
                    X[items],
                    D,
                    [j.gold[i] for i in items],
                    None if excluded is None else [excluded[i] for i in items],
                    cfg,
                    threads=1,
                    evaluate=evaluate,
                )
                wall = time.perf_counter() - t - extra["seconds"]
                st = res.convergence
                rec = {
                    "pair": pair,
                    "variant": name,
                    "head": f"head-{kind}-all",
                    "heldout_rprec": heldout_rprec(rs, apply_head(head, X), D, doc_ids),
                    "steps": st.steps,
                    "converged": st.converged,
                    "seconds": wall,
                    "objective": st.objective,
                    "load": load,
                    "config": cfg.__dict__,
                    "curve": res.curve if a.curve else None,
                }
                report(rec)
                out.append(rec)
                if a.out:
                    Path(a.out).write_text(json.dumps(out, indent=1, default=float))


def report(r: dict) -> None:
    print(
        f"| {r['pair']} | {r['variant']} | {r['head']} | {r['heldout_rprec']:.3f} | {r['steps']} | "
        f"{'yes' if r['converged'] else 'no'} | {r['seconds']:.1f} | {r['objective']:.3f} | {r['load']:.1f} |",
        flush=True,
    )


if __name__ == "__main__":
    main()
