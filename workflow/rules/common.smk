# Input functions shared by every rule file, and the DAG's one switch, enabled(rule, dataset).
# What they compute lives in capgap (capgap.config: the rules' params and switches;
# capgap.sources: the data rule's); the start-up checks run once from the Snakefile.
import re
from pathlib import Path

from capgap import config as cfg
from capgap.config import (
    canonical,
    colbert_params,
    finetune_params,
    regime_params,
    regimes,
    settings,
)
from capgap.paths import shard_labels
from capgap.sources import (
    current_availability,
    current_digest,
    dataset_spec,
    read_status,
    unobtained,
)


def enabled(rule, dataset=None):
    """Whether the optional rule ``rule`` runs (on ``dataset``), see capgap.config.enabled."""
    return cfg.enabled(config, rule, dataset)


def datasets():
    """Dataset names in config order."""
    return list(config["datasets"])


def encoders_for(dataset):
    """Encoder names configured for one dataset."""
    return list(config["datasets"][dataset]["encoders"])


wildcard_constraints:
    dataset="|".join(re.escape(d) for d in datasets()),
    encoder="|".join(re.escape(e) for e in config["encoders"]),
    regime="|".join(re.escape(r) for r in regimes(config)) or "(?!)",


# Input functions: called when the DAG is built, after every rule file is included, so they can
# take paths from the rules' outputs (rules.<rule>.output.<name>).


def recorded_status(dataset):
    """The dataset's status.json as its data job wrote it ({} when not written)."""
    return read_status(expand(rules.data.output[0], dataset=dataset)[0])


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
    spec = config["datasets"][dataset]
    av = current_availability(dataset, spec, recorded_status(dataset))
    if av == "local":
        return True
    if av == "remote:offline":
        return False
    folder = checkpoints.data.get(dataset=dataset).output[
        0
    ]  # waits for the checkpoint to run
    return read_status(folder)["available"]


def transfer_targets(dataset, encoder):
    """twin_negatives.transfer data sets that are available and list `encoder` (the adapters
    are evaluated on their frozen index of that encoder)."""
    return [
        t
        for t in config["twin_negatives"]["transfer"]
        if t != dataset and encoder in encoders_for(t) and dataset_available(t)
    ]


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
        for name in ("finetune", "probe", "ladder"):
            if enabled(name):
                files += per_index(getattr(rules, name).output.metrics, ds)
        if enabled("finetune_regime", ds):
            files += expand(
                rules.finetune_regime.output.metrics,
                dataset=ds,
                encoder=encoders_for(ds),
                regime=list(regimes(config)),
            )
        if enabled("bm25"):
            files += expand(rules.bm25.output.metrics, dataset=ds)
        if enabled("compress", ds):
            files += per_index(rules.compress.output.metrics, ds)
        if enabled("colbert", ds):
            files += expand(rules.colbert.output.metrics, dataset=ds)
        if enabled("twin_negatives", ds):
            files += per_index(rules.twin_negatives.output.metrics, ds)
    if enabled("hardness"):
        files.append(rules.hardness.output.metrics)
    return files


def status_files(wildcards=None):
    """The data checkpoint's folder of every dataset, available or not (its status.json)."""
    return expand(rules.data.output[0], dataset=datasets())


def curve_files(wildcards=None):
    """Fine-tuning curves (single-vector and ColBERT) of the available datasets."""
    files = []
    for ds in available_datasets():
        if enabled("finetune"):
            files += per_index(rules.finetune.output.curve, ds)
        if enabled("colbert", ds):
            files += expand(rules.colbert.output.curve, dataset=ds)
    return files


def hardness_summary(wildcards=None):
    """The hardness rule's summary.json (empty when hardness is disabled)."""
    return [rules.hardness.output.summary] if enabled("hardness") else []


def probe_per_query_files(wildcards=None):
    """The probe's per-query JSONL of every (available dataset, encoder): the slack figure."""
    return every_index(rules.probe.output.per_query) if enabled("probe") else []


def pretrained_run_files(wildcards=None):
    """The pre-trained encoders' TREC runs: the report's "geometrically easy but missed" lists."""
    return every_index(rules.pretrained.output.run)


def fingerprint_files(wildcards=None):
    """Frozen-index fingerprints (model, weights and corpus hashes): the report's provenance."""
    return every_index(rules.index.output.fingerprint)


def reported(path, category):
    """An output flagged for Snakemake's report, captioned by workflow/report/<its stem>.rst."""
    return report(path, caption=f"../report/{Path(path).stem}.rst", category=category)
