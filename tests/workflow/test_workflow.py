"""The DAG end to end on a tiny config: produced rows, incremental reruns, lint, DVC stages."""

import csv
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml

from ..conftest import ROOT
from .conftest import BIN, TINY, _env, _smk


def _jobs(dry_run_output: str) -> dict[str, int]:
    """Job counts per rule from the 'Job stats' table of a dry run."""
    m = re.search(r"job\s+count\n[-\s]+\n(.*?)\n[-\s]*\n", dry_run_output + "\n", re.S)
    if not m:
        return {}
    out = {}
    for line in m.group(1).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] != "total":
            out[parts[0]] = int(parts[1])
    return out


def _rows(work, compression=""):
    """results.csv rows; by default those of the frozen index as built (``compression`` empty),
    ``compression=None`` for every row."""
    with open(work / "reports" / "results.csv") as fh:
        return [r for r in csv.DictReader(fh) if compression is None or r["compression"] == compression]


def test_rows(tiny_run):
    rows = _rows(tiny_run)
    assert list(rows[0]) == ["dataset", "encoder", "method", "split", "metric", "k", "value", "compression"]
    got = {(r["dataset"], r["encoder"], r["method"]) for r in rows}
    assert got == {
        ("limit-gen", "minilm", "pretrained"),
        ("limit-gen", "", "bm25"),
        ("limit-gen", "minilm", "probe"),
        ("limit-small", "minilm", "pretrained"),
        ("limit-small", "", "bm25"),
        ("limit-small", "minilm", "probe"),
        ("limit-gen", "minilm", "finetuned"),
        ("limit-small", "minilm", "finetuned"),
        ("limit-gen", "", "colbert"),
        *((f"parity-P{P}", "", m) for P in (6, 10) for m in ("perfect", "random", "probe", "head-mlp-all", "head-mlp")),
        ("parity-P6", "mlp-infonce", "trained"),
        ("parity-P10", "mlp-infonce", "trained"),
        ("parity-P6", "mlp-infonce-m8", "trained"),
        ("parity-P6", "mlp-infonce-m32", "trained"),
        *(
            ("near-miss", e, m)
            for e, m in (
                ("minilm", "pretrained"),
                ("", "bm25"),
                ("minilm", "probe"),
                ("minilm", "finetuned"),
                ("minilm", "finetuned-no-twins"),
            )
        ),
        *(
            (ds, "minilm", m)
            for ds in ("limit-gen", "limit-small")
            for m in ("finetuned@near-miss", "finetuned-no-twins@near-miss")
        ),
    }
    v = {(r["dataset"], r["method"], r["split"], r["metric"], r["k"]): float(r["value"]) for r in rows}
    # the parity task: d = ceil(log2 P) + 1, k = 1 + d (rho = 1), n = 2^d
    for P, d in ((6, 4), (10, 5)):
        k = str(1 + d)
        assert v[(f"parity-P{P}", "random", "heldout", "recall", k)] == (1 + d) / 2**d
        assert v[(f"parity-P{P}", "perfect", "heldout", "recall", k)] == 1.0
        assert v[(f"parity-P{P}", "probe", "all", "certified", "")] == 1.0
    # sizes follow from the config: 40 generated queries, held-out fraction 0.5
    assert v[("limit-gen", "bm25", "train", "n_queries", "")] == 20
    assert v[("limit-gen", "bm25", "heldout", "n_queries", "")] == 20
    assert v[("limit-small", "pretrained", "all", "n_queries", "")] == 1000
    # by construction only the two gold documents contain a query's attribute word, so BM25
    # ranks exactly them first
    assert v[("limit-gen", "bm25", "all", "recall", "2")] == 1.0
    assert v[("limit-small", "bm25", "all", "recall", "10")] >= 0.95
    # 60 and 46 documents in 384 dimensions are in general position: every gold set is linearly
    # separable, so the probe must certify every query and reach recall 1 at k = |gold| = 2
    for ds in ("limit-gen", "limit-small"):
        assert v[(ds, "probe", "all", "certified", "")] == 1.0
        assert v[(ds, "probe", "all", "recall", "2")] == 1.0
    for ds in ("limit-gen", "limit-small"):
        for m in ("pretrained", "bm25", "probe", "finetuned") + (("colbert",) if ds == "limit-gen" else ()):
            rec = [v[(ds, m, "all", "recall", k)] for k in ("2", "10", "20")]
            assert all(0 <= x <= 1 for x in rec) and rec == sorted(rec)
    # near-miss: 16 + 16 statements, each with a negation and a role-swap twin; round(0.34 x 32)
    # = 11 spatial ones with a flip twin. A role swap has its statement's bag of words: BM25 ties
    # it on every pair, and the tie rule ranks the twin first (twin_win 0)
    for m in ("pretrained", "probe", "finetuned", "finetuned-no-twins", "bm25"):
        assert v[("near-miss", m, "all", "twin_pairs:negation", "")] == 32
        assert v[("near-miss", m, "all", "twin_pairs:role_swap", "")] == 32
        assert v[("near-miss", m, "all", "twin_pairs:spatial_flip", "")] == 11
        assert v[("near-miss", m, "train", "twin_pairs:role_swap", "")] == 16
    for split in ("train", "heldout", "all"):
        assert v[("near-miss", "bm25", split, "twin_tie:role_swap", "")] == 1.0
        assert v[("near-miss", "bm25", split, "twin_win:role_swap", "")] == 0.0
    # the transfer rows evaluate every query of the target, like its own pretrained rows
    for ds in ("limit-gen", "limit-small"):
        for m in ("finetuned@near-miss", "finetuned-no-twins@near-miss"):
            assert v[(ds, m, "all", "n_queries", "")] == v[(ds, "pretrained", "all", "n_queries", "")]
    # ColBERT: 60 documents <= exact_max_docs, so exact MaxSim and no ANN rows; train/held-out split
    assert v[("limit-gen", "colbert", "train", "n_queries", "")] == 20
    assert not any(r["method"] == "colbert" and r["metric"] == "ann_recall" for r in rows)


