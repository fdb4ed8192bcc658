# Input functions and config helpers shared by every rule file.
import json
import re
import sys
from pathlib import Path

# Every job imports this checkout's capgap (src/ first on PYTHONPATH), whatever the venv has
# installed; jobs log which code ran and warn when it is not this checkout (capgap.provenance).
sys.path.insert(0, str(Path(workflow.basedir).resolve() / "src"))
from capgap.provenance import use_checkout

use_checkout(workflow.basedir)

# Snakemake puts this interpreter's path unquoted in every script job's command line: one with a
# space or a quote is refused here, at start, naming it (capgap.paths); other paths may hold any.
# So is a data mirror that names no folder (a literal '~' or quotes, a typo).
from capgap.paths import check_interpreter, check_mirror, shard_labels

check_interpreter()
check_mirror()


def canonical(obj):
    """Nested dicts with keys sorted: params whose meaning is unchanged compare equal, so
    reordering keys in a config file does not trigger reruns."""
    if isinstance(obj, dict):
        return {k: canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [canonical(v) for v in obj]
    return obj


def datasets():
    """Dataset names in config order."""
    return list(config["datasets"])


def encoders_for(dataset):
    """Encoder names configured for one dataset."""
    return list(config["datasets"][dataset]["encoders"])


def dataset_spec(dataset):
    """How to obtain one dataset: its config minus the encoder list (which does not change
    the data, so adding an encoder must not rerun the data rule), plus ``required: true`` under
    ``require_datasets`` (then an unobtainable dataset fails its data job). ``near_miss`` is
    reduced to what it means for the source (only ``types`` unless the source is near-miss:
    the generator's sizes, filled in by the schema's defaults, mean nothing elsewhere), with
    the types in capgap.data.TWIN_TYPES order, so neither reruns anything."""
    from capgap.data import TWIN_TYPES as TYPES

    spec = {k: v for k, v in config["datasets"][dataset].items() if k != "encoders"}
    if "near_miss" in spec:
        nm = dict(spec["near_miss"])
        if spec.get("source") != "near-miss":
            nm = {"types": nm.get("types", list(TYPES))}
        nm["types"] = [t for t in TYPES if t in nm.get("types", TYPES)]
        spec["near_miss"] = nm
    if config["require_datasets"]:
        spec["required"] = True
    return canonical(spec)


def status_json(dataset):
    """status.json in one dataset's data folder (the data checkpoint's output), if written."""
    return Path(expand(rules.data.output[0], dataset=dataset)[0]) / "status.json"


_STATUS_CACHE = {}


def recorded_status(dataset):
    """The dataset's status.json as its data job wrote it ({} when not written), parsed once
    per version of the file (the DAG asks for it many times per evaluation)."""
    path = status_json(dataset)
    if not path.is_file():
        return {}
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _STATUS_CACHE:
        _STATUS_CACHE[key] = json.loads(path.read_text())
    return _STATUS_CACHE[key]


def dataset_source_digest(dataset):
    """capgap.sources.source_digest of the dataset's local folder; when that folder is gone
    (a run without the mirror), the digest its data job recorded, so a good copy is kept.
    """
    from capgap.sources import source_digest

    digest = source_digest(dataset, config["datasets"][dataset])
    if not digest:
        digest = recorded_status(dataset).get("source", {}).get("digest", "")
    return digest


def dataset_availability(dataset):
    """How the dataset can be obtained now (no network): see capgap.sources.availability.

    A dataset already obtained stays "local": a run without the mirror must not replace a
    good copy by an 'unavailable' one.
    """
    from capgap.sources import availability

    if recorded_status(dataset).get("available"):
        return "local"
    return availability(dataset, config["datasets"][dataset])


def report_unavailable():
    """Print the datasets that could not be obtained (also listed in reports/report.md)."""
    for ds in datasets():
        st = recorded_status(ds)
        if st and not st.get("available"):
            print(
                f"capgap: dataset '{ds}' was not obtained: {st['reason']}. {st['hint']}"
            )


def settings(section, drop=()):
    """A config section as a rule's params: without `enabled` (and the keys in `drop`), keys
    sorted (see canonical)."""
    return canonical(
        {k: v for k, v in config[section].items() if k not in ("enabled", *drop)}
    )


def shard_files(section, pattern, wc):
    """The shard jobs' files of one (dataset, encoder) for config ``<section>.shards`` = n > 1:
    ``pattern`` with shard ``1-of-n`` ... ``n-of-n`` (Snakemake's scattergather naming); none
    when n = 1 (the rule then does the whole job itself, as before shards existed)."""
    labels = shard_labels(config[section]["shards"])
    return (
        expand(pattern, dataset=wc.dataset, encoder=wc.encoder, shard=labels)
        if labels
        else []
    )


def colbert_params(dataset):
    """The colbert section for one dataset: steps_by_dataset[dataset] overrides steps (the
    paper fine-tunes GTE-ModernColBERT on LIMIT only; steps 0 elsewhere = zero-shot)."""
    cb = config["colbert"]
    out = settings("colbert", drop=("datasets", "steps_by_dataset"))
    if "steps_by_dataset" in cb:
        out["steps"] = cb["steps_by_dataset"].get(dataset, cb["steps"])
    return canonical(out)


def finetune_params(encoder):
    """The finetune section for one encoder: steps_by_encoder[encoder] overrides steps."""
    ft = settings("finetune", drop=("steps_by_encoder",))
    by_encoder = config["finetune"]["steps_by_encoder"]
    ft["steps"] = by_encoder.get(encoder, ft["steps"])
    return canonical(ft)


def regimes():
    """The ladder's fine-tuning regimes (ladder.regimes: name -> overrides of the finetune section)."""
    return dict(config["ladder"].get("regimes") or {})


def regime_params(encoder, regime):
    """The finetune section for one encoder (finetune_params) with one regime's overrides."""
    return canonical({**finetune_params(encoder), **regimes()[regime]})


def regimes_on(dataset):
    """Whether the regimes run on a dataset: ladder.enabled, regimes configured, and
    ladder.regime_datasets unset or naming it."""
    lad = config["ladder"]
    names = lad.get("regime_datasets")
    return bool(lad["enabled"] and regimes() and (names is None or dataset in names))


def is_enabled(name):
    """Whether an optional method (bm25, ...) is switched on in the config."""
    return bool(config[name]["enabled"])


# Every name the config refers to (encoders, datasets, per-encoder / per-dataset maps), the
# reserved names, compression variants and each encoder's max_length against its model's
# positions: checked once, before any rule exists, so a dry run fails too (capgap.config_check).
from capgap.config_check import check_config

for _w in check_config(config):
    print(f"capgap: {_w}", file=sys.stderr)


wildcard_constraints:
    dataset="|".join(re.escape(d) for d in datasets()),
    encoder="|".join(re.escape(e) for e in config["encoders"]),
    regime="|".join(re.escape(r) for r in regimes()) or "(?!)",


def dataset_status(dataset):
    """status.json of the data checkpoint (waits for the checkpoint to run)."""
    folder = checkpoints.data.get(dataset=dataset).output[0]
    return json.loads((Path(folder) / "status.json").read_text())


def dataset_available(dataset):
    """Whether a dataset's experiments are part of the DAG.

    With ``require_datasets: true`` (config/paper.yaml) every dataset is: the whole grid
    resolves at parse time, offline too, and a dataset that cannot be obtained fails its data
    job with the reason and a hint instead of leaving the grid.

    Decided at parse time wherever possible: "local" (obtained before, a config path, the
    mirror, the generator, the download cache) is available and "remote:offline" is not. Only
    a download that may fail ("remote:online") waits for the data checkpoint. Snakemake does
    not run a missing checkpoint job when the files downstream of it exist, so a dataset added
    to an existing results tree must reach the DAG as a plain input, not through a checkpoint;
    a download's data folder is one of rule all's plain inputs (status_files), so a missing one
    reruns its data job and the report (tests/test_reruns.py, snakemake/snakemake#3870).
    """
    if config["require_datasets"]:
        return True
    av = dataset_availability(dataset)
    if av == "local":
        return True
    if av == "remote:offline":
        return False
    return dataset_status(dataset)["available"]


def compress_on(dataset):
    """Whether the compress rule runs on a dataset, i.e. compress.enabled and
    (compress.datasets unset or naming it)."""
    cp = config["compress"]
    return cp["enabled"] and (cp["datasets"] is None or dataset in cp["datasets"])


def has_twins(dataset):
    """Whether a dataset has near-miss twins: source near-miss, or a near_miss key."""
    spec = config["datasets"][dataset]
    return spec.get("source") == "near-miss" or "near_miss" in spec


def twin_negatives_on(dataset):
    """Whether the twin_negatives job runs on a dataset. It does when twin_negatives.enabled, finetune.enabled
    (it compares against the finetune rule's adapter), the dataset has twins, and
    twin_negatives.datasets is unset or names it."""
    tn = config["twin_negatives"]
    return (
        tn["enabled"]
        and is_enabled("finetune")
        and has_twins(dataset)
        and (tn["datasets"] is None or dataset in tn["datasets"])
    )


def transfer_targets(dataset, encoder):
    """twin_negatives.transfer data sets that are available and list `encoder` (the adapters
    are evaluated on their frozen index of that encoder)."""
    return [
        t
        for t in config["twin_negatives"]["transfer"]
        if t != dataset and encoder in encoders_for(t) and dataset_available(t)
    ]


def colbert_on(dataset):
    """Whether ColBERT runs on a dataset, i.e. colbert.enabled and (colbert.datasets unset
    or naming it)."""
    cb = config["colbert"]
    return cb["enabled"] and (cb["datasets"] is None or dataset in cb["datasets"])


# Input functions: called when the DAG is built, after every rule file is included, so they can
# take paths from the rules' outputs (rules.<rule>.output.<name>).


def available_datasets():
    """The datasets whose experiments are in the DAG, in config order."""
    return [ds for ds in datasets() if dataset_available(ds)]


def per_index(path, dataset):
    """`path` (a rule output with {dataset} and {encoder}) for each of a dataset's encoders."""
    return expand(path, dataset=dataset, encoder=encoders_for(dataset))


def every_index(path):
    """per_index over the available datasets, in config order."""
    return [f for ds in available_datasets() for f in per_index(path, ds)]


def result_tables(wildcards=None):
    """Every per-job metrics.csv for the datasets that could be obtained."""
    files = []
    for ds in available_datasets():
        files += per_index(rules.pretrained.output.metrics, ds)
        if is_enabled("finetune"):
            files += per_index(rules.finetune.output.metrics, ds)
        if is_enabled("probe"):
            files += per_index(rules.probe.output.metrics, ds)
        if is_enabled("ladder"):
            files += per_index(rules.ladder.output.metrics, ds)
        if regimes_on(ds):
            files += expand(
                rules.finetune_regime.output.metrics,
                dataset=ds,
                encoder=encoders_for(ds),
                regime=list(regimes()),
            )
        if is_enabled("bm25"):
            files += expand(rules.bm25.output.metrics, dataset=ds)
        if compress_on(ds):
            files += per_index(rules.compress.output.metrics, ds)
        if colbert_on(ds):
            files += expand(rules.colbert.output.metrics, dataset=ds)
        if twin_negatives_on(ds):
            files += per_index(rules.twin_negatives.output.metrics, ds)
    if is_enabled("hardness"):
        files.append(rules.hardness.output.metrics)
    return files


def status_files(wildcards=None):
    """The data checkpoint's folder of every dataset, available or not (its status.json)."""
    return expand(rules.data.output[0], dataset=datasets())


def curve_files(wildcards=None):
    """Fine-tuning curves (single-vector and ColBERT) of the available datasets."""
    files = []
    for ds in available_datasets():
        if is_enabled("finetune"):
            files += per_index(rules.finetune.output.curve, ds)
        if colbert_on(ds):
            files += expand(rules.colbert.output.curve, dataset=ds)
    return files


def hardness_summary(wildcards=None):
    """The hardness rule's summary.json (empty when hardness is disabled)."""
    return [rules.hardness.output.summary] if is_enabled("hardness") else []


def probe_per_query_files(wildcards=None):
    """The probe's per-query JSONL of every (available dataset, encoder): the slack figure."""
    return every_index(rules.probe.output.per_query) if is_enabled("probe") else []


def pretrained_run_files(wildcards=None):
    """The pre-trained encoders' TREC runs: the report's "geometrically easy but missed" lists."""
    return every_index(rules.pretrained.output.run)


def fingerprint_files(wildcards=None):
    """Frozen-index fingerprints (model, weights and corpus hashes): the report's provenance."""
    return every_index(rules.index.output.fingerprint)


def reported(path, category):
    """An output flagged for Snakemake's report, captioned by workflow/report/<its stem>.rst."""
    return report(path, caption=f"../report/{Path(path).stem}.rst", category=category)
