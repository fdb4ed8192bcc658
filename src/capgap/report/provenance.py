"""Section "Provenance": config hash, machine, packages, data hashes, BM25 variant, model fingerprints,
the capgap code the jobs ran and wall time per stage."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Mapping, Sequence

import pandas as pd

from .. import provenance
from .context import ReportContext, bm25_variant
from .format import _bm25_text, _md_table, _source


def _bm25_provenance(config: Mapping | None) -> list[str]:
    """The provenance block's BM25 line: the variant the config selects, and whether it ran."""
    bm = (config or {}).get("bm25")
    if not isinstance(bm, Mapping):
        return ["**BM25**: variant not recorded (no run config).", ""]
    off = "" if bm["enabled"] else " (bm25.enabled is false: not run)"
    return [f"**BM25**: {_bm25_text(bm25_variant(config))}{off}", ""]


def _code_rows(by_code: Mapping[str, list[str]]) -> dict[str, str]:
    """Provenance rows naming the capgap code the jobs ran (from their logs) and the report's
    own: one row when every job ran the same code, one per version otherwise."""
    rows = {}
    if len(by_code) == 1:
        ((code, jobs),) = by_code.items()
        rows["capgap code (every job)"] = f"{code} ({len(jobs)} jobs)"
    else:
        for i, (code, jobs) in enumerate(sorted(by_code.items(), key=lambda kv: -len(kv[1])), start=1):
            rows[f"capgap code, version {i} of {len(by_code)}"] = (
                f"{code}: {len(jobs)} jobs, e.g. {', '.join(jobs[:3])}"
            )
    rows["capgap code (this report)"] = provenance.code_summary()
    return rows


def render_provenance(
    config: Mapping | None,
    statuses: Sequence[dict],
    fps: Sequence[dict],
    times: Sequence[dict],
    packages: Mapping[str, str],
    host: Mapping[str, str],
    colbert_model: str | None = None,
) -> list[str]:
    """The provenance block: config hash, machine, packages, data hashes, model fingerprints,
    wall time per stage."""
    out = ["## Provenance", ""]
    out.append(
        f"Config sha256 `{provenance.config_hash(config) if config is not None else 'unknown'}` (canonical JSON "
        f"of the run's config). Rendered {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}."
    )
    out.append("")
    out.append("**Machine** (the one that rendered this report; per-job times below are where each job ran)")
    out.append("")
    out.append(_md_table(["", "value"], [[k, v] for k, v in host.items()]))
    out.append("")
    out.append("**Packages**")
    out.append("")
    out.append(_md_table(["package", "version"], [[k, v] for k, v in packages.items()]))
    out.append("")
    out.append("**Data**")
    out.append("")
    rows = []
    for s in statuses:
        if not s.get("available"):
            continue
        src = s.get("source", {})
        where = src.get("folder") or src.get("url") or src.get("path") or "–"
        hashes = (
            ", ".join(f"{f} `{h[:16]}`" for f, h in sorted((src.get("sha256") or {}).items()))
            or "– (generated from the seeded config)"
        )
        rows.append([s["dataset"], _source(src), where, hashes])
    out.append(
        _md_table(["dataset", "source", "location", "file sha256 (first 16 hex)"], rows)
        if rows
        else "No dataset available."
    )
    out.append("")
    out += _bm25_provenance(config)
    out.append("**Models** (frozen-index fingerprints)")
    out.append("")
    if fps:
        out.append(
            _md_table(
                [
                    "dataset",
                    "encoder",
                    "model",
                    "weights sha256 (first 16 hex)",
                    "dim",
                    "documents",
                    "corpus sha256 (first 16 hex)",
                ],
                [
                    [
                        f["dataset"],
                        f["encoder"],
                        f.get("model", "–"),
                        f"`{str(f.get('weights_sha256', '–'))[:16]}`",
                        f.get("dim", "–"),
                        f.get("n_docs", "–"),
                        f"`{str(f.get('corpus_sha256', '–'))[:16]}`",
                    ]
                    for f in fps
                ],
            )
        )
    else:
        out.append("No frozen index was built.")
    if colbert_model:
        out += ["", f"ColBERT (late interaction): `{colbert_model}`, fine-tuned per dataset."]
    out.append("")
    out.append("**Wall time per stage** (Snakemake `benchmark:` files; jobs may have shared the cores)")
    out.append("")
    if times:
        t = pd.DataFrame(times)
        out.append(
            _md_table(
                ["rule", "job", "wall (s)", "max RSS (MB)", "CPU (s)"],
                [
                    [r.rule, r.job, f"{r.s:.1f}", f"{r.max_rss:.0f}", f"{r.cpu_time:.1f}"]
                    for r in t.itertuples(index=False)
                ],
            )
        )
        out.append("")
        per = t.groupby("rule", sort=False)["s"].sum()
        out.append(
            "Total "
            + f"{t['s'].sum() / 60:.1f} min of job wall time: "
            + ", ".join(f"{r} {v:.0f} s" for r, v in per.items())
            + "."
        )
    else:
        out.append("No benchmark files (stages run outside Snakemake).")
    out.append("")
    return out


def render(ctx: ReportContext) -> list[str]:
    """The block from the run config, the data statuses, the fingerprints and the benchmark files."""
    bench = ctx.inputs.benchmarks
    return render_provenance(
        ctx.config,
        ctx.statuses,
        ctx.fps,
        provenance.stage_times(bench),
        {**provenance.package_versions(), **_code_rows(provenance.job_code(bench))},
        provenance.machine(),
        ctx.colbert_model if "colbert" in set(ctx.df["method"]) else None,
    )