def test_compress_reference_is_the_probe_and_pretrained_jobs(tiny_run):
    """The compress job's uncompressed reference (compression float32) gives exactly the rows
    of the probe and pretrained jobs on the same index (one code path), and bytes per document
    follow from the variants at dim 384: float32 4 x 384, trunc-32 4 x 32, sq4 384 / 2, binary
    384 / 8."""
    rows = _rows(tiny_run, compression=None)
    key = lambda r: (r["dataset"], r["encoder"], r["method"], r["split"], r["metric"], r["k"], r["value"])  # noqa: E731
    ref = {key(r) for r in rows if r["compression"] == "float32" and r["metric"] != "bytes_per_doc"}
    jobs = {
        key(r)
        for r in rows
        if r["compression"] == ""
        and r["dataset"] == "limit-gen"
        and r["encoder"] == "minilm"
        and r["method"] in ("probe", "pretrained")
    }
    assert ref and ref == jobs
    nbytes = {(r["compression"], r["method"]): float(r["value"]) for r in rows if r["metric"] == "bytes_per_doc"}
    want = {"float32": 1536.0, "trunc-32": 128.0, "sq4": 192.0, "binary": 48.0}
    assert nbytes == {(v, m): b for v, b in want.items() for m in ("probe", "pretrained")}
    assert {r["dataset"] for r in rows if r["compression"]} == {"limit-gen"}  # compress.datasets


def test_twin_negatives_on_a_dataset_without_twins_stops_at_start(tmp_path, mirror):
    cfg = yaml.safe_load(TINY.read_text())
    cfg["twin_negatives"]["datasets"] = ["limit-gen"]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    r = _smk(tmp_path / "w", tmp_path / "c.yaml", mirror, "-n")
    assert r.returncode != 0 and "'limit-gen', which has no near-miss twins" in r.stdout + r.stderr


@pytest.mark.parametrize("variants, says", [(["pq-0x8"], "pq-0x8"), (["sq8", "sq8"], "non-unique"), (["sq8\n"], "sq8")])
def test_a_bad_compress_variant_stops_the_workflow_at_start(tmp_path, mirror, variants, says):
    """Malformed, repeated or padded variant names fail the dry run, before any job runs."""
    cfg = yaml.safe_load(TINY.read_text())
    cfg["compress"]["variants"] = variants
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    r = _smk(tmp_path / "w", tmp_path / "c.yaml", mirror, "-n")
    assert r.returncode != 0 and says in r.stdout + r.stderr


def test_report_lists_unavailable_dataset(tiny_run):
    md = (tiny_run / "reports" / "report.md").read_text()
    assert "## Datasets that could not be obtained" in md and "**not-there**" in md
    assert "CAPGAP_DATA_MIRROR" in md
    assert "## Capacity probe vs the query encoders" in md
    assert (tiny_run / "reports" / "figures" / "recall_at_k.png").stat().st_size > 1000
    assert "limit-gen" in (tiny_run / "reports" / "summary.json").read_text()
    assert "## Fine-tuning curves" in md
    assert (tiny_run / "reports" / "figures" / "finetune_curves.png").stat().st_size > 1000
    # the curve has a point every eval_every = 3 steps of the 6, train and held-out recall@2
    curve = (tiny_run / "results" / "limit-small" / "minilm" / "finetune" / "curve.csv").read_text().splitlines()
    assert curve[0].split(",")[:2] == ["step", "loss"] and "heldout_recall@2" in curve[0]
    assert [line.split(",")[0] for line in curve[1:]] == ["3", "6"]
    assert (tiny_run / "results" / "limit-small" / "minilm" / "finetune" / "adapter" / "adapter_config.json").is_file()
    assert not (tiny_run / "results" / "limit-small" / "minilm" / "finetune_checkpoint.pt").exists()
    # ColBERT: the side-by-side table, a curve point per step, the fine-tuned model kept
    assert "## Single vector vs late interaction vs BM25" in md
    assert "## Hardness: the parity task" in md and "| 10 | 5 | 32 | 6 | 0.188 | 50 |" in md
    for f in ("hardness_vs_P.png", "hardness_vs_m.png"):
        assert (tiny_run / "reports" / "figures" / f).stat().st_size > 1000
    ccurve = (tiny_run / "results" / "limit-gen" / "colbert" / "curve.csv").read_text().splitlines()
    assert "train_recall@2" in ccurve[0] and [line.split(",")[0] for line in ccurve[1:]] == ["1", "2"]
    work = list((tiny_run / "results" / "limit-gen" / "colbert_work").iterdir())
    assert len(work) == 1 and (work[0] / "model" / "capgap_done").is_file() and not (work[0] / "checkpoint.pt").exists()


