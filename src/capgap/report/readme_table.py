"""The README's results table: rendered from a run's results.csv and stamped with the capgap
commit its jobs ran and the config file it ran on.

``python -m capgap.report.readme_table reports/results.csv --write README.md`` replaces the
text between ``<!-- results:begin -->`` and ``<!-- results:end -->`` in README.md; without
``--write`` the block is printed. Per-job tables (``results/*/*/*/metrics.csv``) may be given
instead of results.csv: they are collected as the report rule collects them.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from .format import _f
from .results import METHOD_ORDER, collect, uncompressed

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"
HEADER = ("dataset", "method", "R@2", "R@10", "R@100", "nDCG@10", "R@10 train / held-out")


def _value(df: pd.DataFrame, split: str, metric: str, k: int) -> float | None:
    v = df[(df["split"] == split) & (df["metric"] == metric) & (df["k"] == k)]["value"]
    return float(v.iloc[0]) if len(v) else None


def results_table(df: pd.DataFrame) -> str:
    """The README's Markdown table from results.csv's frame.

    Parameters
    ----------
    df : pandas.DataFrame
        results.csv as ``capgap.report.results.collect`` reads it (columns ``dataset, encoder,
        method, split, metric, k, value, compression``).

    Returns
    -------
    str
        One row per dataset x method x encoder of ``METHOD_ORDER`` (probe, pretrained,
        finetuned, bm25, colbert) on the frozen index as built (``compression`` empty), in
        results.csv's order: recall@2, @10, @100 and nDCG@10 over all queries (split ``all``),
        then recall@10 on the train and held-out queries; "–" where a value is absent. Other
        methods (ladder rungs, regimes, near-miss adapters) and the parity task's datasets
        (``parity-P*``) are left out: they have their own report sections.
    """
    df = uncompressed(df)
    df = df[df["method"].isin(METHOD_ORDER) & ~df["dataset"].astype(str).str.startswith("parity-")]
    rows = []
    for (ds, method, enc), g in df.groupby(["dataset", "method", "encoder"], sort=False):
        who = {"colbert": "colbert (fine-tuned)", "bm25": "bm25"}.get(method, f"{method} ({enc})" if enc else method)
        tr, ho = _f(_value(g, "train", "recall", 10)), _f(_value(g, "heldout", "recall", 10))
        rows.append(
            [
                ds,
                who,
                *(_f(_value(g, "all", "recall", k)) for k in (2, 10, 100)),
                _f(_value(g, "all", "ndcg", 10)),
                f"{tr} / {ho}",
            ]
        )
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def job_commits(logs: str | Path) -> dict[str, int]:
    """The capgap code the run's jobs ran, as their logs record it.

    Parameters
    ----------
    logs : str or Path
        The run's ``logs/`` folder (``logs/{rule}/...log``; each job's log starts with a
        ``capgap code: commit <12 hex> [(with uncommitted changes)] from <path>`` line, written
        by ``capgap.logs.log_to``).

    Returns
    -------
    dict
        The text after ``capgap code: commit `` up to `` from `` -> how many job logs name it,
        most first; empty when no log has the line.
    """
    out: dict[str, int] = {}
    for p in sorted(Path(logs).rglob("*.log")):
        with open(p, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if "capgap code: " in line:
                    code = line.split("capgap code: ", 1)[1].strip().rsplit(" from ", 1)[0]
                    out[code.removeprefix("commit ")] = out.get(code.removeprefix("commit "), 0) + 1
                    break
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def stamp(commits: Mapping[str, int], config: str | Path, config_sha256: str, source: str) -> str:
    """The line under the table: where its numbers came from.

    Parameters
    ----------
    commits : Mapping
        ``job_commits``'s result (commit text -> number of jobs).
    config : str or Path
        The config file the run ran on, as the README should name it.
    config_sha256 : str
        That file's sha256 (hex).
    source : str
        What the table was rendered from (e.g. ``reports/results.csv``).

    Returns
    -------
    str
        ``Rendered from <source> by `python -m capgap.report.readme_table`: capgap commit <c>
        (all <n> jobs), config `<config>` (sha256 `<hex>`).``; several commits are listed
        ``<c>: <n> jobs``, most first, and "capgap commit not recorded" stands for no log line.
    """
    if not commits:
        code = "capgap commit not recorded"
    elif len(commits) == 1:
        ((c, n),) = commits.items()
        code = f"capgap commit {c} (all {n} jobs)"
    else:
        code = "capgap commits " + "; ".join(f"{c}: {n} job" + "s" * (n != 1) for c, n in commits.items())
    return (
        f"Rendered from {source} by `python -m capgap.report.readme_table`: {code}, "
        f"config `{config}` (sha256 `{config_sha256}`)."
    )


def replace_block(text: str, block: str) -> str:
    """``text`` with everything between the ``BEGIN`` and ``END`` markers replaced by ``block``.

    Raises
    ------
    ValueError
        When the markers are missing or out of order.
    """
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise ValueError(f"no {BEGIN} ... {END} block")
    return text[: i + len(BEGIN)] + "\n" + block.rstrip("\n") + "\n" + text[j:]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m capgap.report.readme_table", description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="+", help="results.csv, or the per-job tables (metrics.csv) of a run")
    ap.add_argument("--logs", default="logs", help="the run's logs folder (default: logs)")
    ap.add_argument("--config", default="config/config.yaml", help="the config file the run ran on")
    ap.add_argument(
        "--source", help="how the stamp names the table's source (default: the csv path, or 'N per-job tables')"
    )
    ap.add_argument("--write", metavar="README", help="replace the marked block in this file instead of printing")
    args = ap.parse_args(argv)
    source = args.source or (f"`{args.csv[0]}`" if len(args.csv) == 1 else f"{len(args.csv)} per-job tables")
    block = (
        results_table(collect(args.csv))
        + "\n\n"
        + stamp(job_commits(args.logs), args.config, hashlib.sha256(Path(args.config).read_bytes()).hexdigest(), source)
    )
    if args.write:
        p = Path(args.write)
        p.write_text(replace_block(p.read_text(encoding="utf-8"), block), encoding="utf-8")
    else:
        sys.stdout.write(block + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
