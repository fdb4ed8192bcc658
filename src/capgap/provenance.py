"""The report's provenance block: what produced these numbers, and where.

Config hash, package versions, the capgap code that ran (git commit, uncommitted changes, the
imported package's path), data sources with their file hashes, model fingerprints (the
frozen indexes' ``fingerprint.json``), wall time and peak memory per stage (Snakemake's
``benchmark:`` files), and the machine that rendered the report.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Mapping, Sequence

from .paths import shard_labels

PACKAGES = (
    "capgap",
    "torch",
    "transformers",
    "sentence-transformers",
    "peft",
    "pylate",
    "faiss-cpu",
    "bm25s",
    "numpy",
    "scipy",
    "pandas",
    "quadprog",
    "snakemake",
    "dvc",
    "seaborn",
)


def config_hash(config: Mapping) -> str:
    """sha256 of the config as canonical JSON (keys sorted): two runs with the same hash ran
    the same configuration."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def package_versions(names: Sequence[str] = PACKAGES) -> dict[str, str]:
    """Installed version of each distribution ("not installed" when absent)."""
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = "not installed"
    return out


def code_version() -> dict:
    """Which capgap code is running: ``path`` (the imported package's folder), and when it lies
    in a git checkout, ``checkout`` (its root), ``commit`` (HEAD) and ``dirty`` (tracked files
    modified); those three are None outside a checkout or without git. ``expected`` is the
    checkout the workflow runs from (``$CAPGAP_CHECKOUT``, set by the Snakefile) and
    ``matches`` whether the imported package belongs to it (None when not set)."""
    import subprocess

    pkg = Path(__file__).resolve().parent  # the imported capgap package's folder
    out = {"path": str(pkg), "checkout": None, "commit": None, "dirty": None}

    def git(*args):
        return subprocess.run(["git", "-C", str(pkg), *args], capture_output=True, text=True, timeout=30)

    try:
        top = git("rev-parse", "--show-toplevel")
        if top.returncode == 0:
            out["checkout"] = top.stdout.strip()
            out["commit"] = git("rev-parse", "HEAD").stdout.strip() or None
            out["dirty"] = bool(git("status", "--porcelain", "--untracked-files=no").stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    expected = os.environ.get("CAPGAP_CHECKOUT")
    out["expected"] = expected
    out["matches"] = None if not expected else pkg.is_relative_to(Path(expected).resolve())
    return out


def use_checkout(root: str | Path) -> str:
    """Make every job of a workflow run from checkout ``root`` import its own capgap: put
    ``root/src`` first on ``PYTHONPATH`` (jobs inherit the environment) and record ``root`` as
    ``$CAPGAP_CHECKOUT`` for ``code_version``. Called by ``config_check.startup`` (the Snakefile); returns
    the resolved root."""
    root = str(Path(root).resolve())
    os.environ["CAPGAP_CHECKOUT"] = root
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != f"{root}/src"]
    os.environ["PYTHONPATH"] = os.pathsep.join([f"{root}/src", *rest])
    return root


def code_summary(v: Mapping | None = None) -> str:
    """One line for the report: ``commit 1a2b3c4d5e6f (modified) from /path/src/capgap``."""
    v = code_version() if v is None else v
    commit = (
        f"commit {v['commit'][:12]}" + (" (with uncommitted changes)" if v.get("dirty") else "")
        if v.get("commit")
        else "no git commit"
    )
    warn = f"; NOT the workflow's checkout {v['expected']}" if v.get("matches") is False else ""
    return f"{commit} from {v['path']}{warn}"


