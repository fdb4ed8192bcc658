"""Writing a diagnosis: ``write_diagnosis(diag, out_dir)`` -> per_query.tsv, summary.json,
summary.md and verdicts.png, written as one set (``capgap.io.output_set``): all four or none.
"""

from __future__ import annotations

import contextlib
import csv
from pathlib import Path

from ..errors import OutputWriteError
from ..figures.base import _mpl, _save
from ..io import atomic_open, output_set, write_json, write_text
from .inputs import _METRIC_NAMES
from .summary import VERDICTS
from .verdicts import Diagnosis


def write_diagnosis(diag: Diagnosis, out_dir: str | Path) -> dict[str, Path]:
    """Write ``per_query.tsv``, ``summary.json``, ``summary.md`` and ``verdicts.png`` into
    ``out_dir`` as one set: each to a temporary file, renamed only once all four are written.

    Parameters
    ----------
    diag : Diagnosis
        ``diagnose``'s result.
    out_dir : str or Path
        The folder (created when missing).

    Returns
    -------
    dict of str to Path
        The four outputs' paths, by key ``per_query``, ``summary_json``, ``summary_md``,
        ``figure``.

    Raises
    ------
    OutputWriteError
        The folder or an output could not be written (a full disk: "cannot write
        <out_dir>/summary.json: No space left on device"), or a rename failed part way; no
        output of this call is then left in ``out_dir`` (files of an earlier diagnosis there
        stay as they were, byte for byte: ``capgap.io.output_set``), and ``out_dir`` itself is
        removed when this call created it.
    """
    out = Path(out_dir)
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputWriteError(out, e) from e
    paths = {
        "per_query": out / "per_query.tsv",
        "summary_json": out / "summary.json",
        "summary_md": out / "summary.md",
        "figure": out / "verdicts.png",
    }
    cols = list(diag.rows[0]) if diag.rows else ["query_id", "verdict"]
    try:
        with output_set():
            with atomic_open(paths["per_query"], "w", encoding="utf-8", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=cols, delimiter="\t", lineterminator="\n")
                w.writeheader()
                for r in diag.rows:
                    w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in cols})
            write_json(paths["summary_json"], diag.summary)
            write_text(paths["summary_md"], "\n".join(_markdown(diag.summary, diag.k)).rstrip() + "\n")
            _plot(diag, paths["figure"])
    except BaseException:
        if created:  # the folder this call made goes too, when nothing else was put there meanwhile
            with contextlib.suppress(OSError):
                out.rmdir()
        raise
    return paths


def _markdown(s: dict, k: int) -> list[str]:
    """The lines of summary.md: the reading, the metric, what the index is, the verdict counts,
    the mean recalls and the notes."""
    md = ["# capgap diagnose", "", s["reading"], "", f"Metric: {_METRIC_NAMES[s['metric']]} (`{s['metric']}`).", ""]
    for what, info in (("Index", s.get("index")), ("Uncompressed documents", s.get("uncompressed"))):
        if info:
            src = f"`{info['path']}`, " if info.get("path") else ""
            typ = f" (faiss `{info['faiss_type']}`)" if info.get("faiss_type") else ""
            md += [f"{what}: {src}`{info['kind']}`{typ}, {info['bytes_per_vector']:g} bytes per vector.", ""]
    md += ["| verdict | queries |", "|---|---|"]
    md += [
        f"| {v} | {s['verdicts'][v]} |"
        if v != "compression-limited" or s.get("uncompressed")
        else f"| {v} | not measured (no uncompressed documents) |"
        for v in VERDICTS
    ]
    md += [
        "",
        f"| at k = {k} | mean |",
        "|---|---|",
        f"| capacity recall (per query, the better of probe and encoder) | {s[f'capacity@{k}']:.3f} |",
        f"| probe recall | {s[f'probe_recall@{k}']:.3f} |",
        f"| certified | {s['certified']:.3f} |",
        f"| encoder recall (exact search) | {s[f'encoder_recall@{k}']:.3f} |",
        f"| unused capacity (capacity − encoder) | {s['unused_capacity']:.3f} |",
    ]
    if f"ann_recall@{k}" in s:
        md += [
            f"| ANN recall | {s[f'ann_recall@{k}']:.3f} |",
            f"| ANN vs exact top-{k} | {s[f'ann_vs_exact@{k}']:.3f} |",
        ]
    if s.get("uncompressed"):
        u = s["uncompressed"]
        md += [
            f"| probe recall, uncompressed documents | {u[f'probe_recall@{k}']:.3f} |",
            f"| certified, uncompressed documents | {u['certified']:.3f} |",
        ]
    md += ["", "Recall is capped: |top-k ∩ gold| / min(k, |gold|). Per-query numbers: `per_query.tsv`.", ""]
    md += [f"- {n}" for n in s["notes"]]
    return md


def _plot(diag: Diagnosis, path: Path) -> None:
    """verdicts.png: the verdict counts and the mean recalls of probe, encoder and ANN."""
    plt, sns = _mpl()
    s, k = diag.summary, diag.k
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2))
    shown = [v for v in VERDICTS if v != "compression-limited" or s.get("uncompressed")]
    sns.barplot(x=shown, y=[s["verdicts"][v] for v in shown], ax=a, color="#4c72b0")
    a.set(ylabel="queries", title="Verdicts")
    a.tick_params(axis="x", labelrotation=25)
    names = ["capacity", "encoder (exact)"] + (["ANN"] if f"ann_recall@{k}" in s else [])
    vals = [s[f"capacity@{k}"], s[f"encoder_recall@{k}"]] + ([s[f"ann_recall@{k}"]] if f"ann_recall@{k}" in s else [])
    sns.barplot(x=names, y=vals, ax=b, color="#55a868")
    b.set(ylim=(0, 1.02), ylabel=f"recall@{k} (capped)", title="Where recall is lost")
    _save(fig, path)
