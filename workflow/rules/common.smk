# Input functions and config helpers shared by every rule file.
import json
import re
from pathlib import Path

RESERVED = {"data", "bm25", "colbert"}  # path segments under results/{dataset}/


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
    return list(config["datasets"][dataset].get("encoders", []))


def dataset_spec(dataset):
    """How to obtain one dataset: its config minus the encoder list (which does not change
    the data, so adding an encoder must not rerun the data rule)."""
    return canonical({k: v for k, v in config["datasets"][dataset].items() if k != "encoders"})


def dataset_availability(dataset):
    """How the dataset can be obtained now (no network): see capgap.sources.availability."""
    from capgap.sources import availability

    return availability(dataset, config["datasets"][dataset])


def is_enabled(name):
    """Whether an optional method (bm25, ...) is switched on in the config."""
    return bool(config.get(name, {}).get("enabled", True))


for _e in config["encoders"]:
    if _e in RESERVED:
        raise ValueError(f"encoder name {_e!r} is reserved (used as a results/ folder name)")
for _d in datasets():
    for _e in encoders_for(_d):
        if _e not in config["encoders"]:
            raise ValueError(f"dataset {_d!r} names unknown encoder {_e!r}; known: {sorted(config['encoders'])}")


wildcard_constraints:
    dataset="|".join(re.escape(d) for d in datasets()),
    encoder="|".join(re.escape(e) for e in config["encoders"]),


def dataset_status(dataset):
    """status.json of the data checkpoint (waits for the checkpoint to run)."""
    folder = checkpoints.data.get(dataset=dataset).output[0]
    return json.loads((Path(folder) / "status.json").read_text())


def result_tables(wildcards=None):
    """Every per-job metrics.csv for the datasets that could be obtained."""
    files = []
    for ds in datasets():
        if not dataset_status(ds)["available"]:
            continue
        files += [f"results/{ds}/{enc}/pretrained/metrics.csv" for enc in encoders_for(ds)]
        if is_enabled("probe"):
            files += [f"results/{ds}/{enc}/probe/metrics.csv" for enc in encoders_for(ds)]
        if is_enabled("bm25"):
            files.append(f"results/{ds}/bm25/metrics.csv")
    return files


def status_files(wildcards=None):
    return [f"results/{ds}/data" for ds in datasets()]


def all_outputs():
    return [
        "reports/results.csv",
        "reports/report.md",
        "reports/summary.json",
        "reports/figures/recall_at_k.png",
    ]