def job_code(benchmark_files: Sequence[str | Path]) -> dict[str, list[str]]:
    """Which capgap code each job ran, from the "capgap code: ..." line its log starts with
    (``logs.log_to``): summary line -> the jobs (``rule/wildcards``) that ran it. A job's log
    is ``logs/{rule}/...log`` beside its ``benchmarks/rules/{rule}/...tsv``; missing logs and
    logs without the line (older runs) are left out."""
    out: dict[str, list[str]] = {}
    for b in benchmark_files:
        parts = Path(b).with_suffix("").parts
        if "rules" not in parts:
            continue
        i = parts.index("rules")
        # the last part plus ".log", not with_suffix: an encoder named "bge-v1.5" keeps its ".5"
        log_path = Path(*parts[: i - 1], "logs", *parts[i + 1 : -1], parts[-1] + ".log")
        try:
            with open(log_path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if "capgap code: " in line:
                        out.setdefault(line.split("capgap code: ", 1)[1].strip(), []).append("/".join(parts[i + 1 :]))
                        break
        except OSError:
            continue
    return out


def machine() -> dict[str, str]:
    """The machine rendering the report: OS, Python, CPU model, logical cores, memory, GPU."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB"
    except (ValueError, OSError, AttributeError):
        mem = "unknown"
    gpu = "none"
    try:
        import torch

        if torch.cuda.is_available():
            gpu = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    except Exception as exc:  # torch missing or broken: say so rather than fail the report
        gpu = f"unknown ({type(exc).__name__})"
    return {
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu or "unknown",
        "logical cores": str(os.cpu_count()),
        "memory": mem,
        "gpu": gpu,
    }


def read_benchmark(path: str | Path) -> dict[str, float]:
    """One Snakemake benchmark TSV (columns s, h:m:s, max_rss, ..., cpu_time): the first row's
    wall time ``s`` (seconds), ``max_rss`` (MB) and ``cpu_time`` (seconds); "NA" becomes nan.

    Raises ``ValueError`` naming the file when the header lacks ``s``."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    if not rows or "s" not in rows[0]:
        raise ValueError(f"{path}: not a Snakemake benchmark file (no 's' column)")

    def num(v):
        try:
            return float(v)
        except (TypeError, ValueError):
            return float("nan")

    r = rows[0]
    return {"s": num(r.get("s")), "max_rss": num(r.get("max_rss")), "cpu_time": num(r.get("cpu_time"))}


STAGE_RULES = frozenset(
    {"finetune", "pretrained", "probe", "index", "ladder", "bm25", "colbert", "compress", "twin_negatives"}
)


SHARDED_RULES = ("index", "probe")  # rules whose work config <rule>.shards > 1 scatters over <rule>_shard jobs


def benchmark_paths(result_paths: Sequence[str | Path], shards: Mapping[str, int] | None = None) -> list[str]:
    """The Snakemake ``benchmark:`` TSV of the job behind each result path, by the workflow's
    layout: ``results/{ds}/data`` -> ``benchmarks/rules/data/{ds}.tsv``;
    ``results/{ds}/{enc}/{rule}/...`` -> ``benchmarks/rules/{rule}/{ds}/{enc}.tsv``;
    ``results/{ds}/{rule}/...`` (bm25, colbert) -> ``benchmarks/rules/{rule}/{ds}.tsv``;
    ``results/{ds}/{enc}/finetune-{regime}/...`` -> ``benchmarks/rules/finetune_regime/{ds}/{enc}/{regime}.tsv``;
    ``results/hardness/...`` -> ``benchmarks/rules/hardness/hardness.tsv``. ``shards``: config
    ``<rule>.shards`` per rule of ``SHARDED_RULES``; where it is n > 1 the gathering job's TSV
    is followed by its n shard jobs' (``benchmarks/rules/<rule>_shard/{ds}/{enc}/{i}-of-{n}.tsv``,
    the workflow's scattergather names), where the work of a sharded run is: exactly this
    run's n, never a stale shard file of another n. Derived from the report's inputs at run
    time, so nothing has to look a checkpoint up while the Snakefile is parsed. Paths not under
    ``results/`` are skipped; the list is deduplicated, in order."""
    shards = shards or {}
    out = []
    for p in result_paths:
        parts = Path(p).parts
        if "results" not in parts:
            continue
        rest = parts[parts.index("results") + 1 :]
        if rest[0] == "hardness":
            out.append("benchmarks/rules/hardness/hardness.tsv")
        elif len(rest) >= 2 and rest[1] == "data":
            out.append(f"benchmarks/rules/data/{rest[0]}.tsv")
        elif len(rest) >= 3 and rest[1] in STAGE_RULES:
            out.append(f"benchmarks/rules/{rest[1]}/{rest[0]}.tsv")
        elif len(rest) >= 4 and rest[2].startswith("finetune-"):
            out.append(f"benchmarks/rules/finetune_regime/{rest[0]}/{rest[1]}/{rest[2][len('finetune-') :]}.tsv")
        elif len(rest) >= 4 and rest[2] in STAGE_RULES:
            out.append(f"benchmarks/rules/{rest[2]}/{rest[0]}/{rest[1]}.tsv")
            labels = shard_labels(shards.get(rest[2], 1)) if rest[2] in SHARDED_RULES else []
            out.extend(f"benchmarks/rules/{rest[2]}_shard/{rest[0]}/{rest[1]}/{label}.tsv" for label in labels)
    return list(dict.fromkeys(out))


def stage_times(paths: Sequence[str | Path]) -> list[dict]:
    """Wall time per job from ``benchmarks/rules/{rule}/{wildcards...}.tsv`` files: dicts with
    ``rule, job, s, max_rss, cpu_time`` (missing files are skipped: a stage not run)."""
    out = []
    for p in paths:
        p = Path(p)
        if not p.is_file():
            continue
        parts = p.with_suffix("").parts
        i = parts.index("rules") if "rules" in parts else len(parts) - 2
        out.append({"rule": parts[i + 1], "job": "/".join(parts[i + 2 :]) or parts[i + 1], **read_benchmark(p)})
    return out


def fingerprints(paths: Sequence[str | Path]) -> list[dict]:
    """Frozen-index fingerprints (``results/{dataset}/{encoder}/index/fingerprint.json``)."""
    out = []
    for p in paths:
        fp = json.loads(Path(p).read_text(encoding="utf-8"))
        parts = Path(p).parts
        out.append({"dataset": parts[-4], "encoder": parts[-3], **fp})
    return out
