"""MTEB's published numbers beside capgap's pre-trained rows: a public check of the index and
the evaluation.

MTEB (embeddings-benchmark/results) publishes nDCG@10, recall@10 and recall@100 of the same
models on the same BEIR test queries. ``mteb_reference.yaml`` (checked in) keeps the values,
each with its model, revision folder and task; ``compare`` puts each beside capgap's
pre-trained encoder on the same dataset and split and flags a difference above the table's
tolerance (0.001): the same model on the same queries should give the same numbers, so a larger
difference points at the index (documents left out or changed, another model revision) or the
evaluation (ties, cut-offs, relevance grades).

Which capgap split is MTEB's test split: the held-out split, when the dataset's split rule
takes held-out from the BEIR qrels file ``test`` (``status.json`` ``split_rule``); with any
other rule (a seeded fraction) no capgap split holds exactly those queries, and the row says
so. Metrics capgap did not compute (``eval.ks`` without 100, ``eval.ndcg_k`` not 10) are said
to be not computed.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd
import yaml

from .errors import DataFormatError

REFERENCE = "mteb_reference.yaml"
# reference table key -> (results.csv metric, k)
METRICS = {"ndcg@10": ("ndcg", 10), "recall@10": ("recall", 10), "recall@100": ("recall", 100)}
# capgap's split holding exactly MTEB's test queries, by the dataset's split rule
_TEST_RULE = re.compile(r"^dataset qrels files: train=\[.*?\], heldout=\['test'\](,|$)")


def _line(root: yaml.Node, keys: Sequence[str]) -> int:
    """The 1-based line of the deepest of ``keys`` (a path of mapping keys) found under ``root``."""
    node, line = root, root.start_mark.line + 1
    for k in keys:
        if not isinstance(node, yaml.MappingNode):
            break
        hit = next(((kn, vn) for kn, vn in node.value if kn.value == k), None)
        if hit is None:
            break
        line, node = hit[0].start_mark.line + 1, hit[1]
    return line


def parse_reference(text: str, path: str | Path) -> dict:
    """Read and check a reference table (the layout of ``mteb_reference.yaml``).

    Parameters
    ----------
    text : str
        The YAML text.
    path : str or Path
        Its file, for the errors.

    Returns
    -------
    dict
        ``{"source", "split", "tolerance", "models": {model: {"revision", "tasks": {task:
        {"dataset", "ndcg@10", ...}}}}}``.

    Raises
    ------
    DataFormatError
        Naming the file, line and field: not YAML, a missing or misspelt key, a revision that
        is not a string, a task without a dataset or without values, a metric other than
        ``METRICS``, a value that is not a number in [0, 1].
    """
    try:
        root = yaml.compose(text)
        ref = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise DataFormatError(
            path, mark.line + 1 if mark else None, None, f"not YAML: {getattr(e, 'problem', e)}"
        ) from e
    if not isinstance(ref, dict):
        raise DataFormatError(path, None, None, "expected a mapping with keys source, split, tolerance, models")

    def fail(keys: Sequence[str], reason: str):
        raise DataFormatError(path, _line(root, keys), ".".join(keys), reason)

    for key in ("source", "split", "tolerance", "models"):
        if key not in ref:
            fail([key], "missing")
    if ref["split"] != "test":
        fail(["split"], f"expected 'test' (MTEB's BEIR split), got {ref['split']!r}")
    tol = ref["tolerance"]
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < 1:
        fail(["tolerance"], f"expected a number in [0, 1), got {tol!r}")
    if not isinstance(ref["models"], dict) or not ref["models"]:
        fail(["models"], "expected a mapping: model id -> revision and tasks")
    for model, entry in ref["models"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("revision"), str) or not entry["revision"].strip():
            fail(["models", model, "revision"], "expected the revision folder of the model's results (a string)")
        if not isinstance(entry.get("tasks"), dict) or not entry["tasks"]:
            fail(["models", model, "tasks"], "expected a mapping: MTEB task -> dataset and values")
        for task, vals in entry["tasks"].items():
            where = ["models", model, "tasks", task]
            if not isinstance(vals, dict) or not isinstance(vals.get("dataset"), str):
                fail(where + ["dataset"], "expected the capgap dataset name (a string)")
            metrics = [m for m in vals if m != "dataset"]
            if not metrics:
                fail(where, f"no published value (expected some of {', '.join(METRICS)})")
            for m in metrics:
                v = vals[m]
                if m not in METRICS:
                    fail(where + [m], f"unknown metric (expected one of {', '.join(METRICS)})")
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
                    fail(where + [m], f"expected a number in [0, 1], got {v!r}")
    return ref


@lru_cache(maxsize=1)
def load_reference() -> dict:
    """The checked-in table, ``capgap/mteb_reference.yaml``, read and checked by
    ``parse_reference`` (which raises ``DataFormatError`` naming file, line and field)."""
    f = resources.files("capgap").joinpath(REFERENCE)
    return parse_reference(f.read_text(encoding="utf-8"), f"capgap/{REFERENCE}")


def source_path(model: str, revision: str, task: str) -> str:
    """The file of MTEB's results repository holding ``task``'s values for ``model`` at
    ``revision``: ``results/<model, "/" written "__">/<revision>/<task>.json``."""
    return f"results/{model.replace('/', '__')}/{revision}/{task}.json"


def mteb_split(status: Mapping) -> str | None:
    """The capgap split holding exactly MTEB's test queries (those of BEIR's ``test`` qrels
    file) for a dataset's ``status.json``: ``"heldout"`` when its split rule takes held-out from
    qrels file ``test``, else None (a seeded fraction, generated data, unavailable)."""
    if not status.get("available") or status.get("source", {}).get("kind") == "generated":
        return None
    return "heldout" if _TEST_RULE.match(str(status.get("split_rule", ""))) else None


def _value(df: pd.DataFrame, dataset: str, encoder: str, split: str, metric: str, k: int) -> float | None:
    sel = df[
        (df["dataset"] == dataset)
        & (df["encoder"] == encoder)
        & (df["method"] == "pretrained")
        & (df["split"] == split)
        & (df["metric"] == metric)
        & (df["k"] == k)
    ]
    return float(sel["value"].iloc[0]) if len(sel) else None


def compare(
    df: pd.DataFrame, statuses: Sequence[Mapping], models: Mapping[str, str], reference: Mapping | None = None
) -> list[dict]:
    """MTEB's published values beside capgap's pre-trained rows of the same model and dataset.

    Parameters
    ----------
    df : pandas.DataFrame
        results.csv rows (``dataset, encoder, method, split, metric, k, value``) of the frozen
        index as built.
    statuses : sequence of mapping
        Each dataset's ``status.json`` (its ``split_rule`` says which split is MTEB's test).
    models : mapping
        Encoder name -> model id (the config's ``encoders.<name>.model``).
    reference : mapping, optional
        A table as ``parse_reference`` returns it; default the checked-in one.

    Returns
    -------
    list of dict
        One per (dataset, encoder with pre-trained rows, published metric), in table order,
        for every task of the encoder's model whose dataset capgap ran: ``dataset, encoder,
        model, task, metric, split, mteb, ours, diff, flagged, verdict, source, revision``.
        ``ours`` and ``diff`` (capgap − MTEB) are None where not comparable; ``flagged`` is True
        for ``|diff| > tolerance``. ``verdict``: "agrees (within 0.001)", "differs by +0.01234:
        likely an index or evaluation error", "not computed (...)" (also for a capgap value that
        is NaN or infinite: ``ours`` and ``diff`` None, never agreeing) or "not comparable (...)".
    """
    ref = load_reference() if reference is None else reference
    tol = float(ref["tolerance"])
    by_ds = {s["dataset"]: s for s in statuses}
    pre = df[df["method"] == "pretrained"]
    rows = []
    for model, entry in ref["models"].items():
        encoders = [e for e, m in models.items() if m == model]
        for task, vals in entry["tasks"].items():
            ds = vals["dataset"]
            for enc in encoders:
                if not ((pre["dataset"] == ds) & (pre["encoder"] == enc)).any():
                    continue
                split = mteb_split(by_ds.get(ds, {}))
                for m in (m for m in METRICS if m in vals):
                    metric, k = METRICS[m]
                    row = dict(
                        dataset=ds,
                        encoder=enc,
                        model=model,
                        task=task,
                        metric=m,
                        split=split or "–",
                        mteb=float(vals[m]),
                        ours=None,
                        diff=None,
                        flagged=False,
                        source=source_path(model, entry["revision"], task),
                        revision=entry["revision"],
                    )
                    if split is None:
                        rule = by_ds.get(ds, {}).get("split_rule", "not recorded")
                        row["verdict"] = f"not comparable (no capgap split is BEIR's test qrels; split rule: {rule})"
                    elif (ours := _value(pre, ds, enc, split, metric, k)) is None:
                        row["verdict"] = (
                            "not computed (eval.ndcg_k is not 10)"
                            if metric == "ndcg"
                            else f"not computed (eval.ks has no {k})"
                        )
                    elif not math.isfinite(ours):  # NaN compares False with everything: it must never read as agreeing
                        row["verdict"] = f"not computed (capgap's value is {ours})"
                    else:
                        diff = ours - row["mteb"]
                        flagged = not math.isclose(abs(diff), tol) and abs(diff) > tol
                        row.update(
                            ours=ours,
                            diff=diff,
                            flagged=flagged,
                            verdict=(
                                f"differs by {diff:+.5f}: likely an index or evaluation error"
                                if flagged
                                else f"agrees (within {tol:g})"
                            ),
                        )
                    rows.append(row)
    return rows


def not_run(df: pd.DataFrame, models: Mapping[str, str], reference: Mapping | None = None) -> list[str]:
    """The published (model, task) pairs with no capgap pre-trained rows to compare: "Task
    (model)" for each, in table order (a model no encoder uses: every task)."""
    ref = load_reference() if reference is None else reference
    pre = df[df["method"] == "pretrained"]
    out = []
    for model, entry in ref["models"].items():
        encoders = [e for e, m in models.items() if m == model]
        for task, vals in entry["tasks"].items():
            if not any(((pre["dataset"] == vals["dataset"]) & (pre["encoder"] == e)).any() for e in encoders):
                out.append(f"{task} ({model})")
    return out
