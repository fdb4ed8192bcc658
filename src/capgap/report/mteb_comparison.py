"""Section "MTEB's published numbers beside ours": every published value of
``capgap/mteb_reference.yaml`` for a model and dataset this run evaluated, beside capgap's
pre-trained encoder on the same split, with the difference; a difference above the table's
tolerance is flagged as a likely index or evaluation error (``capgap.mteb.compare``)."""

from __future__ import annotations

from typing import Sequence

from .. import mteb
from .context import ReportContext
from .format import _md_table

FLAG = "⚠"  # marks a flagged difference in the table


def _num(v: float | None, sign: bool = False) -> str:
    """5 decimals (the published values' own), "–" for none; a difference that rounds to 0
    reads +0.00000."""
    if v is None:
        return "–"
    v = round(v, 5) + 0.0  # + 0.0: no "-0.00000"
    return f"{v:+.5f}" if sign else f"{v:.5f}"


def render_mteb(rows: Sequence[dict], not_run: Sequence[str] = (), tolerance: float | None = None) -> list[str]:
    """The section's Markdown lines.

    Parameters
    ----------
    rows : sequence of dict
        ``capgap.mteb.compare``'s rows.
    not_run : sequence of str
        ``capgap.mteb.not_run``: published (task, model) pairs this run has no rows for.
    tolerance : float, optional
        The flagging threshold (default: the checked-in table's).

    Returns
    -------
    list of str
        The lines, ending with a blank one; none when ``rows`` is empty.
    """
    if not rows:
        return []
    tol = mteb.load_reference()["tolerance"] if tolerance is None else tolerance
    out = [
        "## MTEB's published numbers beside ours",
        "",
        "MTEB publishes the same models' scores on the same BEIR test queries "
        "([embeddings-benchmark/results](https://github.com/embeddings-benchmark/results), checked in as "
        "`capgap/mteb_reference.yaml`). The pre-trained encoder's nDCG@10, recall@10 and recall@100 here should "
        f"equal them: a difference above {tol:g} is flagged ({FLAG}) as a likely index or evaluation error "
        "(documents missing or changed, another model revision, a tie or cut-off rule). MTEB's test split is "
        "capgap's held-out split where the dataset takes held-out queries from BEIR's test qrels.",
        "",
    ]
    out.append(
        _md_table(
            ["dataset", "encoder", "metric", "split", "MTEB", "capgap", "capgap − MTEB", "verdict"],
            [
                [
                    r["dataset"],
                    f"{r['encoder']} ({r['model']})",
                    r["metric"],
                    r["split"],
                    _num(r["mteb"]),
                    _num(r["ours"]),
                    _num(r["diff"], sign=True),
                    (f"{FLAG} **{r['verdict']}**" if r["flagged"] else r["verdict"]),
                ]
                for r in rows
            ],
        )
    )
    out.append("")
    measured = [r for r in rows if r["diff"] is not None]
    flagged = [r for r in measured if r["flagged"]]
    out.append(
        f"**{len(measured) - len(flagged)} of {len(measured)} compared values agree with MTEB within {tol:g}**"
        + (
            f"; {len(flagged)} differ: " + ", ".join(f"{r['dataset']} / {r['encoder']} {r['metric']}" for r in flagged)
            if flagged
            else ""
        )
        + (f"; {len(rows) - len(measured)} not compared (see verdict)." if len(rows) > len(measured) else ".")
    )
    out.append("")
    if not_run:
        out += [
            f"Published values not compared (no pre-trained run of that model and dataset here): {', '.join(not_run)}.",
            "",
        ]
    out += ["Sources (embeddings-benchmark/results):", ""]
    out += [
        f"- `{s}` (revision folder `{rev}`)" for s, rev in dict.fromkeys((r["source"], r["revision"]) for r in rows)
    ]
    out.append("")
    return out


def render(ctx: ReportContext) -> list[str]:
    """The comparison (no published value for any model and dataset run here: no lines)."""
    return render_mteb(ctx.mteb_rows, ctx.mteb_not_run)