def test_report_from_real_runs(tiny_run, mirror, tmp_path):
    """The report of the tiny DAG: every section filled from its runs, the HTML self-contained,
    the DVC files written, and Snakemake's own --report carrying every figure."""
    rep = tiny_run / "reports"
    md = (rep / "report.md").read_text()
    glance = md.split("## At a glance", 1)[1].split("\n## ", 1)[0]
    # LIMIT-style sets have exactly 2 gold documents per query: k = 2 is the stated cut-off
    for ds in ("limit-gen", "limit-small"):
        # the probe certifies every query (see test_rows), by construction (n_docs <= dim + 1: marker ¹),
        # and no query is uncertified for any cause
        assert f"| {ds} | minilm | 2 (stated) | 1.000¹ | 1.000 | 0.000 / 0.000 / 0.000 |" in glance
    assert "| limit-small / bm25 | k = 2 / 10 / 20 |" in md and "| 2 (fixed) |" in md
    assert "The paper's pattern holds on" in md and "## Provenance" in md and "| finetune | limit-small/minilm |" in md
    # geometrically easy but missed: the probe certifies every LIMIT query here (test_rows), so the
    # count is the queries whose pre-trained top 2 (run.trec, ids percent-encoded) lacks a gold document
    from capgap.diagnosis import load_qrels_file
    from capgap.trec import read_run

    run = {
        q: [d for d, _ in v]
        for q, v in read_run(tiny_run / "results" / "limit-small" / "minilm" / "pretrained" / "run.trec").items()
    }
    qrels = load_qrels_file(tiny_run / "results" / "limit-small" / "data" / "qrels.tsv")
    missed = sum(not set(g) <= set(run[q][:2]) for q, g in qrels.items())
    assert f"| limit-small | minilm | 2 | 1000 | {missed} |" in md and 0 < missed < 1000
    html = (rep / "report.html").read_text()
    assert html.count("<img") == md.count("![") >= 6 and 'src="figures/' not in html
    metrics = json.loads((rep / "metrics.json").read_text())
    assert metrics["limit-small"]["minilm"]["capacity@2"] == 1.0 and "parity" in metrics
    assert (rep / "plots" / "recall_at_k.csv").read_text().startswith("run,dataset,method,encoder,k,recall\n")
    out = tmp_path / "smk_report.html"
    r = _smk(tiny_run, TINY, mirror, "--report", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    text = out.read_text(errors="replace")
    for f in (
        "recall_at_k",
        "capacity_gap",
        "train_vs_heldout",
        "probe_slack",
        "finetune_curves",
        "hardness_vs_P",
        "hardness_vs_m",
        "report.html",
    ):
        assert f in text, f


def test_incremental_rerun(tiny_run, mirror, tmp_path):
    r = _smk(tiny_run, TINY, mirror, "-n")
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr
    cfg = yaml.safe_load(TINY.read_text())
    cfg["bm25"]["k1"] = 1.2
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(cfg))
    r = _smk(tiny_run, changed, mirror, "-n")
    assert r.returncode == 0, r.stderr[-2000:]
    assert _jobs(r.stdout + r.stderr) == {"bm25": 3, "report": 1, "all": 1}
    # a second encoder on one dataset adds its index and evaluation, nothing else reruns
    cfg = yaml.safe_load(TINY.read_text())
    cfg["encoders"]["minilm128"] = {**cfg["encoders"]["minilm"], "max_length": 128}
    cfg["datasets"]["limit-gen"]["encoders"].append("minilm128")
    changed.write_text(yaml.safe_dump(cfg))
    r = _smk(tiny_run, changed, mirror, "-n")
    assert _jobs(r.stdout + r.stderr) == {
        "index": 1,
        "pretrained": 1,
        "probe": 1,
        "compress": 1,
        "finetune": 1,
        "report": 1,
        "all": 1,
    }
    # a new dataset next to existing reports enters the DAG (Snakemake would not run a missing
    # checkpoint whose downstream files exist: capgap.common decides availability at parse time)
    cfg = yaml.safe_load(TINY.read_text())
    cfg["datasets"]["limit-gen3"] = {
        **cfg["datasets"]["limit-gen"],
        "generator": {**cfg["datasets"]["limit-gen"]["generator"], "seed": 3},
    }
    changed.write_text(yaml.safe_dump(cfg))
    r = _smk(tiny_run, changed, mirror, "-n")
    assert _jobs(r.stdout + r.stderr) == {
        "data": 1,
        "index": 1,
        "pretrained": 1,
        "probe": 1,
        "finetune": 1,
        "bm25": 1,
        "report": 1,
        "all": 1,
    }
    # near_miss.types is a set: listing it in another order reruns no experiment (only the
    # report, which records the config as written)
    cfg = yaml.safe_load(TINY.read_text())
    cfg["datasets"]["near-miss"]["near_miss"]["types"] = ["spatial_flip", "role_swap", "negation"]
    changed.write_text(yaml.safe_dump(cfg))
    r = _smk(tiny_run, changed, mirror, "-n")
    assert _jobs(r.stdout + r.stderr) == {"report": 1, "all": 1}


def test_missing_dataset_is_fetched_once_available(tiny_run, mirror, tmp_path):
    """'not-there' was unavailable; a mirror that holds it makes only its data job rerun."""
    m = tmp_path / "mirror"
    m.mkdir()
    (m / "limit-small").symlink_to(mirror / "limit-small")
    shutil.copytree(mirror / "limit-small", m / "not-there")
    r = _smk(tiny_run, TINY, m, "-n")
    assert r.returncode == 0, r.stderr[-2000:]
    jobs = _jobs(r.stdout + r.stderr)
    assert "dataset=not-there" in r.stdout + r.stderr
    # its own experiments, nothing already built reruns (one job per rule: all for not-there)
    assert jobs == {"data": 1, "index": 1, "pretrained": 1, "probe": 1, "finetune": 1, "bm25": 1, "report": 1, "all": 1}


