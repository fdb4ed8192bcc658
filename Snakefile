# capgap: the experiment DAG. A table of contents only; logic lives in src/capgap/.
# Threads, memory, wall time and GPUs per rule are in the workflow profile, profiles/default
# (loaded by Snakemake itself); the paper's GPU runs use --workflow-profile profiles/gpu.
import sys
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.0")


# The default config applies only when no --configfile/--config is given, so a named config
# (config/large.yaml, a test config) is used as written, not deep-merged into the default.
if not config:

    configfile: "config/config.yaml"


# --config alone (no --configfile) is the whole config, not an edit of the default: say so
# rather than letting the schema report a missing section
_missing = [k for k in ("encoders", "datasets") if k not in config]
if _missing:
    raise ValueError(
        f"the config has no {' / '.join(_missing)} section (it holds only {sorted(config)}): --config without "
        "--configfile replaces the default config instead of editing it; add --configfile config/config.yaml"
    )


validate(config, "src/capgap/schemas/config.schema.yaml")

# This checkout's capgap (src/ first), then every start-up check, once (capgap.config_check.startup):
# jobs import this checkout, a bad interpreter path or data mirror is refused, the config's names
# and lengths are checked, all before any rule exists, so a dry run fails too.
sys.path.insert(0, str(Path(workflow.basedir).resolve() / "src"))
from capgap.config_check import startup

startup(config, workflow.basedir)


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/index.smk"
include: "workflow/rules/index_shard.smk"
include: "workflow/rules/pretrained.smk"
include: "workflow/rules/probe.smk"
include: "workflow/rules/probe_shard.smk"
include: "workflow/rules/compress.smk"
include: "workflow/rules/finetune.smk"
include: "workflow/rules/finetune_regime.smk"
include: "workflow/rules/ladder.smk"
include: "workflow/rules/bm25.smk"
include: "workflow/rules/colbert.smk"
include: "workflow/rules/twin_negatives.smk"
include: "workflow/rules/hardness.smk"
include: "workflow/rules/report.smk"


onsuccess:
    # the datasets that could not be obtained (also listed in reports/report.md)
    for line in unobtained({ds: recorded_status(ds) for ds in datasets()}):
        print(line)


rule all:
    default_target: True
    input:
        rules.report.output,
        # every dataset's data folder as a plain input: a dataset that waits for its data
        # checkpoint (a download, online) and has none yet makes this target, hence the
        # report, rerun; Snakemake would otherwise skip a missing checkpoint whose downstream
        # report exists ("Nothing to be done", snakemake/snakemake#3870)
        status_files,


rule all_results:
    # Every experiment, no report: the target of the DVC 'experiments' stage. The data status of
    # every dataset (available or not) is part of it, so the report stage adds nothing to results/.
    input:
        result_tables,
        status_files,