def test_lint(mirror):
    r = subprocess.run(
        [str(BIN / "snakemake"), "--lint"], cwd=ROOT, env=_env(mirror), capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # the rules are kept formatted by snakefmt (the Snakemake formatter)
    r = subprocess.run(
        [str(BIN / "snakefmt"), "--check", "Snakefile", "workflow/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def test_dvc_stages_parse():
    r = subprocess.run(
        [str(BIN / "dvc"), "stage", "list"],
        cwd=ROOT,
        env=dict(os.environ, DVC_NO_ANALYTICS="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert {line.split()[0] for line in r.stdout.splitlines() if line.strip()} == {"experiments", "report"}
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for st in stages.values():
        for p in st.get("params", []):
            for key in p["config/config.yaml"]:
                assert key in cfg  # every DVC param names a real config key
        for out in st.get("outs", []):
            assert next(iter(out.values()))["persist"] is True


PAPER = ROOT / "config" / "paper.yaml"
# Python audit hook: any socket connection during the dry run is an error (no network at parse time)
NO_NETWORK = (
    "import sys\n"
    "def hook(event, args):\n"
    "    if event in ('socket.connect', 'socket.getaddrinfo'):\n"
    "        raise RuntimeError(f'network access at parse time: {event} {args}')\n"
    "sys.addaudithook(hook)\n"
    "from snakemake.cli import main\n"
    "sys.argv = ['snakemake'] + sys.argv[1:]\n"
    "main()\n"
)


def test_paper_config_dry_run_resolves_offline(tmp_path):
    """The paper's grid (20 datasets x 2 encoders) resolves without data, models or network."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "CAPGAP_DATA_MIRROR")
    }
    env.update(PATH=f"{BIN}:{os.environ['PATH']}", CAPGAP_CACHE=str(tmp_path / "cache"))
    cmd = [
        sys.executable,
        "-c",
        NO_NETWORK,
        "-n",
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(tmp_path / "work"),
        "--configfile",
        str(PAPER),
        "--cores",
        "8",
        "--workflow-profile",
        str(ROOT / "profiles" / "gpu"),
    ]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    jobs = _jobs(r.stdout + r.stderr)
    assert jobs == {
        "data": 20,
        "index": 40,
        "pretrained": 40,
        "probe": 40,
        "finetune": 40,
        "bm25": 20,
        "colbert": 20,
        "hardness": 1,
        "report": 1,
        "all": 1,
    }
    cfg = yaml.safe_load(PAPER.read_text())
    ds = cfg["datasets"]
    assert sum(d.startswith("bright-") for d in ds) == 12 and "limit" in ds
    assert sorted(d for d, s in ds.items() if s["source"] == "beir") == sorted(
        ["trec-covid", "nfcorpus", "fiqa", "arguana", "scidocs", "scifact", "quora"]
    )
    assert {e["model"] for e in cfg["encoders"].values()} == {"distilbert-base-uncased", "Qwen/Qwen3-Embedding-4B"}
    assert cfg["finetune"]["lora_rank"] == 16 and cfg["finetune"]["steps"] == 3000
    # GPU rules ask the scheduler for a GPU (profiles/gpu); threads are capped at --cores
    out = r.stdout + r.stderr
    assert "workflow specific profile" in out and str(ROOT / "profiles" / "gpu") in out
    assert re.search(r"rule finetune:.*?gpu=1", out, re.S) and re.search(r"rule probe:.*?gpu=0", out, re.S)
    assert re.search(r"rule colbert:\n(?:    .*\n)*?    threads: 8\n    resources: [^\n]*\bmem_mb=128000\b", out)


RULES = (
    "data",
    "index",
    "index_shard",
    "pretrained",
    "probe",
    "probe_shard",
    "compress",
    "finetune",
    "finetune_regime",
    "twin_negatives",
    "ladder",
    "bm25",
    "colbert",
    "hardness",
    "report",
)


def _rules_in_workflow():
    """The rules the rule files define, by file name: each file holds the rule it is named after."""
    found = {}
    for smk in (ROOT / "workflow" / "rules").glob("*.smk"):
        for name in re.findall(r"^(?:rule|checkpoint) (\w+):", smk.read_text(), re.M):
            found[name] = smk.stem
    return found


def test_rule_files_are_named_after_their_rules():
    assert _rules_in_workflow() == {r: r for r in RULES}
    for inc in re.findall(r'include: "workflow/rules/(\w+)\.smk"', (ROOT / "Snakefile").read_text()):
        assert (ROOT / "workflow" / "rules" / f"{inc}.smk").is_file()


def test_every_rules_script_calls_the_stage_beside_its_method():
    """workflow/scripts/<rule>.py imports and calls capgap.stages.STAGES[rule] (the report's calls
    capgap.report.build_report), and that function exists where the table says."""
    import importlib

    from capgap.stages import STAGES

    assert set(STAGES) == set(RULES) - {"report"}
    for rule, (module, name) in STAGES.items():
        text = (ROOT / "workflow" / "scripts" / f"{rule}.py").read_text()
        assert f"from {module} import {name}\n" in text and f"\n{name}(snakemake.input, " in text, rule
        assert callable(getattr(importlib.import_module(module), name))


@pytest.mark.parametrize("profile", ["default", "gpu"])
def test_workflow_profiles_give_every_rule_its_resources(profile):
    """Threads, memory, wall time and GPUs live in the workflow profiles (profiles/default is the
    one Snakemake loads by itself), one entry per rule and none in the rules."""
    prof = yaml.safe_load((ROOT / "profiles" / profile / "config.yaml").read_text())
    assert set(prof["set-threads"]) == set(RULES) and all(
        isinstance(t, int) and t >= 1 for t in prof["set-threads"].values()
    )
    assert set(prof["set-resources"]) == set(RULES)
    for rule, res in prof["set-resources"].items():
        assert set(res) == {"mem_mb", "runtime", "gpu"}, rule
    for smk in (ROOT / "workflow" / "rules").glob("*.smk"):
        assert not re.search(r"^\s+(threads|resources):", smk.read_text(), re.M), smk.name
    if profile == "default":  # the CPU defaults: no GPU anywhere
        assert all(res["gpu"] == 0 for res in prof["set-resources"].values())
    else:
        assert {r for r, res in prof["set-resources"].items() if res["gpu"]} == {
            "index",
            "index_shard",
            "pretrained",
            "finetune",
            "finetune_regime",
            "twin_negatives",
            "ladder",
            "colbert",
        }


def _report_outputs():
    """The report rule's output paths, read from its output: block (one path per named output)."""
    text = (ROOT / "workflow" / "rules" / "report.smk").read_text()
    block = re.search(r"^rule report:\n.*?^    output:\n(.*?)^    \w+:", text, re.S | re.M).group(1)
    names = re.findall(r"^        (\w+)=", block, re.M)
    paths = re.findall(r'"(reports/[^"]+)"', block)
    assert len(names) == len(paths) >= 13, (names, paths)  # every output is a literal path
    return paths


def test_dvc_report_stage_tracks_exactly_the_report_rules_outputs():
    """dvc.yaml cannot read Snakemake: its report stage's outs, metrics and plots must cover the
    report rule's outputs, each one once, and name nothing else."""
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["report"]
    tracked = [
        next(iter(o)) if isinstance(o, dict) else o for key in ("outs", "metrics", "plots") for o in stage.get(key, [])
    ]
    outputs = _report_outputs()

    def covers(t, path):
        return path == t or path.startswith(t.rstrip("/") + "/")

    for path in outputs:
        assert sum(covers(t, path) for t in tracked) == 1, (
            f"{path}: tracked by {[t for t in tracked if covers(t, path)]}"
        )
    for t in tracked:
        assert any(covers(t, path) for path in outputs), f"dvc.yaml tracks {t}, which the report rule does not write"


def test_default_config_dry_run_online_without_mirror(tmp_path):
    """Online mode (HF_HUB_OFFLINE unset), no mirror, nothing cached: the default DAG parses and
    dry-runs (datasets to download wait for their data checkpoint), with no network at parse
    time. This used to stop at parse time: the report looked a checkpoint up for its
    benchmark files."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "CAPGAP_DATA_MIRROR", "CAPGAP_OFFLINE")
    }
    env.update(PATH=f"{BIN}:{os.environ['PATH']}", CAPGAP_CACHE=str(tmp_path / "cache"))
    cmd = [
        sys.executable,
        "-c",
        NO_NETWORK,
        "-n",
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(tmp_path / "work"),
        "--configfile",
        str(ROOT / "config" / "config.yaml"),
        "--cores",
        "2",
    ]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "IncompleteCheckpointException" not in out
    datasets = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["datasets"]
    assert _jobs(out).get("data") == len(datasets) == 4  # every dataset's data job is scheduled (download or hint)


def test_job_code_read_from_each_jobs_log(tmp_path):
    from capgap.provenance import job_code

    for job, code in (
        ("probe/ds/enc", "commit aaa from /x"),
        ("bm25/ds", "commit bbb (with uncommitted changes) from /x"),
        ("pretrained/ds/bge-v1.5", "commit ccc from /x"),
    ):  # a dotted encoder name keeps its ".5"
        log = tmp_path / "logs" / f"{job}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"2026 INFO capgap.stages: capgap code: {code}\nmore\n")
    got = job_code(
        [
            tmp_path / "benchmarks" / "rules" / "probe" / "ds" / "enc.tsv",
            tmp_path / "benchmarks" / "rules" / "bm25" / "ds.tsv",
            tmp_path / "benchmarks" / "rules" / "data" / "ds.tsv",  # no log: left out
            tmp_path / "benchmarks" / "rules" / "pretrained" / "ds" / "bge-v1.5.tsv",
        ]
    )
    assert got == {
        "commit aaa from /x": ["probe/ds/enc"],
        "commit bbb (with uncommitted changes) from /x": ["bm25/ds"],
        "commit ccc from /x": ["pretrained/ds/bge-v1.5"],
    }


def test_benchmark_paths_follow_the_rules():
    from capgap.provenance import benchmark_paths

    got = benchmark_paths(
        [
            "results/ds/data",
            "results/ds/minilm/probe/metrics.csv",
            "results/ds/bm25/metrics.csv",
            "results/ds/minilm/index/fingerprint.json",
            "results/hardness/metrics.csv",
            "results/ds/colbert/metrics.csv",
            "results/ds/minilm/finetune/metrics.csv",
        ]
    )
    assert got == [
        "benchmarks/rules/data/ds.tsv",
        "benchmarks/rules/probe/ds/minilm.tsv",
        "benchmarks/rules/bm25/ds.tsv",
        "benchmarks/rules/index/ds/minilm.tsv",
        "benchmarks/rules/hardness/hardness.tsv",
        "benchmarks/rules/colbert/ds.tsv",
        "benchmarks/rules/finetune/ds/minilm.tsv",
    ]
    # the compress, twin_negatives and fine-tuning regime jobs (finetune-{regime} folders)
    got = benchmark_paths(
        [
            "results/ds/minilm/compress/metrics.csv",
            "results/ds/minilm/twin_negatives/metrics.csv",
            "results/ds/minilm/finetune-lora-r4/metrics.csv",
        ]
    )
    assert got == [
        "benchmarks/rules/compress/ds/minilm.tsv",
        "benchmarks/rules/twin_negatives/ds/minilm.tsv",
        "benchmarks/rules/finetune_regime/ds/minilm/lora-r4.tsv",
    ]
    for rule, path in (
        ("compress", "compress/{dataset}/{encoder}"),
        ("twin_negatives", "twin_negatives/{dataset}/{encoder}"),
        ("finetune_regime", "finetune_regime/{dataset}/{encoder}/{regime}"),
    ):  # the rules' own names
        assert f'"benchmarks/rules/{path}.tsv"' in (ROOT / "workflow" / "rules" / f"{rule}.smk").read_text()
    assert (
        'metrics="results/{dataset}/{encoder}/finetune-{regime}/metrics.csv"'
        in (ROOT / "workflow" / "rules" / "finetune_regime.smk").read_text()
    )
    # probe.shards = 3 (index.shards 1): the gathering probe job, then its three shard jobs, by
    # the scattergather names; the unsharded index keeps its one file
    got = benchmark_paths(
        ["results/ds/minilm/probe/metrics.csv", "results/ds/minilm/index/fingerprint.json"],
        shards={"probe": 3, "index": 1},
    )
    assert got == [
        "benchmarks/rules/probe/ds/minilm.tsv",
        "benchmarks/rules/probe_shard/ds/minilm/1-of-3.tsv",
        "benchmarks/rules/probe_shard/ds/minilm/2-of-3.tsv",
        "benchmarks/rules/probe_shard/ds/minilm/3-of-3.tsv",
        "benchmarks/rules/index/ds/minilm.tsv",
    ]
    for rule in ("probe", "index"):  # the names are the rules' own
        smk = (ROOT / "workflow" / "rules" / f"{rule}_shard.smk").read_text()
        assert f'"benchmarks/rules/{rule}_shard/{{dataset}}/{{encoder}}/{{shard}}.tsv"' in smk
    # every rule's benchmark: directive has this layout (a shard or a fine-tuning regime job's: one level more)
    for smk in (ROOT / "workflow" / "rules").glob("*.smk"):
        for path in re.findall(r'benchmark:\s*\n\s*"([^"]+)"', smk.read_text()):
            assert re.fullmatch(
                r"benchmarks/rules/\w+/(\{dataset\}(/\{encoder\}(/\{(shard|regime)\})?)?|\w+)\.tsv", path
            ), path


def test_required_dataset_fails_its_data_job(tmp_path, monkeypatch):
    from types import SimpleNamespace as NS

    from capgap import stages
    from capgap.errors import DatasetUnavailable

    monkeypatch.setenv("CAPGAP_DATA_MIRROR", str(tmp_path))
    with pytest.raises(DatasetUnavailable):
        stages.data(None, [tmp_path / "d"], NS(dataset="nowhere", spec={"source": "local", "required": True}))
    st = stages.data(None, [tmp_path / "d2"], NS(dataset="nowhere", spec={"source": "local"}))
    assert st["available"] is False


def test_diagnose_agrees_with_the_dag(tiny_run):
    """capgap diagnose on the DAG's own frozen indexes (and the pre-trained encoder's query
    embeddings) gives the DAG's probe and pretrained numbers: capacity recall@2, certified
    fraction and encoder recall@2 (LIMIT gold sets have 2 documents, so capped recall@2 is
    recall@2)."""
    import numpy as np

    from capgap.data import load_canonical
    from capgap.diagnosis import diagnose, load_qrels_file
    from capgap.encoders import EncoderSpec, load_encoder

    rows = _rows(tiny_run)
    v = {(r["dataset"], r["method"], r["split"], r["metric"], r["k"]): float(r["value"]) for r in rows}
    cfg = yaml.safe_load(TINY.read_text())
    enc = load_encoder(EncoderSpec.from_config("minilm", cfg["encoders"]["minilm"]))
    for ds in ("limit-gen", "limit-small"):
        rs = load_canonical(tiny_run / "results" / ds / "data")
        index = tiny_run / "results" / ds / "minilm" / "index"
        D = np.load(index / "embeddings.npy", mmap_mode="r")
        doc_ids = json.loads((index / "doc_ids.json").read_text())
        Q = enc.encode_queries(list(rs.queries.texts))
        diag = diagnose(
            D, Q, load_qrels_file(tiny_run / "results" / ds / "data" / "qrels.tsv"), doc_ids, list(rs.queries.ids), k=2
        )
        s = diag.summary
        assert s["queries"] == len(rs.queries)
        assert s["probe_recall@2"] == pytest.approx(v[(ds, "probe", "all", "recall", "2")], abs=1e-9)
        assert s["certified"] == pytest.approx(v[(ds, "probe", "all", "certified", "")], abs=1e-9)
        assert s["encoder_recall@2"] == pytest.approx(v[(ds, "pretrained", "all", "recall", "2")], abs=1e-6)
        served = sum(r["encoder_recall@2"] == 1.0 for r in diag.rows)
        assert s["verdicts"]["ok"] == served and s["verdicts"]["index-limited"] == 0


def _pessimistic(run_q: list, grades: dict, ks, ndcg_k) -> dict:
    """recall@k and nDCG@ndcg_k of one query from a run file's (doc, score) list under the
    documented tie rule, stated independently of capgap.retrieval: a gold document's rank is 1 +
    the non-gold documents scoring at least as high + the gold ones ahead (higher score, or the
    same score and a lower grade, then earlier in the file)."""
    gold = {d: g for d, g in grades.items() if g > 0}
    ranks = {}
    for i, (d, s) in enumerate(run_q):
        if d in gold:
            ranks[d] = (
                1
                + sum(1 for d2, s2 in run_q if d2 not in gold and s2 >= s)
                + sum(
                    1
                    for j, (d2, s2) in enumerate(run_q)
                    if d2 in gold and (s2 > s or (s2 == s and (gold[d2], j) < (gold[d], i)))
                )
            )
    out = {("recall", str(k)): sum(r <= k for r in ranks.values()) / len(gold) for k in ks}
    dcg = sum(gold[d] / np.log2(r + 1) for d, r in ranks.items() if r <= ndcg_k)
    ideal = sorted(gold.values(), reverse=True)[:ndcg_k]
    out[("ndcg", str(ndcg_k))] = dcg / sum(g / np.log2(i + 2) for i, g in enumerate(ideal))
    return out


def test_every_number_equals_pytrec_eval_on_the_run_files(tiny_run):
    """results.csv of every method that writes a run file (pre-trained, fine-tuned, BM25, the
    probe, ColBERT) equals what its run.trec gives: per query, pytrec_eval where the run has no
    score tie involving a gold document, and the documented tie rule everywhere."""
    import pytrec_eval

    from capgap.diagnosis import load_qrels_file
    from capgap.trec import read_run

    cfg = yaml.safe_load(TINY.read_text())
    ks, ndcg_k = cfg["eval"]["ks"], cfg["eval"]["ndcg_k"]
    table = {
        (r["dataset"], r["encoder"], r["method"], r["split"], r["metric"], r["k"]): float(r["value"])
        for r in _rows(tiny_run)
    }
    checked = tied_queries = 0
    for ds in ("limit-gen", "limit-small", "near-miss"):
        res = tiny_run / "results" / ds
        qrels = load_qrels_file(res / "data" / "qrels.tsv")
        split = dict(
            line.rstrip("\n").split("\t") for line in (res / "data" / "split.tsv").read_text().splitlines()[2:]
        )
        runs = {("minilm", m): res / "minilm" / m / "run.trec" for m in ("pretrained", "finetune", "probe")}
        runs[("", "bm25")], runs[("", "colbert")] = res / "bm25" / "run.trec", res / "colbert" / "run.trec"
        for (enc, m), path in runs.items():
            if not path.exists():
                continue
            method = "finetuned" if m == "finetune" else m
            run = read_run(path)
            ev = pytrec_eval.RelevanceEvaluator(
                qrels, {"recall." + ",".join(map(str, ks)), f"ndcg_cut.{ndcg_k}"}
            ).evaluate({q: {d: s for d, s in v} for q, v in run.items()})
            per_q = {}
            for q, grades in qrels.items():
                per_q[q] = _pessimistic(run.get(q, []), grades, ks, ndcg_k)
                scores = [s for d, s in run.get(q, []) if grades.get(d, 0) > 0]
                others = [s for d, s in run.get(q, []) if grades.get(d, 0) <= 0]
                if len(set(scores)) == len(scores) and not set(scores) & set(others):
                    ref = ev.get(q, {})
                    for k in ks:
                        assert per_q[q][("recall", str(k))] == pytest.approx(ref.get(f"recall_{k}", 0.0), abs=1e-12), (
                            ds,
                            m,
                            q,
                            k,
                        )
                    assert per_q[q][("ndcg", str(ndcg_k))] == pytest.approx(
                        ref.get(f"ndcg_cut_{ndcg_k}", 0.0), abs=1e-12
                    ), (ds, m, q)
                else:
                    tied_queries += 1
            for sp in ("train", "heldout", "all"):
                qs = [q for q in qrels if sp == "all" or split[q] == sp]
                for key in [("recall", str(k)) for k in ks] + [("ndcg", str(ndcg_k))]:
                    want = float(np.mean([per_q[q][key] for q in qs]))
                    assert table[(ds, enc, method, sp, *key)] == pytest.approx(want, abs=1e-12), (ds, method, sp, key)
                    checked += 1
    assert checked >= 5 * 2 * 3 * 4 - 12  # colbert runs on limit-gen only
    print(f"{checked} numbers checked; {tied_queries} query runs with a gold tie judged by the tie rule")


@pytest.mark.slow
def test_edited_source_reruns_its_dataset(tmp_path, mirror):
    """A dataset given by path: editing one document after a full run reruns the data job and
    everything downstream, and the numbers change; rewriting a file unchanged reruns nothing
    (the trigger is the files' content, not their modification time)."""
    data = tmp_path / "data"
    shutil.copytree(ROOT / "tests" / "data" / "source-edit", data)
    cfg = {
        "eval": {"ks": [1, 2, 5, 10], "ndcg_k": 10},
        "encoders": {"minilm": {"model": "sentence-transformers/all-MiniLM-L6-v2", "batch_size": 64}},
        "probe": {"enabled": True},
        "finetune": {"enabled": False},
        "colbert": {"enabled": False},
        "hardness": {"enabled": False},
        "bm25": {"enabled": True},
        "datasets": {
            "edited": {
                "source": "local",
                "path": str(data),
                "encoders": ["minilm"],
                "split": {"heldout_fraction": 0.5, "seed": 0},
            }
        },
    }
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    work = tmp_path / "work"
    env_cache = {"CAPGAP_CACHE": str(tmp_path / "cache")}
    os.environ.update(env_cache)
    try:
        assert _smk(work, config, mirror).returncode == 0
        before = (work / "reports" / "results.csv").read_text()
        corpus = data / "corpus.jsonl"
        text = corpus.read_text()
        corpus.write_text(text)  # same content, a new modification time
        r = _smk(work, config, mirror, "-n")
        assert "Nothing to be done" in r.stdout + r.stderr, (r.stdout + r.stderr)[-2000:]
        assert text.count("Coffee is brewed") == 1
        corpus.write_text(
            text.replace(
                "Coffee is brewed from roasted beans and contains caffeine.",
                "Volcanic glass obsidian is formed when lava cools quickly.",
            )
        )
        r = _smk(work, config, mirror, "-n")
        assert _jobs(r.stdout + r.stderr) == {
            "data": 1,
            "index": 1,
            "pretrained": 1,
            "probe": 1,
            "bm25": 1,
            "report": 1,
            "all": 1,
        }
        assert _smk(work, config, mirror).returncode == 0
        after = (work / "reports" / "results.csv").read_text()
        assert after != before and "obsidian" in (work / "results" / "edited" / "data" / "corpus.jsonl").read_text()
        # q6 ("drink with caffeine") lost its gold document's words: BM25 recall@1 on it drops
        bm = {
            (r["split"], r["metric"], r["k"]): float(r["value"])
            for r in csv.DictReader(open(work / "results" / "edited" / "bm25" / "metrics.csv"))
        }
        old = {
            (r["split"], r["metric"], r["k"]): float(r["value"])
            for r in csv.DictReader(before.splitlines())
            if r["method"] == "bm25"
        }
        assert bm[("all", "recall", "1")] < old[("all", "recall", "1")]
    finally:
        for k in env_cache:
            os.environ.pop(k, None)


def test_stale_lock_of_a_killed_run_is_removed(tmp_path, mirror):
    """What `make run` does first: a lock left by a killed run (no Snakemake in the folder) is
    removed with `snakemake --unlock`; without a lock nothing happens."""
    from capgap import locks

    assert locks.stale(tmp_path) is False and locks.main([str(tmp_path)]) == 0
    lockdir = tmp_path / ".snakemake" / "locks"
    lockdir.mkdir(parents=True)
    (lockdir / "0.input.lock").write_text(str(tmp_path / "results"))
    assert locks.stale(tmp_path) is True
    env_path = os.environ["PATH"]
    os.environ["PATH"] = f"{BIN}:{env_path}"
    try:
        rc = locks.main(
            [str(tmp_path), str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "--configfile", str(TINY)]
        )
    finally:
        os.environ["PATH"] = env_path
    assert rc == 0 and locks.lock_files(tmp_path) == []


def test_jobs_say_which_code_ran(tiny_run, monkeypatch):
    """Every job imports this checkout's capgap and logs its commit; the report's provenance
    names it; a package imported from elsewhere is flagged."""
    from capgap.provenance import code_summary, code_version

    log = (tiny_run / "logs" / "probe" / "limit-gen" / "minilm.log").read_text()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert f"capgap code: commit {head[:12]}" in log and f"from {ROOT}/src/capgap" in log
    assert "is not the workflow's checkout" not in log
    md = (tiny_run / "reports" / "report.md").read_text()
    assert (
        re.search(rf"capgap code \(every job\) \| commit {head[:12]}.* \(\d+ jobs\)", md)
        and "capgap code (this report)" in md
    )
    monkeypatch.setenv("CAPGAP_CHECKOUT", str(ROOT))
    assert code_version()["matches"] is True
    monkeypatch.setenv("CAPGAP_CHECKOUT", "/somewhere/else")
    v = code_version()
    assert v["matches"] is False and "NOT the workflow's checkout /somewhere/else" in code_summary(v)


@pytest.mark.parametrize(
    "name",
    [
        "config.yaml",
        "near-miss.yaml",
        "limit-paper.yaml",
        "limit50k.yaml",
        "large.yaml",
        "ladder.yaml",
        "converge.yaml",
    ],
)
def test_every_shipped_config_validates_and_dry_runs(name, tmp_path, mirror):
    """Each config under config/ parses, passes the schema and builds its DAG (a dry run)."""
    r = _smk(tmp_path / "w", ROOT / "config" / name, mirror, "-n")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert _jobs(r.stdout + r.stderr).get("data", 0) >= 1


@pytest.mark.slow
def test_a_failed_jobs_capgap_error_reaches_the_console(tmp_path):
    """A DAG stopped by bad data (a qrels score that is not a number) prints the data job's
    capgap error, naming file, line and field, on the console: the default workflow profile
    turns on show-failed-logs (no flag given here) and the job's log ends with that error in
    one line, no traceback. The expected text is the loader's own error on the same folder."""
    from capgap.data import load_beir_dir
    from capgap.errors import DataFormatError

    data = tmp_path / "data"
    shutil.copytree(ROOT / "tests" / "data" / "source-edit", data)
    qrels = data / "qrels" / "test.tsv"
    lines = qrels.read_text().splitlines()
    assert lines[3] == "q3\td2\t1"
    lines[3] = "q3\td2\tabc"
    qrels.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError) as err:
        load_beir_dir(data, "broken")
    assert (err.value.path, err.value.line, err.value.field) == (str(qrels), 4, "score")
    cfg = {
        "eval": {"ks": [1, 2], "ndcg_k": 10},
        "encoders": {"minilm": {"model": "sentence-transformers/all-MiniLM-L6-v2", "batch_size": 64}},
        "probe": {"enabled": False},
        "finetune": {"enabled": False},
        "colbert": {"enabled": False},
        "hardness": {"enabled": False},
        "bm25": {"enabled": True},
        "datasets": {
            "broken": {
                "source": "local",
                "path": str(data),
                "encoders": ["minilm"],
                "split": {"heldout_fraction": 0.5, "seed": 0},
            }
        },
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    env = dict(
        os.environ,
        PATH=f"{BIN}:{os.environ['PATH']}",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        CAPGAP_CACHE=str(tmp_path / "cache"),
    )
    cmd = [
        str(BIN / "snakemake"),
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(tmp_path / "w"),
        "--configfile",
        str(tmp_path / "c.yaml"),
        "--cores",
        "1",
    ]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    console = r.stdout + r.stderr
    assert r.returncode == 1, console[-3000:]
    assert f"Error: {err.value}\n" in console, console[-3000:]
    assert "Traceback" not in console
    assert not (tmp_path / "w" / "results" / "broken" / "data").exists()  # the failed job's output is removed


def test_job_excepthook_gives_other_errors_their_traceback(capsys):
    """Only a capgap error is shortened to one line in a job's log; any other exception keeps
    Python's traceback."""
    from capgap.errors import DataFormatError
    from capgap.logs import capgap_excepthook

    for err in (DataFormatError("q.tsv", 3, "score", "not a number: 'x'"), KeyError("boom")):
        try:
            raise err
        except Exception as e:
            capgap_excepthook(type(e), e, e.__traceback__)
    out = capsys.readouterr().err
    assert out.startswith("Error: q.tsv:3: field 'score': not a number: 'x'\nTraceback (most recent call last):\n")
    assert out.endswith("KeyError: 'boom'\n")
